package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestTenantSubnetIndexIsAssignedOnceAndKept: the first call assigns the lowest free
// index, later calls (on any central) return the same; concurrent first calls of eight
// tenants on two centrals get eight different indexes; an unknown tenant is ErrNotFound.
func TestTenantSubnetIndexIsAssignedOnceAndKept(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	peer := openPeer(t, s, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	globex := testTenant(t, s, "globex", sdk.Quotas{})
	for _, c := range []struct {
		st     *Store
		tenant string
		want   int
	}{{s, acme.ID, 0}, {s, globex.ID, 1}, {peer, acme.ID, 0}, {peer, globex.ID, 1}} {
		n, err := c.st.TenantSubnetIndex(ctx, c.tenant)
		if err != nil || n != c.want {
			t.Fatalf("TenantSubnetIndex(%s) = %d, %v; want %d", c.tenant, n, err, c.want)
		}
	}
	if _, err := s.TenantSubnetIndex(ctx, "no-such-tenant"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown tenant: %v, want ErrNotFound", err)
	}

	var tenants []string
	for i := range 8 {
		tenants = append(tenants, testTenant(t, s, fmt.Sprintf("t%d", i), sdk.Quotas{}).ID)
	}
	got := make([]int, len(tenants))
	var wg sync.WaitGroup
	for i, id := range tenants {
		wg.Go(func() {
			st := s
			if i%2 == 1 {
				st = peer
			}
			n, err := st.TenantSubnetIndex(ctx, id)
			if err != nil {
				t.Errorf("TenantSubnetIndex(%s): %v", id, err)
			}
			got[i] = n
		})
	}
	wg.Wait()
	seen := map[int]bool{0: true, 1: true}
	for i, n := range got {
		if seen[n] || n < 0 || n >= MaxTenantSubnets {
			t.Errorf("tenant %d got index %d, given twice or out of range (all: %v)", i, n, got)
		}
		seen[n] = true
		if again, err := s.TenantSubnetIndex(ctx, tenants[i]); err != nil || again != n {
			t.Errorf("tenant %d: %d, then %d (%v)", i, n, again, err)
		}
	}
}

// TestTenantSubnetIndexOfADeletedTenantIsReused: once every index is held, a new tenant
// gets ErrNoSubnet; after a tenant is deleted its index goes to the next tenant that asks,
// and the deleted tenant's record of it goes in the same transaction.
func TestTenantSubnetIndexOfADeletedTenantIsReused(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	var ids []string
	for i := range MaxTenantSubnets {
		id := testTenant(t, s, fmt.Sprintf("t%d", i), sdk.Quotas{}).ID
		if n, err := s.TenantSubnetIndex(ctx, id); err != nil || n != i {
			t.Fatalf("tenant %d: index %d, %v", i, n, err)
		}
		ids = append(ids, id)
	}
	late := testTenant(t, s, "late", sdk.Quotas{}).ID
	if _, err := s.TenantSubnetIndex(ctx, late); !errors.Is(err, ErrNoSubnet) {
		t.Fatalf("with every index held: %v, want ErrNoSubnet", err)
	}
	if err := s.DeleteTenant(ctx, ids[37]); err != nil {
		t.Fatal(err)
	}
	if n, err := s.TenantSubnetIndex(ctx, late); err != nil || n != 37 {
		t.Fatalf("after deleting the holder of 37: %d, %v; want 37", n, err)
	}
	r, err := s.Client().Get(ctx, s.tenantSubnetKey(ids[37]))
	if err != nil || len(r.Kvs) != 0 {
		t.Errorf("the deleted tenant's index record is still there (%v)", err)
	}
}
