package placement

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/scheduler"
)

// view is the fleet as placement decides on it: every node's record, usage counter and live
// reservations, and every tenant's record, counter and reservations, kept in memory and
// current through one etcd watch (store.WatchFleet), the way the Kubernetes scheduler keeps
// its cache. It is always the store's state at one revision (rev), never a mix. A decision
// made on it is committed by Reserve with one transaction that compares the revisions the
// view holds for the keys the decision rests on, so a view that is behind costs a lost
// compare and a retry, never a wrong admission (docs/design/015-watched-placement.md).
type view struct {
	st Store

	mu      sync.RWMutex
	rev     int64
	moved   chan struct{} // closed and replaced each time rev moves
	nodes   map[string]*nodeState
	names   []string // sorted names of the nodes with a record; nil: to be rebuilt
	tenants map[string]*tenantState
}

type usageState struct {
	usage         store.Usage
	gen, usageRev int64
	res           map[string]store.Usage // live reservations by id
	reserved      store.Usage
}

func (u *usageState) apply(c *store.FleetChange) {
	switch c.Kind {
	case store.FleetNodeUsage, store.FleetTenantUsage:
		if c.Deleted {
			u.usage, u.gen, u.usageRev = store.Usage{}, 0, 0
		} else {
			u.usage, u.gen, u.usageRev = c.Usage, c.Gen, c.ModRev
		}
	case store.FleetNodeReservation, store.FleetTenantReservation:
		if c.Deleted {
			delete(u.res, c.ID)
		} else {
			if u.res == nil {
				u.res = map[string]store.Usage{}
			}
			u.res[c.ID] = c.Usage
		}
		u.reserved = store.Usage{}
		for _, r := range u.res {
			u.reserved.VMs += r.VMs
			u.reserved.VCPUs += r.VCPUs
			u.reserved.MemoryMiB += r.MemoryMiB
			u.reserved.MacOS += r.MacOS
		}
	}
}

type nodeState struct {
	usageState
	rec   *store.Node // nil: no record (yet); never changed once stored
	rev   int64
	sched scheduler.Node // the scheduler's view of rec and the usage
}

type tenantState struct {
	usageState
	rec *store.Tenant
	rev int64
}

// startView loads the fleet and keeps it current until the store closes. It returns once
// the first load is in, or with its error.
func startView(ctx context.Context, st Store) (*view, error) {
	v := &view{st: st, moved: make(chan struct{})}
	changes, rev, err := st.LoadFleet(ctx)
	if err != nil {
		return nil, err
	}
	v.reset(rev, changes)
	go v.run(st.Context(), rev)
	return v, nil
}

// run follows the watch from rev, loading afresh whenever the watch is lost, until ctx ends.
func (v *view) run(ctx context.Context, rev int64) {
	for ctx.Err() == nil {
		err := v.st.WatchFleet(ctx, rev, v.apply)
		if ctx.Err() != nil || !errors.Is(err, store.ErrWatchLost) {
			return
		}
		for ctx.Err() == nil {
			changes, r, err := v.st.LoadFleet(ctx)
			if err == nil {
				v.reset(r, changes)
				rev = r
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (v *view) reset(rev int64, changes []store.FleetChange) {
	v.mu.Lock()
	v.nodes, v.tenants, v.names = map[string]*nodeState{}, map[string]*tenantState{}, nil
	v.mu.Unlock()
	v.apply(rev, changes)
}

// apply takes the changes up to rev (whole transactions, in order).
func (v *view) apply(rev int64, changes []store.FleetChange) {
	v.mu.Lock()
	defer v.mu.Unlock()
	touched := map[*nodeState]bool{}
	for i := range changes {
		c := &changes[i]
		switch c.Kind {
		case store.FleetNode, store.FleetNodeUsage, store.FleetNodeReservation:
			n := v.nodes[c.Name]
			if n == nil {
				n = &nodeState{}
				v.nodes[c.Name] = n
			}
			if c.Kind == store.FleetNode {
				if (n.rec == nil) != c.Deleted {
					v.names = nil
				}
				n.rec, n.rev = c.Node, c.ModRev
				if c.Deleted {
					n.rec, n.rev = nil, 0
				}
			} else {
				n.usageState.apply(c)
			}
			touched[n] = true
		default:
			t := v.tenants[c.Name]
			if t == nil {
				t = &tenantState{}
				v.tenants[c.Name] = t
			}
			if c.Kind == store.FleetTenant {
				t.rec, t.rev = c.Tenant, c.ModRev
				if c.Deleted {
					t.rec, t.rev = nil, 0
				}
			} else {
				t.usageState.apply(c)
			}
		}
	}
	for n := range touched {
		if n.rec != nil {
			n.sched = SchedulerNode(n.rec, store.UsageView{Running: n.usage, Reserved: n.reserved})
		}
	}
	if rev > v.rev {
		v.rev = rev
		close(v.moved)
		v.moved = make(chan struct{})
	}
}

// waitFor waits until the view has applied revision rev, or ctx ends, or patience runs out:
// false then. When nothing we watch has moved for askAfter, it asks etcd how far the watch
// is (store.FleetProgress), and again every 20 ms: the last writes may lie outside what we
// watch, and then only a progress notification moves the view.
func (v *view) waitFor(ctx context.Context, rev int64, askAfter, patience time.Duration) bool {
	deadline := time.Now().Add(patience)
	ask := time.Now().Add(askAfter)
	for {
		v.mu.RLock()
		at, moved := v.rev, v.moved
		v.mu.RUnlock()
		if at >= rev {
			return true
		}
		now := time.Now()
		if !now.Before(deadline) {
			return false
		}
		if !now.Before(ask) {
			_ = v.st.FleetProgress(ctx)
			ask = now.Add(20 * time.Millisecond)
		}
		t := time.NewTimer(min(time.Until(ask), time.Until(deadline)))
		select {
		case <-moved:
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		t.Stop()
	}
}

// sync brings the view up to every write committed before it was called.
func (v *view) sync(ctx context.Context) error {
	rev, err := v.st.FleetNow(ctx)
	if err != nil {
		return err
	}
	if !v.waitFor(ctx, rev, 0, 5*time.Second) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("the fleet view did not catch up with etcd in 5s")
	}
	return nil
}

// sortedNames are the names of the nodes with a record, sorted (the slice is not changed
// once built: a change of the set builds another).
func (v *view) sortedNames() []string {
	v.mu.RLock()
	names := v.names
	v.mu.RUnlock()
	if names != nil {
		return names
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.names == nil {
		v.names = []string{}
		for name, n := range v.nodes {
			if n.rec != nil {
				v.names = append(v.names, name)
			}
		}
		slices.Sort(v.names)
	}
	return v.names
}

// decide runs the scheduler on the view: the nodes keep accepts (all when nil), less those
// avoid names while any other fits. It returns the decision and the chosen node's record.
func (v *view) decide(req scheduler.Request, pol scheduler.Policy, keep func(*store.Node) bool,
	avoid func(string) bool) (scheduler.Decision, *store.Node, error) {
	names := v.sortedNames()
	nodes := make([]scheduler.Node, 0, len(names))
	recs := make([]*store.Node, 0, len(names))
	var avoided []scheduler.Node
	var avoidedRecs []*store.Node
	v.mu.RLock()
	for _, name := range names {
		n := v.nodes[name]
		if n == nil || n.rec == nil || (keep != nil && !keep(n.rec)) {
			continue
		}
		if avoid != nil && avoid(name) {
			avoided, avoidedRecs = append(avoided, n.sched), append(avoidedRecs, n.rec)
			continue
		}
		nodes, recs = append(nodes, n.sched), append(recs, n.rec)
	}
	v.mu.RUnlock()
	d, err := scheduler.Place(nodes, req, pol, scheduler.BinPack)
	if len(avoided) > 0 {
		var np *scheduler.NoPlacementError
		if errors.As(err, &np) {
			// Only nodes another placement of ours is reserving on fit: decide on all, so
			// the verdicts are whole.
			nodes, recs = append(nodes, avoided...), append(recs, avoidedRecs...)
			d, err = scheduler.Place(nodes, req, pol, scheduler.BinPack)
		}
	}
	if err != nil {
		return d, nil, err
	}
	for i := range nodes {
		if nodes[i].Name == d.Node {
			return d, recs[i], nil
		}
	}
	return d, nil, errors.New("the scheduler chose a node it was not given")
}

// snapshot is the fleet as Placer.Snapshot gives it, from the view.
func (v *view) snapshot() ([]store.Node, []scheduler.Node) {
	names := v.sortedNames()
	stored := make([]store.Node, 0, len(names))
	nodes := make([]scheduler.Node, 0, len(names))
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, name := range names {
		if n := v.nodes[name]; n != nil && n.rec != nil {
			stored, nodes = append(stored, *n.rec), append(nodes, n.sched)
		}
	}
	return stored, nodes
}

// seen is what the view holds for a reservation on node by tenant, once the view has
// reached atLeast (nil if it does not soon: Reserve then reads).
func (v *view) seen(ctx context.Context, tenant, node string, atLeast int64) *store.Seen {
	if !v.waitFor(ctx, atLeast, 2*time.Millisecond, 50*time.Millisecond) {
		return nil
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := v.nodes[node]
	if n == nil || n.rec == nil {
		return nil
	}
	out := &store.Seen{Node: n.rec, NodeRev: n.rev, NodeUsage: n.usage, NodeReserved: n.reserved,
		NodeGen: n.gen, NodeUsageRev: n.usageRev}
	if tenant != "" {
		t := v.tenants[tenant]
		if t == nil {
			return nil
		}
		out.Tenant, out.TenantRev = t.rec, t.rev
		out.TenantUsage, out.TenantReserved, out.TenantGen, out.TenantUsageRev = t.usage, t.reserved, t.gen, t.usageRev
	}
	return out
}

// tenantUsage is the tenant's record and running + reserved usage as the view has them (nil
// record: the view lacks the tenant).
func (v *view) tenantUsage(tenant string) (*store.Tenant, store.Usage) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	t := v.tenants[tenant]
	if t == nil || t.rec == nil {
		return nil, store.Usage{}
	}
	u := t.usage
	u.VMs += t.reserved.VMs
	u.VCPUs += t.reserved.VCPUs
	u.MemoryMiB += t.reserved.MemoryMiB
	u.MacOS += t.reserved.MacOS
	return t.rec, u
}
