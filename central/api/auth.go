package api

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// The console's sign-in (docs/identity.md): the mechanisms are
// central/identity's; here are the routes under /auth, public because a
// browser comes to them before it has anything to show.

// secureCookie is whether the session cookie is Secure: the public URL is https.
func (s *Server) secureCookie() bool { return strings.HasPrefix(s.publicOrigin, "https://") }

// authSession is GET /auth/session: who the cookie's session is for, now.
// Without a live session it answers signed out (200), so that the console
// asks once.
func (s *Server) authSession(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(identity.CookieName)
	if err != nil || c.Value == "" {
		jsonapi.Write(w, http.StatusOK, sdk.ConsoleSession{})
		return
	}
	who, err := s.sessions.Lookup(r.Context(), c.Value)
	switch {
	case errors.Is(err, identity.ErrNoSession):
		http.SetCookie(w, identity.Cookie("", time.Time{}, s.secureCookie()))
		jsonapi.Write(w, http.StatusOK, sdk.ConsoleSession{})
		return
	case err != nil:
		s.storeError(w, "look up the session", err)
		return
	}
	out := sdk.ConsoleSession{SignedIn: true, Email: who.Session.Email, Operator: who.Session.Operator, ExpiresAt: who.Session.ExpiresAt}
	if who.Tenant != nil {
		out.TenantID, out.TenantName, out.Role = who.Tenant.ID, who.Tenant.Name, who.Member.Role
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// authLogout is POST /auth/logout: the session ends and the cookie is
// cleared. It does not sign the person out of the identity provider.
func (s *Server) authLogout(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(identity.CookieName)
	if err == nil && c.Value != "" {
		if err := identity.CheckConsoleChange(r, s.publicOrigin); err != nil {
			jsonapi.WriteError(w, http.StatusForbidden, err.Error(), "sign out from the console's own page")
			return
		}
		if who, err := s.sessions.Lookup(r.Context(), c.Value); err == nil {
			p := Principal{User: who.Session.Email, Operator: who.Tenant == nil, Tenant: who.Tenant}
			s.record(r, p, "sign out", "", http.StatusOK)
		}
		if err := s.sessions.End(r.Context(), c.Value); err != nil {
			s.storeError(w, "end the session", err)
			return
		}
	}
	http.SetCookie(w, identity.Cookie("", time.Time{}, s.secureCookie()))
	jsonapi.Write(w, http.StatusOK, sdk.ConsoleSession{})
}
