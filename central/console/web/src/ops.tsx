// The operator's pages: every node (what needs attention first) and tenants.
import { useState } from "preact/hooks";
import { Me, ago, del, fmtMiB, post, call } from "./api";
import { ErrorNote, Sheet, Table, useAction, useData } from "./ui";
import { go } from "./router";
import { TenantSheets } from "./operator";

// attention ranks what an operator should look at first.
function attention(n: any): [number, string] {
  if (n.state !== "up") return [0, "not responding"];
  if (n.scrub_pending) return [1, "needs a scrub"];
  if (n.draining && !(n.vms || []).length) return [2, "finished draining"];
  if (n.draining) return [3, "draining"];
  if (n.cordoned) return [4, "cordoned"];
  return [9, "ok"];
}

export function NodesPage({ me, name }: { me: Me; name?: string }) {
  const { data, error, reload } = useData<any>("/fleet/nodes", 3000);
  const tenants = useData<any>("/fleet/tenants");
  const act = useAction();
  const nodes: any[] = (data?.nodes || []).slice().sort((a: any, b: any) => attention(a)[0] - attention(b)[0] || a.name.localeCompare(b.name));
  const open = name ? nodes.find((n) => n.name === name) : null;
  const doit = (f: () => Promise<any>) => act.run(() => f().then(reload));
  return (
    <section aria-labelledby="nodes-h">
      <div class="page-head">
        <h1 id="nodes-h">Nodes</h1>
      </div>
      <ErrorNote error={error || act.error} />
      <Table
        label="Nodes"
        head={["Node", "Needs", "State", "Free", "VMs", "Leased by", "Heartbeat", ""]}
        empty="No node has joined yet."
        rows={nodes.map((n) => {
          const [, why] = attention(n);
          return [
            <a href={`#/nodes/${n.name}`}>{n.name}</a>,
            <span class={"badge " + (why === "ok" ? "s-ready" : "s-attn")}>{why}</span>,
            n.state,
            `${n.capacity?.free?.vcpus ?? 0} vCPU · ${fmtMiB(n.capacity?.free?.memory_mib ?? 0)}`,
            (n.vms || []).length,
            n.leased_by || "—",
            ago(n.last_heartbeat),
            me.operator ? (
              <span class="row-actions">
                {n.cordoned ? (
                  <button onClick={() => doit(() => post(`/fleet/nodes/${n.name}/uncordon`))} aria-label={`Uncordon ${n.name}`}>
                    Uncordon
                  </button>
                ) : (
                  <button onClick={() => doit(() => post(`/fleet/nodes/${n.name}/cordon`))} aria-label={`Cordon ${n.name}`}>
                    Cordon
                  </button>
                )}
                <button onClick={() => go(`/nodes/${n.name}`)} aria-label={`More for ${n.name}`}>
                  More…
                </button>
              </span>
            ) : (
              ""
            ),
          ];
        })}
      />
      {open ? <NodeSheet node={open} tenants={tenants.data?.tenants || []} reload={reload} /> : null}
    </section>
  );
}

function NodeSheet({ node, tenants, reload }: { node: any; tenants: any[]; reload: () => void }) {
  const [mode, setMode] = useState("cordon");
  const [force, setForce] = useState(false);
  const [tenant, setTenant] = useState("");
  const [out, setOut] = useState<any>(null);
  const act = useAction();
  const run = (f: () => Promise<any>) => act.run(() => f().then((r) => (setOut(r), reload())));
  return (
    <Sheet title={`Node ${node.name}`} onClose={() => go("/nodes")}>
      <dl class="details">
        <dt>State</dt>
        <dd>{node.state}{node.cordoned ? ", cordoned" : ""}{node.draining ? ", draining" : ""}{node.scrub_pending ? ", needs a scrub" : ""}</dd>
        <dt>URL</dt>
        <dd><code>{node.url}</code></dd>
        <dt>Total</dt>
        <dd>{node.capacity?.total?.vcpus} vCPU · {fmtMiB(node.capacity?.total?.memory_mib)} · {node.capacity?.total?.macos_slots} macOS slots</dd>
        <dt>Drivers</dt>
        <dd>{(node.drivers || []).map((d: any) => `${d.name} (${d.health})`).join(", ") || "—"}</dd>
        <dt>VMs</dt>
        <dd>{(node.vms || []).map((v: any) => v.name).join(", ") || "none"}</dd>
      </dl>
      <div class="form">
        <h3>Drain</h3>
        <label>
          What happens to running VMs
          <select value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value)}>
            <option value="cordon">keep them (cordon only)</option>
            <option value="evict-ephemeral">delete ephemeral VMs</option>
            <option value="reschedule">move reschedulable VMs elsewhere</option>
          </select>
        </label>
        <label class="check">
          <input type="checkbox" checked={force} onChange={(e) => setForce((e.target as HTMLInputElement).checked)} /> even though it is leased
        </label>
        <div class="actions left">
          <button onClick={() => run(() => post(`/fleet/nodes/${node.name}/drain?mode=${mode}${force ? "&force=true" : ""}`))}>Drain</button>
          <button onClick={() => run(() => post(`/fleet/nodes/${node.name}/scrub`))}>Scrub</button>
        </div>
        <h3>Lease to a tenant</h3>
        <label>
          Tenant
          <select value={tenant} onChange={(e) => setTenant((e.target as HTMLSelectElement).value)}>
            <option value="">choose…</option>
            {tenants.map((t) => (
              <option value={t.name}>{t.name}</option>
            ))}
          </select>
        </label>
        <div class="actions left">
          <button disabled={!tenant} onClick={() => run(() => post(`/fleet/leases`, { node: node.name, tenant }))}>
            Lease {node.name}
          </button>
        </div>
      </div>
      <ErrorNote error={act.error} />
      {out ? <pre class="log">{JSON.stringify(out, null, 2)}</pre> : null}
    </Sheet>
  );
}

export function TenantsPage({ me, create }: { me: Me; create?: boolean }) {
  const { data, error, reload } = useData<any>("/fleet/tenants");
  const [shown, setShown] = useState<any>(null); // a token, shown once
  const [sheet, setSheet] = useState<{ kind: string; t: any } | null>(null); // quotas or statement
  const act = useAction();
  const list: any[] = data?.tenants || [];
  return (
    <section aria-labelledby="tenants-h">
      <div class="page-head">
        <h1 id="tenants-h">Tenants</h1>
        {me.operator ? (
          <button class="primary" onClick={() => go("/tenants/new")}>
            New tenant
          </button>
        ) : null}
      </div>
      <ErrorNote error={error || act.error} />
      {shown ? (
        <div class="once" role="status">
          <h2>Token for {shown.tenant.name}</h2>
          <p>This is the only time it is shown: copy it now. Central keeps only its hash.</p>
          <pre class="token">{shown.token}</pre>
          <button onClick={() => setShown(null)}>I have copied it</button>
        </div>
      ) : null}
      <Table
        label="Tenants"
        head={["Tenant", "Quota", "Created", "State", ""]}
        empty="No tenants yet."
        rows={list.map((t) => [
          t.name,
          `${t.quota?.max_vms || "∞"} VMs · ${t.quota?.max_vcpus || "∞"} vCPU · ${t.quota?.max_memory_mib ? fmtMiB(t.quota.max_memory_mib) : "∞"}`,
          ago(t.created_at),
          t.disabled ? "disabled" : "active",
          <span class="row-actions">
            <button aria-label={`Quotas of ${t.name}`} onClick={() => setSheet({ kind: "quota", t })}>
              Quotas
            </button>
            <button aria-label={`Statement of ${t.name}`} onClick={() => setSheet({ kind: "statement", t })}>
              Statement
            </button>
            <button onClick={() => act.run(() => call("PATCH", `/fleet/tenants/${t.id}`, { disabled: !t.disabled }).then(reload))}>
              {t.disabled ? "Enable" : "Disable"}
            </button>
            <button onClick={() => confirm(`Issue a new token for ${t.name}? The old one stops working.`) && act.run(() => post(`/fleet/tenants/${t.id}/rotate-token`).then((r: any) => (setShown(r), reload())))}>
              New token
            </button>
            <button class="destructive" onClick={() => confirm(`Delete tenant ${t.name}?`) && act.run(() => del(`/fleet/tenants/${t.id}`).then(reload))}>
              Delete
            </button>
          </span>,
        ])}
      />
      <TenantSheets open={sheet} onClose={() => setSheet(null)} reload={reload} />
      {create ? <NewTenant onDone={(r) => (setShown(r), reload(), go("/tenants"))} /> : null}
    </section>
  );
}

function NewTenant({ onDone }: { onDone: (r: any) => void }) {
  const [name, setName] = useState("");
  const [vms, setVMs] = useState(10);
  const [vcpus, setVCPUs] = useState(16);
  const [mem, setMem] = useState(32768);
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    act.run(() => post("/fleet/tenants", { name, quota: { max_vms: vms, max_vcpus: vcpus, max_memory_mib: mem } }).then(onDone));
  };
  return (
    <Sheet title="New tenant" onClose={() => go("/tenants")}>
      <form class="form" onSubmit={submit}>
        <label>
          Name
          <input name="tenant-name" value={name} required maxLength={64} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Most VMs
          <input type="number" min={0} value={vms} onInput={(e) => setVMs(+(e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Most vCPUs
          <input type="number" min={0} value={vcpus} onInput={(e) => setVCPUs(+(e.target as HTMLInputElement).value)} />
        </label>
        <label>
          Most memory (MiB)
          <input type="number" min={0} step={1024} value={mem} onInput={(e) => setMem(+(e.target as HTMLInputElement).value)} />
        </label>
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={() => go("/tenants")}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy}>
            Create tenant
          </button>
        </div>
      </form>
    </Sheet>
  );
}
