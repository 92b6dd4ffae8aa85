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

// Who signed a tenant up, until that person first signs in with SSO and
// becomes its owner (docs/signup.md). Keys:
//
//	P signup-owners/<email>/<tenant>   SignupOwner
//
// The record is taken (read and deleted in one operation) at that first
// sign-in, so it makes an owner once.

// SignupOwner is the person who signed a tenant up.
type SignupOwner struct {
	Tenant string `json:"tenant"`
	Email  string `json:"email"`
	// Verified is set when the address was confirmed by the mailed link.
	Verified bool `json:"verified"`
}

func (s *Store) signupOwnerPrefix(email string) string {
	return s.prefix + "signup-owners/" + email + "/"
}

// PutSignupOwner records who signed tenant up.
func (s *Store) PutSignupOwner(ctx context.Context, o *SignupOwner) error {
	if err := CheckEmail(o.Email); err != nil {
		return err
	}
	if !ValidName(o.Tenant) {
		return fmt.Errorf("%w: sign-up owner: tenant id", ErrInvalid)
	}
	if _, err := s.kv(ctx).Put(ctx, s.signupOwnerPrefix(o.Email)+o.Tenant, mustJSON(o)); err != nil {
		return fmt.Errorf("record who signed up %s: %w", o.Tenant, err)
	}
	return nil
}

// TakeSignupOwners reads and deletes, in one operation, the tenants email
// signed up and has not yet signed in to.
func (s *Store) TakeSignupOwners(ctx context.Context, email string) ([]SignupOwner, error) {
	if CheckEmail(email) != nil {
		return nil, nil
	}
	r, err := s.kv(ctx).Delete(ctx, s.signupOwnerPrefix(email), clientv3.WithPrefix(), clientv3.WithPrevKV())
	if err != nil {
		return nil, fmt.Errorf("take the sign-ups of %s: %w", email, err)
	}
	out := make([]SignupOwner, 0, len(r.PrevKvs))
	for _, kv := range r.PrevKvs {
		var o SignupOwner
		if err := json.Unmarshal(kv.Value, &o); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, o)
	}
	return out, nil
}
