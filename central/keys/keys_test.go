package keys

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

func days(n int) *int { return &n }

// setup is a service on a real etcd whose clock is *now (the tests move it
// from one goroutine), and a tenant.
func setup(t *testing.T) (*Service, *store.Store, *time.Time, *store.Tenant) {
	st := storetest.Open(t)
	now := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	return New(st, func() time.Time { return now }, hclog.NewNullLogger()), st, &now, storetest.Tenant(t, st, "acme")
}

// TestCreateShowsTheKeyOnceAndKeepsOnlyItsDigest: a key is fvk_ and 43
// characters, the store holds its SHA-256 and not the key, it expires in
// 90 days unless told (0: never; up to 3650), and bad names and days are
// refused before anything is written.
func TestCreateShowsTheKeyOnceAndKeepsOnlyItsDigest(t *testing.T) {
	ctx := context.Background()
	svc, st, now, acme := setup(t)
	k, token, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "ci-github"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(token, sdk.APIKeyPrefix) || len(token) != len(sdk.APIKeyPrefix)+43 {
		t.Fatalf("key %q: want fvk_ and 43 characters", token)
	}
	stored, err := st.GetKey(ctx, acme.ID, k.ID)
	if err != nil || stored.TokenSHA256 != store.HashToken(token) || stored.ReadOnly {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	if !strings.HasPrefix(k.ID, store.KeyIDPrefix) || !stored.CreatedAt.Equal(*now) || !stored.ExpiresAt.Equal(now.AddDate(0, 0, 90)) {
		t.Fatalf("created %+v: want an id, created now and expiring in 90 days", stored)
	}
	never, _, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "grafana", ReadOnly: true, ExpiresDays: days(0)})
	if err != nil || !never.ExpiresAt.IsZero() || !never.ReadOnly {
		t.Fatalf("read-only key that never expires: %+v, %v", never, err)
	}
	longest, _, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "decade", ExpiresDays: days(store.MaxKeyExpiresDays)})
	if err != nil || !longest.ExpiresAt.Equal(now.AddDate(0, 0, store.MaxKeyExpiresDays)) {
		t.Fatalf("a key of %d days: %+v, %v", store.MaxKeyExpiresDays, longest, err)
	}
	for _, req := range []sdk.CreateKeyRequest{
		{Name: "x", ExpiresDays: days(-1)}, {Name: "x", ExpiresDays: days(store.MaxKeyExpiresDays + 1)},
		{Name: ""}, {Name: "key-0123456789abcdef"}, {Name: strings.Repeat("n", 64)}, {Name: "a b"},
	} {
		if _, _, err := svc.Create(ctx, acme.ID, req); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("create %q for %v days: %v, want ErrInvalid", req.Name, req.ExpiresDays, err)
		}
	}
	if _, _, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "ci-github"}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("a name taken: %v", err)
	}
	if _, _, err := svc.Create(ctx, "t-gone", sdk.CreateKeyRequest{Name: "x"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a key of no tenant: %v", err)
	}
	if ks, err := svc.List(ctx, acme.ID); err != nil || len(ks) != 3 {
		t.Fatalf("list: %+v, %v, want the 3 keys made", ks, err)
	}
}

// TestAuthenticateRefusesExpiredRevokedAndUnknownKeysAlike: a key works
// until the instant it expires and not from then on; a revoked key and a
// key never made are refused with the same error; a disabled tenant's key
// comes back with the tenant disabled, for the caller to refuse.
func TestAuthenticateRefusesExpiredRevokedAndUnknownKeysAlike(t *testing.T) {
	ctx := context.Background()
	svc, st, now, acme := setup(t)
	_, shortLived, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "short", ExpiresDays: days(1)})
	if err != nil {
		t.Fatal(err)
	}
	k, tn, err := svc.Authenticate(ctx, shortLived)
	if err != nil || k.Name != "short" || tn.ID != acme.ID {
		t.Fatalf("a fresh key: %+v %+v %v", k, tn, err)
	}
	*now = now.Add(24*time.Hour - time.Second)
	if _, _, err := svc.Authenticate(ctx, shortLived); err != nil {
		t.Fatalf("a second before it expires: %v", err)
	}
	*now = now.Add(time.Second)
	if _, _, err := svc.Authenticate(ctx, shortLived); !errors.Is(err, ErrUnknown) {
		t.Fatalf("at its expiry: %v, want ErrUnknown", err)
	}
	if _, _, err := svc.Authenticate(ctx, sdk.APIKeyPrefix+strings.Repeat("x", 43)); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a key never made: %v, want ErrUnknown", err)
	}
	_, revoked, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "revoked"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Revoke(ctx, acme.ID, "revoked"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Authenticate(ctx, revoked); !errors.Is(err, ErrUnknown) {
		t.Fatalf("a revoked key: %v, want ErrUnknown", err)
	}

	_, token, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateTenant(ctx, acme.ID, func(t *store.Tenant) error { t.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, tn, err := svc.Authenticate(ctx, token); err != nil || !tn.Disabled {
		t.Fatalf("a disabled tenant's key: %+v, %v: want the tenant, disabled", tn, err)
	}
}

// countingStore counts the touches the service asks of the store and the
// writes they made.
type countingStore struct {
	*store.Store
	calls, writes atomic.Int32
}

func (c *countingStore) TouchKey(ctx context.Context, tenant, id string, at time.Time, every time.Duration) (bool, error) {
	c.calls.Add(1)
	wrote, err := c.Store.TouchKey(ctx, tenant, id, at, every)
	if wrote {
		c.writes.Add(1)
	}
	return wrote, err
}

// TestLastUsedIsWrittenAtMostOnceAMinute: a hundred uses within a minute
// write last_used_at once, and after the first the service does not even
// ask the store; the first use after the minute writes again.
func TestLastUsedIsWrittenAtMostOnceAMinute(t *testing.T) {
	ctx := context.Background()
	st := &countingStore{Store: storetest.Open(t)}
	now := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	svc := New(st, func() time.Time { return now }, hclog.NewNullLogger())
	acme := storetest.Tenant(t, st.Store, "acme")
	k, token, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "ci"})
	if err != nil {
		t.Fatal(err)
	}
	if !k.LastUsedAt.IsZero() {
		t.Fatalf("a new key has been used at %v", k.LastUsedAt)
	}
	use := func(n int) {
		t.Helper()
		for range n {
			if _, _, err := svc.Authenticate(ctx, token); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := now
	use(100)
	now = now.Add(59 * time.Second)
	use(100)
	if st.calls.Load() != 1 || st.writes.Load() != 1 {
		t.Fatalf("200 uses within a minute: %d touches asked, %d written; want 1 and 1", st.calls.Load(), st.writes.Load())
	}
	now = now.Add(time.Second)
	use(10)
	if st.writes.Load() != 2 {
		t.Fatalf("uses a minute later wrote %d times in all, want 2", st.writes.Load())
	}
	stored, err := st.GetKey(ctx, acme.ID, k.ID)
	if err != nil || !stored.LastUsedAt.Equal(start.Add(time.Minute)) {
		t.Fatalf("last_used_at %v (%v), want %v", stored.LastUsedAt, err, start.Add(time.Minute))
	}
}

// TestRevokeTakesAnIDOrANameOfTheTenantsOwnKeys: a key is revoked by its id
// or its name; another tenant's key is not found by either, nor is a key
// already revoked, and it keeps working.
func TestRevokeTakesAnIDOrANameOfTheTenantsOwnKeys(t *testing.T) {
	ctx := context.Background()
	svc, st, _, acme := setup(t)
	other := storetest.Tenant(t, st, "other")
	byID, _, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "by-id"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.Create(ctx, acme.ID, sdk.CreateKeyRequest{Name: "by-name"}); err != nil {
		t.Fatal(err)
	}
	theirs, theirToken, err := svc.Create(ctx, other.ID, sdk.CreateKeyRequest{Name: "theirs"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{theirs.ID, "theirs", "key-ffffffffffffffff", "no/such"} {
		if _, err := svc.Revoke(ctx, acme.ID, ref); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("revoke %q as acme: %v, want ErrNotFound", ref, err)
		}
	}
	if _, _, err := svc.Authenticate(ctx, theirToken); err != nil {
		t.Fatalf("another tenant's key after acme's tries: %v", err)
	}
	if k, err := svc.Revoke(ctx, acme.ID, byID.ID); err != nil || k.Name != "by-id" {
		t.Fatalf("revoke by id: %+v, %v", k, err)
	}
	if k, err := svc.Revoke(ctx, acme.ID, "by-name"); err != nil || k.Name != "by-name" {
		t.Fatalf("revoke by name: %+v, %v", k, err)
	}
	if _, err := svc.Revoke(ctx, acme.ID, "by-name"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("revoked twice: %v", err)
	}
	if ks, err := svc.List(ctx, acme.ID); err != nil || len(ks) != 0 {
		t.Fatalf("acme's keys after revoking both: %+v, %v", ks, err)
	}
}
