package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// providerUsers are the people the test's identity provider knows; every
// password is "verysecure".
type providerUsers map[string]*storage.User

func (u providerUsers) GetUserByID(id string) *storage.User { return u[id] }
func (u providerUsers) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (u providerUsers) ExampleClientID() string { return "" }

// claimsInIDToken is the example provider's storage, but its clients put
// the email claims in the ID token, as Okta, Entra ID and Google do.
type claimsInIDToken struct{ *storage.Storage }

type assertingClient struct{ op.Client }

func (assertingClient) IDTokenUserinfoClaimsAssertion() bool { return true }

func (s claimsInIDToken) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	c, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return assertingClient{c}, nil
}

// startProvider starts a real OpenID provider (zitadel/oidc's op with its
// example storage and login page) on loopback, with central registered as
// a web client redirecting to callback, and returns its issuer. With
// emailInIDToken the email claims are in the ID token; without, only at
// the provider's UserInfo endpoint (the example's own default).
func startProvider(t *testing.T, callback string, emailInIDToken bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	users := providerUsers{
		"u1": {ID: "u1", Username: "alex", Password: "verysecure", Email: "Alex@Example.com", EmailVerified: true},
		"u2": {ID: "u2", Username: "ops", Password: "verysecure", Email: "ops@example.com", EmailVerified: true},
		"u3": {ID: "u3", Username: "stranger", Password: "verysecure", Email: "stranger@example.com", EmailVerified: true},
		"u4": {ID: "u4", Username: "unverified", Password: "verysecure", Email: "unverified@example.com", EmailVerified: false},
	}
	storage.RegisterClients(storage.WebClient("fluxvm-console", "console-secret", callback))
	var st exampleop.Storage = storage.NewStorage(users)
	if emailInIDToken {
		st = claimsInIDToken{storage.NewStorage(users)}
	}
	router := exampleop.SetupServer(issuer, st, nil, false)
	srv := httptest.NewUnstartedServer(router)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return issuer
}

// browser is a browser without a screen: a cookie jar that follows
// redirects and asks for pages, as browsers do.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Transport: acceptHTML{}}
}

type acceptHTML struct{}

func (acceptHTML) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Accept", "text/html,application/xhtml+xml,*/*;q=0.8")
	return http.DefaultTransport.RoundTrip(r)
}

// signIn walks a browser through the sign-in: central's /auth/login, the
// provider's login page, its form, and back to central's /auth/callback.
// It returns the callback's answer (the last redirect is not followed), its
// body, and the callback URL the provider sent the browser to.
func signIn(t *testing.T, b *http.Client, central, query, user string) (*http.Response, string, string) {
	t.Helper()
	resp, err := b.Get(central + "/auth/login" + query)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("the provider's login page: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	var callback string
	b.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == "/auth/callback" && strings.HasPrefix(central, "http://"+r.URL.Host) {
			callback = r.URL.String()
		}
		if r.URL.Path == "/" && strings.HasPrefix(central, "http://"+r.URL.Host) {
			return http.ErrUseLastResponse // the console's page is not served by the API
		}
		return nil
	}
	defer func() { b.CheckRedirect = nil }()
	resp, err = b.PostForm(strings.TrimSuffix(resp.Request.URL.Scheme+"://"+resp.Request.URL.Host, "/")+"/login/username",
		url.Values{"username": {user}, "password": {"verysecure"}, "id": {id}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if callback == "" {
		t.Fatalf("the provider never sent the browser back to central: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	return resp, string(body), callback
}

// sessionsStored counts the console sessions in etcd.
func (e *env) sessionsStored() int {
	n := 0
	for k := range e.dump() {
		if strings.Contains(k, "/sessions/") {
			n++
		}
	}
	return n
}

// TestSignInWithARealProvider: a member signs in through a real OpenID
// provider on loopback (code flow, PKCE, state and nonce) and calls the API
// in the session with their role; the sign-in is in the activity log; an
// operator's email signs in as the operator; a stranger and an unverified
// email are refused without a session; a callback replayed, with an
// unknown state, or finished in another browser is refused without one.
func TestSignInWithARealProvider(t *testing.T) {
	e := newEnv(t, nil)
	issuer := startProvider(t, e.srv.URL+"/auth/callback", true)
	o, err := identity.NewOIDC(context.Background(), identity.OIDCConfig{Issuer: issuer, ClientID: "fluxvm-console", ClientSecret: "console-secret",
		RedirectURL: e.srv.URL + "/auth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	e.api.opts.OIDC, e.api.opts.OIDCProviderName, e.api.opts.OperatorEmails = o, "Zitadel", []string{"ops@example.com"}
	e.api.publicOrigin = e.srv.URL
	acme, token := e.createTenant("acme", "")
	e.createTenant("beta", "")
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "alex@example.com", "role": "member"}`}, 201)
	// On the team, but the provider has not verified the address: refused all the same.
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "unverified@example.com", "role": "owner"}`}, 201)

	var cfg sdk.AuthConfig
	e.must(req{method: "GET", path: "/auth/config"}, 200).decode(t, &cfg)
	if !cfg.SSO || cfg.ProviderName != "Zitadel" || cfg.LoginURL != "/auth/login" {
		t.Fatalf("/auth/config: %+v", cfg)
	}

	b := browser(t)
	resp, _, callback := signIn(t, b, e.srv.URL, "", "alex")
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/" {
		t.Fatalf("the callback answered %d (to %q)", resp.StatusCode, resp.Header.Get("Location"))
	}
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == identity.CookieName {
			session = c
		}
	}
	if session == nil || !session.HttpOnly || session.SameSite != http.SameSiteLaxMode || session.Secure || session.Path != "/" {
		t.Fatalf("the session cookie: %+v", session)
	}
	get := func(b *http.Client, path string) (int, string) {
		t.Helper()
		r, err := b.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		_ = r.Body.Close()
		return r.StatusCode, string(body)
	}
	if status, body := get(b, "/auth/session"); status != 200 || !strings.Contains(body, `"email":"alex@example.com"`) || !strings.Contains(body, `"role":"member"`) ||
		!strings.Contains(body, acme.ID) {
		t.Fatalf("/auth/session: %d %s", status, body)
	}
	if status, body := get(b, "/fleet/vms"); status != 200 {
		t.Fatalf("a member's GET /fleet/vms: %d %s", status, body)
	}
	if status, _ := get(b, "/fleet/tenants/me/keys"); status != 403 {
		t.Fatalf("a member reading the keys: %d, want 403", status)
	}
	signedIn := false
	for _, ev := range e.api.opts.Activity.Recent(0, acme.ID) {
		signedIn = signedIn || (ev.Action == "sign in" && ev.User == "alex@example.com")
	}
	if !signedIn {
		t.Fatal("the sign-in is not in the activity log")
	}
	before := e.sessionsStored()

	// The callback again: its state is used up.
	r, err := b.Get(callback)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusUnauthorized || e.sessionsStored() != before {
		t.Fatalf("a replayed callback: %d, %d sessions (were %d)", r.StatusCode, e.sessionsStored(), before)
	}
	// Bad input to the routes themselves.
	if status, _ := get(browser(t), "/auth/login?tenant=a/b"); status != http.StatusBadRequest {
		t.Fatalf("a tenant that is no name: %d", status)
	}
	if status, _ := get(browser(t), "/auth/callback?error=access_denied&state=x"); status != http.StatusUnauthorized {
		t.Fatalf("the provider's refusal: %d", status)
	}
	if status, _ := get(browser(t), "/auth/callback"); status != http.StatusUnauthorized {
		t.Fatalf("a callback with nothing: %d", status)
	}
	// An unknown state.
	if status, _ := get(browser(t), "/auth/callback?state=made-up&code=x"); status != http.StatusUnauthorized {
		t.Fatalf("an unknown state: %d", status)
	}
	// Started in one browser, finished in another: the binding cookie is missing.
	// Started and taken through the provider in one browser, the callback
	// handed to another: that browser lacks the binding cookie.
	other := browser(t)
	mallory := browser(t)
	resp, err = mallory.Get(e.srv.URL + "/auth/login")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	var stolen string
	mallory.CheckRedirect = func(r *http.Request, _ []*http.Request) error {
		if r.URL.Path == "/auth/callback" {
			stolen = r.URL.String()
			return http.ErrUseLastResponse
		}
		return nil
	}
	resp, err = mallory.PostForm(issuer+"/login/username", url.Values{"username": {"alex"}, "password": {"verysecure"}, "id": {id}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if stolen == "" {
		t.Fatal("no callback to steal")
	}
	before = e.sessionsStored()
	r, err = other.Get(stolen)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Body.Close()
	if r.StatusCode != http.StatusUnauthorized || e.sessionsStored() != before {
		t.Fatalf("a sign-in finished in another browser: %d, sessions %d (were %d)", r.StatusCode, e.sessionsStored(), before)
	}

	// The operator's email signs in as the operator.
	ops := browser(t)
	if resp, _, _ := signIn(t, ops, e.srv.URL, "", "ops"); resp.StatusCode != http.StatusFound {
		t.Fatalf("the operator's sign-in: %d", resp.StatusCode)
	}
	if status, _ := get(ops, "/fleet/tenants"); status != 200 {
		t.Fatalf("the operator's session on GET /fleet/tenants: %d", status)
	}

	// Nobody is created on the fly; an unverified email is no email.
	for _, user := range []string{"stranger", "unverified"} {
		before = e.sessionsStored()
		resp, body, _ := signIn(t, browser(t), e.srv.URL, "", user)
		want := map[string]int{"stranger": http.StatusForbidden, "unverified": http.StatusUnauthorized}[user]
		if resp.StatusCode != want || e.sessionsStored() != before {
			t.Fatalf("%s's sign-in: %d, sessions %d (were %d)", user, resp.StatusCode, e.sessionsStored(), before)
		}
		// A browser is shown a page; a stranger's says whom to ask.
		if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") || !strings.Contains(body, "<h1>Not signed in</h1>") ||
			user == "stranger" && !strings.Contains(body, "ask an owner or admin of your team to add you") {
			t.Fatalf("%s's page: %s %s", user, resp.Header.Get("Content-Type"), body)
		}
	}
	// A team asked for that the person is not on.
	before = e.sessionsStored()
	if resp, _, _ := signIn(t, browser(t), e.srv.URL, "?tenant=beta", "alex"); resp.StatusCode != http.StatusForbidden || e.sessionsStored() != before {
		t.Fatalf("alex into beta: %d", resp.StatusCode)
	}
}

// TestSignInWithTheEmailAtUserInfo: a provider that keeps the email out of
// the ID token (zitadel's example as it ships) serves it at its UserInfo
// endpoint; central reads it there, for the ID token's subject, and still
// refuses an unverified address.
func TestSignInWithTheEmailAtUserInfo(t *testing.T) {
	e := newEnv(t, nil)
	issuer := startProvider(t, e.srv.URL+"/auth/callback", false)
	o, err := identity.NewOIDC(context.Background(), identity.OIDCConfig{Issuer: issuer, ClientID: "fluxvm-console", ClientSecret: "console-secret",
		RedirectURL: e.srv.URL + "/auth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	e.api.opts.OIDC = o
	e.api.publicOrigin = e.srv.URL
	_, token := e.createTenant("acme", "")
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "alex@example.com", "role": "viewer"}`}, 201)
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "unverified@example.com", "role": "owner"}`}, 201)

	b := browser(t)
	resp, body, _ := signIn(t, b, e.srv.URL, "", "alex")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("alex's sign-in through UserInfo: %d %s", resp.StatusCode, body)
	}
	r, err := b.Get(e.srv.URL + "/auth/session")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if r.StatusCode != 200 || !strings.Contains(string(got), `"email":"alex@example.com"`) || !strings.Contains(string(got), `"role":"viewer"`) {
		t.Fatalf("/auth/session: %d %s", r.StatusCode, got)
	}
	before := e.sessionsStored()
	if resp, _, _ := signIn(t, browser(t), e.srv.URL, "", "unverified"); resp.StatusCode != http.StatusUnauthorized || e.sessionsStored() != before {
		t.Fatalf("an unverified email at UserInfo: %d, sessions %d (were %d)", resp.StatusCode, e.sessionsStored(), before)
	}
}
