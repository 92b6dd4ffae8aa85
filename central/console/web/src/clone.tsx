// A new VM from a VM's snapshot (or its stopped disk), from the Snapshots
// tab of a VM's sheet, and the macOS slot dots of My Macs.
import { useEffect, useRef, useState } from "preact/hooks";
import { post } from "./api";
import { ErrorNote, useAction, useData } from "./ui";
import { go } from "./router";

// suggestName is a VM name nobody uses yet: base, then base-2, base-3…,
// kept to central's 63 characters of letters, digits, '.', '_' and '-'.
export function suggestName(base: string, taken: Set<string>): string {
  const clean = base.replace(/[^A-Za-z0-9._-]+/g, "-").slice(0, 56);
  if (!taken.has(clean)) return clean;
  let n = 2;
  while (taken.has(`${clean}-${n}`)) n++;
  return `${clean}-${n}`;
}

// CloneForm makes the new VM on the source's node (POST …/clone) and opens
// its sheet.
export function CloneForm({ vm, base, snapshot, onCancel }: { vm: any; base: string; snapshot: string; onCancel: () => void }) {
  const { data } = useData<any>("/fleet/vms");
  const taken = new Set<string>((data?.vms || []).map((v: any) => v.name));
  const [name, setName] = useState(() => suggestName(snapshot ? `${vm.name}-${snapshot}` : `${vm.name}-clone`, taken));
  const act = useAction();
  // The form opens below the list: bring it into view, its name focused.
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => {
    input.current?.scrollIntoView({ block: "nearest" });
    input.current?.focus();
  }, []);
  const submit = (e: Event) => {
    e.preventDefault();
    act.run(async () => {
      const r = await post<any>(`${base}/clone`, { name, ...(snapshot ? { snapshot } : {}) });
      go(`/vms/${r.node}/${r.vm.id}`);
    });
  };
  return (
    <form class="form panel clone" onSubmit={submit} aria-label="New VM from this">
      <h3>{snapshot ? `New VM from snapshot ${snapshot}` : `Clone ${vm.name} as it is on disk`}</h3>
      <p class="hint">
        The new VM runs on {vm.node} with the size of {vm.name}, its own id and MAC, and counts against your quota like a launch.
        {snapshot ? "" : ` ${vm.name} must be stopped.`}
      </p>
      <label>
        Name of the new VM
        <input ref={input} name="clone-name" value={name} required maxLength={63} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
      </label>
      <ErrorNote error={act.error} />
      <div class="actions left">
        <button class="primary" type="submit" disabled={act.busy || !name}>
          {act.busy ? "Creating…" : "Create VM"}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

// useMacSlots is what My Macs draws for each leased Mac: GET /fleet/capacity
// reports each Mac's macOS slots (at most the licence's two) and how many are
// free. A Mac missing from the map takes no VM now (down, cordoned,
// draining): central reports nothing about it.
export function useMacSlots(): Map<string, { free: number; total: number }> {
  const { data } = useData<any>("/fleet/capacity", 10000);
  const slots = new Map<string, { free: number; total: number }>();
  for (const n of data?.nodes || []) if (n.macos) slots.set(n.node, { free: n.free?.macos_slots || 0, total: n.macos_slots || 0 });
  return slots;
}

export function SlotDots({ slots }: { slots: { free: number; total: number } | undefined }) {
  if (slots === undefined) return <span class="muted">— (takes no VM now)</span>;
  const used = Math.max(0, slots.total - slots.free);
  const dots = "●".repeat(used) + "○".repeat(Math.max(0, slots.total - used));
  return (
    <span class="slots" role="img" aria-label={`${used} of ${slots.total} macOS slots in use`} title={`${used} of ${slots.total} macOS slots in use`}>
      {dots}
    </span>
  );
}
