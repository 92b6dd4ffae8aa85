package identity

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"
)

// The sign-in with an OpenID Connect provider: the authorization code flow
// with PKCE (S256), a state bound to the browser, a nonce, and an ID token
// verified here, with its keys fetched by this package (cached an hour,
// fetched again for an unknown key at most every KeyRefetchEvery).

const (
	// PendingTTL is how long a sign-in may take at the provider.
	PendingTTL = 10 * time.Minute
	// KeysTTL is how long the provider's keys are trusted before a refetch.
	KeysTTL = time.Hour
	// KeyRefetchEvery bounds the refetches an unknown key id causes.
	KeyRefetchEvery = 30 * time.Second
	// ClockSkew is how long after its exp an ID token is still taken.
	ClockSkew = 60 * time.Second
	// MaxPending bounds the sign-ins under way, so that a flood of
	// /auth/login cannot fill central's memory.
	MaxPending = 10000
	// BindingCookie holds the browser's half of a sign-in's state.
	BindingCookie = "fluxvm_signin"
)

// SigningAlgs are the only algorithms an ID token may be signed with: RSA
// and ECDSA, never "none" or HMAC.
var SigningAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.PS256, oidc.PS384, oidc.PS512, oidc.ES256, oidc.ES384}

var joseAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512, jose.ES256, jose.ES384}

// ErrSignIn is a sign-in that failed: a state unknown, used or from
// another browser, the provider's refusal, or an ID token that does not
// verify. The wrapped text says which, for the log; people are told less.
var ErrSignIn = errors.New("sign-in failed")

// OIDCConfig configures the sign-in.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL; discovery is read from
	// Issuer/.well-known/openid-configuration.
	Issuer string
	// ClientID and ClientSecret are central's registration at the
	// provider; without a secret central is a public client (PKCE either way).
	ClientID, ClientSecret string
	// RedirectURL is central's public URL and /auth/callback.
	RedirectURL string
	// HTTPClient talks to the provider (http.DefaultClient when nil).
	HTTPClient *http.Client
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Claims is what central takes from a verified ID token.
type Claims struct {
	Email string
}

// idClaims is a verified ID token's subject and email claims, before the
// email is required.
type idClaims struct {
	Subject, Email string
	EmailVerified  any
}

// pending is a sign-in under way, by its state.
type pending struct {
	nonce, verifier, tenant string
	// binding is the SHA-256 of the browser's cookie value.
	binding string
	expires time.Time
}

// OIDC signs people in with one provider. It is safe for concurrent use.
type OIDC struct {
	cfg      OIDCConfig
	oauth    oauth2.Config
	provider *oidc.Provider
	verifier *Verifier
	mu       sync.Mutex
	pending  map[string]pending
}

// NewOIDC reads the provider's discovery document and makes the sign-in.
func NewOIDC(ctx context.Context, cfg OIDCConfig) (*OIDC, error) {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = http.DefaultClient
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, cfg.HTTPClient), cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("read the identity provider's discovery document: %w", err)
	}
	var d struct {
		JWKS string `json:"jwks_uri"`
	}
	if err := p.Claims(&d); err != nil || d.JWKS == "" {
		return nil, fmt.Errorf("the identity provider's discovery document names no jwks_uri")
	}
	o := &OIDC{cfg: cfg, provider: p, pending: map[string]pending{},
		oauth: oauth2.Config{ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, Endpoint: p.Endpoint(), RedirectURL: cfg.RedirectURL,
			Scopes: []string{oidc.ScopeOpenID, "email", "profile"}},
		verifier: NewVerifier(cfg.Issuer, cfg.ClientID, d.JWKS, cfg.HTTPClient, cfg.Now)}
	return o, nil
}

// Begin starts a sign-in for tenant ("" lets the email decide): the URL to
// send the browser to, and the value of the browser's binding cookie, which
// Finish must be shown again. Errors: too many sign-ins under way.
func (o *OIDC) Begin(tenant string) (authURL, binding string, err error) {
	state, nonce, verifier := randomString(), randomString(), oauth2.GenerateVerifier()
	binding = randomString()
	now := o.cfg.Now()
	o.mu.Lock()
	for k, p := range o.pending {
		if now.After(p.expires) {
			delete(o.pending, k)
		}
	}
	if len(o.pending) >= MaxPending {
		o.mu.Unlock()
		return "", "", errors.New("too many sign-ins under way; try again in a few minutes")
	}
	o.pending[state] = pending{nonce: nonce, verifier: verifier, tenant: tenant, binding: hashHex(binding), expires: now.Add(PendingTTL)}
	o.mu.Unlock()
	return o.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), binding, nil
}

// Finish ends a sign-in: the state must be one Begin made, unused, not
// expired and bound to this browser's binding cookie; the code is swapped
// at the provider with the PKCE verifier, and the ID token verified. It
// returns the verified email and the tenant asked for. Every failure is
// ErrSignIn, and uses up the state.
func (o *OIDC) Finish(ctx context.Context, state, code, binding string) (*Claims, string, error) {
	o.mu.Lock()
	p, ok := o.pending[state]
	delete(o.pending, state)
	o.mu.Unlock()
	switch {
	case !ok || state == "":
		return nil, "", fmt.Errorf("%w: unknown or used state", ErrSignIn)
	case o.cfg.Now().After(p.expires):
		return nil, "", fmt.Errorf("%w: the sign-in took longer than %s", ErrSignIn, PendingTTL)
	case hashHex(binding) != p.binding:
		return nil, "", fmt.Errorf("%w: the sign-in was started in another browser", ErrSignIn)
	}
	tok, err := o.oauth.Exchange(oidc.ClientContext(ctx, o.cfg.HTTPClient), code, oauth2.VerifierOption(p.verifier))
	if err != nil {
		return nil, "", fmt.Errorf("%w: the provider's token endpoint: %v", ErrSignIn, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return nil, "", fmt.Errorf("%w: the provider sent no id_token", ErrSignIn)
	}
	c, err := o.verifier.verify(ctx, raw, p.nonce)
	if err != nil {
		return nil, "", err
	}
	if c.Email == "" {
		// Providers that keep the email out of the ID token (zitadel's
		// default, Keycloak clients without the mapper) serve it at their
		// UserInfo endpoint, for the access token just issued.
		if c, err = o.userInfo(ctx, tok, c.Subject); err != nil {
			return nil, "", err
		}
	}
	e, err := verifiedEmail(c, "UserInfo")
	if err != nil {
		return nil, "", err
	}
	return e, p.tenant, nil
}

// userInfo reads the email claims from the provider's UserInfo endpoint
// with the sign-in's access token. Its subject must be the ID token's
// (OpenID Connect Core 5.3.2): a reply about someone else is refused.
func (o *OIDC) userInfo(ctx context.Context, tok *oauth2.Token, subject string) (*idClaims, error) {
	if o.provider.UserInfoEndpoint() == "" {
		return nil, fmt.Errorf("%w: the ID token has no email and the provider has no UserInfo endpoint", ErrSignIn)
	}
	ui, err := o.provider.UserInfo(oidc.ClientContext(ctx, o.cfg.HTTPClient), oauth2.StaticTokenSource(tok))
	if err != nil {
		return nil, fmt.Errorf("%w: the ID token has no email, and the provider's UserInfo endpoint: %v", ErrSignIn, err)
	}
	if ui.Subject != subject {
		return nil, fmt.Errorf("%w: UserInfo answered for subject %q, not the ID token's", ErrSignIn, ui.Subject)
	}
	c := &idClaims{Subject: subject}
	var raw struct {
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"`
	}
	if err := ui.Claims(&raw); err != nil {
		return nil, fmt.Errorf("%w: UserInfo claims: %v", ErrSignIn, err)
	}
	c.Email, c.EmailVerified = raw.Email, raw.EmailVerified
	return c, nil
}

// verifiedEmail is the claims' email when it is present and verified
// (email_verified the boolean true); from names where they came from.
func verifiedEmail(c *idClaims, from string) (*Claims, error) {
	switch {
	case c.Email == "":
		return nil, fmt.Errorf("%w: the %s has no email", ErrSignIn, from)
	case c.EmailVerified != true:
		return nil, fmt.Errorf("%w: the email is not verified (email_verified %v)", ErrSignIn, c.EmailVerified)
	}
	return &Claims{Email: c.Email}, nil
}

// Verifier checks ID tokens of one provider for one client.
type Verifier struct {
	clientID string
	keys     *keySet
	v        *oidc.IDTokenVerifier
}

// NewVerifier makes a Verifier for tokens of issuer to clientID, whose
// keys are at jwksURL.
func NewVerifier(issuer, clientID, jwksURL string, client *http.Client, now func() time.Time) *Verifier {
	ks := &keySet{url: jwksURL, client: client, now: now}
	return &Verifier{clientID: clientID, keys: ks, v: oidc.NewVerifier(issuer, ks, &oidc.Config{ClientID: clientID, SupportedSigningAlgs: SigningAlgs,
		Now: func() time.Time { return now().Add(-ClockSkew) }})}
}

// Verify checks an ID token: its signature (SigningAlgs only, the
// provider's keys), iss, aud holding the client id, azp the client id when
// there are several audiences, exp (with ClockSkew), the nonce, and an
// email that is present and verified (email_verified true). Every failure
// is ErrSignIn.
func (v *Verifier) Verify(ctx context.Context, raw, nonce string) (*Claims, error) {
	c, err := v.verify(ctx, raw, nonce)
	if err != nil {
		return nil, err
	}
	return verifiedEmail(c, "ID token")
}

// verify is Verify without the email rule: Finish looks for a missing
// email at the UserInfo endpoint.
func (v *Verifier) verify(ctx context.Context, raw, nonce string) (*idClaims, error) {
	t, err := v.v.Verify(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSignIn, err)
	}
	var c struct {
		AZP           string `json:"azp"`
		Email         string `json:"email"`
		EmailVerified any    `json:"email_verified"`
	}
	if err := t.Claims(&c); err != nil {
		return nil, fmt.Errorf("%w: claims: %v", ErrSignIn, err)
	}
	switch {
	case len(t.Audience) > 1 && c.AZP != v.clientID:
		return nil, fmt.Errorf("%w: several audiences and azp %q is not the client", ErrSignIn, c.AZP)
	case nonce == "" || t.Nonce != nonce:
		return nil, fmt.Errorf("%w: the nonce is not this sign-in's", ErrSignIn)
	}
	return &idClaims{Subject: t.Subject, Email: c.Email, EmailVerified: c.EmailVerified}, nil
}

// keySet is the provider's signing keys, fetched from its JWKS: cached for
// KeysTTL, and fetched again for a key id it does not hold at most every
// KeyRefetchEvery.
type keySet struct {
	url    string
	client *http.Client
	now    func() time.Time

	mu        sync.Mutex
	keys      jose.JSONWebKeySet
	fetchedAt time.Time
	// fetches counts the JWKS reads, for tests.
	fetches int
}

func (k *keySet) VerifySignature(ctx context.Context, raw string) ([]byte, error) {
	jws, err := jose.ParseSignedCompact(raw, joseAlgs)
	if err != nil {
		return nil, fmt.Errorf("parse the token: %w", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, errors.New("the token must carry exactly one signature")
	}
	kid := jws.Signatures[0].Header.KeyID
	key, err := k.key(ctx, kid)
	if err != nil {
		return nil, err
	}
	return jws.Verify(key)
}

// key finds the key kid, fetching the JWKS when the cache is older than
// KeysTTL, or lacks kid and was fetched more than KeyRefetchEvery ago.
func (k *keySet) key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	find := func() *jose.JSONWebKey {
		for i := range k.keys.Keys {
			if key := &k.keys.Keys[i]; key.KeyID == kid && key.Use != "enc" && key.IsPublic() {
				return key
			}
		}
		return nil
	}
	stale := k.fetchedAt.IsZero() || now.Sub(k.fetchedAt) >= KeysTTL
	if key := find(); key != nil && !stale {
		return key, nil
	}
	if !stale && now.Sub(k.fetchedAt) < KeyRefetchEvery {
		return nil, fmt.Errorf("no key %q among the provider's (fetched %s ago; fetched again at most every %s)", kid, now.Sub(k.fetchedAt), KeyRefetchEvery)
	}
	if err := k.fetch(ctx); err != nil {
		return nil, err
	}
	k.fetchedAt = now
	if key := find(); key != nil {
		return key, nil
	}
	return nil, fmt.Errorf("no key %q among the provider's", kid)
}

func (k *keySet) fetch(ctx context.Context) error {
	k.fetches++
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("fetch the provider's keys: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch the provider's keys: %s %v", resp.Status, err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return fmt.Errorf("decode the provider's keys: %w", err)
	}
	// Only keys for the algorithms taken: an HMAC "key" published by
	// mistake must never verify anything.
	set.Keys = slices.DeleteFunc(set.Keys, func(key jose.JSONWebKey) bool { return !key.IsPublic() })
	k.keys = set
	return nil
}

func randomString() string { return oauth2.GenerateVerifier() }

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
