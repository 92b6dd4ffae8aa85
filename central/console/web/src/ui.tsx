// Small building blocks every page uses: data loading, sheets, errors.
import { ComponentChildren } from "preact";
import { useEffect, useRef, useState, useCallback } from "preact/hooks";
import { get, APIError } from "./api";
import { go } from "./router";

// pending counts first loads in flight, on <body data-pending>, so a test
// (or anyone) can tell when a page has everything it asked for.
let pending = 0;
function track(d: number) {
  pending += d;
  document.body.dataset.pending = String(pending);
}

// cache keeps the last answer for each path, so a page opened again shows
// at once and refreshes behind. Signing out empties it.
const cache = new Map<string, any>();
export function clearCache() {
  cache.clear();
}

// inflight shares one request among the parts of the page asking for the
// same path at once (the list, the palette and the overview all read
// /fleet/vms), so central answers it once.
const inflight = new Map<string, Promise<any>>();
function getShared<T>(path: string): Promise<T> {
  let p = inflight.get(path);
  if (!p) {
    p = get<T>(path).finally(() => inflight.delete(path));
    inflight.set(path, p);
  }
  return p as Promise<T>;
}

// useData loads path (again every refreshMs when given) and says how it
// went. A path answered before starts from its last answer.
export function useData<T = any>(path: string | null, refreshMs = 0) {
  const [data, setData] = useState<T | null>(() => (path && cache.has(path) ? cache.get(path) : null));
  const [error, setError] = useState<APIError | Error | null>(null);
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((n) => n + 1), []);
  useEffect(() => {
    if (!path) return;
    let live = true;
    const load = () =>
      getShared<T>(path).then(
        (d) => {
          cache.set(path, d);
          if (live) (setData(d), setError(null));
        },
        (e) => live && setError(e),
      );
    // Only a first load keeps the page waiting; a cached page is shown.
    const fresh = !cache.has(path);
    if (!fresh) setData(cache.get(path));
    else (setData(null), track(1));
    load().finally(() => fresh && track(-1));
    // A hidden tab does not poll.
    const timer = refreshMs ? setInterval(() => document.visibilityState === "visible" && load(), refreshMs) : 0;
    return () => {
      live = false;
      if (timer) clearInterval(timer);
    };
  }, [path, tick, refreshMs]);
  return { data, error, reload };
}

export function ErrorNote({ error }: { error: any }) {
  if (!error) return null;
  return (
    <div class="error" role="alert">
      <strong>{error.message}</strong>
      {error.hint ? <div class="hint">{error.hint}</div> : null}
    </div>
  );
}

// Sheet is a dialog sliding in from the side (full screen on a phone).
export function Sheet(props: { title: string; onClose: () => void; children: ComponentChildren; wide?: boolean }) {
  const ref = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const prev = document.activeElement as HTMLElement | null;
    const first = ref.current?.querySelector<HTMLElement>("input, select, textarea, button:not(.close)");
    (first || ref.current)?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape" && !(e.target as HTMLElement)?.closest?.(".vnc")) props.onClose();
    };
    document.addEventListener("keydown", onKey);
    return () => {
      document.removeEventListener("keydown", onKey);
      prev?.focus?.();
    };
  }, []);
  const id = "sheet-" + props.title.replace(/\W+/g, "-");
  return (
    <div class="backdrop" onClick={(e) => e.target === e.currentTarget && props.onClose()}>
      <div class={"sheet" + (props.wide ? " wide" : "")} role="dialog" aria-modal="true" aria-labelledby={id} ref={ref} tabIndex={-1}>
        <header>
          <h2 id={id}>{props.title}</h2>
          <button class="close" aria-label="Close" onClick={props.onClose}>
            ✕
          </button>
        </header>
        <div class="sheet-body">{props.children}</div>
      </div>
    </div>
  );
}

// MissingSheet stands for an item a page's address names but its list does
// not hold: still looking while the list loads (loaded false), then saying
// there is none. Closing it goes back to the list at back.
export function MissingSheet(props: { title: string; missing: string; looking: string; loaded: boolean; back: string }) {
  return (
    <Sheet title={props.title} onClose={() => go(props.back)}>
      <p class="empty">{props.loaded ? props.missing : props.looking}</p>
    </Sheet>
  );
}

// Busy runs an action, showing its error and disabling its button meanwhile.
export function useAction() {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<any>(null);
  const run = async (f: () => Promise<any>) => {
    setBusy(true);
    setError(null);
    try {
      return await f();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return { busy, error, run, setError };
}

export function Table(props: { label: string; head: string[]; rows: ComponentChildren[][]; empty: string }) {
  if (!props.rows.length) return <p class="empty">{props.empty}</p>;
  return (
    <div class="table-wrap">
      <table aria-label={props.label}>
        <thead>
          <tr>
            {props.head.map((h) => (
              <th scope="col">{h}</th>
            ))}
          </tr>
        </thead>
        <tbody>
          {props.rows.map((r) => (
            <tr>
              {r.map((c, i) => (
                <td data-label={props.head[i]}>{c}</td>
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

export function Meter(props: { label: string; used: number; max: number; unit?: string }) {
  const pct = props.max ? Math.min(100, Math.round((props.used / props.max) * 100)) : 0;
  return (
    <div class="meter">
      <div class="meter-label">
        {props.label}
        <span>
          {props.used}
          {props.unit || ""} of {props.max ? props.max + (props.unit || "") : "no limit"}
        </span>
      </div>
      <div class="bar" role="meter" aria-label={props.label} aria-valuemin={0} aria-valuemax={props.max || 100} aria-valuenow={props.used}>
        <div style={{ width: pct + "%" }} class={pct >= 90 ? "hot" : ""} />
      </div>
    </div>
  );
}

export function StateBadge({ state, ready }: { state: string; ready?: boolean }) {
  const label = state === "running" && ready ? "ready" : state;
  return <span class={"badge s-" + label}>{label}</span>;
}
