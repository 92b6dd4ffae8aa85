package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/signup"
	"github.com/fluxvm/fluxvm/internal/testservers"
	"github.com/fluxvm/fluxvm/sdk"
)

var suLinkRE = regexp.MustCompile(`https://cloud\.example\.com/signup/confirm\?token=(fsu_[0-9a-f]{64})`)

// suMailedToken reads the mail to addr from mailpit's API and returns its
// link's token.
func suMailedToken(t *testing.T, mp *testservers.Mailpit, addr string) string {
	t.Helper()
	get := func(path string, v any) {
		t.Helper()
		resp, err := http.Get(mp.API + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatal(err)
		}
	}
	var list struct {
		Messages []struct {
			ID string
			To []struct{ Address string }
		} `json:"messages"`
	}
	get("/api/v1/search?query="+strings.ReplaceAll("to:"+addr, "@", "%40"), &list)
	if len(list.Messages) != 1 {
		t.Fatalf("%d mails to %s in mailpit, want 1", len(list.Messages), addr)
	}
	var msg struct{ Text, Subject string }
	get("/api/v1/message/"+list.Messages[0].ID, &msg)
	m := suLinkRE.FindStringSubmatch(msg.Text)
	if m == nil {
		t.Fatalf("no link in the mail to %s: %q", addr, msg.Text)
	}
	return m[1]
}

// TestSignupThroughCentral: with sign-up open, a sign-up's mail arrives in
// mailpit, its link opens a page that uses nothing up, confirming creates
// the tenant once (its token works), a reused or expired link is refused,
// and a hundred sign-ups in a second from one address are limited.
func TestSignupThroughCentral(t *testing.T) {
	mp := testservers.StartMailpit(t)
	host, port, _ := strings.Cut(mp.SMTP, ":")
	p, _ := strconv.Atoi(port)
	clock := newPxClock(time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC))
	e := newEnv(t, func(o *Options) {
		o.Now = clock.now
		o.PublicURL = "https://cloud.example.com"
		o.Signup = SignupOptions{Enabled: true, SMTP: signup.SMTP{Host: host, Port: p, From: "signup@cloud.example.com"}}
	})
	var cfg sdk.SignupConfig
	e.must(req{method: "GET", path: "/signup/config"}, 200).decode(t, &cfg)
	if !cfg.Enabled || !cfg.RequireEmailVerification {
		t.Fatalf("config: %+v", cfg)
	}
	var acc sdk.SignupAccepted
	e.must(req{method: "POST", path: "/signup", body: `{"email": "dana@example.com", "tenant": "dana-co"}`}, 202).decode(t, &acc)
	if !acc.ExpiresAt.Equal(clock.now().Add(signup.DefaultLinkTTL)) {
		t.Errorf("expires_at %v", acc.ExpiresAt)
	}
	token := suMailedToken(t, mp, "dana@example.com")
	e.must(req{method: "GET", path: "/fleet/tenants/dana-co", token: testFleetToken}, 404)
	// The page the link opens changes nothing, however often it is opened.
	for range 2 {
		r := e.must(req{method: "GET", path: "/signup/confirm?token=" + token}, 200)
		if !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") || !strings.Contains(string(r.body), token) {
			t.Fatalf("page: %s %s", r.header.Get("Content-Type"), r.body)
		}
	}
	e.must(req{method: "GET", path: "/fleet/tenants/dana-co", token: testFleetToken}, 404)
	var made sdk.TenantWithToken
	e.must(req{method: "POST", path: "/signup/confirm", body: `{"token": "` + token + `"}`}, 201).decode(t, &made)
	if made.Tenant.Name != "dana-co" {
		t.Fatalf("made %+v", made)
	}
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: made.Token}, 200)
	e.must(req{method: "POST", path: "/signup/confirm", body: `{"token": "` + token + `"}`}, 404)

	// Expired: the clock passes the link's lifetime.
	e.must(req{method: "POST", path: "/signup", body: `{"email": "late@example.com", "tenant": "late-co"}`}, 202)
	late := suMailedToken(t, mp, "late@example.com")
	clock.advance(signup.DefaultLinkTTL + time.Second)
	e.must(req{method: "POST", path: "/signup/confirm", body: `{"token": "` + late + `"}`}, 404)
	e.must(req{method: "GET", path: "/fleet/tenants/late-co", token: testFleetToken}, 404)

	// A name taken between sign-up and confirmation is 409.
	e.must(req{method: "POST", path: "/signup", body: `{"email": "twin@example.com", "tenant": "dana-co"}`}, 202)
	e.must(req{method: "POST", path: "/signup/confirm", body: `{"token": "` + suMailedToken(t, mp, "twin@example.com") + `"}`}, 409)

	// A link that is no token, and a confirmation that is no JSON object.
	e.must(req{method: "GET", path: "/signup/confirm?token=fsu_short"}, 404)
	e.must(req{method: "POST", path: "/signup/confirm", body: `{"token": "fsu_` + strings.Repeat("0", 64) + `"}`}, 404)
	for _, bad := range []string{`{"token": 1}`, `not json`, `{"token": "x", "more": 1}`} {
		if r := e.call(req{method: "POST", path: "/signup/confirm", body: bad}); r.status != 400 {
			t.Errorf("confirm with %s: %d, want 400", bad, r.status)
		}
	}
	// Bad bodies.
	for _, bad := range []string{`{"email": "x", "tenant": "a"}`, `{"email": "a@example.com", "tenant": "me"}`} {
		e.must(req{method: "POST", path: "/signup", body: bad}, 400)
	}
	if r := e.call(req{method: "POST", path: "/signup", body: `{"email": "a@example.com", "tenant": "a", "admin": true}`}); r.status != 400 {
		t.Errorf("unknown field: %d", r.status)
	}
	if r := e.call(req{method: "POST", path: "/signup", body: `{"email": "a@example.com",` + strings.Repeat(" ", 5000) + `"tenant": "a"}`}); r.status != 413 {
		t.Errorf("a 5 KB body: %d", r.status)
	}
	if r := e.call(req{method: "POST", path: "/signup", body: `{"email": "a@example.com",` + strings.Repeat(" ", 2<<20) + `"tenant": "a"}`}); r.status != 413 {
		t.Errorf("a 2 MB body: %d", r.status)
	}

	// A hundred sign-ups in one second from this test's address: the first
	// few are taken (the bucket is full again after a quiet minute), the
	// rest are 429 with Retry-After.
	clock.advance(time.Minute)
	codes := map[int]int{}
	for i := range 100 {
		r := e.call(req{method: "POST", path: "/signup", body: `{"email": "flood` + strconv.Itoa(i) + `@example.com", "tenant": "flood-` + strconv.Itoa(i) + `"}`})
		codes[r.status]++
		if r.status == 429 && r.header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
		clock.advance(10 * time.Millisecond)
	}
	if codes[202] != signup.Burst || codes[429] != 100-signup.Burst {
		t.Errorf("answers %v, want %d taken and %d limited", codes, signup.Burst, 100-signup.Burst)
	}
}

func TestSignupIsClosedUnlessOpened(t *testing.T) {
	e := newEnv(t, nil)
	var cfg sdk.SignupConfig
	e.must(req{method: "GET", path: "/signup/config"}, 200).decode(t, &cfg)
	if cfg.Enabled {
		t.Fatalf("config: %+v", cfg)
	}
	e.must(req{method: "POST", path: "/signup", body: `{"email": "a@example.com", "tenant": "a"}`}, 404)
	e.must(req{method: "GET", path: "/signup/confirm?token=fsu_" + strings.Repeat("0", 64)}, 404)
	e.must(req{method: "POST", path: "/signup/confirm", body: `{"token": "fsu_` + strings.Repeat("0", 64) + `"}`}, 404)
}

// TestASignedUpPersonsFirstSSOSignInMakesThemTheOwner: with email
// confirmation off, a sign-up's tenant, its key and its webhook are made
// with the sign-up's token; the person's first sign-in through a real
// OpenID provider makes them the tenant's owner, and at that moment the
// sign-up's token and key stop working and the webhook is gone.
func TestASignedUpPersonsFirstSSOSignInMakesThemTheOwner(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.Signup = SignupOptions{Enabled: true} })
	issuer := startProvider(t, e.srv.URL+"/auth/callback", true)
	o, err := identity.NewOIDC(context.Background(), identity.OIDCConfig{Issuer: issuer, ClientID: "fluxvm-console", ClientSecret: "console-secret",
		RedirectURL: e.srv.URL + "/auth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	e.api.opts.OIDC, e.api.opts.OIDCProviderName = o, "Zitadel"
	e.api.publicOrigin = e.srv.URL
	p, err := e.store.GetPolicy(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.SignupRequireEmailVerification = false
	if _, err := e.store.PutPolicy(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	var made sdk.TenantWithToken
	e.must(req{method: "POST", path: "/signup", body: `{"email": "stranger@example.com", "tenant": "strangers"}`}, 201).decode(t, &made)
	var key sdk.APIKeyWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/me/keys", token: made.Token, body: `{"name": "ci"}`}, 201).decode(t, &key)
	e.must(req{method: "POST", path: "/fleet/webhooks", token: made.Token, body: `{"url": "https://hooks.example.com/x"}`}, 201)

	resp, _, _ := signIn(t, browser(t), e.srv.URL, "", "stranger")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("the sign-up's person was not signed in: %d", resp.StatusCode)
	}
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: made.Token}, 401)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: key.Token}, 401)
	var members sdk.MemberList
	e.must(req{method: "GET", path: "/fleet/tenants/" + made.Tenant.ID + "/members", token: testFleetToken}, 200).decode(t, &members)
	if len(members.Members) != 1 || members.Members[0].Email != "stranger@example.com" || members.Members[0].Role != sdk.RoleOwner {
		t.Fatalf("members: %+v", members)
	}
	if ws, _ := e.store.ListWebhooks(context.Background(), made.Tenant.ID); len(ws) != 0 {
		t.Fatalf("webhooks left: %+v", ws)
	}
}

// TestTheSDKSignsUpAndConfirms: the SDK's sign-up calls against central,
// with the link read from mailpit.
func TestTheSDKSignsUpAndConfirms(t *testing.T) {
	mp := testservers.StartMailpit(t)
	host, port, _ := strings.Cut(mp.SMTP, ":")
	p, _ := strconv.Atoi(port)
	e := newEnv(t, func(o *Options) {
		o.PublicURL = "https://cloud.example.com"
		o.Signup = SignupOptions{Enabled: true, SMTP: signup.SMTP{Host: host, Port: p, From: "FluxVM <signup@cloud.example.com>"}}
	})
	fc, err := sdk.NewFleetClient(e.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if cfg, err := fc.SignupConfig(ctx); err != nil || !cfg.Enabled {
		t.Fatalf("config: %+v %v", cfg, err)
	}
	acc, made, err := fc.Signup(ctx, sdk.SignupRequest{Email: "sdk@example.com", Tenant: "sdk-co"})
	if err != nil || acc == nil || made != nil || acc.Status != "mail_sent" {
		t.Fatalf("sign-up: %+v %+v %v", acc, made, err)
	}
	token := suMailedToken(t, mp, "sdk@example.com")
	made, err = fc.ConfirmSignup(ctx, token)
	if err != nil || made.Tenant.Name != "sdk-co" || made.Token == "" {
		t.Fatalf("confirm: %+v %v", made, err)
	}
	var apiErr *sdk.APIError
	if _, err := fc.ConfirmSignup(ctx, token); !errors.As(err, &apiErr) || apiErr.Status != 404 {
		t.Fatalf("a second confirmation: %v, want 404", err)
	}
	p2, _ := e.store.GetPolicy(ctx)
	p2.SignupRequireEmailVerification = false
	if _, err := e.store.PutPolicy(ctx, p2); err != nil {
		t.Fatal(err)
	}
	acc, made, err = fc.Signup(ctx, sdk.SignupRequest{Email: "quick@example.com", Tenant: "quick-co"})
	if err != nil || acc != nil || made == nil || made.Tenant.Name != "quick-co" || made.Token == "" {
		t.Fatalf("sign-up without confirmation: %+v %+v %v", acc, made, err)
	}
}
