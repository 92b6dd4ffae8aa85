package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Self-service sign-ups waiting for their mailed link (docs/signup.md). Keys:
//
//	P signups/<sha256 of the link's token>   Signup (leased: gone soon after it expires)
//
// Only the token's SHA-256 is stored. Taking a sign-up deletes its key in the
// transaction that reads it, so a link works once even when two clicks race.

// Signup is a sign-up whose mailed link was not followed yet.
type Signup struct {
	Email     string    `json:"email"`
	Tenant    string    `json:"tenant"` // the name asked for
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (s *Store) signupKey(sha string) string { return s.prefix + "signups/" + sha }

// PutSignup stores a pending sign-up under its token's hash, on an etcd
// lease that ends a minute after x expires.
func (s *Store) PutSignup(ctx context.Context, tokenSHA256 string, x *Signup, ttl time.Duration) error {
	if !sha256HexRE.MatchString(tokenSHA256) || !ValidName(x.Tenant) {
		return fmt.Errorf("%w: sign-up: token hash or tenant name", ErrInvalid)
	}
	if err := CheckEmail(x.Email); err != nil {
		return err
	}
	grant, err := s.client.Grant(ctx, int64((ttl+time.Minute)/time.Second))
	if err != nil {
		return fmt.Errorf("store a sign-up: %w", err)
	}
	if _, err := s.kv(ctx).Put(ctx, s.signupKey(tokenSHA256), mustJSON(x), clientv3.WithLease(grant.ID)); err != nil {
		return fmt.Errorf("store a sign-up: %w", err)
	}
	return nil
}

// TakeSignup reads and deletes the sign-up of a token's hash in one
// transaction: ErrNotFound when there is none (never made, used, or gone
// with its lease).
func (s *Store) TakeSignup(ctx context.Context, tokenSHA256 string) (*Signup, error) {
	if !sha256HexRE.MatchString(tokenSHA256) {
		return nil, fmt.Errorf("take a sign-up: %w", ErrNotFound)
	}
	r, err := s.kv(ctx).Delete(ctx, s.signupKey(tokenSHA256), clientv3.WithPrevKV())
	if err != nil {
		return nil, fmt.Errorf("take a sign-up: %w", err)
	}
	if len(r.PrevKvs) == 0 {
		return nil, fmt.Errorf("take a sign-up: %w", ErrNotFound)
	}
	var x Signup
	if err := json.Unmarshal(r.PrevKvs[0].Value, &x); err != nil {
		return nil, fmt.Errorf("take a sign-up: %w", err)
	}
	return &x, nil
}
