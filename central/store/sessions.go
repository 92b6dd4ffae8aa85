package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Console sessions (docs/identity.md, "Sessions"). Keys, next to those in crud.go:
//
//	P sessions/<sha256>                      Session (leased: gone soon after it expires)
//	P session-people/<email>/<sha256>        the session's created_at (a person's sessions)
//
// A session is found by the SHA-256 of its token, never by the token. Both keys of a session
// are written and deleted together and hang on an etcd lease that outlives the session by a
// minute, so an expired session leaves nothing behind. A person's sessions are counted in
// the transaction that adds one: past MaxSessionsPerPerson, the oldest go in that transaction.

// MaxSessionsPerPerson bounds the console sessions one email holds at once.
const MaxSessionsPerPerson = 20

// Session is a console session as the store keeps it. Who it is for is looked up again on
// every request (the member's role, the operator's email), so it holds only who signed in,
// where to, and until when.
type Session struct {
	// Email is the person's verified email, lowercase.
	Email string `json:"email"`
	// Operator sessions have no tenant; Tenant is the tenant's id otherwise.
	Operator    bool      `json:"operator,omitempty"`
	Tenant      string    `json:"tenant,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	TokenSHA256 string    `json:"token_sha256"`
}

// Validate checks what the store relies on.
func (x *Session) Validate() error {
	if err := CheckEmail(x.Email); err != nil {
		return err
	}
	if x.Operator != (x.Tenant == "") {
		return fmt.Errorf("%w: a session is the operator's or a tenant's, and only one", ErrInvalid)
	}
	if !x.Operator {
		if err := checkName("tenant id", x.Tenant); err != nil {
			return err
		}
	}
	if !sha256HexRE.MatchString(x.TokenSHA256) {
		return fmt.Errorf("%w: session: token_sha256 must be 64 lowercase hex digits", ErrInvalid)
	}
	if !x.ExpiresAt.After(x.CreatedAt) {
		return fmt.Errorf("%w: session: expires_at must follow created_at", ErrInvalid)
	}
	return nil
}

func (s *Store) sessionKey(hash string) string { return s.prefix + "sessions/" + hash }
func (s *Store) sessionPersonPrefix(email string) string {
	return s.prefix + "session-people/" + email + "/"
}

// CreateSession stores a new session, and ends the person's oldest ones beyond
// MaxSessionsPerPerson, in one transaction that compares the person's sessions as read. It
// returns how many older sessions it ended.
func (s *Store) CreateSession(ctx context.Context, x *Session) (int, error) {
	x.Email = NormalEmail(x.Email)
	if err := x.Validate(); err != nil {
		return 0, err
	}
	what := "create a session"
	ttl := int64(time.Until(x.ExpiresAt)/time.Second) + 60
	if ttl < 60 {
		ttl = 60
	}
	grant, err := s.client.Grant(ctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	pp, key := s.sessionPersonPrefix(x.Email), s.sessionKey(x.TokenSHA256)
	ended := 0
	err = s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Get(ctx, pp, clientv3.WithPrefix())
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		type held struct {
			hash    string
			created string
			rev     int64
		}
		var hs []held
		read := []readKey{{key, 0}}
		for _, kv := range r.Kvs {
			hs = append(hs, held{string(kv.Key[len(pp):]), string(kv.Value), kv.ModRevision})
			read = append(read, readKey{string(kv.Key), kv.ModRevision})
		}
		sort.Slice(hs, func(i, j int) bool { return hs[i].created < hs[j].created })
		ops := []clientv3.Op{
			clientv3.OpPut(key, mustJSON(x), clientv3.WithLease(grant.ID)),
			clientv3.OpPut(pp+x.TokenSHA256, x.CreatedAt.UTC().Format(sortableTime), clientv3.WithLease(grant.ID)),
		}
		drop := len(hs) + 1 - MaxSessionsPerPerson
		for i := 0; i < drop; i++ {
			ops = append(ops, clientv3.OpDelete(s.sessionKey(hs[i].hash)), clientv3.OpDelete(pp+hs[i].hash))
		}
		w, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, read, pp)...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		ended = max(drop, 0)
		return w.Succeeded, nil
	})
	return ended, err
}

// sortableTime formats times so that their strings sort as the times do.
const sortableTime = "2006-01-02T15:04:05.000000000Z"

// SessionByToken finds a session by the SHA-256 hex of its token. An expired session is
// returned too: the caller decides (and must refuse it).
func (s *Store) SessionByToken(ctx context.Context, tokenSHA256 string) (*Session, error) {
	if !sha256HexRE.MatchString(tokenSHA256) {
		return nil, fmt.Errorf("look up a session: %w", ErrNotFound)
	}
	x, _, err := getJSON[Session](ctx, s, s.sessionKey(tokenSHA256))
	if err != nil {
		return nil, fmt.Errorf("look up a session: %w", err)
	}
	return x, nil
}

// DeleteSession ends a session by the SHA-256 of its token; one that is not there is not an
// error.
func (s *Store) DeleteSession(ctx context.Context, tokenSHA256 string) error {
	r, err := s.client.Get(ctx, s.sessionKey(tokenSHA256))
	if err != nil || len(r.Kvs) == 0 {
		return err
	}
	var x Session
	if err := json.Unmarshal(r.Kvs[0].Value, &x); err != nil {
		return fmt.Errorf("end a session: %w", err)
	}
	_, err = s.kv(ctx).Txn(ctx).Then(clientv3.OpDelete(s.sessionKey(tokenSHA256)),
		clientv3.OpDelete(s.sessionPersonPrefix(x.Email)+tokenSHA256)).Commit()
	if err != nil {
		return fmt.Errorf("end a session: %w", err)
	}
	return nil
}

// NoteSignIn sets a member's last_sign_in_at.
func (s *Store) NoteSignIn(ctx context.Context, tenant, email string, at time.Time) error {
	_, err := s.ChangeTeamMember(ctx, tenant, email, func(m *TeamMember) (bool, error) {
		m.LastSignInAt = at.UTC()
		return false, nil
	})
	return err
}
