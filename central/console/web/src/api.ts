// The console's one way to talk to central: same origin only, the pasted
// token (if any) from this tab's session storage as a bearer token, else
// the SSO session cookie plus the X-FluxVM-Console header central wants on
// a change made with a cookie.

const tokenKey = "fluxvm.token";

export function savedToken(): string {
  return sessionStorage.getItem(tokenKey) || "";
}

export function saveToken(token: string) {
  if (token) sessionStorage.setItem(tokenKey, token);
  else sessionStorage.removeItem(tokenKey);
}

export class APIError extends Error {
  status: number;
  hint: string;
  constructor(status: number, message: string, hint: string) {
    super(message);
    this.status = status;
    this.hint = hint;
  }
}

export async function call<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  // Only paths of this central: a token never leaves for another host.
  if (!path.startsWith("/") || path.startsWith("//")) throw new Error("not a path of this central: " + path);
  const headers: Record<string, string> = { Accept: "application/json" };
  const token = savedToken();
  if (token) headers.Authorization = "Bearer " + token;
  if (method !== "GET") headers["X-FluxVM-Console"] = "1";
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  const text = await r.text();
  let data: any = text;
  if ((r.headers.get("Content-Type") || "").includes("json")) {
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
  }
  if (!r.ok) {
    throw new APIError(r.status, (data && data.error) || (typeof data === "string" && data.slice(0, 200)) || r.status + " " + r.statusText, (data && data.hint) || "");
  }
  return data as T;
}

export const get = <T = any>(path: string) => call<T>("GET", path);
export const post = <T = any>(path: string, body?: unknown) => call<T>("POST", path, body === undefined ? {} : body);
export const del = <T = any>(path: string) => call<T>("DELETE", path);

export type Role = "viewer" | "member" | "admin" | "owner";

// Who is signed in, and what the console may offer them.
export interface Me {
  operator: boolean;
  tenantId: string;
  tenantName: string;
  role: Role;
  email: string; // "" when signed in with a token
  viaSession: boolean;
}

const rank: Record<Role, number> = { viewer: 0, member: 1, admin: 2, owner: 3 };

// can says whether me's role reaches least (the operator can do anything).
export function can(me: Me, least: Role): boolean {
  return me.operator || rank[me.role] >= rank[least];
}

// whoAmI finds out whom the token (or, without one, the session cookie)
// belongs to: null when neither works.
export async function whoAmI(): Promise<Me | null> {
  if (!savedToken()) {
    const s = await get<any>("/auth/session").catch(() => null);
    if (!s || !s.signed_in) return null;
    return {
      operator: !!s.operator,
      tenantId: s.tenant_id || "",
      tenantName: s.tenant_name || "",
      role: (s.role || "owner") as Role,
      email: s.email || "",
      viaSession: true,
    };
  }
  try {
    const t = await get<any>("/fleet/tenants/me");
    return { operator: false, tenantId: t.tenant.id, tenantName: t.tenant.name, role: "owner", email: "", viaSession: false };
  } catch (e) {
    if (!(e instanceof APIError) || e.status !== 403) {
      if (e instanceof APIError && e.status === 401) return null;
    }
  }
  try {
    await get("/fleet/nodes");
    return { operator: true, tenantId: "", tenantName: "", role: "owner", email: "", viaSession: false };
  } catch {
    return null;
  }
}

export function fmtMiB(mib: number): string {
  if (!mib) return "0";
  return mib >= 1024 ? (mib / 1024).toFixed(mib % 1024 ? 1 : 0) + " GiB" : mib + " MiB";
}

// One formatter and one collator for every call: Date.toLocaleString and
// String.localeCompare build their ICU objects on each call, which drawing
// 200 rows made the slowest part of a page (docs/benchmarks.md).
const timeFormat = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit" });
export const compareText = new Intl.Collator().compare;

// compareISO orders RFC 3339 times (as central writes them) oldest first.
export function compareISO(a?: string, b?: string): number {
  const x = a || "", y = b || "";
  return x < y ? -1 : x > y ? 1 : 0;
}

export function fmtTime(s?: string): string {
  if (!s || s.startsWith("0001-")) return "—";
  return timeFormat.format(new Date(s));
}

export function ago(s?: string): string {
  if (!s || s.startsWith("0001-")) return "—";
  const sec = Math.round((Date.now() - new Date(s).getTime()) / 1000);
  if (sec < 60) return sec + " s ago";
  if (sec < 3600) return Math.round(sec / 60) + " min ago";
  if (sec < 86400) return Math.round(sec / 3600) + " h ago";
  return Math.round(sec / 86400) + " d ago";
}
