package identity

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// TestTheCookieIsHttpOnlyLaxAndSecureWithHTTPS: the session cookie is
// HttpOnly, SameSite=Lax, for the whole site, Secure exactly when asked
// (an https public URL), and an empty token clears it.
func TestTheCookieIsHttpOnlyLaxAndSecureWithHTTPS(t *testing.T) {
	exp := time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)
	for _, secure := range []bool{true, false} {
		w := httptest.NewRecorder()
		http.SetCookie(w, Cookie("fvs_x", exp, secure))
		c := w.Result().Cookies()[0]
		if c.Name != CookieName || c.Value != "fvs_x" || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Secure != secure || !c.Expires.Equal(exp) {
			t.Fatalf("secure %v: cookie %+v", secure, c)
		}
	}
	w := httptest.NewRecorder()
	http.SetCookie(w, Cookie("", time.Time{}, true))
	if c := w.Result().Cookies()[0]; c.Value != "" || c.MaxAge >= 0 {
		t.Fatalf("clearing cookie %+v", c)
	}
}

// TestConsoleChangesNeedTheHeaderAndTheOrigin: reads pass; a change needs
// X-FluxVM-Console, and an Origin sent must be the public URL's.
func TestConsoleChangesNeedTheHeaderAndTheOrigin(t *testing.T) {
	const origin = "https://cloud.example.com"
	for _, c := range []struct {
		method, header, origin string
		ok                     bool
	}{
		{"GET", "", "", true}, {"HEAD", "", "https://evil.example.com", true},
		{"POST", "", "", false}, {"POST", "1", "", true}, {"DELETE", "1", origin, true},
		{"PATCH", "1", "https://evil.example.com", false}, {"PUT", "1", "null", false}, {"POST", "", origin, false},
	} {
		r := httptest.NewRequest(c.method, "/fleet/vms", nil)
		if c.header != "" {
			r.Header.Set("X-FluxVM-Console", c.header)
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if err := CheckConsoleChange(r, origin); (err == nil) != c.ok {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestAnOperatorSessionEndsWithTheEmail: an operator's session lasts only
// while the email is an operator's; removing it ends the session, which is
// then deleted.
func TestAnOperatorSessionEndsWithTheEmail(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	var allowed atomic.Bool
	allowed.Store(true)
	s := NewSessions(st, 0, time.Now, func(_ context.Context, email string) (bool, error) {
		return allowed.Load() && email == "ops@example.com", nil
	}, hclog.NewNullLogger())
	token, x, err := s.Start(ctx, "OPS@example.com", "")
	if err != nil || !x.Operator || x.ExpiresAt.Sub(x.CreatedAt) != DefaultTTL {
		t.Fatalf("start: %+v %v", x, err)
	}
	if who, err := s.Lookup(ctx, token); err != nil || who.Tenant != nil || who.Session.Email != "ops@example.com" {
		t.Fatalf("lookup: %+v %v", who, err)
	}
	allowed.Store(false)
	if _, err := s.Lookup(ctx, token); err != ErrNoSession {
		t.Fatalf("after the email was removed: %v", err)
	}
	if _, err := st.SessionByToken(ctx, store.HashToken(token)); err == nil {
		t.Fatal("the session is still stored")
	}
	if _, err := s.Lookup(ctx, "fvs_never-issued"); err != ErrNoSession {
		t.Fatalf("a token never issued: %v", err)
	}
}

// TestSignInPicksTheOperatorThenATeamAndCreatesNobody: an operator's email
// without a tenant asked for is the operator; a tenant asked for (by id or
// name) must have the person; without one, the first of their teams by
// name; a stranger, or a team they are not on, is ErrNoAccess and leaves
// nothing behind.
func TestSignInPicksTheOperatorThenATeamAndCreatesNobody(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	s := NewSessions(st, 0, time.Now, func(_ context.Context, email string) (bool, error) { return email == "ops@example.com", nil }, hclog.NewNullLogger())
	zeta, alpha, other := storetest.Tenant(t, st, "zeta"), storetest.Tenant(t, st, "alpha"), storetest.Tenant(t, st, "other")
	for _, m := range []struct {
		tenant *store.Tenant
		email  string
	}{{zeta, "alex@example.com"}, {alpha, "alex@example.com"}, {zeta, "ops@example.com"}} {
		if err := st.AddTeamMember(ctx, &store.TeamMember{Member: sdk.Member{Email: m.email, Role: sdk.RoleMember, AddedAt: time.Now()}, Tenant: m.tenant.ID}); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		email, tenant, want string // want: "operator", a tenant id, or "" for ErrNoAccess
	}{
		{"Ops@Example.com", "", "operator"},
		{"ops@example.com", "zeta", zeta.ID},
		{"alex@example.com", "", alpha.ID},
		{"alex@example.com", zeta.ID, zeta.ID},
		{"alex@example.com", "other", ""},
		{"alex@example.com", "nowhere", ""},
		{"stranger@example.com", "", ""},
	} {
		_, who, err := s.SignIn(ctx, c.email, c.tenant)
		switch {
		case c.want == "" && err != ErrNoAccess:
			t.Errorf("%s into %q: %+v %v, want ErrNoAccess", c.email, c.tenant, who, err)
		case c.want == "operator" && (err != nil || who.Tenant != nil || !who.Session.Operator):
			t.Errorf("%s: %+v %v, want the operator", c.email, who, err)
		case c.want != "" && c.want != "operator" && (err != nil || who.Tenant == nil || who.Tenant.ID != c.want || who.Member.Role != sdk.RoleMember):
			t.Errorf("%s into %q: %+v %v, want tenant %s", c.email, c.tenant, who, err, c.want)
		}
	}
	if ms, err := st.ListTeam(ctx, other.ID); err != nil || len(ms) != 0 {
		t.Fatalf("a refused sign-in added %+v (%v)", ms, err)
	}
}
