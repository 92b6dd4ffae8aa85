// The tenant's other pages: overview, Macs, storage, pools, tunnels,
// images, usage, billing, activity, notifications, keys and members.
import { useState } from "preact/hooks";
import { Me, ago, can, compareISO, del, fmtMiB, fmtTime, post, call, savedToken } from "./api";
import { ErrorNote, Meter, Table, useAction, useData } from "./ui";
import { go } from "./router";
import { SlotDots, useMacSlots } from "./clone";
import { BudgetPanel, Webhooks } from "./settings";

export function Overview({ me }: { me: Me }) {
  const mine = useData<any>(me.operator ? null : "/fleet/tenants/me");
  const vms = useData<any>("/fleet/vms");
  const leases = useData<any>(me.operator ? null : "/fleet/leases");
  const nodes = useData<any>(me.operator ? "/fleet/nodes" : null);
  const list: any[] = vms.data?.vms || [];
  const q = mine.data?.tenant?.quota || {};
  const used = mine.data?.usage?.total || {};
  const bill = mine.data?.billing;
  const steps = [
    { done: (leases.data?.leases || []).length > 0, label: "Lease a Mac", href: "#/macs" },
    { done: list.length > 0, label: "Launch a VM", href: "#/vms/new" },
    { done: list.some((v) => v.network && v.network !== "default"), label: "Connect VMs on a private network", href: "#/networks" },
  ];
  return (
    <section aria-labelledby="ov-h">
      <div class="page-head">
        <h1 id="ov-h">{me.operator ? "Fleet overview" : `Overview — ${me.tenantName}`}</h1>
      </div>
      <ErrorNote error={mine.error || vms.error} />
      <div class="cards">
        {!me.operator ? (
          <div class="panel">
            <h2>Getting started</h2>
            <ul class="checklist">
              {steps.map((s) => (
                <li class={s.done ? "done" : ""}>
                  <span aria-hidden="true">{s.done ? "✓" : "○"}</span> <a href={s.href}>{s.label}</a>
                  <span class="sr-only">{s.done ? " (done)" : " (to do)"}</span>
                </li>
              ))}
            </ul>
          </div>
        ) : null}
        {!me.operator ? (
          <div class="panel">
            <h2>Quota</h2>
            <Meter label="VMs" used={used.vms || 0} max={q.max_vms || 0} />
            <Meter label="vCPUs" used={used.vcpus || 0} max={q.max_vcpus || 0} />
            <Meter label="Memory (GiB)" used={Math.round((used.memory_mib || 0) / 1024)} max={Math.round((q.max_memory_mib || 0) / 1024)} />
          </div>
        ) : null}
        {bill ? (
          <div class="panel">
            <h2>This month</h2>
            <p class="big">
              {bill.month_to_date_display} <span class="muted">{bill.currency}</span>
            </p>
            <p>{bill.monthly ? `Budget ${bill.monthly} ${bill.currency}` : "No budget set"}</p>
            {bill.state && bill.state !== "ok" ? <p class="warn">Budget: {bill.state}</p> : null}
          </div>
        ) : null}
        {me.operator ? (
          <div class="panel">
            <h2>Nodes</h2>
            <p class="big">{(nodes.data?.nodes || []).length}</p>
            <p>{(nodes.data?.nodes || []).filter((n: any) => n.state !== "up").length} not responding</p>
            <a href="#/nodes">All nodes</a>
          </div>
        ) : null}
        <div class="panel">
          <h2>Recent VMs</h2>
          <ul class="plain">
            {list
              .slice()
              .sort((a, b) => compareISO(b.created_at, a.created_at))
              .slice(0, 5)
              .map((v) => (
                <li>
                  <a href={`#/vms/${v.node}/${v.id}`}>{v.name}</a> <span class="muted">{v.state}</span>
                </li>
              ))}
            {!list.length ? <li class="muted">None yet</li> : null}
          </ul>
        </div>
      </div>
    </section>
  );
}

function Simple(props: { id: string; title: string; children: any; action?: any }) {
  return (
    <section aria-labelledby={props.id}>
      <div class="page-head">
        <h1 id={props.id}>{props.title}</h1>
        {props.action}
      </div>
      {props.children}
    </section>
  );
}

export function MacsPage({ me }: { me: Me }) {
  const { data, error, reload } = useData<any>("/fleet/leases", 10000);
  const act = useAction();
  const list: any[] = (data?.leases || []).filter((l: any) => l.active);
  const slots = useMacSlots();
  return (
    <Simple id="macs-h" title="My Macs">
      <ErrorNote error={error || act.error} />
      <Table
        label="Leased Macs"
        head={["Mac", "macOS slots", "Since", "Minimum", "", ""]}
        empty="You lease no Mac. Leasing one reserves a whole host for you, for at least 24 hours."
        rows={list.map((l) => {
          const start = new Date(l.started_at).getTime();
          const min = new Date(l.min_end).getTime();
          const pct = Math.max(0, Math.min(100, Math.round(((Date.now() - start) / (min - start || 1)) * 100)));
          return [
            l.node,
            <SlotDots slots={slots.get(l.node)} />,
            fmtTime(l.started_at),
            <div class="meter">
              <div class="bar" role="progressbar" aria-label={`Lease of ${l.node} through its minimum`} aria-valuenow={pct} aria-valuemin={0} aria-valuemax={100}>
                <div style={{ width: pct + "%" }} />
              </div>
              <span class="muted">{pct >= 100 ? "minimum met: may be released" : `${pct}%, may be released from ${fmtTime(l.min_end)}`}</span>
            </div>,
            <a href="#/vms/new">Launch on it</a>,
            can(me, "admin") ? (
              <button disabled={pct < 100} onClick={() => act.run(() => post(`/fleet/leases/${l.id}/release`).then(reload))}>
                Release
              </button>
            ) : (
              ""
            ),
          ];
        })}
      />
    </Simple>
  );
}

export function TunnelsPage({ me }: { me: Me }) {
  const { data, error, reload } = useData<any>("/fleet/tunnels", 5000);
  const act = useAction();
  return (
    <Simple id="tun-h" title="Tunnels">
      <ErrorNote error={error || act.error} />
      <Table
        label="Open tunnels"
        head={["VM", "Kind", "Tenant", "Opened by", "To VM", "From VM", "Idle", ""]}
        empty="No open tunnels."
        rows={(data?.tunnels || []).map((t: any) => [
          t.vm_name,
          t.kind === "screen" ? "screen" : "port " + t.port,
          t.tenant_name || "—",
          t.opened_by,
          t.bytes_to_vm + " B",
          t.bytes_from_vm + " B",
          ago(t.last_active),
          can(me, "admin") ? (
            <button onClick={() => act.run(() => del(`/fleet/tunnels/${t.id}`).then(reload))} aria-label={`Close tunnel to ${t.vm_name}`}>
              Close
            </button>
          ) : (
            ""
          ),
        ])}
      />
      {data?.limits ? (
        <p class="hint">
          {data.limits.enabled ? "Tunnels are on" : "Tunnels are off"}; at most {data.limits.max_per_tenant} per tenant, idle for{" "}
          {data.limits.idle_timeout_minutes} min.
        </p>
      ) : null}
    </Simple>
  );
}

export function ImagesPage({ me }: { me: Me }) {
  const { data, error } = useData<any>("/fleet/images");
  return (
    <Simple id="img-h" title="Images">
      <ErrorNote error={error} />
      <Table
        label="Image catalog"
        head={["Name", "Guest", "Default size", "SSH user", ""]}
        empty="The catalog is empty."
        rows={(data?.images || []).map((i: any) => [
          i.display_name || i.name,
          i.guest_os,
          `${i.vcpus} vCPU · ${fmtMiB(i.memory_mib)}`,
          i.ssh_user,
          !me.operator ? <a href="#/vms/new">Launch</a> : "",
        ])}
      />
    </Simple>
  );
}

export function UsagePage() {
  const [days, setDays] = useState(30);
  const to = new Date();
  const from = new Date(to.getTime() - days * 86400e3);
  const qs = `from=${from.toISOString().replace(/\.\d+Z$/, "Z")}&to=${to.toISOString().replace(/\.\d+Z$/, "Z")}`;
  const { data, error } = useData<any>(`/fleet/usage?${qs.replace(/:\d\dZ/g, ":00Z")}`);
  const download = async () => {
    const token = savedToken();
    const r = await fetch(`/fleet/usage?${qs}&format=csv`, { headers: token ? { Authorization: "Bearer " + token } : {}, credentials: "same-origin" });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(await r.blob());
    a.download = `usage-${days}d.csv`;
    a.click();
  };
  const h = (s: number) => (s / 3600).toFixed(1);
  return (
    <Simple id="use-h" title="Usage" action={<button onClick={download}>Download CSV</button>}>
      <div class="seg" role="group" aria-label="Window">
        {[7, 30, 90].map((d) => (
          <button aria-pressed={d === days} onClick={() => setDays(d)}>
            {d} days
          </button>
        ))}
      </div>
      <ErrorNote error={error} />
      <Table
        label="Usage"
        head={["Tenant", "VM hours", "vCPU hours", "GiB hours", "Lease hours", "VMs started"]}
        empty="No usage in this window."
        rows={(data?.tenants || []).map((u: any) => [
          u.tenant_name,
          h(u.vm_seconds),
          h(u.vcpu_seconds),
          h(u.memory_mib_seconds / 1024),
          h(u.lease_seconds),
          u.vms_started,
        ])}
      />
    </Simple>
  );
}

export function BillingPage({ me }: { me: Me }) {
  const { data, error } = useData<any>("/fleet/billing");
  const inv = useData<any>("/fleet/billing/invoices");
  const st = data?.statements || (data ? [data] : []);
  return (
    <Simple id="bill-h" title="Billing">
      <BudgetPanel me={me} />
      <ErrorNote error={error} />
      {st.map((s: any) => (
        <div class="panel">
          <h2>
            {s.tenant_name || me.tenantName} — {s.month}
          </h2>
          <Table
            label={`Statement ${s.month}`}
            head={["Item", "Quantity", "Amount"]}
            empty="Nothing billed this month."
            rows={(s.lines || []).map((l: any) => [l.description, `${l.quantity} ${l.unit}`, l.amount_display])}
          />
          <p>
            Total <strong>{s.total_display}</strong>
            {s.forecast_display ? ` · forecast ${s.forecast_display}` : ""}
          </p>
        </div>
      ))}
      <h2>Invoices</h2>
      <ErrorNote error={inv.error} />
      <Table
        label="Invoices"
        head={["Invoice", "Month", "Status", "Amount"]}
        empty="No invoices."
        rows={(inv.data?.invoices || []).map((i: any) => [i.id, i.month, i.status, i.amount_display || i.total_display || ""])}
      />
    </Simple>
  );
}

export function ActivityPage() {
  const { data, error } = useData<any>("/fleet/events?limit=200", 10000);
  return (
    <Simple id="act-h" title="Activity">
      <ErrorNote error={error} />
      <Table
        label="Activity"
        head={["When", "Who", "What", "Result"]}
        empty="Nothing has happened yet."
        rows={(data?.events || [])
          .slice()
          .sort((a: any, b: any) => compareISO(b.time, a.time))
          .map((e: any) => [
            fmtTime(e.time),
            e.user || (e.key ? `${e.actor} (key ${e.key})` : e.actor || e.who),
            e.action || `${e.method} ${e.path}`,
            e.status >= 400 ? <span class="badge s-attn">{e.status}</span> : "ok",
          ])}
      />
    </Simple>
  );
}

export function NotificationsPage({ me }: { me: Me }) {
  const { data, error } = useData<any>("/fleet/notifications");
  return (
    <Simple id="not-h" title="Notifications">
      <ErrorNote error={error} />
      <ul class="plain notes">
        {(data?.notifications || []).map((n: any) => (
          <li>
            <strong>{n.title}</strong> <span class="muted">{ago(n.time)}</span>
            {n.detail ? <div>{n.detail}</div> : null}
          </li>
        ))}
        {data && !(data.notifications || []).length ? <li class="muted">No notifications.</li> : null}
      </ul>
      <Webhooks me={me} />
    </Simple>
  );
}

export function KeysPage({ me }: { me: Me }) {
  const { data, error, reload } = useData<any>("/fleet/tenants/me/keys");
  const [name, setName] = useState("");
  const [ro, setRO] = useState(false);
  const [shown, setShown] = useState<any>(null);
  const act = useAction();
  return (
    <Simple id="keys-h" title="API keys">
      <ErrorNote error={error || act.error} />
      {shown ? (
        <div class="once" role="status">
          <h2>Key {name || shown.key?.name}</h2>
          <p>Shown once: copy it now.</p>
          <pre class="token">{shown.token || shown.secret}</pre>
          <button onClick={() => setShown(null)}>I have copied it</button>
        </div>
      ) : null}
      <Table
        label="API keys"
        head={["Name", "Access", "Created", "Expires", "Last used", ""]}
        empty="No API keys."
        rows={(data?.keys || []).map((k: any) => [
          k.name,
          k.read_only ? "read-only" : "full",
          ago(k.created_at),
          fmtTime(k.expires_at),
          ago(k.last_used_at),
          can(me, "admin") ? (
            <button onClick={() => confirm(`Revoke ${k.name}?`) && act.run(() => del(`/fleet/tenants/me/keys/${k.id}`).then(reload))}>Revoke…</button>
          ) : (
            ""
          ),
        ])}
      />
      {can(me, "admin") ? (
        <form
          class="form inline"
          onSubmit={(e) => {
            e.preventDefault();
            act.run(() => post("/fleet/tenants/me/keys", { name, read_only: ro }).then((r) => (setShown(r), reload())));
          }}
        >
          <label>
            Key name
            <input value={name} required onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </label>
          <label class="check">
            <input type="checkbox" checked={ro} onChange={(e) => setRO((e.target as HTMLInputElement).checked)} /> read-only
          </label>
          <button class="primary" type="submit">
            Create key
          </button>
        </form>
      ) : null}
    </Simple>
  );
}

export function MembersPage({ me }: { me: Me }) {
  const { data, error, reload } = useData<any>("/fleet/tenants/me/members");
  const [email, setEmail] = useState("");
  const [role, setRole] = useState("member");
  const act = useAction();
  const admin = can(me, "admin");
  return (
    <Simple id="mem-h" title="Members">
      <ErrorNote error={error || act.error} />
      <Table
        label="Members"
        head={["Email", "Role", "Last sign-in", ""]}
        empty="No members: people sign in with SSO once added here."
        rows={(data?.members || []).map((m: any) => [
          m.email,
          admin ? (
            <select
              aria-label={`Role of ${m.email}`}
              value={m.role}
              onChange={(e) => act.run(() => call("PATCH", `/fleet/tenants/me/members/${m.email}`, { role: (e.target as HTMLSelectElement).value }).then(reload))}
            >
              {["viewer", "member", "admin", "owner"].map((r) => (
                <option value={r}>{r}</option>
              ))}
            </select>
          ) : (
            m.role
          ),
          ago(m.last_sign_in_at),
          admin ? <button onClick={() => confirm(`Remove ${m.email}?`) && act.run(() => del(`/fleet/tenants/me/members/${m.email}`).then(reload))}>Remove…</button> : "",
        ])}
      />
      {admin ? (
        <form
          class="form inline"
          onSubmit={(e) => {
            e.preventDefault();
            act.run(() => post("/fleet/tenants/me/members", { email, role }).then(() => (setEmail(""), reload())));
          }}
        >
          <label>
            Email
            <input type="email" value={email} required onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
          </label>
          <label>
            Role
            <select value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value)}>
              {["viewer", "member", "admin", "owner"].map((r) => (
                <option value={r}>{r}</option>
              ))}
            </select>
          </label>
          <button class="primary" type="submit">
            Add member
          </button>
        </form>
      ) : null}
    </Simple>
  );
}

export { go };
