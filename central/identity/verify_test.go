package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// testIssuer is a provider made of a key and a JWKS served on loopback: it
// mints the forged ID tokens the verifier must refuse. (The sign-in
// itself is tested against a real provider in central/api.)
type testIssuer struct {
	key  *rsa.PrivateKey
	jwks *httptest.Server
	url  string
	mu   sync.Mutex
	now  time.Time
}

const testClient = "fluxvm-console"

func newTestIssuer(t *testing.T) *testIssuer {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ti := &testIssuer{key: key, now: time.Now().UTC()}
	ti.jwks = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
	}))
	t.Cleanup(ti.jwks.Close)
	ti.url = "https://idp.example.com"
	return ti
}

func (ti *testIssuer) clock() time.Time { ti.mu.Lock(); defer ti.mu.Unlock(); return ti.now }
func (ti *testIssuer) tick(d time.Duration) {
	ti.mu.Lock()
	ti.now = ti.now.Add(d)
	ti.mu.Unlock()
}

// claims are a valid token's; each case changes one thing.
func (ti *testIssuer) claims() map[string]any {
	now := ti.clock()
	return map[string]any{"iss": ti.url, "sub": "u1", "aud": testClient, "exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(),
		"nonce": "n-1", "email": "alex@example.com", "email_verified": true}
}

func (ti *testIssuer) sign(t *testing.T, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(claims)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTheVerifierRefusesEveryForgery: a valid token passes; each forgery
// is refused: alg none, HS256 keyed with the provider's public key, an
// unknown key id (whose refetches are rate-limited), another issuer, an
// audience without the client, several audiences whose azp is not the
// client, a token expired beyond the skew, another nonce, and an email
// that is unverified, not a boolean true, or missing.
func TestTheVerifierRefusesEveryForgery(t *testing.T) {
	ti := newTestIssuer(t)
	v := NewVerifier(ti.url, testClient, ti.jwks.URL, ti.jwks.Client(), ti.clock)
	ctx := context.Background()
	valid := func(change func(c map[string]any)) string {
		c := ti.claims()
		if change != nil {
			change(c)
		}
		return ti.sign(t, jose.RS256, ti.key, "k1", c)
	}
	if c, err := v.Verify(ctx, valid(nil), "n-1"); err != nil || c.Email != "alex@example.com" {
		t.Fatalf("a valid token: %+v %v", c, err)
	}
	if _, err := v.Verify(ctx, valid(func(c map[string]any) { c["aud"] = []string{testClient, "other"}; c["azp"] = testClient }), "n-1"); err != nil {
		t.Fatalf("several audiences, azp the client: %v", err)
	}
	if _, err := v.Verify(ctx, valid(func(c map[string]any) { c["exp"] = ti.clock().Add(-30 * time.Second).Unix() }), "n-1"); err != nil {
		t.Fatalf("expired 30 s ago, within the skew: %v", err)
	}

	enc := base64.RawURLEncoding.EncodeToString
	payload, _ := json.Marshal(ti.claims())
	none := enc([]byte(`{"alg":"none","kid":"k1","typ":"JWT"}`)) + "." + enc(payload) + "."
	pub, err := x509.MarshalPKIXPublicKey(&ti.key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, token, nonce string }{
		{"alg none", none, "n-1"},
		{"HS256 keyed with the provider's public key", ti.sign(t, jose.HS256, pub, "k1", ti.claims()), "n-1"},
		{"another issuer", valid(func(c map[string]any) { c["iss"] = "https://evil.example.com" }), "n-1"},
		{"an audience without the client", valid(func(c map[string]any) { c["aud"] = "someone-else" }), "n-1"},
		{"several audiences, azp another", valid(func(c map[string]any) { c["aud"] = []string{testClient, "other"}; c["azp"] = "other" }), "n-1"},
		{"several audiences, no azp", valid(func(c map[string]any) { c["aud"] = []string{testClient, "other"} }), "n-1"},
		{"expired beyond the skew", valid(func(c map[string]any) { c["exp"] = ti.clock().Add(-61 * time.Second).Unix() }), "n-1"},
		{"another nonce", valid(nil), "n-2"},
		{"no nonce", valid(func(c map[string]any) { delete(c, "nonce") }), "n-1"},
		{"email_verified false", valid(func(c map[string]any) { c["email_verified"] = false }), "n-1"},
		{"email_verified absent", valid(func(c map[string]any) { delete(c, "email_verified") }), "n-1"},
		{"email_verified a string", valid(func(c map[string]any) { c["email_verified"] = "true" }), "n-1"},
		{"no email", valid(func(c map[string]any) { delete(c, "email") }), "n-1"},
		{"signed by another key under the provider's kid", ti.sign(t, jose.RS256, other, "k1", ti.claims()), "n-1"},
	} {
		if _, err := v.Verify(ctx, c.token, c.nonce); !errors.Is(err, ErrSignIn) {
			t.Errorf("%s: %v, want ErrSignIn", c.name, err)
		}
	}

	// An unknown key id fetches the keys again at most every 30 s.
	fetches := func() int { v.keys.mu.Lock(); defer v.keys.mu.Unlock(); return v.keys.fetches }
	ti.tick(KeyRefetchEvery)
	before := fetches()
	for range 5 {
		if _, err := v.Verify(ctx, ti.sign(t, jose.RS256, other, "k-unknown", ti.claims()), "n-1"); err == nil || !strings.Contains(err.Error(), "k-unknown") {
			t.Fatalf("an unknown key id: %v", err)
		}
	}
	if n := fetches() - before; n != 1 {
		t.Fatalf("five tokens of an unknown key fetched the keys %d times, want 1", n)
	}
	ti.tick(KeyRefetchEvery)
	if _, err := v.Verify(ctx, ti.sign(t, jose.RS256, other, "k-unknown", ti.claims()), "n-1"); err == nil {
		t.Fatal("an unknown key id verified")
	}
	if n := fetches() - before; n != 2 {
		t.Fatalf("after 30 s the keys were fetched %d times in all, want 2", n)
	}
	// A known key is served from the cache for an hour, then fetched again.
	before = fetches()
	ti.tick(KeysTTL - 2*KeyRefetchEvery)
	if _, err := v.Verify(ctx, valid(nil), "n-1"); err != nil || fetches() != before {
		t.Fatalf("within the hour: %v, %d fetches", err, fetches()-before)
	}
	ti.tick(2 * KeyRefetchEvery)
	if _, err := v.Verify(ctx, valid(nil), "n-1"); err != nil || fetches() != before+1 {
		t.Fatalf("after the hour: %v, %d fetches", err, fetches()-before)
	}
}

// TestAStateWorksOnceInItsBrowserForTenMinutes: Finish refuses, before it
// asks the provider anything, a state that is unknown, already used, older
// than ten minutes or shown with another browser's binding; a state is
// used up by any attempt.
func TestAStateWorksOnceInItsBrowserForTenMinutes(t *testing.T) {
	ti := newTestIssuer(t)
	o := &OIDC{cfg: OIDCConfig{Now: ti.clock}, pending: map[string]pending{}}
	ctx := context.Background()
	stateOf := func(authURL string) string {
		i := strings.Index(authURL, "state=")
		if i < 0 {
			t.Fatalf("no state in %s", authURL)
		}
		s := authURL[i+len("state="):]
		if j := strings.IndexByte(s, '&'); j >= 0 {
			s = s[:j]
		}
		return s
	}
	u, binding, err := o.Begin("acme")
	if err != nil || !strings.Contains(u, "code_challenge_method=S256") || !strings.Contains(u, "nonce=") {
		t.Fatalf("begin: %s %v", u, err)
	}
	state := stateOf(u)
	if _, _, err := o.Finish(ctx, state, "code", "another browser's"); !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "another browser") {
		t.Fatalf("another browser: %v", err)
	}
	if _, _, err := o.Finish(ctx, state, "code", binding); !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "unknown or used") {
		t.Fatalf("the same state again: %v", err)
	}
	if _, _, err := o.Finish(ctx, "made-up", "code", binding); !errors.Is(err, ErrSignIn) {
		t.Fatalf("an unknown state: %v", err)
	}
	u, binding, err = o.Begin("")
	if err != nil {
		t.Fatal(err)
	}
	ti.tick(PendingTTL + time.Second)
	if _, _, err := o.Finish(ctx, stateOf(u), "code", binding); !errors.Is(err, ErrSignIn) || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("an expired state: %v", err)
	}
}
