package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// warmMembers makes a pool with n warm members, each with a running ledger entry of the
// pool's owner on node (as the pool loop leaves them).
func warmMembers(t *testing.T, s *Store, tenant, pool, node string, n int) {
	t.Helper()
	ctx := testCtx(t)
	if err := s.CreatePool(ctx, &Pool{Pool: sdk.Pool{Name: pool, Tenant: tenant, Image: "img", VCPUs: 1, MemoryMiB: 512, Size: n, MaxSize: n}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("pool-%s-%d", pool, i)
		res, err := s.Reserve(ctx, ReserveRequest{Tenant: tenant, Node: node, VCPUs: 1, MemoryMiB: 512})
		if err != nil {
			t.Fatal(err)
		}
		e, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-" + id, Name: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CreateMember(ctx, &PoolMember{ID: id, Pool: pool, Tenant: tenant, Node: node, VMID: "vm-" + id,
			EntryID: e.ID, State: MemberWarm, CreatedAt: time.Now().UTC()}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClaimHandsOutEachMemberOnce: 50 claims at once against 5 warm members, from two
// centrals: exactly 5 succeed, each with a different member, the rest find none warm.
func TestClaimHandsOutEachMemberOnce(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, Options{})
	testNode(t, a, "n1", 64, 65536, 0)
	tn := testTenant(t, a, "acme", sdk.Quotas{})
	warmMembers(t, a, tn.ID, "ci", "n1", 5)

	var mu sync.Mutex
	got := map[string]int{}
	empty := 0
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := []*Store{a, b}[i%2]
			c, err := st.ClaimMember(testCtx(t), ClaimRequest{PoolTenant: tn.ID, Pool: "ci", Tenant: tn.ID})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				got[c.Member.ID]++
			case errors.Is(err, ErrNoWarm):
				empty++
			default:
				t.Errorf("claim: %v", err)
			}
		}()
	}
	wg.Wait()
	if len(got) != 5 || empty != 45 {
		t.Fatalf("claims: %v, %d found none warm; want 5 distinct and 45", got, empty)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("member %s handed out %d times", id, n)
		}
	}
	ms, err := a.ListMembers(testCtx(t), tn.ID, "ci")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.State != MemberClaimed || m.ClaimedBy != tn.ID {
			t.Errorf("member %+v after the claims", m)
		}
	}
}

// TestClaimFromSharedPoolMovesTheVMIntoTheTenant: the operator's entry ends, the tenant's
// starts at the claim, the tenant's usage counts the VM, a quota is respected, and the
// recount agrees with the counters.
func TestClaimFromSharedPoolMovesTheVMIntoTheTenant(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := testCtx(t)
	testNode(t, s, "n1", 64, 65536, 0)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 1})
	warmMembers(t, s, "", "shared", "n1", 3)

	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	c, err := s.ClaimMember(ctx, ClaimRequest{Pool: "shared", Tenant: tn.ID, Now: at})
	if err != nil {
		t.Fatal(err)
	}
	if c.Entry.Tenant != tn.ID || !c.Entry.StartedAt.Equal(at) || c.Member.EntryID != c.Entry.ID {
		t.Fatalf("claimed entry %+v, member %+v", c.Entry, c.Member)
	}
	u, err := s.TenantUsage(ctx, tn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.Running.VMs != 1 || u.Running.MemoryMiB != 512 {
		t.Fatalf("tenant usage after the claim: %+v", u)
	}
	es, err := s.ListEntries(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, e := range es {
		if e.EndReason == "claimed" && e.Tenant == "" && e.VMID == c.Member.VMID {
			ended++
		}
	}
	if ended != 1 {
		t.Fatalf("the operator's entry of the claimed vm did not end as claimed: %+v", es)
	}
	// max_vms 1 is reached: the next claim is refused by quota and hands nothing out.
	_, err = s.ClaimMember(ctx, ClaimRequest{Pool: "shared", Tenant: tn.ID})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Field != "max_vms" {
		t.Fatalf("claim over quota: %v", err)
	}
	ms, _ := s.ListMembers(ctx, "", "shared")
	warm := 0
	for _, m := range ms {
		if m.State == MemberWarm {
			warm++
		}
	}
	if warm != 2 {
		t.Fatalf("%d warm after a refused claim, want 2", warm)
	}
	rep, err := s.Recount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Fixed) != 0 {
		t.Fatalf("the claim left counters the recount fixed: %+v", rep.Fixed)
	}
	// A pool being deleted hands nothing out.
	if _, err := s.UpdatePool(ctx, "", "shared", func(p *Pool) error { p.Deleting = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimMember(ctx, ClaimRequest{Pool: "shared"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("claim from a pool being deleted: %v", err)
	}
}
