// Networks: a tenant's private networks across nodes (central's overlays,
// docs/networks.md): the list, a new network with its egress policy, and a
// network's sheet (members, add and remove a node, rotate keys, delete).
import { useState } from "preact/hooks";
import { Me, ago, can, del, fmtTime, post } from "./api";
import { ErrorNote, MissingSheet, Sheet, Table, useAction, useData } from "./ui";
import { go } from "./router";

const overlayPath = (name: string, ...rest: string[]) => ["/fleet/overlays", name, ...rest].map((p, i) => (i ? encodeURIComponent(p) : p)).join("/");

// egressText says in a few words what a network lets out.
export function egressText(e: any): string {
  if (!e || !e.mode) return "the operator's floor";
  const block = (e.block || []).length ? `, ${(e.block || []).length} blocked` : "";
  if (e.mode === "open") return "open" + block;
  return `only ${(e.allow || []).join(", ") || "nothing"}${block}`;
}

// lines reads a textarea of one entry a line (commas also separate).
const lines = (s: string) =>
  s
    .split(/[\n,]/)
    .map((x) => x.trim())
    .filter(Boolean);

export function NetworksPage({ me, name }: { me: Me; name?: string }) {
  const { data, error, reload } = useData<any>("/fleet/overlays", 10000);
  const list: any[] = data?.overlays || [];
  const member = can(me, "member");
  const open = name && name !== "new" ? list.find((o) => o.name === name) : null;
  return (
    <section aria-labelledby="net-h">
      <div class="page-head">
        <h1 id="net-h">Networks</h1>
        {member ? (
          <button class="primary" onClick={() => go("/networks/new")}>
            New network
          </button>
        ) : null}
      </div>
      <p class="hint">
        A private network joins your VMs on several nodes in one subnet, through encrypted tunnels between the nodes. A VM joins one when it is
        launched on a member node.
      </p>
      <ErrorNote error={error} />
      <Table
        label="Networks"
        head={["Name", "Subnet", "Nodes", "Egress", "Created", "Keys rotated"]}
        empty={member ? "No private networks yet. Make one, then launch VMs into it." : "No private networks."}
        rows={list.map((o) => [
          <a href={"#/networks/" + encodeURIComponent(o.name)}>{o.name}</a>,
          o.subnet,
          (o.members || []).map((m: any) => m.node).join(", ") || "none yet",
          egressText(o.egress),
          ago(o.created_at),
          o.rotated_at ? ago(o.rotated_at) : "never",
        ])}
      />
      {name === "new" && member ? <NewNetwork onDone={(n) => (reload(), go("/networks/" + encodeURIComponent(n)))} onError={reload} /> : null}
      {name && name !== "new" ? (
        open ? (
          <NetworkSheet me={me} net={open} reload={reload} />
        ) : (
          <MissingSheet title="Network" missing={`You have no network ${name}.`} looking={`Looking for network ${name}…`} loaded={!!data} back="/networks" />
        )
      ) : null}
    </section>
  );
}

// useNodes lists the nodes the caller may place on (GET /fleet/capacity),
// the ones a tenant may name.
export function useNodes(): string[] {
  const { data } = useData<any>("/fleet/capacity");
  return (data?.nodes || []).map((n: any) => n.node);
}

// NewNetwork makes the network, then adds its first nodes: a node central
// refuses leaves the network made without it (the list shows it), and the
// refusal on the form.
function NewNetwork({ onDone, onError }: { onDone: (name: string) => void; onError: () => void }) {
  const nodes = useNodes();
  const [name, setName] = useState("");
  const [picked, setPicked] = useState<string[]>([]);
  const [mode, setMode] = useState("");
  const [allow, setAllow] = useState("");
  const [block, setBlock] = useState("");
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    const egress = mode ? { mode, ...(mode === "allowlist" ? { allow: lines(allow) } : {}), block: lines(block) } : undefined;
    act.run(() =>
      post<any>("/fleet/overlays", { name, nodes: picked, ...(egress ? { egress } : {}) }).then(
        (o) => onDone(o.name),
        (e) => {
          onError();
          throw e;
        },
      ),
    );
  };
  return (
    <Sheet title="New network" onClose={() => go("/networks")}>
      <form class="form" onSubmit={submit} noValidate>
        <label>
          Name
          <input name="network-name" value={name} required maxLength={40} placeholder="backend" onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <p class="hint">1 to 40 lowercase letters, digits and dashes.</p>
        <fieldset>
          <legend>First nodes (more can join later)</legend>
          {nodes.map((n) => (
            <label class="check">
              <input
                type="checkbox"
                name="network-node"
                value={n}
                checked={picked.includes(n)}
                onChange={(e) => setPicked((e.target as HTMLInputElement).checked ? [...picked, n] : picked.filter((x) => x !== n))}
              />
              {n}
            </label>
          ))}
          {!nodes.length ? <p class="empty">No node takes VMs now; add nodes later.</p> : null}
        </fieldset>
        <label>
          Egress (what its VMs may reach outside your networks)
          <select name="egress-mode" value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value)}>
            <option value="">the operator's floor</option>
            <option value="open">open, less what is blocked</option>
            <option value="allowlist">only what is allowed</option>
          </select>
        </label>
        {mode === "allowlist" ? (
          <label>
            Allowed (IPv4 addresses or subnets, one a line)
            <textarea name="egress-allow" rows={3} class="mono" value={allow} placeholder="192.0.2.0/24" onInput={(e) => setAllow((e.target as HTMLTextAreaElement).value)} />
          </label>
        ) : null}
        {mode ? (
          <label>
            Blocked (IPv4 addresses or subnets, one a line)
            <textarea name="egress-block" rows={2} class="mono" value={block} placeholder="192.0.2.66" onInput={(e) => setBlock((e.target as HTMLTextAreaElement).value)} />
          </label>
        ) : null}
        <p class="hint">Your policy can only narrow the operator's floor; what would widen it is refused and listed on the network.</p>
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={() => go("/networks")}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy}>
            {act.busy ? "Creating…" : "Create network"}
          </button>
        </div>
      </form>
    </Sheet>
  );
}

function NetworkSheet({ me, net, reload }: { me: Me; net: any; reload: () => void }) {
  const nodes = useNodes();
  const act = useAction();
  const [node, setNode] = useState("");
  const [confirm, setConfirm] = useState("");
  const [done, setDone] = useState("");
  const member = can(me, "member");
  const members: any[] = net.members || [];
  const joinable = nodes.filter((n) => !members.some((m) => m.node === n));
  const change = (what: string, f: () => Promise<any>) => (setDone(""), act.run(() => f().then(() => (setDone(what), reload()))));
  return (
    <Sheet title={net.name} onClose={() => go("/networks")} wide>
      <dl class="details">
        <dt>Subnet</dt>
        <dd>{net.subnet}</dd>
        <dt>Tunnel port</dt>
        <dd>UDP {net.listen_port}</dd>
        <dt>Egress</dt>
        <dd>
          {net.egress?.mode || "—"}
          {(net.egress?.allow || []).length ? ` · allowed ${net.egress.allow.join(", ")}` : ""}
          {(net.egress?.block || []).length ? ` · blocked ${net.egress.block.join(", ")}` : ""}
        </dd>
        {(net.egress_refused || []).length ? (
          <>
            <dt>Refused</dt>
            <dd>
              <ul class="plain">
                {net.egress_refused.map((r: string) => (
                  <li class="warn">{r}</li>
                ))}
              </ul>
            </dd>
          </>
        ) : null}
        <dt>Created</dt>
        <dd>{fmtTime(net.created_at)}</dd>
        <dt>Keys rotated</dt>
        <dd>{net.rotated_at ? fmtTime(net.rotated_at) : "never"}</dd>
      </dl>
      <h3>Nodes</h3>
      <Table
        label={`Nodes of ${net.name}`}
        head={["Node", "Its part", "Reached at", "Public key", ""]}
        empty={member ? "No node is a member yet: add one to launch VMs into this network." : "No node is a member yet."}
        rows={members.map((m) => [
          m.node,
          m.subnet,
          m.endpoint || "—",
          <code title={m.public_key}>{(m.public_key || "").slice(0, 12)}…</code>,
          member ? (
            <button aria-label={`Remove ${m.node} from ${net.name}`} disabled={act.busy} onClick={() => change(`${m.node} left`, () => del(overlayPath(net.name, "members", m.node)))}>
              Remove
            </button>
          ) : (
            ""
          ),
        ])}
      />
      <ErrorNote error={act.error} />
      {done ? (
        <p class="done-note" role="status">
          Done: {done}.
        </p>
      ) : null}
      {member ? (
        <>
          <form
            class="form inline"
            onSubmit={(e) => {
              e.preventDefault();
              const n = node || joinable[0];
              if (n) change(`${n} joined`, () => post(overlayPath(net.name, "members"), { node: n }));
            }}
          >
            {joinable.length ? (
              <>
                <label>
                  Node to add
                  <select name="add-node" value={node || joinable[0]} onChange={(e) => setNode((e.target as HTMLSelectElement).value)}>
                    {joinable.map((n) => (
                      <option value={n}>{n}</option>
                    ))}
                  </select>
                </label>
                <button type="submit" disabled={act.busy}>
                  Add node
                </button>
              </>
            ) : (
              <p class="hint">Every node you may use is a member.</p>
            )}
            <button type="button" disabled={act.busy} onClick={() => change("keys rotated", () => post(overlayPath(net.name, "rotate")))}>
              Rotate keys
            </button>
          </form>
          <div class="danger">
            <h3>Delete this network</h3>
            <label>
              <span>
                Type <strong>{net.name}</strong> to delete it (its VMs must be gone first)
              </span>
              <input name="confirm-delete" value={confirm} onInput={(e) => setConfirm((e.target as HTMLInputElement).value)} autoComplete="off" />
            </label>
            <button
              class="destructive"
              disabled={confirm !== net.name || act.busy}
              onClick={() => act.run(() => del(overlayPath(net.name)).then(() => (reload(), go("/networks"))))}
            >
              Delete {net.name}
            </button>
          </div>
        </>
      ) : null}
    </Sheet>
  );
}

// useNetworks lists the tenant's private networks.
export function useNetworks(): any[] {
  const { data } = useData<any>("/fleet/overlays");
  return data?.overlays || [];
}

// NetworkPicker is the launch sheet's choice of a private network: none, or
// one of the tenant's, whose member nodes are then the only nodes offered.
export function NetworkPicker({ nets, value, onChange }: { nets: any[]; value: string; onChange: (v: string) => void }) {
  return (
    <label>
      Private network
      <select name="network" value={value} onChange={(e) => onChange((e.target as HTMLSelectElement).value)}>
        <option value="">none (your default network)</option>
        {nets.map((o) => (
          <option value={o.name}>
            {o.name} — {o.subnet}, {(o.members || []).length} node{(o.members || []).length === 1 ? "" : "s"}
          </option>
        ))}
      </select>
    </label>
  );
}
