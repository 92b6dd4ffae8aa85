// Volumes and warm pools: the lists, a new one, and each one's sheet
// (resize a detached volume, a pool's size; delete after typing the name).
import { useState } from "preact/hooks";
import { Me, ago, call, can, del, fmtMiB, fmtTime, post } from "./api";
import { ErrorNote, MissingSheet, Sheet, Table, useAction, useData } from "./ui";
import { go } from "./router";
import { useNodes } from "./networks";

// The ranges central enforces (sdk.MinVolumeGiB-MaxVolumeGiB, a pool's
// size 0-100); the inputs say them, and the forms leave the judging to
// central (noValidate), whose refusal and hint the sheet shows.
const maxVolumeGiB = 2048;
const maxPoolSize = 100;

const num = (e: Event) => +(e.target as HTMLInputElement).value;
const text = (e: Event) => (e.target as HTMLInputElement).value;

// ownerQuery names a volume's or pool's tenant for the operator's calls.
const ownerQuery = (me: Me, tenant?: string) => (me.operator && tenant ? "?tenant=" + encodeURIComponent(tenant) : "");

// DeleteByName is the danger zone of a sheet: type the name, then delete.
function DeleteByName({ what, name, busy, onDelete, note }: { what: string; name: string; busy: boolean; onDelete: () => void; note?: string }) {
  const [typed, setTyped] = useState("");
  return (
    <div class="danger">
      <h3>Delete this {what}</h3>
      <label>
        <span>
          Type <strong>{name}</strong> to delete it{note ? ` (${note})` : ""}
        </span>
        <input name="confirm-delete" value={typed} onInput={(e) => setTyped(text(e))} autoComplete="off" />
      </label>
      <button class="destructive" disabled={typed !== name || busy} onClick={onDelete}>
        Delete {name}
      </button>
    </div>
  );
}

export function VolumesPage({ me, name }: { me: Me; name?: string }) {
  const { data, error, reload } = useData<any>("/fleet/volumes", 10000);
  const list: any[] = data?.volumes || [];
  const member = can(me, "member") && !me.operator;
  const open = name && name !== "new" ? list.find((v) => v.name === name) : null;
  return (
    <section aria-labelledby="vol-h">
      <div class="page-head">
        <h1 id="vol-h">Volumes</h1>
        {member ? (
          <button class="primary" onClick={() => go("/volumes/new")}>
            New volume
          </button>
        ) : null}
      </div>
      <ErrorNote error={error} />
      {data && !me.operator ? (
        <p class="hint">
          Your volumes hold {data.used_gib || 0} GiB{data.limit_gib ? ` of ${data.limit_gib} GiB allowed` : " (no limit)"}.
        </p>
      ) : null}
      <Table
        label="Volumes"
        head={["Name", "Node", "Size", "Attached to", "Created"]}
        empty={member ? "No volumes. A volume is a disk on one node that outlives the VMs using it." : "No volumes."}
        rows={list.map((v: any) => [
          <a href={"#/volumes/" + encodeURIComponent(v.name)}>{v.name}</a>,
          v.node,
          v.size_gib + " GiB",
          v.attached_to || "free",
          ago(v.created_at),
        ])}
      />
      {name === "new" && member ? <NewVolume onDone={(n) => (reload(), go("/volumes/" + encodeURIComponent(n)))} /> : null}
      {name && name !== "new" ? (
        open ? (
          <VolumeSheet me={me} vol={open} reload={reload} />
        ) : (
          <MissingSheet title="Volume" missing={`There is no volume ${name}.`} looking={`Looking for volume ${name}…`} loaded={!!data} back="/volumes" />
        )
      ) : null}
    </section>
  );
}

function NewVolume({ onDone }: { onDone: (name: string) => void }) {
  const nodes = useNodes();
  const [name, setName] = useState("");
  const [size, setSize] = useState(10);
  const [node, setNode] = useState("");
  const act = useAction();
  const submit = (e: Event) => {
    e.preventDefault();
    act.run(() => post<any>("/fleet/volumes", { name, size_gib: size, ...(node ? { node } : {}) }).then((v) => onDone(v.name)));
  };
  return (
    <Sheet title="New volume" onClose={() => go("/volumes")}>
      <form class="form" onSubmit={submit} noValidate>
        <label>
          Name
          <input name="volume-name" value={name} required maxLength={40} placeholder="data" onInput={(e) => setName(text(e))} />
        </label>
        <p class="hint">1 to 40 lowercase letters, digits and dashes.</p>
        <label>
          Size (GiB, 1 to {maxVolumeGiB})
          <input name="volume-size" type="number" min={1} max={maxVolumeGiB} value={size} required onInput={(e) => setSize(num(e))} />
        </label>
        <label>
          Node (a VM that uses it runs there)
          <select name="volume-node" value={node} onChange={(e) => setNode((e.target as HTMLSelectElement).value)}>
            <option value="">central chooses (a Mac you lease, else the roomiest)</option>
            {nodes.map((n) => (
              <option value={n}>{n}</option>
            ))}
          </select>
        </label>
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={() => go("/volumes")}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy}>
            {act.busy ? "Creating…" : "Create volume"}
          </button>
        </div>
      </form>
    </Sheet>
  );
}

function VolumeSheet({ me, vol, reload }: { me: Me; vol: any; reload: () => void }) {
  const act = useAction();
  const [size, setSize] = useState(vol.size_gib);
  const [done, setDone] = useState("");
  const path = "/fleet/volumes/" + encodeURIComponent(vol.name);
  const q = ownerQuery(me, vol.tenant);
  const member = can(me, "member");
  return (
    <Sheet title={vol.name} onClose={() => go("/volumes")}>
      <dl class="details">
        <dt>ID</dt>
        <dd>
          <code>{vol.id}</code>
        </dd>
        <dt>Node</dt>
        <dd>{vol.node}</dd>
        <dt>Size</dt>
        <dd>{vol.size_gib} GiB</dd>
        <dt>Attached to</dt>
        <dd>{vol.attached_to || "free"}</dd>
        <dt>Created</dt>
        <dd>{fmtTime(vol.created_at)}</dd>
      </dl>
      <ErrorNote error={act.error} />
      {done ? (
        <p class="done-note" role="status">
          {done}
        </p>
      ) : null}
      {member && !me.operator ? (
        vol.attached_to ? (
          <p class="hint">A volume grows only while no VM uses it: delete or detach the VM first.</p>
        ) : (
          <form
            class="form inline"
            noValidate
            onSubmit={(e) => {
              e.preventDefault();
              setDone("");
              act.run(() => post(path + "/resize", { size_gib: size }).then(() => (setDone(`Resized to ${size} GiB.`), reload())));
            }}
          >
            <label>
              New size (GiB, {vol.size_gib} to {maxVolumeGiB}; volumes only grow)
              <input name="volume-new-size" type="number" min={vol.size_gib} max={maxVolumeGiB} value={size} required onInput={(e) => setSize(num(e))} />
            </label>
            <button type="submit" disabled={act.busy || size === vol.size_gib}>
              Resize
            </button>
          </form>
        )
      ) : null}
      {member ? (
        <DeleteByName
          what="volume"
          name={vol.name}
          busy={act.busy}
          note="its data is lost"
          onDelete={() => act.run(() => del(path + q).then(() => (reload(), go("/volumes"))))}
        />
      ) : null}
    </Sheet>
  );
}

export function PoolsPage({ me, name }: { me: Me; name?: string }) {
  const { data, error, reload } = useData<any>("/fleet/pools", 10000);
  const list: any[] = data?.pools || [];
  const admin = can(me, "admin");
  const open = name && name !== "new" ? list.find((p) => p.name === name) : null;
  return (
    <section aria-labelledby="pools-h">
      <div class="page-head">
        <h1 id="pools-h">Warm pools</h1>
        {admin ? (
          <button class="primary" onClick={() => go("/pools/new")}>
            New pool
          </button>
        ) : null}
      </div>
      <p class="hint">A warm pool keeps VMs of one image booted, so that a launch naming it gets one at once.</p>
      <ErrorNote error={error} />
      <Table
        label="Warm pools"
        head={["Pool", "Image", "Size", "Max", "Mode", "Shared", "Blocked"]}
        empty="No warm pools."
        rows={list.map((p: any) => [
          <a href={"#/pools/" + encodeURIComponent(p.name)}>{p.name}</a>,
          p.image,
          p.size,
          p.max_size,
          p.mode || "running",
          p.shared ? "yes" : "no",
          p.deleting ? "being deleted" : p.blocked || "—",
        ])}
      />
      {name === "new" && admin ? <NewPool me={me} onDone={(n) => (reload(), go("/pools/" + encodeURIComponent(n)))} /> : null}
      {name && name !== "new" ? (
        open ? (
          <PoolSheet me={me} pool={open} reload={reload} />
        ) : (
          <MissingSheet title="Warm pool" missing={`There is no pool ${name}.`} looking={`Looking for pool ${name}…`} loaded={!!data} back="/pools" />
        )
      ) : null}
    </section>
  );
}

function NewPool({ me, onDone }: { me: Me; onDone: (name: string) => void }) {
  const images = useData<any>("/fleet/images");
  const list: any[] = images.data?.images || [];
  const [name, setName] = useState("");
  const [image, setImage] = useState("");
  const [size, setSize] = useState(1);
  const [max, setMax] = useState(0);
  const [mode, setMode] = useState("running");
  const act = useAction();
  const img = list.find((i) => i.name === (image || list[0]?.name));
  const submit = (e: Event) => {
    e.preventDefault();
    act.run(() =>
      post<any>("/fleet/pools", { name, image: img?.name || image, size, ...(max ? { max_size: max } : {}), mode }).then((p) => onDone(p.name)),
    );
  };
  return (
    <Sheet title="New warm pool" onClose={() => go("/pools")}>
      <form class="form" onSubmit={submit} noValidate>
        <label>
          Name
          <input name="pool-name" value={name} required maxLength={40} placeholder="ci" onInput={(e) => setName(text(e))} />
        </label>
        <label>
          Image
          <select name="pool-image" value={img?.name || ""} onChange={(e) => setImage((e.target as HTMLSelectElement).value)}>
            {list.map((i) => (
              <option value={i.name}>
                {i.display_name || i.name} ({i.vcpus} vCPU · {fmtMiB(i.memory_mib)})
              </option>
            ))}
          </select>
        </label>
        <div class="row">
          <label>
            Size (warm VMs kept, 0 to {maxPoolSize})
            <input name="pool-size" type="number" min={0} max={maxPoolSize} value={size} required onInput={(e) => setSize(num(e))} />
          </label>
          <label>
            Grows to at most (0: the size)
            <input name="pool-max" type="number" min={0} max={maxPoolSize} value={max} onInput={(e) => setMax(num(e))} />
          </label>
        </div>
        <label>
          Mode
          <select name="pool-mode" value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value)}>
            <option value="running">running (booted VMs wait)</option>
            <option value="snapshot">snapshot (one saved guest, resumed per claim)</option>
          </select>
        </label>
        {me.operator ? <p class="hint">As the operator you make a shared pool, for the tenants the policy lets claim from shared pools.</p> : null}
        {!me.operator ? <p class="hint">Warm VMs count against your quota while they wait.</p> : null}
        <ErrorNote error={act.error} />
        <div class="actions">
          <button type="button" onClick={() => go("/pools")}>
            Cancel
          </button>
          <button class="primary" type="submit" disabled={act.busy || !img}>
            {act.busy ? "Creating…" : "Create pool"}
          </button>
        </div>
      </form>
    </Sheet>
  );
}

function PoolSheet({ me, pool, reload }: { me: Me; pool: any; reload: () => void }) {
  const act = useAction();
  const path = "/fleet/pools/" + encodeURIComponent(pool.name);
  const q = ownerQuery(me, pool.tenant);
  const status = useData<any>(path + "/status" + q, 5000);
  const [size, setSize] = useState(pool.size);
  const [max, setMax] = useState(pool.max_size);
  const [done, setDone] = useState("");
  // A tenant changes its own pools only; the operator its shared ones and any tenant's.
  const mayChange = can(me, "admin") && (me.operator || !pool.shared);
  const members: any[] = status.data?.members || [];
  return (
    <Sheet title={pool.name} onClose={() => go("/pools")} wide>
      <dl class="details">
        <dt>Image</dt>
        <dd>{pool.image}</dd>
        <dt>VM size</dt>
        <dd>
          {pool.vcpus} vCPU · {fmtMiB(pool.memory_mib)}
        </dd>
        <dt>Mode</dt>
        <dd>{pool.mode || "running"}</dd>
        <dt>Owner</dt>
        <dd>{pool.shared ? (me.operator ? "you (shared with the tenants the policy allows)" : "the operator (shared: you launch from it)") : me.operator ? pool.tenant : "you"}</dd>
        <dt>Keeps now</dt>
        <dd>{status.data ? `${status.data.target} (${status.data.recent_claims} recent claims)` : "—"}</dd>
        {pool.blocked ? (
          <>
            <dt>Blocked</dt>
            <dd class="warn">{pool.blocked}</dd>
          </>
        ) : null}
      </dl>
      <h3>Warm VMs</h3>
      <Table
        label={`Warm VMs of ${pool.name}`}
        head={["Name", "Node", "State", "Ready"]}
        empty="None yet."
        rows={members.map((m) => [m.name, m.node, m.state, m.ready_at ? ago(m.ready_at) : "—"])}
      />
      <ErrorNote error={act.error || status.error} />
      {done ? (
        <p class="done-note" role="status">
          {done}
        </p>
      ) : null}
      {mayChange ? (
        <>
          <form
            class="form inline"
            noValidate
            onSubmit={(e) => {
              e.preventDefault();
              setDone("");
              act.run(() => call("PATCH", path + q, { size, max_size: max }).then(() => (setDone(`Size ${size}, at most ${max}.`), reload())));
            }}
          >
            <label>
              Size (0 to {maxPoolSize})
              <input name="pool-new-size" type="number" min={0} max={maxPoolSize} value={size} required onInput={(e) => setSize(num(e))} />
            </label>
            <label>
              At most
              <input name="pool-new-max" type="number" min={0} max={maxPoolSize} value={max} required onInput={(e) => setMax(num(e))} />
            </label>
            <button type="submit" disabled={act.busy || (size === pool.size && max === pool.max_size)}>
              Save size
            </button>
          </form>
          <DeleteByName
            what="pool"
            name={pool.name}
            busy={act.busy}
            note="its unclaimed VMs are deleted"
            onDelete={() => act.run(() => del(path + q).then(() => (reload(), go("/pools"))))}
          />
        </>
      ) : null}
    </Sheet>
  );
}
