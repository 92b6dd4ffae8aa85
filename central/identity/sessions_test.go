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
