package placement

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

func putNode(t *testing.T, st *store.Store, name string, vcpus int64) {
	t.Helper()
	n := &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: "http://" + name + ":7777", State: store.NodeUp, GuestOS: []string{store.GuestLinux},
		Drivers:       []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}},
		Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: vcpus, MemoryMiB: 65536}, Free: sdk.Resources{VCPUs: vcpus, MemoryMiB: 65536}},
		LastHeartbeat: time.Now().UTC()}}
	if err := st.PutNode(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

// putTenant creates the tenant acme with room for maxVMs VMs.
func putTenant(t *testing.T, st *store.Store, maxVMs int64) *store.Tenant {
	t.Helper()
	tn := &store.Tenant{Tenant: sdk.Tenant{Name: "acme", Quota: sdk.Quotas{MaxVMs: maxVMs}}, TokenSHA256: store.HashToken("fvt_acme")}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn
}

// raceOnce is the real store, except that just before the first Reserve on
// node it lets another create take all of that node's room (through the
// same store; small has 8 vCPUs): the reservation then fails as it
// would in a real race.
type raceOnce struct {
	*store.Store
	node  string
	taken bool
}

func (r *raceOnce) Reserve(ctx context.Context, req store.ReserveRequest) (*store.Reservation, error) {
	if !r.taken && req.Node == r.node {
		r.taken = true
		if _, err := r.Store.Reserve(ctx, store.ReserveRequest{Node: r.node, VCPUs: 8, MemoryMiB: 1024}); err != nil {
			return nil, errors.New("the racing create was refused: " + err.Error())
		}
	}
	return r.Store.Reserve(ctx, req)
}

// TestPlaceAndReserve: a VM lands where the scheduler chose and its room is
// reserved; a node filled by a concurrent create between the snapshot and
// the reservation is placed around; keep limits the nodes; a quota breach
// is the store's error, not a retry.
func TestPlaceAndReserve(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	putNode(t, st, "big", 16)
	putNode(t, st, "small", 8)
	tenant := putTenant(t, st, 2)
	pol := store.DefaultPolicy()
	ask := func(p *Placer, keep func(*store.Node) bool) (scheduler.Decision, *store.Reservation, error) {
		d, _, res, err := p.PlaceAndReserve(ctx, scheduler.Request{Tenant: tenant.ID, GuestOS: store.GuestLinux, VCPUs: 4, MemoryMiB: 256},
			pol, store.ReserveRequest{Tenant: tenant.ID, VCPUs: 4, MemoryMiB: 256}, keep)
		return d, res, err
	}

	// Bin-packing takes the fuller-after-placement node: small. A create
	// takes all of small first, so the placement goes again and lands on big.
	d, res, err := ask(New(&raceOnce{Store: st, node: "small"}), nil)
	if err != nil || d.Node != "big" || res.Node != "big" {
		t.Fatalf("placement after a lost race = %+v %+v %v; want big", d, res, err)
	}
	if u, err := st.NodeUsage(ctx, "big"); err != nil || u.Reserved.VCPUs != 4 {
		t.Fatalf("big's usage = %+v %v; want the 4 vCPUs reserved", u, err)
	}

	// keep leaves only small, which is full now.
	_, _, err = ask(New(st), func(n *store.Node) bool { return n.Name == "small" })
	var np *scheduler.NoPlacementError
	if !errors.As(err, &np) {
		t.Fatalf("placement on a full small = %v; want a NoPlacementError", err)
	}

	// The second VM fits the quota; a third does not.
	if _, _, err := ask(New(st), nil); err != nil {
		t.Fatal(err)
	}
	_, _, err = ask(New(st), nil)
	var qe *store.QuotaError
	if !errors.As(err, &qe) || qe.Field != "max_vms" {
		t.Fatalf("a third VM = %v; want the max_vms quota error", err)
	}
}

// TestViewFollowsTheStoreAndNeverOvershoots: the watched view sees a node
// joining, a cordon and reservations as the store writes them; a burst of
// placements decided on it from several Placers (several centrals) never
// reserves past the tenant's quota or a node's room, however stale each
// Placer's view is when it decides.
func TestViewFollowsTheStoreAndNeverOvershoots(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	putNode(t, st, "a", 8)
	p := New(st)
	ns, _, err := p.Snapshot(ctx)
	if err != nil || len(ns) != 1 {
		t.Fatalf("snapshot = %d nodes, %v; want a", len(ns), err)
	}
	putNode(t, st, "b", 8)
	cordon := func(on bool) {
		if _, err := st.UpdateNode(ctx, "a", false, func(n *store.Node) error { n.Cordoned = on; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	cordon(true)
	ns, sn, err := p.Snapshot(ctx)
	if err != nil || len(ns) != 2 || !sn[0].Cordoned || sn[1].Name != "b" {
		t.Fatalf("snapshot after b joined and a was cordoned = %+v, %v", sn, err)
	}
	cordon(false)

	tenant := putTenant(t, st, 7)
	placers := []*Placer{p, New(st), New(st)}
	pol := store.DefaultPolicy()
	var wg sync.WaitGroup
	var mu sync.Mutex
	placed := map[string]int{}
	refused := 0
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, node, _, err := placers[i%len(placers)].PlaceAndReserve(ctx,
				scheduler.Request{Tenant: tenant.ID, GuestOS: store.GuestLinux, VCPUs: 3, MemoryMiB: 256}, pol,
				store.ReserveRequest{Tenant: tenant.ID, VCPUs: 3, MemoryMiB: 256}, nil)
			mu.Lock()
			defer mu.Unlock()
			var qe *store.QuotaError
			var np *scheduler.NoPlacementError
			switch {
			case err == nil:
				placed[node.Name]++
			case errors.As(err, &qe), errors.As(err, &np), errors.Is(err, ErrNoRoom):
				refused++
			default:
				t.Errorf("placement: %v", err)
			}
		}()
	}
	wg.Wait()
	// 8 vCPUs take two 3-vCPU VMs: 4 VMs in all, below the quota of 7.
	if placed["a"] != 2 || placed["b"] != 2 || refused != 36 {
		t.Fatalf("placed %v, refused %d; want 2 on each node and 36 refused", placed, refused)
	}
	for _, n := range []string{"a", "b"} {
		if u, err := st.NodeUsage(ctx, n); err != nil || u.Reserved.VCPUs != 6 {
			t.Errorf("node %s usage = %+v, %v; want 6 vCPUs reserved", n, u, err)
		}
	}
	_, sn, err = p.Snapshot(ctx)
	if err != nil || sn[0].Used.VCPUs != 6 || sn[1].Used.VCPUs != 6 {
		t.Fatalf("the view after the burst = %+v, %v; want 6 vCPUs used on each node", sn, err)
	}
}

// TestKeepChoosesAmongTheNodesItAccepts: on the watched view, keep limits
// the nodes the scheduler weighs to those it accepts, and a placement lands
// on one of them although bin-packing prefers another.
func TestKeepChoosesAmongTheNodesItAccepts(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	putNode(t, st, "big", 16)
	putNode(t, st, "small", 8) // bin-packing's choice
	p := New(st)
	req := scheduler.Request{GuestOS: store.GuestLinux, VCPUs: 2, MemoryMiB: 256}
	rr := store.ReserveRequest{VCPUs: 2, MemoryMiB: 256}
	d, _, _, err := p.PlaceAndReserve(ctx, req, store.DefaultPolicy(), rr, nil)
	if err != nil || d.Node != "small" {
		t.Fatalf("placement without keep = %+v, %v; want small", d, err)
	}
	d, node, res, err := p.PlaceAndReserve(ctx, req, store.DefaultPolicy(), rr, func(n *store.Node) bool { return n.Name == "big" })
	if err != nil || d.Node != "big" || node.Name != "big" || res.Node != "big" || len(d.Considered) != 1 {
		t.Fatalf("placement keeping big = %+v, %v, %v; want big, the only node considered", d, res, err)
	}
}

// countSkips is the real store, counting the watch events the view skips;
// the watch waits for open to close before each event.
type countSkips struct {
	*store.Store
	open    chan struct{}
	skipped atomic.Int64
}

func (c *countSkips) WatchFleet(ctx context.Context, rev int64, apply func(int64, []store.FleetChange), skip func(int64) bool) error {
	return c.Store.WatchFleet(ctx, rev, apply, func(r int64) bool {
		<-c.open
		s := skip(r)
		if s {
			c.skipped.Add(1)
		}
		return s
	})
}

// TestTheViewSkipsItsOwnReservationsOnTheWatchAndStaysExact: the watch events
// of reservations the view applied itself (view.took) are skipped, and the view
// still equals one loaded afresh from etcd, after the reservations and after
// some of them are released (which the watch brings).
func TestTheViewSkipsItsOwnReservationsOnTheWatchAndStaysExact(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	putNode(t, st, "a", 64)
	putNode(t, st, "b", 64)
	tenant := putTenant(t, st, 100)
	// The watch waits until the reservations are made, so that each comes after
	// the view applied it (else either may come first).
	cs := &countSkips{Store: st, open: make(chan struct{})}
	p := New(cs)
	var held []*store.Reservation
	for range 20 {
		_, _, res, err := p.PlaceAndReserve(ctx, scheduler.Request{Tenant: tenant.ID, GuestOS: store.GuestLinux, VCPUs: 3, MemoryMiB: 256},
			store.DefaultPolicy(), store.ReserveRequest{Tenant: tenant.ID, VCPUs: 3, MemoryMiB: 256}, nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, res)
	}
	close(cs.open)
	same := func(when string) {
		t.Helper()
		_, got, err := p.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, want, err := New(st).Snapshot(ctx) // loaded afresh
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: the view holds %+v, etcd %+v", when, got, want)
		}
		gt, gu := p.view(ctx).tenantUsage(tenant.ID)
		wt, wu := New(st).view(ctx).tenantUsage(tenant.ID)
		if gt == nil || wt == nil || gu != wu {
			t.Fatalf("%s: the view holds tenant usage %+v, etcd %+v", when, gu, wu)
		}
	}
	same("after 20 reservations")
	if n := cs.skipped.Load(); n != 20*4 {
		t.Fatalf("the watch skipped %d events of the view's own 20 reservations; want all 80 (4 keys each)", n)
	}
	for _, r := range held[:7] {
		if err := st.Release(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	same("after 7 releases")
	if _, sn, _ := p.Snapshot(ctx); sn[0].Used.VCPUs+sn[1].Used.VCPUs != 13*3 {
		t.Fatalf("the view's nodes use %d and %d vCPUs; want 39 in all", sn[0].Used.VCPUs, sn[1].Used.VCPUs)
	}
}

// TestNodesAreTheStoresRecords: Placer.Nodes, from the view, is what the
// store's ListNodes reads, including a write made just before the call.
func TestNodesAreTheStoresRecords(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	putNode(t, st, "b", 8)
	putNode(t, st, "a", 16)
	p := New(st)
	for step := range 3 {
		switch step {
		case 1:
			putNode(t, st, "c", 4) // joins after the view loaded
		case 2:
			if _, err := st.UpdateNode(ctx, "a", false, func(n *store.Node) error { n.Cordoned = true; return nil }); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.Nodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, err := st.ListNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d: Nodes = %+v, ListNodes %+v", step, got, want)
		}
	}
}
