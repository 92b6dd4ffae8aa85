package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// seenFrom builds what a watched view would hold for tenant and node from loaded changes.
func seenFrom(cs []FleetChange, tenant, node string) *Seen {
	sn := &Seen{}
	for _, c := range cs {
		switch {
		case c.Kind == FleetNode && c.Name == node:
			sn.Node, sn.NodeRev = c.Node, c.ModRev
		case c.Kind == FleetNodeUsage && c.Name == node:
			sn.NodeUsage, sn.NodeGen, sn.NodeUsageRev = c.Usage, c.Gen, c.ModRev
		case c.Kind == FleetNodeReservation && c.Name == node:
			sn.NodeReserved = sn.NodeReserved.Add(c.Usage)
		case c.Kind == FleetTenant && c.Name == tenant:
			sn.Tenant, sn.TenantRev = c.Tenant, c.ModRev
		case c.Kind == FleetTenantUsage && c.Name == tenant:
			sn.TenantUsage, sn.TenantGen, sn.TenantUsageRev = c.Usage, c.Gen, c.ModRev
		case c.Kind == FleetTenantReservation && c.Name == tenant:
			sn.TenantReserved = sn.TenantReserved.Add(c.Usage)
		}
	}
	return sn
}

func TestFleetWatchDeliversAReservationAsOneTransaction(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	testNode(t, s, "n1", 8, 8192, 0)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 5})
	cs, rev, err := s.LoadFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sn := seenFrom(cs, tn.ID, "n1"); sn.Node == nil || sn.Tenant == nil || sn.Tenant.Quota.MaxVMs != 5 {
		t.Fatalf("loaded fleet %+v lacks node n1 or tenant acme", cs)
	}
	var mu sync.Mutex
	var batches [][]FleetChange
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.WatchFleet(wctx, rev, func(_ int64, cs []FleetChange) {
			mu.Lock()
			batches = append(batches, cs)
			mu.Unlock()
		}, nil)
	}()
	res, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 2, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, res); err != nil {
		t.Fatal(err)
	}
	// Both transactions, however the watch batches them: no batch splits one.
	all := func() []FleetChange {
		mu.Lock()
		defer mu.Unlock()
		var out []FleetChange
		for _, b := range batches {
			if len(b) > 0 && len(out) > 0 && b[0].ModRev == out[len(out)-1].ModRev {
				t.Errorf("revision %d is split across watch batches", b[0].ModRev)
			}
			out = append(out, b...)
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(all()) < 6 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("watch ended with %v; want context.Canceled", err)
	}
	cs = all()
	if len(cs) != 6 {
		t.Fatalf("watched changes = %+v; want the reservation's 4 writes and its release's 2 deletions", cs)
	}
	kinds := map[FleetKind]bool{}
	for _, c := range cs[:4] {
		kinds[c.Kind] = !c.Deleted
		if c.ModRev != cs[0].ModRev {
			t.Errorf("change %+v is of another revision than %d", c, cs[0].ModRev)
		}
	}
	for _, k := range []FleetKind{FleetNodeReservation, FleetNodeUsage, FleetTenantReservation, FleetTenantUsage} {
		if !kinds[k] {
			t.Errorf("the reservation's changes %+v lack a write of kind %d", cs[:4], k)
		}
	}
	for _, c := range cs[4:] {
		if !c.Deleted || (c.Kind != FleetNodeReservation && c.Kind != FleetTenantReservation) || c.ID != res.ID || c.ModRev <= cs[0].ModRev {
			t.Errorf("release change %+v; want only the later deletion of reservation %s", c, res.ID)
		}
	}
}

// A view that missed writes decides wrongly in memory; the transaction's compares must
// refuse to commit on it, and Reserve must decide again on what etcd holds.
func TestReserveOnAStaleViewLosesTheCompareAndDecidesAgain(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	testNode(t, s, "n1", 4, 8192, 0)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 3})
	cs, _, err := s.LoadFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stale := seenFrom(cs, tn.ID, "n1") // an empty node and tenant
	calls := 0
	seen := func(context.Context, Wrote) *Seen { calls++; return stale }

	// Room the stale view does not know is taken: 2 of 4 vCPUs.
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 2, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	// 2 more fit: the stale view's compare fails, Reserve reads and admits.
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 2, MemoryMiB: 512, Seen: seen}); err != nil {
		t.Fatalf("reserve on a stale view with room left: %v", err)
	}
	// 1 more does not, though the stale view says the node is empty.
	_, err = s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 1, MemoryMiB: 512, Seen: seen})
	var ce *CapacityError
	if !errors.As(err, &ce) || ce.Resource != "vcpus" {
		t.Fatalf("reserve past the node's room on a stale view = %v; want a vcpus CapacityError", err)
	}
	if calls != 2 {
		t.Errorf("Seen was asked %d times; want once per Reserve (2)", calls)
	}
	nu, err := s.NodeUsage(ctx, "n1")
	if err != nil || nu.Reserved.VCPUs != 4 || nu.Reserved.VMs != 2 {
		t.Fatalf("node usage = %+v, %v; want exactly the two reservations (4 vCPUs)", nu, err)
	}

	// A view that is current commits in its one transaction, and the counters it writes
	// carry on from what it saw.
	testNode(t, s, "n2", 4, 8192, 0)
	cs, _, err = s.LoadFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fresh := seenFrom(cs, tn.ID, "n2")
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n2", VCPUs: 1, MemoryMiB: 512,
		Seen: func(context.Context, Wrote) *Seen { return fresh }}); err != nil {
		t.Fatal(err)
	}
	cs, _, err = s.LoadFleet(ctx)
	if err != nil {
		t.Fatal(err)
	}
	after := seenFrom(cs, tn.ID, "n2")
	if after.TenantGen != fresh.TenantGen+1 || after.NodeGen != fresh.NodeGen+1 || after.TenantReserved.VMs != 3 {
		t.Errorf("after a reserve on a current view: %+v; want both generations one up from %+v and 3 tenant reservations", after, fresh)
	}
	// The tenant is at max_vms 3 now; a view that still shows 2 is refused by etcd.
	_, err = s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n2", VCPUs: 1, MemoryMiB: 512,
		Seen: func(context.Context, Wrote) *Seen { return fresh }})
	var qe *QuotaError
	if !errors.As(err, &qe) || qe.Field != "max_vms" {
		t.Fatalf("reserve past the quota on a stale view = %v; want the max_vms QuotaError", err)
	}
}
