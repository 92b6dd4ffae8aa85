// Package signup lets people create their own tenant (POST /signup) when the
// operator opens sign-up: it limits attempts per client address, mails a
// one-use link that expires, and creates the tenant when the link is followed.
// Only the link token's SHA-256 is stored, in etcd, on a lease.
package signup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/smtp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/time/rate"
)

// Bounds and defaults (docs/signup.md; schemas/fleet-openapi.yaml gives the
// same for the bodies).
const (
	// DefaultLinkTTL is how long a mailed link works; MinLinkTTL and
	// MaxLinkTTL bound -signup-link-hours.
	DefaultLinkTTL = 24 * time.Hour
	MinLinkTTL     = time.Hour
	MaxLinkTTL     = 7 * 24 * time.Hour
	// Burst sign-ups may come from one address at once, then one every
	// Refill.
	Burst  = 5
	Refill = 12 * time.Second
	// MaxAddresses bounds the rate limiter's memory: past it, the addresses
	// idle longest are forgotten.
	MaxAddresses = 10000
	// TokenPrefix starts a link's token.
	TokenPrefix = "fsu_"
	// MaxBodyBytes bounds POST /signup's body.
	MaxBodyBytes = 4 << 10
	// SMTPTimeout bounds one mail's delivery to the SMTP server.
	SMTPTimeout = 30 * time.Second
)

// Errors callers branch on.
var (
	ErrClosed  = errors.New("sign-up is not open")                 // 404
	ErrLimited = errors.New("too many sign-ups from this address") // 429
	ErrInvalid = errors.New("invalid sign-up")                     // 400
	// ErrLink is a link that is unknown, used or expired: all look alike
	// to the caller (404).
	ErrLink = errors.New("the sign-up link is unknown, used or expired")
)

// InvalidError says what is wrong with a sign-up.
type InvalidError struct{ Msg, Hint string }

func (e *InvalidError) Error() string { return e.Msg }
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// SMTP is the mail server confirmation links go through. User and Password
// are optional (net/smtp's PLAIN auth, which it sends only over TLS or to
// localhost); the password is never logged.
type SMTP struct {
	Host     string
	Port     int
	From     string
	User     string
	Password string
}

// Store is what sign-up needs of central's store.
type Store interface {
	PutSignup(ctx context.Context, tokenSHA256 string, x *store.Signup, ttl time.Duration) error
	TakeSignup(ctx context.Context, tokenSHA256 string) (*store.Signup, error)
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	// For the first SSO sign-in of the person who signed up (ClaimOnSignIn).
	PutSignupOwner(ctx context.Context, o *store.SignupOwner) error
	TakeSignupOwners(ctx context.Context, email string) ([]store.SignupOwner, error)
	ListTeam(ctx context.Context, tenant string) ([]store.TeamMember, error)
	AddTeamMember(ctx context.Context, m *store.TeamMember) error
	RotateTenantToken(ctx context.Context, id, newTokenSHA256 string) (*store.Tenant, error)
	ListKeys(ctx context.Context, tenant string) ([]store.APIKey, error)
	DeleteKey(ctx context.Context, tenant, id string) error
	ListWebhooks(ctx context.Context, tenant string) ([]store.Webhook, error)
	DeleteWebhook(ctx context.Context, tenant, id string) error
}

// Options configure a Service.
type Options struct {
	Store Store
	// Enabled opens sign-up (central's -signup); off, every call is ErrClosed.
	Enabled bool
	// PublicURL is central's URL as browsers reach it; links point there.
	PublicURL string
	SMTP      SMTP
	// LinkTTL is how long a link works (DefaultLinkTTL when 0).
	LinkTTL time.Duration
	// CreateTenant makes the tenant and its primary token (the API's own
	// tenant creation, so a sign-up's tenant is like any other).
	CreateTenant func(ctx context.Context, name, email string) (*sdk.TenantWithToken, error)
	Now          func() time.Time
	Logger       hclog.Logger
}

// Service is self-service sign-up. It is safe for concurrent use.
type Service struct {
	o   Options
	log hclog.Logger

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

// New makes a Service.
func New(o Options) *Service {
	if o.LinkTTL <= 0 {
		o.LinkTTL = DefaultLinkTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return &Service{o: o, log: o.Logger, buckets: map[string]*bucket{}}
}

// Enabled says whether sign-up is open.
func (s *Service) Enabled() bool { return s.o.Enabled }

// Config is GET /signup/config.
func (s *Service) Config(ctx context.Context) (sdk.SignupConfig, error) {
	if !s.o.Enabled {
		return sdk.SignupConfig{}, nil
	}
	p, err := s.o.Store.GetPolicy(ctx)
	if err != nil {
		return sdk.SignupConfig{}, err
	}
	return sdk.SignupConfig{Enabled: true, RequireEmailVerification: p.SignupRequireEmailVerification}, nil
}

// allow takes one sign-up from addr's bucket.
func (s *Service) allow(addr string) bool {
	now := s.o.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.buckets[addr]
	if b == nil {
		if len(s.buckets) >= MaxAddresses {
			s.forgetOldest()
		}
		b = &bucket{lim: rate.NewLimiter(rate.Every(Refill), Burst)}
		s.buckets[addr] = b
	}
	b.seen = now
	return b.lim.AllowN(now, 1)
}

// forgetOldest drops the tenth of the addresses idle longest. An address
// forgotten starts again with a full bucket, which the bound makes rare.
func (s *Service) forgetOldest() {
	times := make([]time.Time, 0, len(s.buckets))
	for _, b := range s.buckets {
		times = append(times, b.seen)
	}
	slices.SortFunc(times, time.Time.Compare)
	cut := times[len(times)/10]
	for a, b := range s.buckets {
		if !b.seen.After(cut) {
			delete(s.buckets, a)
		}
	}
}

// Result is what a sign-up did: a link mailed (Accepted), or, with email
// verification off in the policy, the tenant made at once (Tenant).
type Result struct {
	Accepted *sdk.SignupAccepted
	Tenant   *sdk.TenantWithToken
}

// Signup takes a sign-up from client address addr.
func (s *Service) Signup(ctx context.Context, addr string, req sdk.SignupRequest) (*Result, error) {
	if !s.o.Enabled {
		return nil, ErrClosed
	}
	if !s.allow(addr) {
		return nil, ErrLimited
	}
	email := store.NormalEmail(req.Email)
	if err := store.CheckEmail(email); err != nil {
		return nil, &InvalidError{"email is not an address central can mail", "use an address such as alex@example.com, at most 254 characters"}
	}
	if !store.ValidName(req.Tenant) || req.Tenant == "me" {
		return nil, &InvalidError{"tenant is not a valid name", "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit; not \"me\""}
	}
	p, err := s.o.Store.GetPolicy(ctx)
	if err != nil {
		return nil, err
	}
	if !p.SignupRequireEmailVerification {
		t, err := s.create(ctx, req.Tenant, email, false)
		if err != nil {
			return nil, err
		}
		s.log.Info("tenant signed up without email verification", "tenant", t.Tenant.ID)
		return &Result{Tenant: t}, nil
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("make a sign-up token: %w", err)
	}
	token := TokenPrefix + hex.EncodeToString(raw)
	now := s.o.Now().UTC()
	x := &store.Signup{Email: email, Tenant: req.Tenant, CreatedAt: now, ExpiresAt: now.Add(s.o.LinkTTL)}
	if err := s.o.Store.PutSignup(ctx, store.HashToken(token), x, s.o.LinkTTL); err != nil {
		return nil, err
	}
	link := strings.TrimSuffix(s.o.PublicURL, "/") + "/signup/confirm?token=" + token
	if err := s.mail(email, req.Tenant, link, x.ExpiresAt); err != nil {
		// The caller learns the mail did not go; the stored sign-up expires unused.
		return nil, err
	}
	s.log.Info("sign-up link mailed", "tenant_name", req.Tenant)
	return &Result{Accepted: &sdk.SignupAccepted{Status: "mail_sent", ExpiresAt: x.ExpiresAt}}, nil
}

// Confirm follows a mailed link: it takes the sign-up (once) and creates
// its tenant. A link that is unknown, was used, or has expired is ErrLink.
func (s *Service) Confirm(ctx context.Context, token string) (*sdk.TenantWithToken, error) {
	if !s.o.Enabled {
		return nil, ErrClosed
	}
	if !strings.HasPrefix(token, TokenPrefix) || len(token) != len(TokenPrefix)+64 {
		return nil, ErrLink
	}
	x, err := s.o.Store.TakeSignup(ctx, store.HashToken(token))
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrLink
	}
	if err != nil {
		return nil, err
	}
	// The etcd lease removes it a minute after expiry; the clock decides.
	if !s.o.Now().Before(x.ExpiresAt) {
		return nil, ErrLink
	}
	t, err := s.create(ctx, x.Tenant, x.Email, true)
	if err != nil {
		return nil, err
	}
	s.log.Info("tenant signed up", "tenant", t.Tenant.ID)
	return t, nil
}

// create makes the tenant and records who signed it up, for their first
// SSO sign-in.
func (s *Service) create(ctx context.Context, name, email string, verified bool) (*sdk.TenantWithToken, error) {
	t, err := s.o.CreateTenant(ctx, name, email)
	if err != nil {
		return nil, err
	}
	if err := s.o.Store.PutSignupOwner(ctx, &store.SignupOwner{Tenant: t.Tenant.ID, Email: email, Verified: verified}); err != nil {
		// The tenant exists and its token is answered; only the SSO
		// hand-over is lost, and the operator can add the owner.
		s.log.Error("record who signed up a tenant", "tenant", t.Tenant.ID, "error", err)
	}
	return t, nil
}

// ClaimOnSignIn is a first SSO sign-in's part of sign-up: each tenant that
// email signed up, and that has no members yet, gets email as its owner.
// When the address was not confirmed by a mailed link (the policy's
// signup_require_email_verification was off), whoever holds the sign-up's
// token may not be that person, so at this moment the tenant's primary
// token is rotated (to one nobody is shown) and its API keys and webhooks
// are removed; the owner makes new ones from the console. It runs once per
// sign-up, and returns the tenants claimed.
func (s *Service) ClaimOnSignIn(ctx context.Context, email string) ([]string, error) {
	email = store.NormalEmail(email)
	owners, err := s.o.Store.TakeSignupOwners(ctx, email)
	if err != nil {
		return nil, err
	}
	var claimed []string
	for _, o := range owners {
		team, err := s.o.Store.ListTeam(ctx, o.Tenant)
		if err != nil {
			return claimed, err
		}
		if len(team) > 0 {
			continue // the tenant has a team already: it is theirs to add this person
		}
		m := &store.TeamMember{Member: sdk.Member{Email: email, Role: sdk.RoleOwner, AddedBy: "sign-up", AddedAt: s.o.Now().UTC()}, Tenant: o.Tenant}
		if err := s.o.Store.AddTeamMember(ctx, m); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				continue // the tenant was deleted meanwhile
			}
			return claimed, err
		}
		if !o.Verified {
			if err := s.revokeSignupCredentials(ctx, o.Tenant); err != nil {
				return claimed, err
			}
		}
		s.log.Info("signed-up tenant claimed at its owner's first sign-in", "tenant", o.Tenant, "verified", o.Verified)
		claimed = append(claimed, o.Tenant)
	}
	return claimed, nil
}

// revokeSignupCredentials rotates tenant's primary token to one nobody
// holds and removes its API keys and webhooks.
func (s *Service) revokeSignupCredentials(ctx context.Context, tenant string) error {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	if _, err := s.o.Store.RotateTenantToken(ctx, tenant, store.HashToken("fvt_"+hex.EncodeToString(raw))); err != nil {
		return fmt.Errorf("rotate the token of %s: %w", tenant, err)
	}
	keys, err := s.o.Store.ListKeys(ctx, tenant)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := s.o.Store.DeleteKey(ctx, tenant, k.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("remove key %s of %s: %w", k.ID, tenant, err)
		}
	}
	hooks, err := s.o.Store.ListWebhooks(ctx, tenant)
	if err != nil {
		return err
	}
	for _, h := range hooks {
		if err := s.o.Store.DeleteWebhook(ctx, tenant, h.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("remove webhook %s of %s: %w", h.ID, tenant, err)
		}
	}
	return nil
}

// mail sends the confirmation link.
func (s *Service) mail(to, tenant, link string, expires time.Time) error {
	c := s.o.SMTP
	if c.Host == "" || c.From == "" {
		return errors.New("sign-up mail is not configured (-smtp-host, -smtp-from)")
	}
	from, err := mail.ParseAddress(c.From)
	if err != nil {
		return fmt.Errorf("-smtp-from %q is not an address: %w", c.From, err)
	}
	msg := strings.Join([]string{
		"From: " + from.String(),
		"To: " + to,
		"Subject: Confirm your FluxVM sign-up",
		"Date: " + s.o.Now().UTC().Format(time.RFC1123Z),
		"MIME-Version: 1.0",
		"Content-Type: text/plain; charset=utf-8",
		"",
		"Someone, probably you, asked for the FluxVM account " + tenant + " with this address.",
		"",
		"To create it, open this link and confirm:",
		"",
		link,
		"",
		"The link works once, until " + expires.Format("2006-01-02 15:04 MST") + ".",
		"If you did not ask for it, ignore this mail: nothing is created.",
		"",
	}, "\r\n")
	addr := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
	conn, err := net.DialTimeout("tcp", addr, SMTPTimeout)
	if err != nil {
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	_ = conn.SetDeadline(time.Now().Add(SMTPTimeout))
	cl, err := smtp.NewClient(conn, c.Host)
	if err != nil {
		conn.Close()
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	defer cl.Close()
	if ok, _ := cl.Extension("STARTTLS"); ok {
		if err := cl.StartTLS(nil); err != nil {
			return fmt.Errorf("mail the sign-up link: starttls: %w", err)
		}
	}
	if c.User != "" {
		if err := cl.Auth(smtp.PlainAuth("", c.User, c.Password, c.Host)); err != nil {
			return fmt.Errorf("mail the sign-up link: log in to the SMTP server: %w", err)
		}
	}
	if err := cl.Mail(from.Address); err != nil {
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	if err := cl.Rcpt(to); err != nil {
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	w, err := cl.Data()
	if err != nil {
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	if _, err := w.Write([]byte(msg)); err != nil {
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("mail the sign-up link: %w", err)
	}
	return cl.Quit()
}

// DecodeRequest reads POST /signup's body: one JSON object with known
// fields only, at most MaxBodyBytes.
func DecodeRequest(body []byte) (sdk.SignupRequest, error) {
	var req sdk.SignupRequest
	if len(body) > MaxBodyBytes {
		return req, &InvalidError{fmt.Sprintf("the body is over %d bytes", MaxBodyBytes), `the body is {"email": "alex@example.com", "tenant": "acme"}`}
	}
	if e := jsonapi.Decode(body, &req, `the body is {"email": "alex@example.com", "tenant": "acme"}`); e != nil {
		return req, &InvalidError{e.Msg, e.Hint}
	}
	return req, nil
}
