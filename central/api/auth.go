package api

import (
	"errors"
	"fmt"
	"html"
	"net/http"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/store"
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

// authConfig is GET /auth/config: whether sign-in with the identity
// provider is on.
func (s *Server) authConfig(w http.ResponseWriter, _ *http.Request) {
	if s.opts.OIDC == nil {
		jsonapi.Write(w, http.StatusOK, sdk.AuthConfig{})
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.AuthConfig{SSO: true, ProviderName: s.opts.OIDCProviderName, LoginURL: "/auth/login"})
}

// ssoOff answers the sign-in's routes when SSO is not configured.
func (s *Server) ssoOff(w http.ResponseWriter) bool {
	if s.opts.OIDC != nil {
		return false
	}
	jsonapi.WriteError(w, http.StatusNotFound, "sign-in with an identity provider is not configured on this central",
		"the operator starts central with -public-url and -oidc-issuer, -oidc-client-id (docs/identity.md); tokens and API keys work meanwhile")
	return true
}

// authLogin is GET /auth/login[?tenant=T]: the browser goes to the
// provider, carrying a short-lived cookie that binds the sign-in to it.
func (s *Server) authLogin(w http.ResponseWriter, r *http.Request) {
	if s.ssoOff(w) {
		return
	}
	tenant := r.URL.Query().Get("tenant")
	if tenant != "" && !store.ValidName(tenant) {
		jsonapi.WriteError(w, http.StatusBadRequest, "tenant "+jsonapi.Echo(tenant)+" is not a tenant's name or id", "leave ?tenant= out, or name one of your teams")
		return
	}
	to, binding, err := s.opts.OIDC.Begin(tenant)
	if err != nil {
		jsonapi.WriteError(w, http.StatusTooManyRequests, err.Error(), "")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: identity.BindingCookie, Value: binding, Path: "/auth/callback", HttpOnly: true,
		SameSite: http.SameSiteLaxMode, Secure: s.secureCookie(), MaxAge: int(identity.PendingTTL / time.Second)})
	http.Redirect(w, r, to, http.StatusFound)
}

// signInError answers a sign-in that ends without a session: a small page
// for a browser (one that asks for text/html), the usual JSON error
// otherwise.
func signInError(w http.ResponseWriter, r *http.Request, status int, msg, hint string) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		jsonapi.WriteError(w, status, msg, hint)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, "<!doctype html>\n<title>FluxVM: not signed in</title>\n<h1>Not signed in</h1>\n<p>%s</p>\n<p>%s</p>\n<p><a href=\"/auth/login\">Sign in again</a></p>\n",
		html.EscapeString(msg), html.EscapeString(hint))
}

// authCallback is GET /auth/callback: the provider's answer. The verified
// email picks the operator, a membership (the one asked for with ?tenant=
// at login, else the first of the person's teams by name), or nobody:
// nobody is created here. Only a sign-in that passes every check starts a
// session, and the sign-in is in the activity log.
func (s *Server) authCallback(w http.ResponseWriter, r *http.Request) {
	if s.ssoOff(w) {
		return
	}
	http.SetCookie(w, &http.Cookie{Name: identity.BindingCookie, Path: "/auth/callback", MaxAge: -1, HttpOnly: true, Secure: s.secureCookie()})
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		signInError(w, r, http.StatusUnauthorized, "the identity provider did not sign you in", "start again from the console's sign-in page")
		return
	}
	var binding string
	if c, err := r.Cookie(identity.BindingCookie); err == nil {
		binding = c.Value
	}
	claims, tenant, err := s.opts.OIDC.Finish(r.Context(), q.Get("state"), q.Get("code"), binding)
	if err != nil {
		s.log.Warn("sign-in refused", "error", err)
		signInError(w, r, http.StatusUnauthorized, "the sign-in could not be completed", "start again from the console's sign-in page, in this browser")
		return
	}
	email := store.NormalEmail(claims.Email)
	// Someone who signed up becomes the owner of their tenant now, at the
	// first sign-in with the address the provider verified (docs/signup.md).
	if _, err := s.signup.ClaimOnSignIn(r.Context(), email); err != nil {
		s.storeError(w, "hand a signed-up tenant to its owner", err)
		return
	}
	token, who, err := s.sessions.SignIn(r.Context(), email, tenant)
	switch {
	case errors.Is(err, identity.ErrNoAccess):
		msg := email + " has no access to this cloud"
		if tenant != "" {
			msg = email + " is not a member of " + tenant
		}
		signInError(w, r, http.StatusForbidden, msg,
			"ask an owner or admin of your team to add you (fluxctl fleet member-add "+email+" --role viewer), or the operator")
		return
	case err != nil:
		s.storeError(w, "sign in", err)
		return
	}
	p := Principal{Operator: who.Tenant == nil, Tenant: who.Tenant, User: email}
	if who.Member != nil {
		p.Role = who.Member.Role
	}
	s.record(r, p, "sign in", "", http.StatusFound)
	http.SetCookie(w, identity.Cookie(token, who.Session.ExpiresAt, s.secureCookie()))
	http.Redirect(w, r, "/", http.StatusFound)
}
