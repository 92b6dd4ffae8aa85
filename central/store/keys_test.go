package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testKey is a key of tenant named name, whose token is "fvk_" + tenant + name.
func testKey(tenant *Tenant, name string) *APIKey {
	return &APIKey{APIKey: sdk.APIKey{Name: name, CreatedAt: time.Now().UTC()}, Tenant: tenant.ID, TokenSHA256: HashToken("fvk_" + tenant.ID + name)}
}

// atOnce runs do n times at once, the even calls through a and the odd ones
// through b (two centrals on one etcd), and waits for them.
func atOnce(n int, a, b *Store, do func(i int, st *Store)) {
	var wg sync.WaitGroup
	for i := range n {
		st := a
		if i%2 == 1 {
			st = b
		}
		wg.Go(func() { do(i, st) })
	}
	wg.Wait()
}

// TestCreateKeyStopsAtTheLimitAcrossTwoCentrals: with 45 keys, 20 creates at
// once through two stores on one etcd make exactly 5 more; the others are
// refused with the limit, and the tenant holds exactly 50.
func TestCreateKeyStopsAtTheLimitAcrossTwoCentrals(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	peer := openPeer(t, s, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	for i := range MaxKeysPerTenant - 5 {
		if err := s.CreateKey(ctx, testKey(acme, fmt.Sprintf("k%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var made, refused atomic.Int32
	atOnce(20, s, peer, func(i int, st *Store) {
		err := st.CreateKey(ctx, testKey(acme, fmt.Sprintf("burst%d", i)))
		var qe *QuotaError
		switch {
		case err == nil:
			made.Add(1)
		case errors.As(err, &qe) && errors.Is(err, ErrQuota) && qe.Field == "api_keys" && qe.Limit == MaxKeysPerTenant:
			refused.Add(1)
		default:
			t.Errorf("create %d: %v", i, err)
		}
	})
	ks, err := s.ListKeys(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	if made.Load() != 5 || refused.Load() != 15 || len(ks) != MaxKeysPerTenant {
		t.Fatalf("made %d, refused %d, the tenant holds %d keys; want 5, 15 and %d", made.Load(), refused.Load(), len(ks), MaxKeysPerTenant)
	}
	// Another tenant is not held to acme's count.
	if err := s.CreateKey(ctx, testKey(testTenant(t, s, "other", sdk.Quotas{}), "k0")); err != nil {
		t.Fatal(err)
	}
}

// TestKeyNamesAreUniqueWithinATenantAndNeverLookLikeIDs: a name taken in the
// tenant is ErrExists, the same name in another tenant is fine, a name of a
// key id's form (in any case), too long or with a '/' is ErrInvalid, and a
// key of a tenant that does not exist is ErrNotFound. Nothing refused is
// written.
func TestKeyNamesAreUniqueWithinATenantAndNeverLookLikeIDs(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	acme, other := testTenant(t, s, "acme", sdk.Quotas{}), testTenant(t, s, "other", sdk.Quotas{})
	if err := s.CreateKey(ctx, testKey(acme, "ci")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, testKey(other, "ci")); err != nil {
		t.Fatalf("the same name in another tenant: %v", err)
	}
	taken := testKey(acme, "ci")
	taken.TokenSHA256 = HashToken("another")
	if err := s.CreateKey(ctx, taken); !errors.Is(err, ErrExists) {
		t.Fatalf("a name taken: %v, want ErrExists", err)
	}
	for _, name := range []string{"key-0123456789abcdef", "KEY-0123456789ABCDEF", strings.Repeat("a", MaxKeyNameLen+1), "a/b", "", "-x"} {
		if err := s.CreateKey(ctx, testKey(acme, name)); !errors.Is(err, ErrInvalid) {
			t.Errorf("name %q: %v, want ErrInvalid", name, err)
		}
	}
	if err := s.CreateKey(ctx, testKey(acme, strings.Repeat("a", MaxKeyNameLen))); err != nil {
		t.Errorf("a name of %d characters: %v", MaxKeyNameLen, err)
	}
	if err := s.CreateKey(ctx, &APIKey{APIKey: sdk.APIKey{Name: "x"}, Tenant: "t-gone", TokenSHA256: HashToken("x")}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a key of no tenant: %v, want ErrNotFound", err)
	}
	if ks, err := s.ListKeys(ctx, acme.ID); err != nil || len(ks) != 2 || ks[0].Name != strings.Repeat("a", MaxKeyNameLen) || ks[1].Name != "ci" {
		t.Fatalf("acme's keys %+v, %v", ks, err)
	}
	if r, err := s.client.Get(ctx, s.prefix+"api-key", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 3*3 {
		t.Fatalf("%d keys stored under api-key*, want 9 (three keys with their two indexes): %v", r.Count, err)
	}
}

// keyOnTwoCentrals opens two stores on one etcd and makes tenant acme's key
// "ci" through the first.
func keyOnTwoCentrals(t *testing.T) (s, peer *Store, acme *Tenant, k *APIKey) {
	s = openEmbedded(t, Options{})
	peer = openPeer(t, s, Options{})
	acme = testTenant(t, s, "acme", sdk.Quotas{})
	k = testKey(acme, "ci")
	if err := s.CreateKey(testCtx(t), k); err != nil {
		t.Fatal(err)
	}
	return s, peer, acme, k
}

// TestARevokedKeyFindsNothingOnEveryCentral: a key is found by its token
// with its tenant, by id and by name; once deleted through one store,
// another store on the same etcd finds nothing by any of them, and the name
// may be used again.
func TestARevokedKeyFindsNothingOnEveryCentral(t *testing.T) {
	ctx := testCtx(t)
	s, peer, acme, k := keyOnTwoCentrals(t)
	got, tn, err := peer.KeyByToken(ctx, k.TokenSHA256)
	if err != nil || got.ID != k.ID || got.Name != "ci" || tn.ID != acme.ID || tn.Name != "acme" {
		t.Fatalf("by token: %+v %+v %v", got, tn, err)
	}
	if byName, err := peer.KeyByName(ctx, acme.ID, "ci"); err != nil || byName.ID != k.ID {
		t.Fatalf("by name: %+v %v", byName, err)
	}
	if err := s.DeleteKey(ctx, acme.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := peer.KeyByToken(ctx, k.TokenSHA256); !errors.Is(err, ErrNotFound) {
		t.Fatalf("by token after the revoke: %v", err)
	}
	if _, err := peer.GetKey(ctx, acme.ID, k.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("by id after the revoke: %v", err)
	}
	if _, err := peer.KeyByName(ctx, acme.ID, "ci"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("by name after the revoke: %v", err)
	}
	if err := s.DeleteKey(ctx, acme.ID, k.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoked twice: %v", err)
	}
	again := testKey(acme, "ci")
	again.TokenSHA256 = HashToken("new")
	if err := s.CreateKey(ctx, again); err != nil {
		t.Fatalf("the name of a revoked key: %v", err)
	}
}

// TestDeletingATenantDeletesItsKeysAndRotatingItsTokenKeepsThem: rotating
// the primary token leaves the keys working; deleting the tenant leaves no
// key, name or token index of it, and another tenant's keys stay.
func TestDeletingATenantDeletesItsKeysAndRotatingItsTokenKeepsThem(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	acme, other := testTenant(t, s, "acme", sdk.Quotas{}), testTenant(t, s, "other", sdk.Quotas{})
	var keys []*APIKey
	for _, name := range []string{"ci", "grafana", "laptop"} {
		k := testKey(acme, name)
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	kept := testKey(other, "ci")
	if err := s.CreateKey(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RotateTenantToken(ctx, acme.ID, HashToken("fvt_rotated")); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, _, err := s.KeyByToken(ctx, k.TokenSHA256); err != nil {
			t.Fatalf("key %s after the token's rotation: %v", k.Name, err)
		}
	}
	if err := s.DeleteTenant(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, _, err := s.KeyByToken(ctx, k.TokenSHA256); !errors.Is(err, ErrNotFound) {
			t.Fatalf("key %s of a deleted tenant: %v", k.Name, err)
		}
	}
	r, err := s.client.Get(ctx, s.prefix+"api-key", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.Kvs {
		for _, k := range keys {
			if strings.Contains(string(kv.Key), acme.ID) || strings.HasSuffix(string(kv.Key), k.TokenSHA256) {
				t.Errorf("left behind: %s", kv.Key)
			}
		}
	}
	if len(r.Kvs) != 3 {
		t.Errorf("%d keys stored under api-key*, want other's key with its two indexes", len(r.Kvs))
	}
	if _, _, err := s.KeyByToken(ctx, kept.TokenSHA256); err != nil {
		t.Fatalf("another tenant's key: %v", err)
	}
}

// TestTouchKeyWritesAtMostOnceAMinute: the first use is written, a use
// within the minute is not, one after it is; of two centrals touching at
// once one writes; a key revoked is not brought back by a touch.
func TestTouchKeyWritesAtMostOnceAMinute(t *testing.T) {
	ctx := testCtx(t)
	s, peer, acme, k := keyOnTwoCentrals(t)
	t0 := time.Date(2026, 12, 3, 14, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want bool
	}{{t0, true}, {t0.Add(59 * time.Second), false}, {t0.Add(time.Minute), true}, {t0.Add(90 * time.Second), false}} {
		wrote, err := s.TouchKey(ctx, acme.ID, k.ID, c.at, time.Minute)
		if err != nil || wrote != c.want {
			t.Fatalf("touch at %v: wrote %v (%v), want %v", c.at.Sub(t0), wrote, err, c.want)
		}
	}
	if got, err := s.GetKey(ctx, acme.ID, k.ID); err != nil || !got.LastUsedAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("last_used_at %v (%v), want %v", got.LastUsedAt, err, t0.Add(time.Minute))
	}

	var wrote atomic.Int32
	atOnce(8, s, peer, func(_ int, st *Store) {
		ok, err := st.TouchKey(ctx, acme.ID, k.ID, t0.Add(5*time.Minute), time.Minute)
		if err != nil {
			t.Error(err)
		}
		if ok {
			wrote.Add(1)
		}
	})
	if wrote.Load() != 1 {
		t.Fatalf("8 touches at once through two centrals wrote %d times, want 1", wrote.Load())
	}

	if err := s.DeleteKey(ctx, acme.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.TouchKey(ctx, acme.ID, k.ID, t0.Add(time.Hour), time.Minute); ok || err != nil {
		t.Fatalf("touch of a revoked key: %v %v", ok, err)
	}
	if _, err := s.GetKey(ctx, acme.ID, k.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a touch brought a revoked key back: %v", err)
	}
}
