package signup_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/signup"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/internal/testservers"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	st  *store.Store
	svc *signup.Service
	mp  *testservers.Mailpit
	clk *clock
}

// newEnv opens sign-up with mail going to a real mailpit.
func newEnv(t *testing.T, enabled bool) *env {
	t.Helper()
	e := &env{st: storetest.Open(t), clk: &clock{t: time.Date(2026, 12, 3, 18, 0, 0, 0, time.UTC)}}
	smtpCfg := signup.SMTP{From: "FluxVM <signup@cloud.example.com>"}
	if enabled {
		e.mp = testservers.StartMailpit(t)
		host, port, _ := strings.Cut(e.mp.SMTP, ":")
		smtpCfg.Host = host
		smtpCfg.Port, _ = strconv.Atoi(port)
	}
	e.svc = signup.New(signup.Options{Store: e.st, Enabled: enabled, PublicURL: "https://cloud.example.com/", SMTP: smtpCfg,
		Now: e.clk.now, CreateTenant: func(ctx context.Context, name, email string) (*sdk.TenantWithToken, error) {
			tok := store.NewToken("fvt_")
			tn := &store.Tenant{Tenant: sdk.Tenant{Name: name, CreatedAt: e.clk.now()}, TokenSHA256: store.HashToken(tok)}
			if err := e.st.CreateTenant(ctx, tn); err != nil {
				return nil, err
			}
			return &sdk.TenantWithToken{Tenant: tn.Tenant, Token: tok}, nil
		}})
	return e
}

var linkRE = regexp.MustCompile(`https://cloud\.example\.com/signup/confirm\?token=(fsu_[0-9a-f]{64})`)

// linkFor reads the newest mail to addr from mailpit's API and returns
// the token of its link.
func (e *env) linkFor(t *testing.T, addr string) string {
	t.Helper()
	var list struct {
		Messages []struct {
			ID string `json:"ID"`
			To []struct {
				Address string `json:"Address"`
			} `json:"To"`
			Subject string `json:"Subject"`
		} `json:"messages"`
	}
	getJSON(t, e.mp.API+"/api/v1/messages", &list)
	for _, m := range list.Messages {
		if len(m.To) == 1 && m.To[0].Address == addr {
			var msg struct {
				Text string `json:"Text"`
			}
			getJSON(t, e.mp.API+"/api/v1/message/"+url.PathEscape(m.ID), &msg)
			got := linkRE.FindStringSubmatch(msg.Text)
			if got == nil {
				t.Fatalf("the mail to %s has no link:\n%s", addr, msg.Text)
			}
			return got[1]
		}
	}
	t.Fatalf("no mail to %s in mailpit (%d messages)", addr, len(list.Messages))
	return ""
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

func TestSignupMailArrivesAndItsLinkCreatesTheTenantOnce(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	res, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "Alex@Example.com", Tenant: "alex-co"})
	if err != nil || res.Accepted == nil || res.Tenant != nil {
		t.Fatalf("sign-up: %+v %v", res, err)
	}
	if !res.Accepted.ExpiresAt.Equal(e.clk.now().Add(signup.DefaultLinkTTL)) {
		t.Errorf("expires %v", res.Accepted.ExpiresAt)
	}
	if _, err := e.st.TenantByName(ctx, "alex-co"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the tenant exists before the link was followed: %v", err)
	}
	token := e.linkFor(t, "alex@example.com")
	// Only the token's hash is stored.
	kvs, err := e.st.Client().Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs.Kvs {
		if strings.Contains(string(kv.Key)+string(kv.Value), token) {
			t.Fatalf("the token is stored in clear under %s", kv.Key)
		}
	}
	got, err := e.svc.Confirm(ctx, token)
	if err != nil || got.Tenant.Name != "alex-co" || !strings.HasPrefix(got.Token, "fvt_") {
		t.Fatalf("confirm: %+v %v", got, err)
	}
	if _, err := e.st.TenantByName(ctx, "alex-co"); err != nil {
		t.Fatalf("no tenant after the link: %v", err)
	}
	if _, err := e.svc.Confirm(ctx, token); !errors.Is(err, signup.ErrLink) {
		t.Errorf("second use: %v, want ErrLink", err)
	}
}

func TestAnExpiredLinkIsRefused(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	if _, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "late@example.com", Tenant: "late"}); err != nil {
		t.Fatal(err)
	}
	token := e.linkFor(t, "late@example.com")
	e.clk.add(signup.DefaultLinkTTL)
	if _, err := e.svc.Confirm(ctx, token); !errors.Is(err, signup.ErrLink) {
		t.Fatalf("expired link: %v, want ErrLink", err)
	}
	if _, err := e.st.TenantByName(ctx, "late"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("an expired link made the tenant: %v", err)
	}
}

func TestUnknownAndMalformedLinksAreRefused(t *testing.T) {
	e := newEnv(t, true)
	for _, tok := range []string{"", "fsu_", "fsu_" + strings.Repeat("0", 64), "fvt_" + strings.Repeat("a", 64), strings.Repeat("x", 5000)} {
		if _, err := e.svc.Confirm(context.Background(), tok); !errors.Is(err, signup.ErrLink) {
			t.Errorf("Confirm(%.20q) = %v, want ErrLink", tok, err)
		}
	}
}

func TestAHundredSignupsInASecondFromOneAddressAreLimited(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	var ok, limited int
	for i := range 100 {
		// A tenth of a second of the injected clock over the loop.
		e.clk.add(10 * time.Millisecond)
		_, err := e.svc.Signup(ctx, "198.51.100.7", sdk.SignupRequest{Email: "flood" + strconv.Itoa(i) + "@example.com", Tenant: "flood-" + strconv.Itoa(i)})
		switch {
		case err == nil:
			ok++
		case errors.Is(err, signup.ErrLimited):
			limited++
		default:
			t.Fatalf("sign-up %d: %v", i, err)
		}
	}
	if ok != signup.Burst || limited != 100-signup.Burst {
		t.Errorf("%d taken, %d limited; want %d and %d", ok, limited, signup.Burst, 100-signup.Burst)
	}
	// Another address is not held back by the first.
	if _, err := e.svc.Signup(ctx, "198.51.100.8", sdk.SignupRequest{Email: "other@example.com", Tenant: "other"}); err != nil {
		t.Errorf("another address: %v", err)
	}
	// And the first gets one again after Refill.
	e.clk.add(signup.Refill)
	if _, err := e.svc.Signup(ctx, "198.51.100.7", sdk.SignupRequest{Email: "later@example.com", Tenant: "later"}); err != nil {
		t.Errorf("after the refill: %v", err)
	}
}

func TestSignupIsClosedByDefault(t *testing.T) {
	e := newEnv(t, false)
	ctx := context.Background()
	if c, err := e.svc.Config(ctx); err != nil || c.Enabled {
		t.Errorf("config = %+v %v", c, err)
	}
	if _, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "a@example.com", Tenant: "a"}); !errors.Is(err, signup.ErrClosed) {
		t.Errorf("sign-up: %v, want ErrClosed", err)
	}
	if _, err := e.svc.Confirm(ctx, "fsu_"+strings.Repeat("0", 64)); !errors.Is(err, signup.ErrClosed) {
		t.Errorf("confirm: %v, want ErrClosed", err)
	}
}

func TestSignupRefusesBadAddressesAndNames(t *testing.T) {
	e := newEnv(t, true)
	for i, req := range []sdk.SignupRequest{
		{Email: "", Tenant: "a"},
		{Email: "no at sign", Tenant: "a"},
		{Email: "a@example.com\r\nBcc: victim@example.com", Tenant: "a"},
		{Email: strings.Repeat("a", 250) + "@example.com", Tenant: "a"},
		{Email: "a@example.com", Tenant: ""},
		{Email: "a@example.com", Tenant: "me"},
		{Email: "a@example.com", Tenant: "a/b"},
		{Email: "a@example.com", Tenant: strings.Repeat("a", 65)},
	} {
		// Each from its own address, so the limiter is not what answers.
		if _, err := e.svc.Signup(context.Background(), "192.0.2."+strconv.Itoa(i), req); !errors.Is(err, signup.ErrInvalid) {
			t.Errorf("Signup(%q, %q) = %v, want ErrInvalid", req.Email, req.Tenant, err)
		}
	}
}

func TestWithoutVerificationTheTenantIsMadeAtOnce(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	p, _ := e.st.GetPolicy(ctx)
	p.SignupRequireEmailVerification = false
	if _, err := e.st.PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "quick@example.com", Tenant: "quick"})
	if err != nil || res.Tenant == nil || res.Tenant.Tenant.Name != "quick" {
		t.Fatalf("sign-up: %+v %v", res, err)
	}
	if c, _ := e.svc.Config(ctx); !c.Enabled || c.RequireEmailVerification {
		t.Errorf("config = %+v", c)
	}
}

func TestDecodeRequestTakesOnlyTheKnownFields(t *testing.T) {
	if r, err := signup.DecodeRequest([]byte(`{"email":"a@example.com","tenant":"a"}`)); err != nil || r.Tenant != "a" {
		t.Errorf("good body: %+v %v", r, err)
	}
	for _, b := range []string{``, `{`, `[]`, `{"email":1}`, `{"admin":true}`, `{} {}`, `{"email":"` + strings.Repeat("a", signup.MaxBodyBytes) + `"}`} {
		if _, err := signup.DecodeRequest([]byte(b)); !errors.Is(err, signup.ErrInvalid) {
			t.Errorf("DecodeRequest(%.30q) = %v, want ErrInvalid", b, err)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{`{"email":"a@example.com","tenant":"a"}`, `{"email":"\u0000"}`, `{"tenant":"` + strings.Repeat("x", 100) + `"}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := signup.DecodeRequest(body)
		if err == nil && len(body) > signup.MaxBodyBytes {
			t.Fatalf("took a body of %d bytes: %+v", len(body), r)
		}
	})
}

// claimFixture gives tenant a named API key and a webhook, what the first
// SSO sign-in must remove when the address was never confirmed.
func claimFixture(t *testing.T, st *store.Store, tenant string) {
	t.Helper()
	ctx := context.Background()
	if err := st.CreateKey(ctx, &store.APIKey{APIKey: sdk.APIKey{Name: "ci", CreatedAt: time.Now()}, Tenant: tenant,
		TokenSHA256: store.HashToken("fvk_" + tenant + "-key")}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateWebhook(ctx, &store.Webhook{Webhook: sdk.Webhook{ID: "whk_0123456789ab", URL: "https://hooks.example.com/x", Tenant: tenant,
		CreatedAt: time.Now()}, Secret: "whsec_x"}); err != nil {
		t.Fatal(err)
	}
}

func TestFirstSignInOfAnUnconfirmedSignupRotatesTheTokenAndRemovesKeysAndWebhooks(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	p, _ := e.st.GetPolicy(ctx)
	p.SignupRequireEmailVerification = false
	if _, err := e.st.PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "Sam@Example.com", Tenant: "sams"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Tenant.Tenant.ID
	claimFixture(t, e.st, id)
	if got, err := e.svc.ClaimOnSignIn(ctx, "someone-else@example.com"); err != nil || len(got) != 0 {
		t.Fatalf("another person claimed %v %v", got, err)
	}
	got, err := e.svc.ClaimOnSignIn(ctx, "SAM@example.com")
	if err != nil || len(got) != 1 || got[0] != id {
		t.Fatalf("claim: %v %v", got, err)
	}
	if _, err := e.st.TenantByToken(ctx, store.HashToken(res.Tenant.Token)); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the sign-up's token still works: %v", err)
	}
	if ks, _ := e.st.ListKeys(ctx, id); len(ks) != 0 {
		t.Errorf("keys left: %v", ks)
	}
	if ws, _ := e.st.ListWebhooks(ctx, id); len(ws) != 0 {
		t.Errorf("webhooks left: %v", ws)
	}
	team, _ := e.st.ListTeam(ctx, id)
	if len(team) != 1 || team[0].Email != "sam@example.com" || team[0].Role != sdk.RoleOwner {
		t.Errorf("team = %+v, want sam as the owner", team)
	}
	if again, err := e.svc.ClaimOnSignIn(ctx, "sam@example.com"); err != nil || len(again) != 0 {
		t.Errorf("a second sign-in claimed again: %v %v", again, err)
	}
}

func TestFirstSignInOfAConfirmedSignupKeepsTokenKeysAndWebhooks(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	if _, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "kim@example.com", Tenant: "kims"}); err != nil {
		t.Fatal(err)
	}
	made, err := e.svc.Confirm(ctx, e.linkFor(t, "kim@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	claimFixture(t, e.st, made.Tenant.ID)
	if got, err := e.svc.ClaimOnSignIn(ctx, "kim@example.com"); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	if _, err := e.st.TenantByToken(ctx, store.HashToken(made.Token)); err != nil {
		t.Errorf("the confirmed sign-up's token stopped working: %v", err)
	}
	if ks, _ := e.st.ListKeys(ctx, made.Tenant.ID); len(ks) != 1 {
		t.Errorf("keys = %v, want the one kept", ks)
	}
	if ws, _ := e.st.ListWebhooks(ctx, made.Tenant.ID); len(ws) != 1 {
		t.Errorf("webhooks = %v, want the one kept", ws)
	}
}

func TestATenantWithATeamIsNotClaimed(t *testing.T) {
	e := newEnv(t, true)
	ctx := context.Background()
	p, _ := e.st.GetPolicy(ctx)
	p.SignupRequireEmailVerification = false
	if _, err := e.st.PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Signup(ctx, "192.0.2.1", sdk.SignupRequest{Email: "lee@example.com", Tenant: "lees"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.AddTeamMember(ctx, &store.TeamMember{Member: sdk.Member{Email: "boss@example.com", Role: sdk.RoleOwner, AddedAt: time.Now()},
		Tenant: res.Tenant.Tenant.ID}); err != nil {
		t.Fatal(err)
	}
	if got, err := e.svc.ClaimOnSignIn(ctx, "lee@example.com"); err != nil || len(got) != 0 {
		t.Fatalf("claimed %v %v", got, err)
	}
	if _, err := e.st.TenantByToken(ctx, store.HashToken(res.Tenant.Token)); err != nil {
		t.Errorf("the token was rotated though nothing was claimed: %v", err)
	}
}
