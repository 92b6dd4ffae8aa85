// Package keys manages tenants' named API keys: it makes them (the key is
// shown once, only its SHA-256 is kept), lists and revokes them, and tells
// whose a key is when one is presented, refusing expired ones. It notes when
// each key was last used, writing that at most once a minute per key.
package keys

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Store is what keys need of central's store.
type Store interface {
	// CreateKey stores a new key within the tenant's limit (see store.CreateKey).
	CreateKey(ctx context.Context, k *store.APIKey) error
	// ListKeys reads a tenant's keys, by name.
	ListKeys(ctx context.Context, tenant string) ([]store.APIKey, error)
	// GetKey reads a tenant's key by id.
	GetKey(ctx context.Context, tenant, id string) (*store.APIKey, error)
	// KeyByName reads a tenant's key by name.
	KeyByName(ctx context.Context, tenant, name string) (*store.APIKey, error)
	// DeleteKey removes a key and its indexes.
	DeleteKey(ctx context.Context, tenant, id string) error
	// KeyByToken finds a key and its tenant by the key's SHA-256.
	KeyByToken(ctx context.Context, tokenSHA256 string) (*store.APIKey, *store.Tenant, error)
	// TouchKey sets last_used_at unless it was set less than every ago.
	TouchKey(ctx context.Context, tenant, id string, at time.Time, every time.Duration) (bool, error)
}

const (
	// DefaultExpiresDays is how long a key works when its request says
	// nothing (0 says: for ever).
	DefaultExpiresDays = sdk.DefaultKeyExpiresDays
	// TouchEvery is how often, at most, a key's last_used_at is written.
	TouchEvery = time.Minute
	// Note goes with every key shown: it is shown once.
	Note = "store this key now; central keeps only its SHA-256 and cannot show it again"
)

// ErrUnknown is a key presented that does not work: no such key (never
// made, revoked, or its tenant deleted) or an expired one, which callers
// refuse alike.
var ErrUnknown = errors.New("unknown or expired API key")

// Service manages API keys. It is safe for concurrent use.
type Service struct {
	st  Store
	now func() time.Time
	log hclog.Logger
}

// New makes a Service over st with the clock now.
func New(st Store, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, now: now, log: log}
}

// Create makes a key for tenant and returns it with the key itself, which
// nothing can show again. Errors: store.ErrInvalid (the name, or
// expires_days out of range), store.ErrExists (the name is taken),
// store.ErrQuota (the tenant holds store.MaxKeysPerTenant keys),
// store.ErrNotFound (no such tenant); any other is the store's, as a
// *store.OpError.
func (s *Service) Create(ctx context.Context, tenant string, req sdk.CreateKeyRequest) (*store.APIKey, string, error) {
	if err := store.CheckKeyName(req.Name); err != nil {
		return nil, "", err
	}
	days := DefaultExpiresDays
	if req.ExpiresDays != nil {
		days = *req.ExpiresDays
	}
	if days < 0 || days > store.MaxKeyExpiresDays {
		return nil, "", fmt.Errorf("%w: expires_days %d: use 0 (never) to %d", store.ErrInvalid, days, store.MaxKeyExpiresDays)
	}
	now := s.now().UTC()
	token := store.NewToken(sdk.APIKeyPrefix)
	k := &store.APIKey{APIKey: sdk.APIKey{Name: req.Name, ReadOnly: req.ReadOnly, CreatedAt: now}, Tenant: tenant, TokenSHA256: store.HashToken(token)}
	if days > 0 {
		k.ExpiresAt = now.AddDate(0, 0, days)
	}
	err := s.st.CreateKey(ctx, k)
	switch {
	case errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrExists), errors.Is(err, store.ErrQuota), errors.Is(err, store.ErrNotFound):
		return nil, "", err
	case err != nil:
		return nil, "", &store.OpError{Op: "create key " + req.Name, Err: err}
	}
	s.log.Info("api key created", "tenant", tenant, "key", k.ID, "name", k.Name, "read_only", k.ReadOnly)
	return k, token, nil
}

// List returns a tenant's keys, by name.
func (s *Service) List(ctx context.Context, tenant string) ([]store.APIKey, error) {
	ks, err := s.st.ListKeys(ctx, tenant)
	if err != nil {
		return nil, &store.OpError{Op: "list keys", Err: err}
	}
	return ks, nil
}

// Revoke deletes a tenant's key named by ref: its id when ref has an id's
// form (no name has), else its name. The key stops working at once on
// every central. A key that is not the tenant's is store.ErrNotFound.
func (s *Service) Revoke(ctx context.Context, tenant, ref string) (*store.APIKey, error) {
	var (
		k   *store.APIKey
		err error
	)
	if store.LooksLikeKeyID(ref) {
		k, err = s.st.GetKey(ctx, tenant, ref)
	} else {
		k, err = s.st.KeyByName(ctx, tenant, ref)
	}
	if err == nil {
		err = s.st.DeleteKey(ctx, tenant, k.ID)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, err
	case err != nil:
		return nil, &store.OpError{Op: "revoke key", Err: err}
	}
	s.log.Info("api key revoked", "tenant", tenant, "key", k.ID, "name", k.Name)
	return k, nil
}

// Authenticate finds whose key token is: the key and its tenant, or
// ErrUnknown for a key that does not exist or has expired. A disabled
// tenant is returned too, for the caller to refuse. The key's last_used_at
// is written when the record shows it more than TouchEvery old; a failure
// to write it is logged, never the caller's.
func (s *Service) Authenticate(ctx context.Context, token string) (*store.APIKey, *store.Tenant, error) {
	k, t, err := s.st.KeyByToken(ctx, store.HashToken(token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, nil, ErrUnknown
	case err != nil:
		return nil, nil, &store.OpError{Op: "look up the key", Err: err}
	}
	now := s.now().UTC()
	if k.Expired(now) {
		return nil, nil, ErrUnknown
	}
	if k.LastUsedAt.IsZero() || now.Sub(k.LastUsedAt) >= TouchEvery {
		wrote, err := s.st.TouchKey(ctx, t.ID, k.ID, now, TouchEvery)
		switch {
		case err != nil:
			s.log.Warn("note when an api key was used", "tenant", t.ID, "key", k.ID, "error", err)
		case wrote:
			k.LastUsedAt = now
		}
	}
	return k, t, nil
}
