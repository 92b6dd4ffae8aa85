// Virtual machines: the list, the launch sheet and a VM's sheet.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import { Me, can, compareText, del, fmtMiB, fmtTime, get, post } from "./api";
import { ErrorNote, Sheet, StateBadge, Table, useAction, useData } from "./ui";
import { go } from "./router";
import { NetworkPicker, useNetworks } from "./networks";
import { CloneForm } from "./clone";

// pageSize is how many VMs the list draws at once.
const pageSize = 50;

export function VMsPage({ me, node, id, launch }: { me: Me; node?: string; id?: string; launch?: boolean }) {
  const { data, error, reload } = useData<any>("/fleet/vms", 3000);
  const [q, setQ] = useState("");
  const [state, setState] = useState("");
  const [page, setPage] = useState(0);
  useEffect(() => setPage(0), [q, state]);
  const vms: any[] = useMemo(() => (data?.vms || []).slice().sort((a: any, b: any) => compareText(a.name, b.name)), [data]);
  const shown = vms.filter(
    (v) =>
      (!q || (v.name + " " + v.id + " " + v.node + " " + (v.image_name || "")).toLowerCase().includes(q.toLowerCase())) &&
      (!state || (state === "ready" ? v.state === "running" && v.agent_ready : v.state === state)),
  );
  const open = node && id ? vms.find((v) => v.node === node && v.id === id) : null;
  return (
    <section aria-labelledby="vms-h">
      <div class="page-head">
        <h1 id="vms-h">Virtual machines</h1>
        {can(me, "member") && !me.operator ? (
          <button class="primary" onClick={() => go("/vms/new")}>
            Launch VM
          </button>
        ) : null}
      </div>
      <div class="filters">
        <label>
          Search
          <input type="search" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} placeholder="name, id, node, image" />
        </label>
        <label>
          State
          <select value={state} onChange={(e) => setState((e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            <option value="ready">ready</option>
            <option value="running">running</option>
            <option value="creating">creating</option>
            <option value="paused">paused</option>
            <option value="stopped">stopped</option>
          </select>
        </label>
        <span class="count" aria-live="polite">
          {shown.length} of {vms.length}
        </span>
      </div>
      <ErrorNote error={error} />
      {(data?.unreachable_nodes || []).map((u: any) => (
        <p class="warn">Node {u.node} does not answer: its VMs are missing from this list.</p>
      ))}
      {data ? (
        <Table
          label="Virtual machines"
          head={["Name", "State", "Image", "Size", "Node", "Address"]}
          empty={vms.length ? "No VM matches." : "No VMs yet."}
          rows={shown.slice(page * pageSize, (page + 1) * pageSize).map((v) => [
            <a href={`#/vms/${v.node}/${v.id}`} class="vm-link">
              {v.name}
            </a>,
            <StateBadge state={v.state} ready={v.agent_ready} />,
            v.image_name || "—",
            `${v.vcpus} vCPU · ${fmtMiB(v.memory_mib)}`,
            v.node,
            v.address || "—",
          ])}
        />
      ) : (
        <p class="empty">Loading…</p>
      )}
      {shown.length > pageSize ? (
        <nav class="pager" aria-label="Pages of the list">
          <button disabled={page === 0} onClick={() => setPage(page - 1)}>
            Previous
          </button>
          <span>
            {page * pageSize + 1}–{Math.min(shown.length, (page + 1) * pageSize)} of {shown.length}
          </span>
          <button disabled={(page + 1) * pageSize >= shown.length} onClick={() => setPage(page + 1)}>
            Next
          </button>
        </nav>
      ) : null}
      {launch && can(me, "member") && !me.operator ? <LaunchSheet me={me} vms={vms} onDone={(n, i) => (reload(), go(`/vms/${n}/${i}`))} /> : null}
      {node && id ? <VMSheet me={me} node={node} id={id} vm={open} reload={reload} /> : null}
    </section>
  );
}

function LaunchSheet({ me, vms, onDone }: { me: Me; vms: any[]; onDone: (node: string, id: string) => void }) {
  const images = useData<any>("/fleet/images");
  const capacity = useData<any>("/fleet/capacity");
  const mine = useData<any>("/fleet/tenants/me");
  const [image, setImage] = useState("");
  const [name, setName] = useState("");
  const [vcpus, setVCPUs] = useState(0);
  const [mem, setMem] = useState(0);
  const [node, setNode] = useState("");
  const [display, setDisplay] = useState(true);
  const [ttl, setTTL] = useState(0);
  const [estimate, setEstimate] = useState<any>(null);
  const [network, setNetwork] = useState("");
  const nets = useNetworks();
  const act = useAction();
  const list: any[] = images.data?.images || [];
  const img = list.find((i) => i.name === image);
  // Pick the first image, then suggest a name nobody uses and the image's size.
  useEffect(() => {
    if (!image && list.length) setImage(list[0].name);
  }, [list.length]);
  useEffect(() => {
    if (!img) return;
    const taken = new Set(vms.map((v) => v.name));
    let n = 1;
    while (taken.has(`${img.name}-${n}`)) n++;
    setName(`${img.name}-${n}`);
    setVCPUs(img.vcpus || 1);
    setMem(img.memory_mib || 512);
  }, [image]);
  const guest = img?.guest_os || "linux";
  // A VM joins a private network on one of its member nodes, named.
  const members: string[] | null = network ? (nets.find((o) => o.name === network)?.members || []).map((m: any) => m.node) : null;
  const nodes: any[] = (capacity.data?.nodes || []).filter(
    (n: any) =>
      (guest === "macos" ? n.macos && n.free.macos_slots > 0 : n.linux) && n.free.vcpus >= vcpus && n.free.memory_mib >= mem && (!members || members.includes(n.node)),
  );
  useEffect(() => {
    if (members && !members.includes(node)) setNode(nodes[0]?.node || "");
  }, [network, nodes.length]);
  const body = () => ({
    name,
    image,
    vcpus,
    memory_mib: mem,
    display,
    ...(node ? { node } : {}),
    ...(ttl ? { ttl_seconds: ttl } : {}),
    ...(network ? { networks: [network] } : {}),
  });
  // The cost estimate is central's dry run: nothing is placed.
  useEffect(() => {
    if (!image || !name || !vcpus || !mem) return;
    const t = setTimeout(() => {
      post("/fleet/vms?dry_run=true", body()).then(setEstimate, () => setEstimate(null));
    }, 250);
    return () => clearTimeout(t);
  }, [image, name, vcpus, mem, node, ttl, network]);
  const q = mine.data?.tenant?.quota || {};
  const used = mine.data?.usage?.total || {};
  const submit = (e: Event) => {
    e.preventDefault();
    act.run(async () => {
      const r = await post<any>("/fleet/vms", body());
      onDone(r.node, r.vm.id);
    });
  };
  return (
    <Sheet title="Launch a VM" onClose={() => go("/vms")}>
      <form onSubmit={submit} class="form">
        <fieldset>
          <legend>Image</legend>
          <div class="catalog">
            {list.map((i) => (
              <label class={"card" + (i.name === image ? " picked" : "")}>
                <span class="card-title">
                  <input type="radio" name="image" value={i.name} checked={i.name === image} onChange={() => setImage(i.name)} />
                  <strong>{i.display_name || i.name}</strong>
                </span>
                <span>
                  {i.guest_os} · {i.vcpus} vCPU · {fmtMiB(i.memory_mib)}
                </span>
              </label>
            ))}
            {images.data && !list.length ? <p class="empty">The catalog is empty: ask the operator to add an image.</p> : null}
          </div>
        </fieldset>
        <label>
          Name
          <input name="name" value={name} required maxLength={64} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        </label>
        <div class="row">
          <label>
            vCPUs
            <input type="number" min={1} max={64} value={vcpus} onInput={(e) => setVCPUs(+(e.target as HTMLInputElement).value)} />
          </label>
          <label>
            Memory (MiB)
            <input type="number" min={128} step={128} value={mem} onInput={(e) => setMem(+(e.target as HTMLInputElement).value)} />
          </label>
        </div>
        <NetworkPicker nets={nets} value={network} onChange={setNetwork} />
        <label>
          Node
          <select name="node" value={node} onChange={(e) => setNode((e.target as HTMLSelectElement).value)}>
            {!network ? <option value="">Any node with room ({nodes.length})</option> : null}
            {network && !nodes.length ? <option value="">none of its nodes has room</option> : null}
            {nodes.map((n) => (
              <option value={n.node}>
                {n.node} — {n.free.vcpus} vCPU, {fmtMiB(n.free.memory_mib)} free
              </option>
            ))}
          </select>
        </label>
        <label>
          Delete automatically after
          <select value={ttl} onChange={(e) => setTTL(+(e.target as HTMLSelectElement).value)}>
            <option value={0}>never</option>
            <option value={3600}>1 hour</option>
            <option value={86400}>1 day</option>
            <option value={604800}>7 days</option>
          </select>
        </label>
        <label class="check">
          <input type="checkbox" checked={display} onChange={(e) => setDisplay((e.target as HTMLInputElement).checked)} />
          Give it a screen (Control and Screen tabs)
        </label>
        <div class="quota" aria-label="Quota this VM takes">
          <span>
            VMs {(used.vms || 0) + 1} of {q.max_vms || "∞"}
          </span>
          <span>
            vCPUs {(used.vcpus || 0) + vcpus} of {q.max_vcpus || "∞"}
          </span>
          <span>
            Memory {fmtMiB((used.memory_mib || 0) + mem)} of {q.max_memory_mib ? fmtMiB(q.max_memory_mib) : "∞"}
          </span>
        </div>
        {estimate ? (
          <p class="estimate">
            {estimate.estimate?.per_hour_display ? `${estimate.estimate.per_hour_display} an hour` : ""}
            {estimate.for_ttl_display ? ` · ${estimate.for_ttl_display} until it is deleted` : ""}
            {estimate.node ? ` · would go to ${estimate.node}` : ""}
          </p>
        ) : null}
        {!nodes.length && capacity.data ? (
          <p class="warn">{network ? `No node of ${network} has room for this size now: add a node to the network.` : "No node has room for this size now."}</p>
        ) : null}
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={() => go("/vms")}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy || !image || !can(me, "member") || (!!network && !node)}>
            {act.busy ? "Launching…" : "Launch"}
          </button>
        </div>
      </form>
    </Sheet>
  );
}

const tabs = ["Details", "Run", "Snapshots", "SSH", "Screen", "Control", "Log"] as const;
type Tab = (typeof tabs)[number];

function VMSheet({ me, node, id, vm, reload }: { me: Me; node: string; id: string; vm: any; reload: () => void }) {
  const [tab, setTab] = useState<Tab>("Details");
  const base = `/fleet/vms/${node}/${id}`;
  const member = can(me, "member");
  const shown = tabs.filter((t) => member || t === "Details" || t === "Snapshots" || t === "SSH");
  if (!vm) {
    return (
      <Sheet title="Virtual machine" onClose={() => go("/vms")}>
        <p class="empty">Looking for VM {id} on {node}…</p>
      </Sheet>
    );
  }
  return (
    <Sheet title={vm.name} onClose={() => go("/vms")} wide>
      <div class="tabs" role="tablist" aria-label="VM tools">
        {shown.map((t) => (
          <button role="tab" id={"tab-" + t} aria-selected={t === tab} aria-controls="tabpanel" onClick={() => setTab(t)}>
            {t}
          </button>
        ))}
      </div>
      <div role="tabpanel" id="tabpanel" aria-labelledby={"tab-" + tab}>
        {tab === "Details" ? <Details me={me} vm={vm} base={base} reload={reload} /> : null}
        {tab === "Run" ? <Run base={base} /> : null}
        {tab === "Snapshots" ? <Snapshots me={me} base={base} vm={vm} /> : null}
        {tab === "SSH" ? <SSH vm={vm} /> : null}
        {tab === "Screen" ? <Screen base={base} vm={vm} /> : null}
        {tab === "Control" ? <Control base={base} vm={vm} /> : null}
        {tab === "Log" ? <Log base={base} /> : null}
      </div>
    </Sheet>
  );
}

function Details({ me, vm, base, reload }: { me: Me; vm: any; base: string; reload: () => void }) {
  const act = useAction();
  const [confirm, setConfirm] = useState("");
  const power = (verb: string) => act.run(() => post(`${base}/${verb}`).then(reload));
  return (
    <div>
      <dl class="details">
        <dt>State</dt>
        <dd>
          <StateBadge state={vm.state} ready={vm.agent_ready} />
        </dd>
        <dt>ID</dt>
        <dd>
          <code>{vm.id}</code>
        </dd>
        <dt>Node</dt>
        <dd>{vm.node}</dd>
        <dt>Image</dt>
        <dd>{vm.image_name || vm.image}</dd>
        <dt>Size</dt>
        <dd>
          {vm.vcpus} vCPU · {fmtMiB(vm.memory_mib)}
        </dd>
        <dt>Address</dt>
        <dd>{vm.address || "—"}</dd>
        <dt>Created</dt>
        <dd>{fmtTime(vm.created_at)}</dd>
        <dt>Deleted at</dt>
        <dd>{vm.expires_at ? fmtTime(vm.expires_at) : "never (no TTL)"}</dd>
        {vm.last_error ? (
          <>
            <dt>Last error</dt>
            <dd>{vm.last_error}</dd>
          </>
        ) : null}
      </dl>
      {can(me, "member") ? (
        <>
          <div class="actions left" aria-label="Power">
            {vm.state !== "running" && vm.state !== "paused" ? <button onClick={() => power("start")}>Start</button> : null}
            {vm.state === "running" ? <button onClick={() => power("stop")}>Stop</button> : null}
            {vm.state === "running" ? <button onClick={() => power("restart")}>Restart</button> : null}
            {vm.state === "running" ? <button onClick={() => power("pause")}>Pause</button> : null}
            {vm.state === "paused" ? <button onClick={() => power("resume")}>Resume</button> : null}
          </div>
          <ErrorNote error={act.error} />
          <div class="danger">
            <h3>Delete this VM</h3>
            <label>
              <span>
                Type <strong>{vm.name}</strong> to delete it
              </span>
              <input name="confirm-delete" value={confirm} onInput={(e) => setConfirm((e.target as HTMLInputElement).value)} autoComplete="off" />
            </label>
            <button
              class="destructive"
              disabled={confirm !== vm.name || act.busy}
              onClick={() => act.run(() => del(base).then(() => (reload(), go("/vms"))))}
            >
              Delete {vm.name}
            </button>
          </div>
        </>
      ) : null}
    </div>
  );
}

function Run({ base }: { base: string }) {
  const [cmd, setCmd] = useState("");
  const [out, setOut] = useState<any>(null);
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    act.run(async () => setOut(await post(`${base}/exec`, { command: cmd, timeout_seconds: 60 })));
  };
  return (
    <form onSubmit={submit} class="form">
      <label>
        Command (run by /bin/sh -c in the guest)
        <input name="command" value={cmd} required placeholder="uname -a" onInput={(e) => setCmd((e.target as HTMLInputElement).value)} class="mono" />
      </label>
      <div class="actions left">
        <button class="primary" type="submit" disabled={act.busy}>
          {act.busy ? "Running…" : "Run"}
        </button>
      </div>
      <ErrorNote error={act.error} />
      {out ? (
        <div class="output" aria-live="polite">
          <p>
            Exit code <strong class="exit-code">{out.exit_code}</strong> after {out.duration_ms} ms
          </p>
          <pre class="stdout" aria-label="Output">
            {out.stdout}
          </pre>
          {out.stderr ? (
            <pre class="stderr" aria-label="Errors">
              {out.stderr}
            </pre>
          ) : null}
        </div>
      ) : null}
    </form>
  );
}

function Snapshots({ me, base, vm }: { me: Me; base: string; vm: any }) {
  const { data, error, reload } = useData<any>(`${base}/snapshots`);
  const [cloning, setCloning] = useState<string | null>(null);
  const [name, setName] = useState("");
  const [memory, setMemory] = useState(false);
  const act = useAction();
  const list: any[] = data?.snapshots || [];
  const take = (e: Event) => {
    e.preventDefault();
    act.run(() => post(`${base}/snapshots`, { ...(name ? { name } : {}), include_memory: memory }).then(() => (setName(""), reload())));
  };
  return (
    <div>
      <ErrorNote error={error} />
      <Table
        label="Snapshots"
        head={["Name", "Taken", "Size", "Holds", ""]}
        empty="No snapshots yet."
        rows={list.map((s) => [
          s.name,
          fmtTime(s.taken_at),
          s.size_gib ? s.size_gib + " GiB" : "—",
          s.memory ? "disk and memory" : "disk only",
          can(me, "member") ? (
            <span class="row-actions">
              <button onClick={() => setCloning(s.name)} aria-label={`New VM from this: ${s.name}`}>
                New VM from this
              </button>
              <button onClick={() => confirm(`Put the VM back to ${s.name}?`) && act.run(() => post(`${base}/snapshots/${s.name}/restore`).then(reload))}>
                Restore…
              </button>
              <button onClick={() => confirm(`Delete snapshot ${s.name}?`) && act.run(() => del(`${base}/snapshots/${s.name}`).then(reload))}>
                Delete…
              </button>
            </span>
          ) : (
            ""
          ),
        ])}
      />
      {data ? <p class="hint">At most {data.limit} snapshots per VM.</p> : null}
      {cloning !== null && can(me, "member") ? <CloneForm key={cloning} vm={vm} base={base} snapshot={cloning} onCancel={() => setCloning(null)} /> : null}
      {can(me, "member") ? (
        <form onSubmit={take} class="form inline">
          <label>
            Snapshot name
            <input name="snapshot-name" value={name} placeholder="optional" onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          </label>
          <label class="check">
            <input type="checkbox" checked={memory} onChange={(e) => setMemory((e.target as HTMLInputElement).checked)} />
            with memory
          </label>
          <button class="primary" type="submit" disabled={act.busy}>
            {act.busy ? "Taking…" : "Take snapshot"}
          </button>
          <button type="button" onClick={() => setCloning("")}>
            Clone…
          </button>
        </form>
      ) : null}
      <ErrorNote error={act.error} />
    </div>
  );
}

function SSH({ vm }: { vm: any }) {
  const images = useData<any>("/fleet/images");
  const user = (images.data?.images || []).find((i: any) => i.name === vm.image_name)?.ssh_user || "admin";
  const central = location.origin;
  const block = `Host ${vm.name}
  User ${user}
  HostKeyAlias fluxvm-${vm.id}
  ProxyCommand fluxctl fleet --central ${central} tunnel-stdio ${vm.node}/${vm.id} %p`;
  const [copied, setCopied] = useState(false);
  return (
    <div>
      <p>Connect with your own ssh through a tunnel central opens to port 22 of the VM:</p>
      <pre class="ssh-command">fluxctl fleet --central {central} ssh {vm.name}</pre>
      <p>Or paste this into ~/.ssh/config, then run ssh {vm.name} (FLUXVM_TOKEN holds your token):</p>
      <pre class="ssh-config" aria-label="SSH config block">
        {block}
      </pre>
      <button onClick={() => navigator.clipboard?.writeText(block).then(() => setCopied(true))}>{copied ? "Copied" : "Copy"}</button>
    </div>
  );
}

function Screen({ base, vm }: { base: string; vm: any }) {
  const [src, setSrc] = useState("");
  const [error, setError] = useState<any>(null);
  useEffect(() => {
    let url = "";
    let live = true;
    const load = async () => {
      try {
        const token = sessionStorage.getItem("fluxvm.token");
        const r = await fetch(`${base}/screen`, { headers: token ? { Authorization: "Bearer " + token } : {}, credentials: "same-origin" });
        if (!r.ok) {
          const b = await r.json().catch(() => ({}));
          throw Object.assign(new Error(b.error || r.statusText), { hint: b.hint });
        }
        const blob = await r.blob();
        if (!live) return;
        if (url) URL.revokeObjectURL(url);
        url = URL.createObjectURL(blob);
        setSrc(url);
        setError(null);
      } catch (e) {
        live && setError(e);
      }
    };
    load();
    const t = setInterval(load, 2000);
    return () => {
      live = false;
      clearInterval(t);
      if (url) URL.revokeObjectURL(url);
    };
  }, [base]);
  return (
    <div>
      <ErrorNote error={error} />
      {src ? <img class="screen" src={src} alt={`The screen of ${vm.name}, refreshed every 2 seconds`} /> : error ? null : <p class="empty">Loading the screen…</p>}
    </div>
  );
}

// Control is the VM's display through noVNC, which loads only now.
function Control({ base, vm }: { base: string; vm: any }) {
  const box = useRef<HTMLDivElement>(null);
  const rfb = useRef<any>(null);
  const [status, setStatus] = useState("Connecting…");
  const [error, setError] = useState<any>(null);
  const [paste, setPaste] = useState("");
  useEffect(() => {
    let closed = false;
    (async () => {
      try {
        const ticket = await post<any>(`${base}/ws-ticket`, { kind: "vnc" });
        // noVNC's npm build is CommonJS: its class is the module's "default" export.
        const mod: any = await import("@novnc/novnc/lib/rfb.js");
        const RFB = mod.default?.default || mod.default;
        if (closed || !box.current) return;
        const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + ticket.path;
        const r = new RFB(box.current, url, {});
        r.scaleViewport = true;
        r.focusOnClick = true;
        r.addEventListener("connect", () => (setStatus("Connected: clicks and typing go to " + vm.name), r.focus()));
        r.addEventListener("disconnect", (e: any) => setStatus(e.detail?.clean ? "Disconnected" : "The connection was lost"));
        rfb.current = r;
      } catch (e) {
        setError(e);
        setStatus("");
      }
    })();
    return () => {
      closed = true;
      rfb.current?.disconnect();
    };
  }, [base]);
  const key = (keysym: number, code: string) => rfb.current?.sendKey(keysym, code);
  const sendText = () => {
    for (const ch of paste) {
      const cp = ch.codePointAt(0)!;
      if (ch === "\n") key(0xff0d, "Enter");
      else rfb.current?.sendKey(cp < 0x100 ? cp : 0x1000000 | cp, null);
    }
    setPaste("");
  };
  return (
    <div>
      <p class="status" aria-live="polite">
        {status}
      </p>
      <ErrorNote error={error} />
      <div class="vnc" ref={box} aria-label={`Screen of ${vm.name}`} />
      <div class="actions left" aria-label="Keys">
        <button onClick={() => key(0xff0d, "Enter")}>Return</button>
        <button onClick={() => key(0xff1b, "Escape")}>Esc</button>
        <button onClick={() => key(0xff09, "Tab")}>Tab</button>
        <button
          onClick={() => {
            const r = rfb.current;
            if (!r) return;
            r.sendKey(0xffeb, "MetaLeft", true);
            r.sendKey(0x20, "Space");
            r.sendKey(0xffeb, "MetaLeft", false);
          }}
        >
          ⌘ Space
        </button>
      </div>
      <div class="form inline">
        <label>
          Paste text
          <textarea name="paste" rows={2} value={paste} onInput={(e) => setPaste((e.target as HTMLTextAreaElement).value)} />
        </label>
        <button onClick={sendText} disabled={!paste}>
          Type it
        </button>
      </div>
    </div>
  );
}

function Log({ base }: { base: string }) {
  const { data, error, reload } = useData<any>(`${base}/logs?lines=200`);
  return (
    <div>
      <ErrorNote error={error} />
      <button onClick={reload}>Refresh</button>
      <pre class="log">{typeof data === "string" ? data : data?.lines?.join("\n") ?? data?.log ?? ""}</pre>
    </div>
  );
}

export function useVMIndex(me: Me | null) {
  const { data } = useData<any>(me ? "/fleet/vms" : null, 10000);
  return useMemo(() => (data?.vms || []) as any[], [data]);
}
export { get };
