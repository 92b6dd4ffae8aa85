// FluxVM Studio: the shell (sign-in, top bar, menus, palette, theme) and
// the page each hash route shows.
import { render } from "preact";
import { useEffect, useMemo, useRef, useState } from "preact/hooks";
import "./style.css";
import { Me, Role, can, get, post, saveToken, whoAmI } from "./api";
import { go, useRoute } from "./router";
import { clearCache, useData } from "./ui";
import { VMsPage, useVMIndex } from "./vms";
import { NodesPage, TenantsPage } from "./ops";
import { NetworksPage } from "./networks";
import { PoolsPage, VolumesPage } from "./storage";
import { CatalogPage, PolicyPage, PricesPage } from "./operator";
import {
  ActivityPage, BillingPage, ImagesPage, KeysPage, MacsPage, MembersPage,
  NotificationsPage, Overview, TunnelsPage, UsagePage,
} from "./pages";

interface Page { path: string; title: string; group: string; tenant?: boolean; operator?: boolean; least?: Role }

// Every page, in its top-bar group; tenant-only and operator-only pages
// are hidden from whoever cannot use them.
const pages: Page[] = [
  { path: "overview", title: "Overview", group: "Overview" },
  { path: "networks", title: "Networks", group: "Cloud", tenant: true },
  { path: "volumes", title: "Volumes", group: "Cloud" },
  { path: "pools", title: "Warm pools", group: "Cloud" },
  { path: "tunnels", title: "Tunnels", group: "Cloud" },
  { path: "images", title: "Images", group: "Cloud" },
  { path: "vms", title: "Virtual machines", group: "Compute" },
  { path: "macs", title: "My Macs", group: "Compute", tenant: true },
  { path: "nodes", title: "Nodes", group: "Compute", operator: true },
  { path: "usage", title: "Usage", group: "Billing" },
  { path: "billing", title: "Billing", group: "Billing" },
  { path: "prices", title: "Prices", group: "Billing", operator: true },
  { path: "activity", title: "Activity", group: "Access" },
  { path: "notifications", title: "Notifications", group: "Access" },
  { path: "keys", title: "API keys", group: "Access", tenant: true, least: "admin" },
  { path: "members", title: "Members", group: "Access", tenant: true },
  { path: "tenants", title: "Tenants", group: "Access", operator: true },
  { path: "policy", title: "Policy", group: "Access", operator: true },
];
const groups = ["Overview", "Cloud", "Compute", "Billing", "Access"];

function visible(me: Me) {
  return pages.filter((p) => !(p.tenant && me.operator) && !(p.operator && !me.operator) && (!p.least || can(me, p.least)));
}

// The theme follows the system unless the person picks one (kept in this browser).
function useTheme(): [string, (t: string) => void] {
  const [theme, setTheme] = useState(localStorage.getItem("fluxvm.theme") || "system");
  useEffect(() => {
    if (theme === "system") delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = theme;
    localStorage.setItem("fluxvm.theme", theme);
  }, [theme]);
  return [theme, setTheme];
}

function SignIn({ onSignedIn }: { onSignedIn: (me: Me) => void }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState("");
  const { data: cfg } = useData<any>("/auth/config");
  const submit = async (e: Event) => {
    e.preventDefault();
    saveToken(token.trim());
    const me = await whoAmI();
    if (me) onSignedIn(me);
    else {
      saveToken("");
      setError("Central did not accept this token. Paste a tenant token, an API key or the fleet token.");
    }
  };
  return (
    <main class="signin">
      <form onSubmit={submit} class="panel form" aria-labelledby="signin-h">
        <h1 id="signin-h">FluxVM Studio</h1>
        {cfg?.sso ? (
          <>
            <a class="button primary" href={cfg.login_url}>
              Sign in with {cfg.provider_name}
            </a>
            <p class="or">or</p>
          </>
        ) : null}
        <label>
          Token
          <input name="token" type="password" autoComplete="off" value={token} onInput={(e) => setToken((e.target as HTMLInputElement).value)} required />
        </label>
        <p class="hint">Kept in this tab only and sent to this central only.</p>
        {error ? (
          <p class="error" role="alert">
            {error}
          </p>
        ) : null}
        <button class="primary" type="submit">
          Sign in
        </button>
      </form>
    </main>
  );
}

interface PaletteItem { label: string; hint: string; run: () => void }

function Palette({ me, onClose }: { me: Me; onClose: () => void }) {
  const [q, setQ] = useState("");
  const [sel, setSel] = useState(0);
  const vms = useVMIndex(me);
  const nodes = useData<any>(me.operator ? "/fleet/nodes" : null);
  const tenants = useData<any>(me.operator ? "/fleet/tenants" : null);
  const nets = useData<any>(me.operator ? null : "/fleet/overlays");
  const input = useRef<HTMLInputElement>(null);
  useEffect(() => input.current?.focus(), []);
  const all: PaletteItem[] = useMemo(() => {
    const items: PaletteItem[] = visible(me).map((p) => ({ label: p.title, hint: "page", run: () => go("/" + p.path) }));
    if (!me.operator && me.role !== "viewer") items.push({ label: "Launch a VM", hint: "action", run: () => go("/vms/new") });
    if (!me.operator && me.role !== "viewer") items.push({ label: "Create a network", hint: "action", run: () => go("/networks/new") }, { label: "Create a volume", hint: "action", run: () => go("/volumes/new") });
    if (me.operator) items.push({ label: "Create a tenant", hint: "action", run: () => go("/tenants/new") });
    for (const v of vms) items.push({ label: v.name, hint: "VM on " + v.node, run: () => go(`/vms/${v.node}/${v.id}`) });
    for (const n of nodes.data?.nodes || []) items.push({ label: n.name, hint: "node", run: () => go(`/nodes/${n.name}`) });
    for (const t of tenants.data?.tenants || []) items.push({ label: t.name, hint: "tenant", run: () => go(`/tenants`) });
    for (const o of nets.data?.overlays || []) items.push({ label: o.name, hint: "network", run: () => go(`/networks/${o.name}`) });
    return items;
  }, [vms, nodes.data, tenants.data, nets.data]);
  const shown = all.filter((i) => (i.label + " " + i.hint).toLowerCase().includes(q.toLowerCase())).slice(0, 12);
  const pick = (i: PaletteItem | undefined) => {
    if (!i) return;
    onClose();
    i.run();
  };
  return (
    <div class="backdrop" onClick={(e) => e.target === e.currentTarget && onClose()}>
      <div class="palette" role="dialog" aria-modal="true" aria-label="Command palette">
        <input
          ref={input}
          aria-label="Jump to a page, VM, node or tenant, or start an action"
          placeholder="Jump to… (pages, VMs, nodes, tenants, actions)"
          value={q}
          role="combobox"
          aria-expanded="true"
          aria-controls="palette-list"
          aria-activedescendant={shown[sel] ? "pal-" + sel : undefined}
          onInput={(e) => (setQ((e.target as HTMLInputElement).value), setSel(0))}
          onKeyDown={(e) => {
            if (e.key === "ArrowDown") (setSel((s) => Math.min(s + 1, shown.length - 1)), e.preventDefault());
            if (e.key === "ArrowUp") (setSel((s) => Math.max(s - 1, 0)), e.preventDefault());
            if (e.key === "Enter") pick(shown[sel]);
            if (e.key === "Escape") onClose();
          }}
        />
        <ul id="palette-list" role="listbox" aria-label="Results">
          {shown.map((i, n) => (
            <li id={"pal-" + n} role="option" aria-selected={n === sel} onClick={() => pick(i)}>
              {i.label} <span class="muted">{i.hint}</span>
            </li>
          ))}
        </ul>
      </div>
    </div>
  );
}

function Bell() {
  const { data } = useData<any>("/fleet/notifications", 30000);
  const n = (data?.notifications || []).filter((x: any) => Date.now() - new Date(x.time).getTime() < 86400e3).length;
  return (
    <a class="bell" href="#/notifications" aria-label={`Notifications: ${n} today`}>
      <svg aria-hidden="true" width="18" height="18" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round">
        <path d="M6 8a6 6 0 0 1 12 0c0 7 3 9 3 9H3s3-2 3-9" />
        <path d="M10.3 21a1.94 1.94 0 0 0 3.4 0" />
      </svg>
      {n ? <span class="dot">{n}</span> : null}
    </a>
  );
}

function Shell({ me, signOut }: { me: Me; signOut: () => void }) {
  const route = useRoute();
  const [palette, setPalette] = useState(false);
  const [menu, setMenu] = useState("");
  const [theme, setTheme] = useTheme();
  const teams = useData<any>(me.viaSession && me.email ? "/auth/session" : null);
  useEffect(() => {
    const on = (e: KeyboardEvent) => {
      if ((e.metaKey || e.ctrlKey) && e.key.toLowerCase() === "k") {
        e.preventDefault();
        setPalette((p) => !p);
      }
    };
    addEventListener("keydown", on);
    return () => removeEventListener("keydown", on);
  }, []);
  useEffect(() => setMenu(""), [route.join("/")]);
  const mine = visible(me);
  const [page, a, b] = route;
  const current = mine.find((p) => p.path === page);
  useEffect(() => {
    document.title = (current ? current.title + " · " : "") + "FluxVM Studio";
  }, [page]);
  let body;
  switch (current ? page : "") {
    case "overview": body = <Overview me={me} />; break;
    case "vms": body = a === "new" ? <VMsPage me={me} launch /> : <VMsPage me={me} node={a} id={b} />; break;
    case "nodes": body = <NodesPage me={me} name={a} />; break;
    case "tenants": body = <TenantsPage me={me} create={a === "new"} />; break;
    case "macs": body = <MacsPage me={me} />; break;
    case "networks": body = <NetworksPage me={me} name={a} />; break;
    case "volumes": body = <VolumesPage me={me} name={a} />; break;
    case "pools": body = <PoolsPage me={me} name={a} />; break;
    case "tunnels": body = <TunnelsPage me={me} />; break;
    case "images": body = me.operator ? <CatalogPage /> : <ImagesPage me={me} />; break;
    case "usage": body = <UsagePage />; break;
    case "billing": body = <BillingPage me={me} />; break;
    case "activity": body = <ActivityPage />; break;
    case "notifications": body = <NotificationsPage me={me} />; break;
    case "policy": body = <PolicyPage />; break;
    case "prices": body = <PricesPage />; break;
    case "keys": body = <KeysPage me={me} />; break;
    case "members": body = <MembersPage me={me} />; break;
    default:
      body = (
        <section>
          <h1>Not found</h1>
          <p>
            There is no page {page} for you here. <a href="#/overview">Go to the overview</a>.
          </p>
        </section>
      );
  }
  return (
    <>
      <a class="skip" href="#main" onClick={(e) => (e.preventDefault(), document.getElementById("main")?.focus())}>
        Skip to the page
      </a>
      <header class="topbar">
        <a class="brand" href="#/overview">
          FluxVM<span class="brand-rest"> Studio</span>
        </a>
        <nav aria-label="Pages">
          <ul class="menus">
            {groups.map((g) => {
              const inGroup = mine.filter((p) => p.group === g);
              if (g === "Overview")
                return (
                  <li>
                    <a href="#/overview" aria-current={page === "overview" ? "page" : undefined} class="menu-button">
                      Overview
                    </a>
                  </li>
                );
              return (
                <li class="menu">
                  <button class="menu-button" aria-expanded={menu === g} aria-controls={"menu-" + g} onClick={() => setMenu(menu === g ? "" : g)}>
                    {g}
                  </button>
                  <ul id={"menu-" + g} hidden={menu !== g}>
                    {inGroup.map((p) => (
                      <li>
                        <a href={"#/" + p.path} aria-current={p.path === page ? "page" : undefined}>
                          {p.title}
                        </a>
                      </li>
                    ))}
                  </ul>
                </li>
              );
            })}
          </ul>
        </nav>
        <button class="search" onClick={() => setPalette(true)} aria-keyshortcuts="Control+K Meta+K" title="Search and actions (Ctrl K or ⌘K)">
          Search <kbd aria-hidden="true">⌘K</kbd>
        </button>
        <Bell />
        <div class="menu account">
          <button class="menu-button" aria-expanded={menu === "account"} aria-controls="menu-account" onClick={() => setMenu(menu === "account" ? "" : "account")}>
            {me.email || (me.operator ? "Operator" : me.tenantName)}
            <span class="role"> · {me.operator ? "operator" : me.role}</span>
          </button>
          <ul id="menu-account" hidden={menu !== "account"}>
            <li>
              <label>
                Theme
                <select value={theme} onChange={(e) => setTheme((e.target as HTMLSelectElement).value)}>
                  <option value="system">as the system</option>
                  <option value="light">light</option>
                  <option value="dark">dark</option>
                </select>
              </label>
            </li>
            {me.viaSession ? (
              <li>
                <SwitchTeam current={me.tenantName} />
              </li>
            ) : null}
            <li>
              <button onClick={signOut}>Sign out</button>
            </li>
          </ul>
        </div>
      </header>
      <main id="main" tabIndex={-1}>
        {body}
      </main>
      {palette ? <Palette me={me} onClose={() => setPalette(false)} /> : null}
      {teams.data ? null : null}
    </>
  );
}

// SwitchTeam signs in again for another of the person's teams: the
// provider remembers them, so this is usually one redirect.
function SwitchTeam({ current }: { current: string }) {
  const [team, setTeam] = useState("");
  return (
    <form
      class="switch"
      onSubmit={(e) => {
        e.preventDefault();
        if (team) location.href = "/auth/login?tenant=" + encodeURIComponent(team);
      }}
    >
      <label>
        Switch team
        <input value={team} placeholder={current} onInput={(e) => setTeam((e.target as HTMLInputElement).value)} />
      </label>
      <button type="submit">Switch</button>
    </form>
  );
}

function App() {
  const [me, setMe] = useState<Me | null | undefined>(undefined);
  useEffect(() => {
    whoAmI().then(setMe);
  }, []);
  if (me === undefined) return <p class="loading">Loading…</p>;
  if (!me) return <SignIn onSignedIn={setMe} />;
  const signOut = async () => {
    saveToken("");
    clearCache();
    if (me.viaSession) await post("/auth/logout").catch(() => {});
    setMe(null);
    go("/overview");
  };
  return <Shell me={me} signOut={signOut} />;
}

render(<App />, document.getElementById("app")!);
export { get };
