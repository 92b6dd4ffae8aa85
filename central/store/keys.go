package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Tenants' named API keys (docs/tenancy.md, "API keys"). Keys, next to those in crud.go:
//
//	P api-keys/<tenant>/<id>                 APIKey
//	P api-key-names/<tenant>/<name>          key id (unique name within the tenant)
//	P api-key-tokens/<sha256>                <tenant>/<id> (token index)
//
// A bearer key is found through its token index in one read, then its record and its
// tenant in one more (KeyByToken). Nothing caches them, so a key revoked through any central
// is refused by every central from the revoking transaction on. The limit of keys per tenant
// is checked in the creating transaction, and deleting a tenant deletes its keys with it.

// Bounds of API keys; schemas/fleet-openapi.yaml gives the same (a test holds them together).
const (
	MaxKeysPerTenant  = 50
	MaxKeyNameLen     = 63
	MaxKeyExpiresDays = 3650
)

// KeyIDPrefix starts every key id.
const KeyIDPrefix = "key-"

// keyIDRE is the form of a key id; no key name may have it (in any letter case), so a
// reference to a key is an id or a name, never both.
var keyIDRE = regexp.MustCompile(`(?i)^key-[0-9a-f]{16}$`)

// LooksLikeKeyID reports whether ref has the form of a key id.
func LooksLikeKeyID(ref string) bool { return keyIDRE.MatchString(ref) }

// NewToken returns a bearer secret: prefix and 43 base64url characters (256 random bits).
// The store keeps only its HashToken.
func NewToken(prefix string) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// APIKey is a tenant's named API key as the store keeps it: the key the API shows
// (sdk.APIKey, the one definition of its fields) and, stored beside them, what no answer
// carries: whose key it is (answers are always about one tenant's keys) and the key itself,
// only as a SHA-256 hex digest.
type APIKey struct {
	sdk.APIKey
	Tenant      string `json:"tenant"`
	TokenSHA256 string `json:"token_sha256"`
}

// Expired reports whether the key no longer works at now.
func (k *APIKey) Expired(now time.Time) bool {
	return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt)
}

// CheckKeyName refuses a key name the store would not keep: not a valid name, longer than
// MaxKeyNameLen, or of a key id's form.
func CheckKeyName(name string) error {
	switch {
	case !ValidName(name) || len(name) > MaxKeyNameLen:
		return fmt.Errorf("%w: key name %q: use 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit",
			ErrInvalid, jsonapi.Echo(name), MaxKeyNameLen)
	case LooksLikeKeyID(name):
		return fmt.Errorf("%w: key name %q has the form of a key id (%s and 16 hex digits), which a key is also revoked by",
			ErrInvalid, name, KeyIDPrefix)
	}
	return nil
}

// Validate checks what the store relies on.
func (k *APIKey) Validate() error {
	if err := CheckKeyName(k.Name); err != nil {
		return err
	}
	if !LooksLikeKeyID(k.ID) || k.ID != strings.ToLower(k.ID) {
		return fmt.Errorf("%w: key %s: id %q is not %s and 16 lowercase hex digits", ErrInvalid, k.Name, jsonapi.Echo(k.ID), KeyIDPrefix)
	}
	if err := checkName("tenant id", k.Tenant); err != nil {
		return err
	}
	if !sha256HexRE.MatchString(k.TokenSHA256) {
		return fmt.Errorf("%w: key %s: token_sha256 must be 64 lowercase hex digits", ErrInvalid, k.Name)
	}
	return nil
}

func (s *Store) keyPrefix(tenant string) string  { return s.prefix + "api-keys/" + tenant + "/" }
func (s *Store) keyKey(tenant, id string) string { return s.keyPrefix(tenant) + id }
func (s *Store) keyNamePrefix(tenant string) string {
	return s.prefix + "api-key-names/" + tenant + "/"
}
func (s *Store) keyNameKey(tenant, name string) string { return s.keyNamePrefix(tenant) + name }
func (s *Store) keyTokenKey(hash string) string        { return s.prefix + "api-key-tokens/" + hash }

// CreateKey stores a new key of k.Tenant with its name and token indexes, in one transaction
// that compares what it read: the tenant exists, the name, token and id are free, and no key
// of the tenant appeared since the tenant's keys were counted. An empty ID becomes "key-" +
// 16 random hex digits. Errors: ErrNotFound (no such tenant), ErrExists (the name, or the
// token, is taken), a *QuotaError with Field "api_keys" (the tenant has MaxKeysPerTenant).
func (s *Store) CreateKey(ctx context.Context, k *APIKey) error {
	if k.ID == "" {
		k.ID = newID(KeyIDPrefix)
	}
	if err := k.Validate(); err != nil {
		return err
	}
	what := "create key " + k.Name
	tk, kp, key, nk, hk := s.tenantKey(k.Tenant), s.keyPrefix(k.Tenant), s.keyKey(k.Tenant, k.ID), s.keyNameKey(k.Tenant, k.Name), s.keyTokenKey(k.TokenSHA256)
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Txn(ctx).Then(
			clientv3.OpGet(tk, clientv3.WithKeysOnly()), clientv3.OpGet(kp, clientv3.WithPrefix(), clientv3.WithCountOnly()),
			clientv3.OpGet(nk, clientv3.WithCountOnly()), clientv3.OpGet(hk, clientv3.WithCountOnly()),
		).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		tkvs := r.Responses[0].GetResponseRange().Kvs
		switch n := r.Responses[1].GetResponseRange().Count; {
		case len(tkvs) == 0:
			return false, fmt.Errorf("%s: tenant %s: %w", what, k.Tenant, ErrNotFound)
		case r.Responses[2].GetResponseRange().Count > 0:
			return false, fmt.Errorf("%s: name %w", what, ErrExists)
		case r.Responses[3].GetResponseRange().Count > 0:
			return false, fmt.Errorf("%s: token %w", what, ErrExists)
		case n >= MaxKeysPerTenant:
			return false, fmt.Errorf("%s: %w", what, &QuotaError{Field: "api_keys", Limit: MaxKeysPerTenant, Used: n, Asked: 1})
		}
		cmps := unchanged(r.Header.Revision, []readKey{{tk, tkvs[0].ModRevision}, {nk, 0}, {hk, 0}, {key, 0}}, kp)
		w, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(
			clientv3.OpPut(key, mustJSON(k)), clientv3.OpPut(nk, k.ID), clientv3.OpPut(hk, k.Tenant+"/"+k.ID),
		).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return w.Succeeded, nil
	})
}

// ListKeys reads a tenant's keys, by name.
func (s *Store) ListKeys(ctx context.Context, tenant string) ([]APIKey, error) {
	ks, err := listJSON[APIKey](ctx, s, s.keyPrefix(tenant))
	if err != nil {
		return nil, fmt.Errorf("list the keys of tenant %s: %w", tenant, err)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i].Name < ks[j].Name })
	return ks, nil
}

// GetKey reads a tenant's key by id.
func (s *Store) GetKey(ctx context.Context, tenant, id string) (*APIKey, error) {
	if !ValidName(id) {
		return nil, fmt.Errorf("get key: %w", ErrNotFound)
	}
	k, _, err := getJSON[APIKey](ctx, s, s.keyKey(tenant, id))
	if err != nil {
		return nil, fmt.Errorf("get key %s: %w", id, err)
	}
	return k, nil
}

// KeyByName reads a tenant's key through its name index.
func (s *Store) KeyByName(ctx context.Context, tenant, name string) (*APIKey, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("get key: %w", ErrNotFound)
	}
	r, err := s.client.Get(ctx, s.keyNameKey(tenant, name))
	if err != nil {
		return nil, fmt.Errorf("get key %s: %w", name, err)
	}
	if len(r.Kvs) == 0 {
		return nil, fmt.Errorf("get key %s: %w", name, ErrNotFound)
	}
	k, err := s.GetKey(ctx, tenant, string(r.Kvs[0].Value))
	if err == nil && k.Name != name { // renamed between the two reads: keys are not renamed, but be exact
		err = fmt.Errorf("get key %s: %w", name, ErrNotFound)
	}
	return k, err
}

// KeyByToken finds a key by the SHA-256 hex of the key itself, with its tenant: the token
// index in one read, then the key's record and the tenant's in one transaction. Expired keys
// and disabled tenants are returned too: the caller decides (and must refuse them).
func (s *Store) KeyByToken(ctx context.Context, tokenSHA256 string) (*APIKey, *Tenant, error) {
	const what = "look up key"
	r, err := s.client.Get(ctx, s.keyTokenKey(tokenSHA256))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(r.Kvs) == 0 {
		return nil, nil, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	tenant, id, _ := strings.Cut(string(r.Kvs[0].Value), "/")
	rr, err := s.client.Txn(ctx).Then(clientv3.OpGet(s.keyKey(tenant, id)), clientv3.OpGet(s.tenantKey(tenant))).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	var k APIKey
	var t Tenant
	krev, err := decodeOne(rr.Responses[0].GetResponseRange().Kvs, &k)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	trev, err := decodeOne(rr.Responses[1].GetResponseRange().Kvs, &t)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	// A key revoked (or a tenant deleted) between the two reads finds nothing.
	if krev == 0 || trev == 0 || k.TokenSHA256 != tokenSHA256 || k.Tenant != t.ID {
		return nil, nil, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return &k, &t, nil
}

// DeleteKey removes a tenant's key and its indexes in one transaction: from its revision
// on, the key finds nothing on any central.
func (s *Store) DeleteKey(ctx context.Context, tenant, id string) error {
	key := s.keyKey(tenant, id)
	what := "delete key " + id
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		k, rev, err := getJSON[APIKey](ctx, s, key)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(
			clientv3.OpDelete(key), clientv3.OpDelete(s.keyNameKey(tenant, k.Name)), clientv3.OpDelete(s.keyTokenKey(k.TokenSHA256)),
		).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return r.Succeeded, nil
	})
}

// TouchKey sets a key's last_used_at to at, unless it was set less than every before at.
// It compares the record as read, so of centrals touching one key at once one writes, and a
// key revoked meanwhile stays revoked. It reports whether it wrote; a key that is gone is
// not an error (nothing to touch).
func (s *Store) TouchKey(ctx context.Context, tenant, id string, at time.Time, every time.Duration) (bool, error) {
	key := s.keyKey(tenant, id)
	k, rev, err := getJSON[APIKey](ctx, s, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("touch key %s: %w", id, err)
	}
	if !k.LastUsedAt.IsZero() && at.Sub(k.LastUsedAt) < every {
		return false, nil
	}
	k.LastUsedAt = at.UTC()
	r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(clientv3.OpPut(key, mustJSON(k))).Commit()
	if err != nil {
		return false, fmt.Errorf("touch key %s: %w", id, err)
	}
	return r.Succeeded, nil
}
