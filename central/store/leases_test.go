package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestConcurrentLeasesOfOneNodeHaveOneWinner races 40 leases of one node
// from 8 tenants through two stores (two centrals) on one etcd: exactly one
// wins, every other is refused as "leased", and the node names the winner.
func TestConcurrentLeasesOfOneNodeHaveOneWinner(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, Options{})
	// Race the transactions alone, not the in-process queue.
	a.locks.disabled, b.locks.disabled = true, true
	ctx := testCtx(t)
	testNode(t, a, "mac-1", 8, 16384, 2)
	var tenants []*Tenant
	for i := range 8 {
		tenants = append(tenants, testTenant(t, a, fmt.Sprintf("t%d", i), sdk.Quotas{}))
	}
	var (
		mu      sync.Mutex
		won     []*Lease
		refused int
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			s := []*Store{a, b}[i%2]
			l, err := s.CreateLease(ctx, CreateLeaseRequest{Tenant: tenants[i%8].ID, Node: "mac-1", MinHours: 24})
			mu.Lock()
			defer mu.Unlock()
			var lr *LeaseRefusal
			switch {
			case err == nil:
				won = append(won, l)
			case errors.As(err, &lr) && lr.Reason == "leased":
				refused++
			default:
				t.Errorf("lease %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(won) != 1 || refused != 39 {
		t.Fatalf("%d leases won, %d refused; want 1 and 39", len(won), refused)
	}
	n, err := b.GetNode(ctx, "mac-1")
	if err != nil {
		t.Fatal(err)
	}
	if n.LeasedBy != won[0].Tenant || n.LeaseID != won[0].ID {
		t.Fatalf("node names %s/%s, the winner is %s/%s", n.LeasedBy, n.LeaseID, won[0].Tenant, won[0].ID)
	}
	if got, err := a.ActiveLeaseOfNode(ctx, "mac-1"); err != nil || got.ID != won[0].ID {
		t.Fatalf("ActiveLeaseOfNode = %+v, %v", got, err)
	}
	if !won[0].MinEnd.Equal(won[0].StartedAt.Add(24 * time.Hour)) {
		t.Fatalf("min end %v, started %v", won[0].MinEnd, won[0].StartedAt)
	}
}

// TestMaxLeasedHostsHoldsUnderConcurrentLeases races one tenant's leases of
// 6 nodes through two stores with max_leased_hosts 2: exactly 2 win, the
// rest are refused by the quota; ending one makes room for one more.
func TestMaxLeasedHostsHoldsUnderConcurrentLeases(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, Options{})
	a.locks.disabled, b.locks.disabled = true, true
	ctx := testCtx(t)
	for i := range 6 {
		testNode(t, a, fmt.Sprintf("mac-%d", i), 8, 16384, 2)
	}
	tn := testTenant(t, a, "acme", sdk.Quotas{MaxLeasedHosts: 2})
	var (
		mu    sync.Mutex
		won   []*Lease
		quota int
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, err := []*Store{a, b}[i%2].CreateLease(ctx, CreateLeaseRequest{Tenant: tn.ID, Node: fmt.Sprintf("mac-%d", i)})
			mu.Lock()
			defer mu.Unlock()
			var qe *QuotaError
			switch {
			case err == nil:
				won = append(won, l)
			case errors.As(err, &qe) && qe.Field == "max_leased_hosts":
				quota++
			default:
				t.Errorf("lease %d: %v", i, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(won) != 2 || quota != 4 {
		t.Fatalf("%d leases won, %d refused by quota; want 2 and 4", len(won), quota)
	}
	// Ending one lease frees a slot; its node waits for a scrub.
	ended, now, err := a.EndLease(ctx, won[0].ID, "released", time.Now())
	if err != nil || !now || ended.Active() {
		t.Fatalf("end lease: %+v %v %v", ended, now, err)
	}
	if _, again, err := b.EndLease(ctx, won[0].ID, "expired", time.Now()); err != nil || again {
		t.Fatalf("ending an ended lease again: ended=%v err=%v, want false, nil", again, err)
	}
	n, err := a.GetNode(ctx, won[0].Node)
	if err != nil || !n.ScrubPending || n.LeasedBy != "" {
		t.Fatalf("node after the lease ended: %+v %v", n, err)
	}
	if _, err := a.CreateLease(ctx, CreateLeaseRequest{Tenant: tn.ID, Node: won[0].Node}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("lease of a scrub-pending node: %v, want ErrUnavailable", err)
	}
	free := ""
	for i := range 6 {
		if name := fmt.Sprintf("mac-%d", i); name != won[0].Node && name != won[1].Node {
			free = name
			break
		}
	}
	if _, err := a.CreateLease(ctx, CreateLeaseRequest{Tenant: tn.ID, Node: free}); err != nil {
		t.Fatalf("a lease within the quota after one ended: %v", err)
	}
	ls, err := a.ListLeases(ctx, func(l *Lease) bool { return l.Tenant == tn.ID && l.Active() })
	if err != nil || len(ls) != 2 {
		t.Fatalf("active leases: %d %v, want 2", len(ls), err)
	}
}

// TestLeaseRefusesBusyNodesAndReserveRespectsTheLessee: a node running a VM
// through central is refused unless AllowBusy; a leased node refuses other
// tenants' reservations with ExclusiveLeases, and RequireLease refuses a
// node the tenant does not lease.
func TestLeaseRefusesBusyNodesAndReserveRespectsTheLessee(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := testCtx(t)
	testNode(t, s, "mac-1", 8, 16384, 2)
	testNode(t, s, "mac-2", 8, 16384, 2)
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	other := testTenant(t, s, "other", sdk.Quotas{})
	res, err := s.Reserve(ctx, ReserveRequest{Tenant: other.ID, Node: "mac-1", VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	var lr *LeaseRefusal
	if _, err := s.CreateLease(ctx, CreateLeaseRequest{Tenant: acme.ID, Node: "mac-1"}); !errors.As(err, &lr) || lr.Reason != "running VMs" {
		t.Fatalf("lease of a node with a reservation: %v, want running VMs", err)
	}
	if _, err := s.CreateLease(ctx, CreateLeaseRequest{Tenant: acme.ID, Node: "mac-1", Hours: 5}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("5-hour lease: %v, want ErrInvalid", err)
	}
	l, err := s.CreateLease(ctx, CreateLeaseRequest{Tenant: acme.ID, Node: "mac-1", AllowBusy: true, Hours: 48})
	if err != nil {
		t.Fatal(err)
	}
	if !l.EndsAt.Equal(l.StartedAt.Add(48 * time.Hour)) {
		t.Fatalf("ends %v, started %v", l.EndsAt, l.StartedAt)
	}
	_ = s.Release(ctx, res)
	var ce *CapacityError
	_, err = s.Reserve(ctx, ReserveRequest{Tenant: other.ID, Node: "mac-1", VCPUs: 1, MemoryMiB: 512, ExclusiveLeases: true})
	if !errors.As(err, &ce) || ce.Resource != "state" {
		t.Fatalf("another tenant on a leased node: %v", err)
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "mac-1", VCPUs: 1, MemoryMiB: 512, MacOS: true,
		ExclusiveLeases: true, RequireLease: true}); err != nil {
		t.Fatalf("the lessee on its node: %v", err)
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "mac-2", VCPUs: 1, MemoryMiB: 512, MacOS: true,
		RequireLease: true}); !errors.As(err, &ce) {
		t.Fatalf("a macOS guest on an unleased node: %v", err)
	}
}
