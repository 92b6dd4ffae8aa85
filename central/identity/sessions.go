// Package identity signs people in to the console: it verifies who they are
// with the company's OpenID Connect provider and keeps their console
// sessions. Who a session is for (the operator, or a tenant's member and
// their role) is looked up again on every request, so a change to the team
// applies at once.
package identity

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/hashicorp/go-hclog"
)

// Store is what identity needs of central's store.
type Store interface {
	// CreateSession stores a session, ending the person's oldest beyond the limit.
	CreateSession(ctx context.Context, x *store.Session) (int, error)
	// SessionByToken finds a session by its token's SHA-256.
	SessionByToken(ctx context.Context, tokenSHA256 string) (*store.Session, error)
	// DeleteSession ends a session by its token's SHA-256.
	DeleteSession(ctx context.Context, tokenSHA256 string) error
	// GetTenant reads a tenant by id.
	GetTenant(ctx context.Context, id string) (*store.Tenant, error)
	// GetTeamMember reads a tenant's member by email.
	GetTeamMember(ctx context.Context, tenant, email string) (*store.TeamMember, error)
	// NoteSignIn sets a member's last_sign_in_at.
	NoteSignIn(ctx context.Context, tenant, email string, at time.Time) error
	// TenantByName reads a tenant by name.
	TenantByName(ctx context.Context, name string) (*store.Tenant, error)
	// ListTenants reads every tenant.
	ListTenants(ctx context.Context) ([]store.Tenant, error)
}

const (
	// CookieName is the session's cookie.
	CookieName = "fluxvm_session"
	// TokenPrefix starts every session token.
	TokenPrefix = "fvs_"
	// DefaultTTL is how long a session lasts unless configured.
	DefaultTTL = 12 * time.Hour
)

// ErrNoSession is a session token that does not work: never issued, signed
// out, expired, pushed out by newer ones, or whose person is no longer the
// operator or a member of the tenant. Callers refuse all of them alike.
var ErrNoSession = errors.New("no such session, or it has ended")

// ErrNoAccess is a sign-in by an email that is neither an operator's nor a
// member of the tenant asked for.
var ErrNoAccess = errors.New("this email has no access")

// Who is whom a live session is for.
type Who struct {
	Session *store.Session
	// Tenant and Member are set for a tenant's session (Member.Role is the
	// role now); neither for the operator's.
	Tenant *store.Tenant
	Member *store.TeamMember
}

// Sessions issues, finds and ends console sessions. It is safe for
// concurrent use.
type Sessions struct {
	st  Store
	ttl time.Duration
	now func() time.Time
	log hclog.Logger
	// isOperator says whether an email signs in as the operator.
	isOperator func(ctx context.Context, email string) (bool, error)
}

// NewSessions makes Sessions over st lasting ttl (DefaultTTL when 0), with
// the clock now; isOperator says whether an email is an operator's, asked
// again on every request of an operator's session.
func NewSessions(st Store, ttl time.Duration, now func() time.Time, isOperator func(ctx context.Context, email string) (bool, error), log hclog.Logger) *Sessions {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Sessions{st: st, ttl: ttl, now: now, log: log, isOperator: isOperator}
}

// Start issues a session for email: the operator's with tenant "", else the
// tenant's (by id), whose member email must be. It returns the session's
// token, which only the cookie holds (the store keeps its SHA-256). Errors:
// ErrNoAccess; others as *store.OpError.
func (s *Sessions) Start(ctx context.Context, email, tenant string) (string, *store.Session, error) {
	email = store.NormalEmail(email)
	now := s.now().UTC()
	if tenant == "" {
		ok, err := s.isOperator(ctx, email)
		if err != nil {
			return "", nil, &store.OpError{Op: "check the operator's emails", Err: err}
		}
		if !ok {
			return "", nil, ErrNoAccess
		}
	} else {
		_, err := s.st.GetTeamMember(ctx, tenant, email)
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "", nil, ErrNoAccess
		case err != nil:
			return "", nil, &store.OpError{Op: "look up a member", Err: err}
		}
		if err := s.st.NoteSignIn(ctx, tenant, email, now); err != nil {
			s.log.Warn("note a sign-in", "tenant", tenant, "error", err)
		}
	}
	token := store.NewToken(TokenPrefix)
	x := &store.Session{Email: email, Operator: tenant == "", Tenant: tenant, CreatedAt: now, ExpiresAt: now.Add(s.ttl), TokenSHA256: store.HashToken(token)}
	ended, err := s.st.CreateSession(ctx, x)
	if err != nil {
		return "", nil, &store.OpError{Op: "create a session", Err: err}
	}
	s.log.Info("session started", "tenant", tenant, "operator", x.Operator, "ended_older", ended)
	return token, x, nil
}

// SignIn starts the session a verified email is entitled to: the
// operator's when no tenant is asked for and the email is an operator's;
// else the membership of the tenant asked for (its id or name), or of the
// first of the person's teams by name. Nobody is added: ErrNoAccess when
// the email has none of these.
func (s *Sessions) SignIn(ctx context.Context, email, tenant string) (string, *Who, error) {
	email = store.NormalEmail(email)
	if tenant == "" {
		ok, err := s.isOperator(ctx, email)
		if err != nil {
			return "", nil, &store.OpError{Op: "check the operator's emails", Err: err}
		}
		if ok {
			token, x, err := s.Start(ctx, email, "")
			if err != nil {
				return "", nil, err
			}
			return token, &Who{Session: x}, nil
		}
	}
	var ts []store.Tenant
	if tenant != "" {
		t, err := s.st.GetTenant(ctx, tenant)
		if errors.Is(err, store.ErrNotFound) {
			t, err = s.st.TenantByName(ctx, tenant)
		}
		switch {
		case errors.Is(err, store.ErrNotFound):
			return "", nil, ErrNoAccess
		case err != nil:
			return "", nil, &store.OpError{Op: "find the tenant", Err: err}
		}
		ts = []store.Tenant{*t}
	} else {
		// Every tenant is asked: an index of people is for when tenants are many.
		all, err := s.st.ListTenants(ctx)
		if err != nil {
			return "", nil, &store.OpError{Op: "list the tenants", Err: err}
		}
		ts = all
		slices.SortFunc(ts, func(a, b store.Tenant) int { return strings.Compare(a.Name, b.Name) })
	}
	for i := range ts {
		m, err := s.st.GetTeamMember(ctx, ts[i].ID, email)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", nil, &store.OpError{Op: "look up a member", Err: err}
		}
		token, x, err := s.Start(ctx, email, ts[i].ID)
		if err != nil {
			return "", nil, err
		}
		return token, &Who{Session: x, Tenant: &ts[i], Member: m}, nil
	}
	return "", nil, ErrNoAccess
}

// Lookup finds whom a session token is for, now: ErrNoSession when the
// session has ended or its person is no longer the operator or the
// tenant's member (the session is then deleted). A disabled tenant is
// returned for the caller to refuse.
func (s *Sessions) Lookup(ctx context.Context, token string) (*Who, error) {
	hash := store.HashToken(token)
	x, err := s.st.SessionByToken(ctx, hash)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, ErrNoSession
	case err != nil:
		return nil, &store.OpError{Op: "look up a session", Err: err}
	}
	gone := func(why string) (*Who, error) {
		if err := s.st.DeleteSession(ctx, hash); err != nil {
			s.log.Warn("end a session", "why", why, "error", err)
		}
		return nil, ErrNoSession
	}
	if !s.now().Before(x.ExpiresAt) {
		return gone("expired")
	}
	if x.Operator {
		ok, err := s.isOperator(ctx, x.Email)
		if err != nil {
			return nil, &store.OpError{Op: "check the operator's emails", Err: err}
		}
		if !ok {
			return gone("no longer an operator")
		}
		return &Who{Session: x}, nil
	}
	t, err := s.st.GetTenant(ctx, x.Tenant)
	if errors.Is(err, store.ErrNotFound) {
		return gone("tenant deleted")
	}
	if err != nil {
		return nil, &store.OpError{Op: "look up a session's tenant", Err: err}
	}
	m, err := s.st.GetTeamMember(ctx, x.Tenant, x.Email)
	if errors.Is(err, store.ErrNotFound) {
		return gone("no longer a member")
	}
	if err != nil {
		return nil, &store.OpError{Op: "look up a session's member", Err: err}
	}
	return &Who{Session: x, Tenant: t, Member: m}, nil
}

// End deletes a session (signing out); one that is not there is not an error.
func (s *Sessions) End(ctx context.Context, token string) error {
	if err := s.st.DeleteSession(ctx, store.HashToken(token)); err != nil {
		return &store.OpError{Op: "end a session", Err: err}
	}
	return nil
}

// TTL is how long a session lasts.
func (s *Sessions) TTL() time.Duration { return s.ttl }

// Cookie is the session cookie for token: HttpOnly, SameSite=Lax, for the
// whole site, Secure when central's public URL is https, and lasting until
// expires (a zero time and an empty token clear it).
func Cookie(token string, expires time.Time, secure bool) *http.Cookie {
	c := &http.Cookie{Name: CookieName, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: secure}
	if token == "" {
		c.MaxAge = -1
	} else {
		c.Expires = expires
	}
	return c
}

// CheckConsoleChange refuses a change (any method but GET and HEAD) made
// with a session cookie unless it carries the X-FluxVM-Console header,
// which a cross-site form cannot send and a cross-site fetch cannot without
// the browser asking central first, and, when the browser sends an Origin,
// that Origin is publicOrigin (central's public URL's scheme and host).
func CheckConsoleChange(r *http.Request, publicOrigin string) error {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return nil
	}
	if r.Header.Get("X-FluxVM-Console") == "" {
		return errors.New("a change made with a console session must carry the X-FluxVM-Console header")
	}
	if o := r.Header.Get("Origin"); o != "" && o != publicOrigin {
		return fmt.Errorf("a change made with a console session must come from %s", publicOrigin)
	}
	return nil
}
