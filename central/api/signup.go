package api

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/central/signup"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Self-service sign-up (docs/signup.md): the work is package signup's.

// SignupOptions open self-service sign-up.
type SignupOptions struct {
	// Enabled opens POST /signup (central's -signup); off by default.
	Enabled bool
	SMTP    signup.SMTP
	// LinkTTL is how long a mailed link works (signup.DefaultLinkTTL when 0).
	LinkTTL time.Duration
}

func (s *Server) newSignup() *signup.Service {
	o := s.opts.Signup
	return signup.New(signup.Options{Store: s.opts.Store, Enabled: o.Enabled && len(s.fleet) > 0, PublicURL: s.opts.PublicURL,
		SMTP: o.SMTP, LinkTTL: o.LinkTTL, Now: s.opts.Now, Logger: s.log.Named("signup"), CreateTenant: s.signupTenant})
}

// signupTenant makes a signed-up tenant, like the operator's POST
// /fleet/tenants with no quota.
func (s *Server) signupTenant(ctx context.Context, name, _ string) (*sdk.TenantWithToken, error) {
	token := store.NewToken(TenantTokenPrefix)
	t := &store.Tenant{Tenant: sdk.Tenant{Name: name, CreatedAt: s.opts.Now().UTC()}, TokenSHA256: store.HashToken(token)}
	if err := s.opts.Store.CreateTenant(ctx, t); err != nil {
		return nil, err
	}
	return &sdk.TenantWithToken{Tenant: wireTenant(t), Token: token, Note: tokenNote}, nil
}

// signupError answers an error of package signup for people.
func (s *Server) signupError(w http.ResponseWriter, err error) {
	var ie *signup.InvalidError
	switch {
	case errors.Is(err, signup.ErrClosed):
		jsonapi.WriteError(w, http.StatusNotFound, "sign-up is not open on this central", "ask the operator for an account")
	case errors.Is(err, signup.ErrLimited):
		w.Header().Set("Retry-After", strconv.Itoa(int(signup.Refill.Seconds())))
		jsonapi.WriteError(w, http.StatusTooManyRequests, "too many sign-ups from your address", "wait a minute and try again")
	case errors.As(err, &ie):
		jsonapi.WriteError(w, http.StatusBadRequest, ie.Msg, ie.Hint)
	case errors.Is(err, signup.ErrLink):
		jsonapi.WriteError(w, http.StatusNotFound, "this sign-up link is unknown, was used already, or has expired", "sign up again (POST /signup)")
	case errors.Is(err, store.ErrExists):
		jsonapi.WriteError(w, http.StatusConflict, "that tenant name is taken", "sign up again with another name")
	default:
		var op *store.OpError
		if errors.As(err, &op) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrInvalid) {
			s.storeError(w, "sign up", err)
			return
		}
		// Mail that did not go (the SMTP server's answer is logged, not shown).
		s.log.Error("sign-up", "error", err)
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "central could not send the confirmation mail", "try again later")
	}
}

// signupConfig is GET /signup/config.
func (s *Server) signupConfig(w http.ResponseWriter, r *http.Request) {
	c, err := s.signup.Config(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, c)
}

// postSignup is POST /signup: a mailed link (202), or with verification
// off in the policy the tenant and its token at once (201).
func (s *Server) postSignup(w http.ResponseWriter, r *http.Request) {
	if !s.signup.Enabled() {
		s.signupError(w, signup.ErrClosed)
		return
	}
	const bodyHint = `the body is {"email": "alex@example.com", "tenant": "acme"}`
	body, err := jsonapi.BufferBody(r)
	switch {
	case err != nil:
		jsonapi.WriteError(w, http.StatusBadRequest, "could not read the body", bodyHint)
		return
	case r.ContentLength > signup.MaxBodyBytes, len(body) > signup.MaxBodyBytes:
		jsonapi.WriteError(w, http.StatusRequestEntityTooLarge, "the body is over 4 KiB", bodyHint)
		return
	}
	req, err := signup.DecodeRequest(body)
	if err != nil {
		s.signupError(w, err)
		return
	}
	res, err := s.signup.Signup(r.Context(), clientAddr(r), req)
	if err != nil {
		s.signupError(w, err)
		return
	}
	if res.Tenant != nil {
		jsonapi.Write(w, http.StatusCreated, res.Tenant)
		return
	}
	jsonapi.Write(w, http.StatusAccepted, res.Accepted)
}

// confirmPage is what the mailed link opens: a page whose button confirms.
// Following the link changes nothing by itself, so a mail scanner that
// fetches links does not use it up.
var confirmPage = template.Must(template.New("confirm").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Confirm your FluxVM sign-up</title></head>
<body><h1>Confirm your FluxVM sign-up</h1>
<p><button id="go">Create my account</button></p><pre id="out"></pre>
<script nonce="{{.Nonce}}">
document.getElementById("go").onclick = async () => {
  const r = await fetch("/signup/confirm", {method: "POST", headers: {"Content-Type": "application/json"},
    body: JSON.stringify({token: {{.Token}}})});
  const b = await r.json();
  document.getElementById("out").textContent = r.ok
    ? "Tenant " + b.tenant.name + " is yours. Its token, shown this once:\n\n" + b.token
    : b.error + "\n" + (b.hint || "");
};
</script></body></html>
`))

// signupConfirmPage is GET /signup/confirm?token=.
func (s *Server) signupConfirmPage(w http.ResponseWriter, r *http.Request) {
	if !s.signup.Enabled() {
		s.signupError(w, signup.ErrClosed)
		return
	}
	token := r.URL.Query().Get("token")
	if len(token) != len(signup.TokenPrefix)+64 {
		s.signupError(w, signup.ErrLink)
		return
	}
	// The page's one script runs by its nonce; nothing else may.
	nonce := store.NewToken("")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+nonce+"'; connect-src 'self'; base-uri 'none'; form-action 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("Cache-Control", "no-store")
	_ = confirmPage.Execute(w, struct{ Token, Nonce string }{token, nonce})
}

// signupConfirm is POST /signup/confirm {"token"}: the tenant and its
// token, once.
func (s *Server) signupConfirm(w http.ResponseWriter, r *http.Request) {
	var req sdk.SignupConfirmRequest
	if e := jsonapi.ReadBody(w, r, &req, true, `the body is {"token": "fsu_..."}, the token of the mailed link`); e != nil {
		if !s.signup.Enabled() {
			s.signupError(w, signup.ErrClosed)
			return
		}
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	t, err := s.signup.Confirm(r.Context(), req.Token)
	if err != nil {
		s.signupError(w, err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, t)
}
