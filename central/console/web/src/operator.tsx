// The operator's editing pages: the image catalog, the fleet policy, the
// price list, a tenant's quotas and a tenant's statement. Each form sends
// what was typed; central checks it and its refusal (with its hint) is
// shown where the form is.
import { useEffect, useState } from "preact/hooks";
import { Me, call, del, fmtMiB, fmtTime, get } from "./api";
import { ErrorNote, Sheet, Table, useAction, useData } from "./ui";
import { asNumber } from "./settings";

// ---- a JSON document as a form ----

type Kind = "bool" | "num" | "str" | "list" | "json";
interface Field { key: string; path: string[]; kind: Kind }

// fieldsOf lists the editable leaves of doc: booleans, numbers, strings,
// lists of strings (typed comma-separated) and anything else as JSON.
function fieldsOf(doc: any, skip: string[], jsonKeys: string[], prefix: string[] = []): Field[] {
  const out: Field[] = [];
  for (const [k, v] of Object.entries(doc)) {
    const path = [...prefix, k];
    if (!prefix.length && skip.includes(k)) continue;
    let kind: Kind = "json";
    if (typeof v === "boolean") kind = "bool";
    else if (typeof v === "number") kind = "num";
    else if (typeof v === "string") kind = "str";
    else if (jsonKeys.includes(k)) kind = "json";
    else if (Array.isArray(v) && v.every((x) => typeof x === "string")) kind = "list";
    else if (v && typeof v === "object" && !Array.isArray(v)) {
      out.push(...fieldsOf(v, skip, jsonKeys, path));
      continue;
    }
    out.push({ key: path.join("."), path, kind });
  }
  return out;
}

function at(doc: any, path: string[]): any {
  return path.reduce((o, k) => (o == null ? undefined : o[k]), doc);
}

function shown(v: any, kind: Kind): string | boolean {
  if (kind === "bool") return !!v;
  if (kind === "list") return (v || []).join(", ");
  if (kind === "json") return JSON.stringify(v, null, 1);
  return v == null ? "" : String(v);
}

// DocForm edits doc field by field and hands back the whole document with
// the edits made (central's PUTs replace a whole document). Beside its save
// button it shows the save's error, or note once saved.
function DocForm(props: {
  doc: any; skip?: string[]; jsonKeys?: string[]; label: string; save: string; busy: boolean;
  onSave: (doc: any) => void; onBad: (e: Error) => void; error: any; note: string;
}) {
  const fields = fieldsOf(props.doc, props.skip || [], props.jsonKeys || []);
  const initial = () => Object.fromEntries(fields.map((f) => [f.key, shown(at(props.doc, f.path), f.kind)]));
  const [draft, setDraft] = useState<Record<string, string | boolean>>(initial);
  useEffect(() => setDraft(initial()), [props.doc]);
  const set = (k: string, v: string | boolean) => setDraft((d) => ({ ...d, [k]: v }));
  const submit = (e: Event) => {
    e.preventDefault();
    const doc = JSON.parse(JSON.stringify(props.doc));
    for (const k of props.skip || []) delete doc[k];
    for (const f of fields) {
      const v = draft[f.key];
      let out: any = v;
      if (f.kind === "num") out = asNumber(String(v));
      if (f.kind === "list") out = String(v).split(",").map((s) => s.trim()).filter(Boolean);
      if (f.kind === "json") {
        try {
          out = JSON.parse(String(v));
        } catch {
          props.onBad(new Error(`${f.key} is not valid JSON`));
          return;
        }
      }
      let o = doc;
      for (const p of f.path.slice(0, -1)) o = o[p];
      o[f.path[f.path.length - 1]] = out;
    }
    props.onSave(doc);
  };
  // Fields of a nested object are grouped under its name.
  const groups: [string, Field[]][] = [];
  for (const f of fields) {
    const g = f.path.length > 1 ? f.path[0] : "";
    const last = groups[groups.length - 1];
    if (last && last[0] === g) last[1].push(f);
    else groups.push([g, [f]]);
  }
  const input = (f: Field) => {
    const name = f.path[f.path.length - 1];
    const words = name.replace(/_/g, " ");
    const v = draft[f.key];
    if (f.kind === "bool")
      return (
        <label class="check">
          <input type="checkbox" name={f.key} checked={!!v} onChange={(e) => set(f.key, (e.target as HTMLInputElement).checked)} /> {words}
        </label>
      );
    return (
      <label>
        <span>
          {words}
          {f.kind === "list" ? <span class="muted"> (comma-separated)</span> : null}
          {f.kind === "json" ? <span class="muted"> (JSON)</span> : null}
        </span>
        {f.kind === "json" ? (
          <textarea name={f.key} rows={5} class="mono" value={String(v ?? "")} onInput={(e) => set(f.key, (e.target as HTMLTextAreaElement).value)} />
        ) : (
          <input
            name={f.key}
            inputMode={f.kind === "num" ? "decimal" : undefined}
            autoComplete="off"
            value={String(v ?? "")}
            onInput={(e) => set(f.key, (e.target as HTMLInputElement).value)}
          />
        )}
      </label>
    );
  };
  return (
    <form class="form doc" onSubmit={submit} aria-label={props.label}>
      {groups.map(([g, fs]) =>
        g ? (
          <fieldset class="panel">
            <legend>{g.replace(/_/g, " ")}</legend>
            <div class="form">{fs.map(input)}</div>
          </fieldset>
        ) : (
          <div class="panel form">{fs.map(input)}</div>
        ),
      )}
      <div class="sticky-save">
        <div class="save-result" aria-live="polite">
          <ErrorNote error={props.error} />
          {props.note ? <p role="status">{props.note}</p> : null}
        </div>
        <div class="actions left">
          <button class="primary" type="submit" disabled={props.busy}>
            {props.save}
          </button>
        </div>
      </div>
    </form>
  );
}

// ---- policy ----

export function PolicyPage() {
  const { data, error, reload } = useData<any>("/fleet/policy");
  const [note, setNote] = useState("");
  const act = useAction();
  const save = (doc: any) =>
    act.run(async () => {
      setNote("");
      const stored = await call("PUT", "/fleet/policy", doc);
      setNote(
        stored.min_lease_hours !== doc.min_lease_hours
          ? `Policy saved; min lease hours ${doc.min_lease_hours} was raised to ${stored.min_lease_hours} (Apple's licence asks for 24 hours).`
          : "Policy saved.",
      );
      reload();
    });
  return (
    <section aria-labelledby="pol-h">
      <div class="page-head">
        <h1 id="pol-h">Fleet policy</h1>
      </div>
      <p class="hint">Every field with its value now. Saving replaces the whole policy; central checks every value.</p>
      <ErrorNote error={error} />
      {data ? (
        <DocForm doc={{ ...data, egress: data.egress ?? null }} skip={["fleet_egress"]} jsonKeys={["egress"]} label="Fleet policy" save="Save policy" busy={act.busy} onSave={save} onBad={act.setError} error={act.error} note={note} />
      ) : null}
      <p class="hint">
        Egress is the floor every tenant network is held to, as JSON: null for none (tenant networks may reach anywhere), or{" "}
        <code>{'{"mode": "allowlist", "allow": ["192.0.2.0/24"], "block": ["192.0.2.7"]}'}</code>. Tenants may tighten it, never loosen it.
      </p>
      {data?.fleet_egress ? (
        <p class="hint" role="note">
          This central is a member of a fleet: its owner's floor, {JSON.stringify(data.fleet_egress.floor ?? null)}
          {data.fleet_egress.fetched_at ? `, fetched ${fmtTime(data.fleet_egress.fetched_at)}` : ", not fetched yet"}
          {data.fleet_egress.last_error ? ` (last try failed: ${data.fleet_egress.last_error})` : ""}, applies here; the egress above may only tighten it.
        </p>
      ) : null}
    </section>
  );
}

// ---- prices ----

export function PricesPage() {
  const { data, error, reload } = useData<any>("/fleet/prices?history=true");
  const [note, setNote] = useState("");
  const act = useAction();
  const versions: any[] = data?.versions || [];
  const now = versions[versions.length - 1];
  const save = (doc: any) =>
    act.run(async () => {
      setNote("");
      const v = await call("PUT", "/fleet/prices", doc);
      setNote(`New prices in effect from ${fmtTime(v.effective_from)}.`);
      reload();
    });
  return (
    <section aria-labelledby="prices-h">
      <div class="page-head">
        <h1 id="prices-h">Prices</h1>
      </div>
      <ErrorNote error={error} />
      <h2>History</h2>
      <Table
        label="Price history"
        head={["In effect from", "Currency", "VM / h", "vCPU / h", "GiB / h", "Mac / h", "Note"]}
        empty="No prices published yet."
        rows={versions
          .slice()
          .reverse()
          .map((v) => [fmtTime(v.effective_from), v.currency, v.vm_per_hour, v.vcpu_per_hour, v.memory_gib_per_hour, v.mac_per_hour, v.note || ""])}
      />
      <h2>New prices</h2>
      <p class="hint">
        Rates are per hour in the currency's units; they take effect when saved, and running leases keep the price they started with. Mac classes are a JSON list
        such as <code>[{`{"name": "m2-pro", "min_vcpus": 10, "min_memory_gib": 32, "per_hour": 1.2}`}]</code>.
      </p>
      {now ? (
        <DocForm doc={now} skip={["effective_from"]} jsonKeys={["mac_classes"]} label="New prices" save="Publish prices" busy={act.busy} onSave={save} onBad={act.setError} error={act.error} note={note} />
      ) : null}
    </section>
  );
}

// ---- the image catalog ----

const blankImage = { name: "", display_name: "", guest_os: "linux", image: "", vcpus: 2, memory_mib: 2048, ssh_user: "admin", source: "" };

// CatalogPage is the Images page for the operator: the catalog with add,
// edit and delete.
export function CatalogPage() {
  const { data, error, reload } = useData<any>("/fleet/images");
  const [edit, setEdit] = useState<any>(null); // the entry in the sheet
  const act = useAction();
  return (
    <section aria-labelledby="img-h">
      <div class="page-head">
        <h1 id="img-h">Images</h1>
        <button class="primary" onClick={() => setEdit({ ...blankImage, isNew: true })}>
          Add image
        </button>
      </div>
      <ErrorNote error={error || act.error} />
      <Table
        label="Image catalog"
        head={["Name", "Guest", "Default size", "Disk on the nodes", "SSH user", ""]}
        empty="The catalog is empty: add an image the nodes have."
        rows={(data?.images || []).map((i: any) => [
          i.display_name ? `${i.display_name} (${i.name})` : i.name,
          i.guest_os,
          `${i.vcpus} vCPU · ${fmtMiB(i.memory_mib)}`,
          <code>{i.image}</code>,
          i.ssh_user,
          <span class="row-actions">
            <button aria-label={`Edit ${i.name}`} onClick={() => setEdit(i)}>
              Edit
            </button>
            <button class="destructive" aria-label={`Delete ${i.name}`} onClick={() => confirm(`Delete ${i.name} from the catalog? VMs launched from it keep running.`) && act.run(() => del(`/fleet/images/${encodeURIComponent(i.name)}`).then(reload))}>
              Delete
            </button>
          </span>,
        ])}
      />
      {edit ? <ImageSheet image={edit} onClose={() => setEdit(null)} onDone={() => (setEdit(null), reload())} /> : null}
    </section>
  );
}

function ImageSheet({ image, onClose, onDone }: { image: any; onClose: () => void; onDone: () => void }) {
  const [v, setV] = useState<Record<string, string>>(() => Object.fromEntries(Object.keys(blankImage).map((k) => [k, String(image[k] ?? "")])));
  const act = useAction();
  const field = (k: string, label: string, extra: any = {}) => (
    <label>
      {label}
      <input name={"image-" + k} autoComplete="off" value={v[k]} onInput={(e) => setV({ ...v, [k]: (e.target as HTMLInputElement).value })} {...extra} />
    </label>
  );
  const submit = (e: Event) => {
    e.preventDefault();
    const body: any = { ...v, vcpus: asNumber(v.vcpus), memory_mib: asNumber(v.memory_mib) };
    delete body.name;
    act.run(() => call("PUT", `/fleet/images/${encodeURIComponent(v.name.trim())}`, body).then(onDone));
  };
  return (
    <Sheet title={image.isNew ? "Add an image" : `Edit ${image.name}`} onClose={onClose}>
      <form class="form" onSubmit={submit}>
        {field("name", "Name", { required: true, readOnly: !image.isNew, maxLength: 64 })}
        {field("display_name", "Display name")}
        <label>
          Guest
          <select name="image-guest_os" value={v.guest_os} onChange={(e) => setV({ ...v, guest_os: (e.target as HTMLSelectElement).value })}>
            <option value="linux">linux</option>
            <option value="macos">macos</option>
          </select>
        </label>
        {field("image", "Disk path on the nodes", { required: true })}
        <div class="row">
          {field("vcpus", "Default vCPUs", { inputMode: "numeric" })}
          {field("memory_mib", "Default memory (MiB)", { inputMode: "numeric" })}
        </div>
        {field("ssh_user", "SSH user")}
        {field("source", "Source (OCI reference or URL)")}
        <p class="hint">Central does not copy the disk: put it on the nodes first.</p>
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={onClose}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy}>
            {image.isNew ? "Add image" : "Save image"}
          </button>
        </div>
      </form>
    </Sheet>
  );
}

// ---- a tenant's quotas and statement ----

const quotas: [string, string][] = [
  ["max_vms", "Most VMs"],
  ["max_vcpus", "Most vCPUs"],
  ["max_memory_mib", "Most memory (MiB)"],
  ["max_leased_hosts", "Most leased Macs"],
  ["max_snapshots_per_vm", "Most snapshots per VM (empty: the policy's)"],
  ["max_volume_gib", "Most volume GiB"],
];

// TenantSheets is the sheet a Tenants row opens: "quota" or "statement".
export function TenantSheets({ open, onClose, reload }: { open: { kind: string; t: any } | null; onClose: () => void; reload: () => void }) {
  if (!open) return null;
  return open.kind === "quota" ? <QuotaSheet t={open.t} onClose={onClose} onDone={() => (onClose(), reload())} /> : <StatementSheet t={open.t} onClose={onClose} />;
}

function QuotaSheet({ t, onClose, onDone }: { t: any; onClose: () => void; onDone: () => void }) {
  const [v, setV] = useState<Record<string, string>>(() => Object.fromEntries(quotas.map(([k]) => [k, t.quota?.[k] != null ? String(t.quota[k]) : ""])));
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    const quota = Object.fromEntries(quotas.map(([k]) => [k, v[k].trim() === "" ? null : asNumber(v[k])]));
    act.run(() => call("PATCH", `/fleet/tenants/${t.id}`, { quota }).then(onDone));
  };
  return (
    <Sheet title={`Quotas of ${t.name}`} onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <p class="hint">Empty means no limit.</p>
        {quotas.map(([k, label]) => (
          <label>
            {label}
            <input name={"quota-" + k} inputMode="numeric" autoComplete="off" value={v[k]} onInput={(e) => setV({ ...v, [k]: (e.target as HTMLInputElement).value })} />
          </label>
        ))}
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={onClose}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy}>
            Save quotas
          </button>
        </div>
      </form>
    </Sheet>
  );
}

function StatementSheet({ t, onClose }: { t: any; onClose: () => void }) {
  const [month, setMonth] = useState(new Date().toISOString().slice(0, 7));
  const [st, setSt] = useState<any>(null);
  const act = useAction();
  useEffect(() => {
    setSt(null);
    act.run(() => get(`/fleet/billing?tenant=${encodeURIComponent(t.id)}&month=${month}`).then(setSt));
  }, [month]);
  return (
    <Sheet title={`Statement of ${t.name}`} onClose={onClose} wide>
      <label class="inline-label">
        Month
        <input type="month" name="statement-month" value={month} onChange={(e) => (e.target as HTMLInputElement).value && setMonth((e.target as HTMLInputElement).value)} />
      </label>
      <ErrorNote error={act.error} />
      {st ? (
        <div class="statement">
          <Table
            label={`Statement of ${t.name} for ${st.month}`}
            head={["Item", "Quantity", "Amount"]}
            empty="Nothing billed this month."
            rows={(st.lines || []).map((l: any) => [l.description, `${l.quantity} ${l.unit}`, l.amount_display])}
          />
          <p>
            Total <strong class="statement-total">{st.total_display} {st.currency}</strong>
            {st.forecast_display ? ` · forecast ${st.forecast_display}` : ""}
            {st.budget?.monthly ? ` · budget ${st.budget.monthly}` : ""}
          </p>
          <p class="hint">As of {fmtTime(st.as_of)}.</p>
        </div>
      ) : act.busy ? (
        <p>Loading…</p>
      ) : null}
    </Sheet>
  );
}
