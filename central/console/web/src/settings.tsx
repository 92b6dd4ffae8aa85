// A tenant's settings kept beside its pages: the month's budget (on
// Billing) and the webhooks (on Notifications). Central checks every value;
// the forms send what was typed and show central's refusal with its hint.
import { useState } from "preact/hooks";
import { Me, ago, can, call, del, post } from "./api";
import { ErrorNote, Table, useAction, useData } from "./ui";

// asNumber is what a number field sends: a number when it reads as one,
// else the text as typed, so central (not the page) says what is wrong
// with it.
export function asNumber(v: string): number | string {
  const s = v.trim();
  return /^-?\d+(\.\d+)?$/.test(s) ? Number(s) : s;
}

// BudgetPanel shows the month's spend against the budget and, for an admin
// or owner, sets or removes the budget (PUT /fleet/tenants/me/budget).
export function BudgetPanel({ me }: { me: Me }) {
  const mine = useData<any>(me.operator ? null : "/fleet/tenants/me");
  const [value, setValue] = useState("");
  const [done, setDone] = useState("");
  const act = useAction();
  if (me.operator) return null;
  const b = mine.data?.billing;
  const set = (monthly: number | string | null) =>
    act.run(async () => {
      setDone("");
      const r = await call("PUT", "/fleet/tenants/me/budget", { monthly });
      setDone(r.monthly ? `Budget set to ${r.monthly} ${r.currency}.` : "Budget removed.");
      setValue("");
      mine.reload();
    });
  return (
    <section class="panel budget" aria-labelledby="budget-h">
      <h2 id="budget-h">Budget for {b?.month || "this month"}</h2>
      <ErrorNote error={mine.error} />
      {b ? (
        <p>
          Spent <strong>{b.month_to_date_display} {b.currency}</strong> so far;{" "}
          {b.monthly ? (
            <>
              budget <strong class="budget-now">{b.monthly} {b.currency}</strong>
            </>
          ) : (
            <span class="budget-now">no budget set</span>
          )}
          {b.state && b.state !== "ok" ? (
            <>
              {" "}
              <span class="badge s-attn">{b.state === "over" ? "over budget" : "near the budget"}</span>
            </>
          ) : null}
        </p>
      ) : null}
      <p class="hint">Central sends a notification at 80 % of the budget and when it is reached; nothing is stopped.</p>
      {can(me, "admin") ? (
        <form
          class="form inline"
          onSubmit={(e) => {
            e.preventDefault();
            set(asNumber(value));
          }}
        >
          <label>
            Monthly budget ({b?.currency || "currency units"})
            <input name="budget" inputMode="decimal" autoComplete="off" value={value} required onInput={(e) => setValue((e.target as HTMLInputElement).value)} />
          </label>
          <button class="primary" type="submit" disabled={act.busy}>
            Set budget
          </button>
          {b?.monthly ? (
            <button type="button" disabled={act.busy} onClick={() => set(null)}>
              Remove budget
            </button>
          ) : null}
        </form>
      ) : null}
      <ErrorNote error={act.error} />
      {done ? <p role="status">{done}</p> : null}
    </section>
  );
}

const eventTypes = [
  "vm.created", "vm.deleted", "vm.snapshot", "vm.restored", "vm.cloned", "lease.created", "lease.released", "lease.ending",
  "lease.ended", "budget.near", "budget.over", "volume.created", "volume.deleted", "node.down", "node.scrub", "drain.done",
];

// Webhooks lists the caller's webhooks with their last delivery; an admin
// creates one (its signing secret shown this once), sends a test delivery
// and deletes one.
export function Webhooks({ me }: { me: Me }) {
  const { data, error, reload } = useData<any>("/fleet/webhooks");
  const [url, setURL] = useState("");
  const [name, setName] = useState("");
  const [events, setEvents] = useState<string[]>([]);
  const [shown, setShown] = useState<any>(null); // the secret, shown once
  const [tested, setTested] = useState<any>(null);
  const act = useAction();
  const admin = can(me, "admin");
  const list: any[] = data?.webhooks || [];
  const types = me.operator ? eventTypes : eventTypes.filter((t) => !["node.down", "node.scrub", "drain.done"].includes(t));
  const create = (e: Event) => {
    e.preventDefault();
    act.run(async () => {
      const r = await post("/fleet/webhooks", { url: url.trim(), name: name.trim() || undefined, events });
      setShown(r);
      setURL("");
      setName("");
      setEvents([]);
      reload();
    });
  };
  const last = (w: any) => {
    const d = (w.deliveries || [])[0];
    if (!d) return "none yet";
    return `${d.ok ? "delivered" : "failed"} (${d.event}, ${d.status || "no answer"}) ${ago(d.at)}${d.error ? ": " + d.error : ""}`;
  };
  return (
    <section aria-labelledby="hooks-h">
      <h2 id="hooks-h">Webhooks</h2>
      <p class="hint">
        Central posts each notification to these addresses, signed with the webhook's secret in X-FluxVM-Signature
        {me.operator ? "; the operator's webhooks hear of every tenant." : "; a tenant's webhook must be https and reach a public address."}
      </p>
      <ErrorNote error={error} />
      {shown ? (
        <div class="once" role="status">
          <h3>Signing secret of {shown.webhook.name || shown.webhook.url}</h3>
          <p>This is the only time it is shown: copy it now. Receivers check X-FluxVM-Signature with it.</p>
          <pre class="token secret">{shown.secret}</pre>
          <button onClick={() => setShown(null)}>I have copied it</button>
        </div>
      ) : null}
      <Table
        label="Webhooks"
        head={["Name", "URL", "Events", "Last delivery", ""]}
        empty="No webhooks yet."
        rows={list.map((w) => [
          w.name || "—",
          <code>{w.url}</code>,
          (w.events || []).length ? w.events.join(", ") : "every event",
          last(w),
          admin ? (
            <span class="row-actions">
              <button aria-label={`Send a test to ${w.name || w.url}`} disabled={act.busy} onClick={() => act.run(() => post(`/fleet/webhooks/${w.id}/test`).then((d) => (setTested({ w, d }), reload())))}>
                Test
              </button>
              <button class="destructive" aria-label={`Delete webhook ${w.name || w.url}`} onClick={() => confirm(`Delete the webhook to ${w.url}?`) && act.run(() => del(`/fleet/webhooks/${w.id}`).then(reload))}>
                Delete
              </button>
            </span>
          ) : (
            ""
          ),
        ])}
      />
      {tested ? (
        <p role="status" class="tested">
          Test to {tested.w.name || tested.w.url}: {tested.d.ok ? `delivered (${tested.d.status})` : `not delivered: ${tested.d.error || "status " + tested.d.status}`}
        </p>
      ) : null}
      <ErrorNote error={act.error} />
      {admin ? (
        <form class="panel form new-webhook" onSubmit={create} aria-labelledby="newhook-h">
          <h3 id="newhook-h">New webhook</h3>
          <div class="row">
            <label>
              URL
              <input name="webhook-url" type="text" inputMode="url" autoComplete="off" value={url} required placeholder="https://hooks.example.com/fluxvm" onInput={(e) => setURL((e.target as HTMLInputElement).value)} />
            </label>
            <label>
              Name (optional)
              <input name="webhook-name" autoComplete="off" value={name} maxLength={64} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
            </label>
          </div>
          <fieldset>
            <legend>Events (none ticked: every event)</legend>
            <div class="ticks">
              {types.map((t) => (
                <label class="check">
                  <input
                    type="checkbox"
                    checked={events.includes(t)}
                    onChange={(e) => setEvents((cur) => ((e.target as HTMLInputElement).checked ? [...cur, t] : cur.filter((x) => x !== t)))}
                  />{" "}
                  {t}
                </label>
              ))}
            </div>
          </fieldset>
          <div class="actions left">
            <button class="primary" type="submit" disabled={act.busy}>
              Create webhook
            </button>
          </div>
        </form>
      ) : null}
    </section>
  );
}
