package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// clock is a settable clock for the API's Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// inConsole is a request made with a session cookie, from the console
// (the header) unless console is false, with origin as its Origin if set.
func inConsole(method, path, session, body string, console bool, origin string) req {
	h := http.Header{"Cookie": {identity.CookieName + "=" + session}}
	if console {
		h.Set("X-FluxVM-Console", "1")
	}
	if origin != "" {
		h.Set("Origin", origin)
	}
	return req{method: method, path: path, body: body, header: h}
}

// TestConsoleSessionsFollowTheTeam: a member's session works with their
// role as it is now: a change needs the console's header and origin, a
// demotion to viewer refuses the next change, removing the member ends
// the session on the next request, the session expires with the clock, a
// bearer token ignores the cookie, /auth/session says who, /auth/logout
// ends it, and the activity log names the person.
func TestConsoleSessionsFollowTheTeam(t *testing.T) {
	c := &clock{t: time.Now().UTC()}
	e := newEnv(t, func(o *Options) { o.Now, o.PublicURL = c.now, "https://cloud.example.com" })
	ctx := context.Background()
	acme, token := e.createTenant("acme", "")
	for _, m := range []string{`{"email": "ada@example.com", "role": "admin"}`, `{"email": "olga@example.com", "role": "owner"}`} {
		e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: m}, 201)
	}
	ada, x, err := e.api.sessions.Start(ctx, "ADA@example.com", acme.ID)
	if err != nil || !strings.HasPrefix(ada, identity.TokenPrefix) || !x.ExpiresAt.Equal(c.now().Add(identity.DefaultTTL)) {
		t.Fatalf("start: %q %+v %v", ada, x, err)
	}
	for k, v := range e.dump() {
		if strings.Contains(k+v, ada) {
			t.Fatalf("etcd holds the session token itself at %s", k)
		}
	}
	if _, _, err := e.api.sessions.Start(ctx, "nobody@example.com", acme.ID); err != identity.ErrNoAccess {
		t.Fatalf("a stranger's sign-in: %v", err)
	}

	var who sdk.ConsoleSession
	e.must(inConsole("GET", "/auth/session", ada, "", false, ""), 200).decode(t, &who)
	if !who.SignedIn || who.Email != "ada@example.com" || who.TenantID != acme.ID || who.Role != sdk.RoleAdmin {
		t.Fatalf("/auth/session: %+v", who)
	}
	var list sdk.MemberList
	e.must(inConsole("GET", "/fleet/tenants/me/members", ada, "", false, ""), 200).decode(t, &list)
	if list.Members[0].Email != "ada@example.com" || list.Members[0].LastSignInAt.IsZero() {
		t.Fatalf("the sign-in is not noted: %+v", list.Members)
	}

	budget := `{"monthly": 100}`
	eb := e.must(inConsole("PUT", "/fleet/tenants/me/budget", ada, budget, false, ""), 403).errorBody(t)
	if !strings.Contains(eb.Error, "X-FluxVM-Console") {
		t.Fatalf("a change without the console's header: %+v", eb)
	}
	e.must(inConsole("PUT", "/fleet/tenants/me/budget", ada, budget, true, "https://evil.example.com"), 403)
	e.must(inConsole("PUT", "/fleet/tenants/me/budget", ada, budget, true, "https://cloud.example.com"), 200)
	e.must(inConsole("PUT", "/fleet/tenants/me/budget", ada, budget, true, ""), 200)
	// An admin makes no owner, and changes none.
	e.must(inConsole("POST", "/fleet/tenants/me/members", ada, `{"email": "x@example.com", "role": "owner"}`, true, ""), 403)
	e.must(inConsole("PATCH", "/fleet/tenants/me/members/olga@example.com", ada, `{"role": "viewer"}`, true, ""), 403)
	e.must(inConsole("POST", "/fleet/tenants/me/members", ada, `{"email": "x@example.com", "role": "member"}`, true, ""), 201)

	var changes []string
	for _, ev := range e.api.opts.Activity.Recent(0, acme.ID) {
		if ev.User == "ada@example.com" {
			changes = append(changes, ev.Action)
		}
	}
	if len(changes) < 4 || changes[0] != "add member x@example.com" {
		t.Fatalf("the activity log's events by ada: %q", changes)
	}

	// A bearer token ignores the cookie, a live one or not.
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: token, header: http.Header{"Cookie": {identity.CookieName + "=fvs_nothing"}}}, 200)

	// Demoted to viewer: reads go on, the next change is refused.
	e.must(req{method: "PATCH", path: "/fleet/tenants/me/members/ada@example.com", token: token, body: `{"role": "viewer"}`}, 200)
	e.must(inConsole("GET", "/fleet/vms", ada, "", false, ""), 200)
	eb = e.must(inConsole("PUT", "/fleet/tenants/me/budget", ada, budget, true, ""), 403).errorBody(t)
	if !strings.Contains(eb.Error, "viewer role") {
		t.Fatalf("a viewer's change: %+v", eb)
	}
	// With the primary token beside the viewer's cookie, the token decides.
	e.must(req{method: "PUT", path: "/fleet/tenants/me/budget", token: token, body: budget,
		header: http.Header{"Cookie": {identity.CookieName + "=" + ada}}}, 200)

	// Removed: the next request finds no session, and it is gone from etcd.
	e.must(req{method: "DELETE", path: "/fleet/tenants/me/members/ada@example.com", token: token}, 204)
	eb = e.must(inConsole("GET", "/fleet/vms", ada, "", false, ""), 401).errorBody(t)
	if !strings.Contains(eb.Error, "session has ended") {
		t.Fatalf("a removed member's session: %+v", eb)
	}
	if _, err := e.store.SessionByToken(ctx, store.HashToken(ada)); err == nil {
		t.Fatal("a removed member's session is still stored")
	}

	// The clock ends a session; logout ends one and clears the cookie.
	olga, _, err := e.api.sessions.Start(ctx, "olga@example.com", acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.must(inConsole("GET", "/fleet/vms", olga, "", false, ""), 200)
	c.add(identity.DefaultTTL)
	e.must(inConsole("GET", "/fleet/vms", olga, "", false, ""), 401)
	olga, _, err = e.api.sessions.Start(ctx, "olga@example.com", acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.must(inConsole("POST", "/auth/logout", olga, "", false, ""), 403)
	out := e.must(inConsole("POST", "/auth/logout", olga, "", true, "https://cloud.example.com"), 200)
	if sc := out.header.Get("Set-Cookie"); !strings.Contains(sc, identity.CookieName+"=;") || !strings.Contains(sc, "Max-Age=0") {
		t.Fatalf("logout's cookie: %q", sc)
	}
	e.must(inConsole("GET", "/fleet/vms", olga, "", false, ""), 401)
	e.must(inConsole("GET", "/auth/session", olga, "", false, ""), 200).decode(t, &who)
	if who.SignedIn {
		t.Fatalf("after logout: %+v", who)
	}

	// Deleting the tenant ends its sessions.
	olga, _, err = e.api.sessions.Start(ctx, "olga@example.com", acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.must(req{method: "DELETE", path: "/fleet/tenants/" + acme.ID, token: testFleetToken}, 204)
	e.must(inConsole("GET", "/fleet/vms", olga, "", false, ""), 401)
}

// TestOperatorSessions: an operator's email signs in as the operator and
// calls operator routes, named in the log; anyone else is no operator.
func TestOperatorSessions(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.OperatorEmails = []string{"Ops@Example.com"} })
	ctx := context.Background()
	ops, x, err := e.api.sessions.Start(ctx, "ops@example.com", "")
	if err != nil || !x.Operator {
		t.Fatalf("an operator's sign-in: %+v %v", x, err)
	}
	if _, _, err := e.api.sessions.Start(ctx, "stranger@example.com", ""); err != identity.ErrNoAccess {
		t.Fatalf("a stranger as the operator: %v", err)
	}
	e.must(inConsole("GET", "/fleet/tenants", ops, "", false, ""), 200)

	// The policy's operator_emails add operators without a restart, and
	// removing one ends their session on the next request.
	var pol sdk.Policy
	e.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &pol)
	pol.OperatorEmails = []string{"Dev@Example.com"}
	body, _ := json.Marshal(pol)
	e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: string(body)}, 200)
	dev, _, err := e.api.sessions.Start(ctx, "dev@example.com", "")
	if err != nil {
		t.Fatal(err)
	}
	e.must(inConsole("GET", "/fleet/tenants", dev, "", false, ""), 200)
	pol.OperatorEmails = []string{}
	body, _ = json.Marshal(pol)
	e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: string(body)}, 200)
	e.must(inConsole("GET", "/fleet/tenants", dev, "", false, ""), 401)
	e.must(inConsole("POST", "/fleet/tenants", ops, `{"name": "made-in-console"}`, true, ""), 201)
	found := false
	for _, ev := range e.api.opts.Activity.Recent(0, "") {
		found = found || (ev.User == "ops@example.com" && ev.Who == "operator" && ev.Action == "create tenant made-in-console")
	}
	if !found {
		t.Fatal("the activity log does not name the operator's person")
	}
}
