package placement

import (
	"context"
	"errors"
	"fmt"
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
	tenants map[string]*tenantState
	// list is the scheduler's view of every node with a record, in name order, and recs
	// their records. index finds a node in them; nil index: the set of nodes changed and
	// they are rebuilt. Decisions run the scheduler on them under the read lock, and a
	// change waits for the decisions under way (tens of microseconds each with
	// scheduler.PlaceShort) and writes in place. (An earlier version let decisions run
	// unlocked and copied the list on the next change instead: at 2,000 nodes that was
	// hundreds of kilobytes copied per placement.)
	list  []scheduler.Node
	recs  []*store.Node
	index map[string]int
	// memo remembers each listed node's verdict on the last kind of request, so a
	// decision works afresh only on the nodes changed since (scheduler.Memo). Changes
	// tell it under mu; decisions, which hold mu only to read, take memoMu to use it.
	memoMu sync.Mutex
	memo   scheduler.Memo

	// taken holds the revisions of this process's reservations that took applied and the
	// watch has not yet brought: the watch skips their events (skip), which hold nothing
	// took did not apply. Its own lock, since skip runs on the watch's goroutine for every
	// event, before apply takes mu. Written under mu too (took, apply, reset), so an event
	// skipped is one whose changes are in the view.
	takenMu sync.Mutex
	taken   map[int64]struct{}
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
		if c.ModRev < u.usageRev {
			return // a write this view already took (view.took) is older than what it holds
		}
		if c.Deleted {
			u.usage, u.gen, u.usageRev = store.Usage{}, 0, 0
		} else {
			u.usage, u.gen, u.usageRev = c.Usage, c.Gen, c.ModRev
		}
	case store.FleetNodeReservation, store.FleetTenantReservation:
		// reserved is kept as the sum of res, one change at a time (a node filled by
		// small VMs holds hundreds of reservations).
		if old, ok := u.res[c.ID]; ok {
			u.reserved = u.reserved.Sub(old)
			delete(u.res, c.ID)
		}
		if !c.Deleted {
			if u.res == nil {
				u.res = map[string]store.Usage{}
			}
			u.res[c.ID] = c.Usage
			u.reserved = u.reserved.Add(c.Usage)
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
		err := v.st.WatchFleet(ctx, rev, v.apply, v.skip)
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
	v.nodes, v.tenants, v.index = map[string]*nodeState{}, map[string]*tenantState{}, nil
	v.takenMu.Lock()
	v.taken = nil
	v.takenMu.Unlock()
	v.mu.Unlock()
	v.apply(rev, changes)
}

// apply takes the changes up to rev (whole transactions, in order).
func (v *view) apply(rev int64, changes []store.FleetChange) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.applyLocked(rev, changes)
	v.takenMu.Lock()
	for r := range v.taken {
		if r <= rev { // the watch is past it: nothing more of it will come
			delete(v.taken, r)
		}
	}
	v.takenMu.Unlock()
}

// skip tells the watch that the view already holds the changes made at rev (see taken).
func (v *view) skip(rev int64) bool {
	v.takenMu.Lock()
	defer v.takenMu.Unlock()
	_, ok := v.taken[rev]
	return ok
}

// applyLocked is apply under v.mu.
func (v *view) applyLocked(rev int64, changes []store.FleetChange) {
	touched := map[string]*nodeState{}
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
					v.index = nil // a node joined or left
				}
				n.rec, n.rev = c.Node, c.ModRev
				if c.Deleted {
					n.rec, n.rev = nil, 0
				}
			} else {
				n.usageState.apply(c)
			}
			touched[c.Name] = n
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
	for name, n := range touched {
		if n.rec == nil {
			continue
		}
		n.sched = SchedulerNode(n.rec, store.UsageView{Running: n.usage, Reserved: n.reserved})
		if i, ok := v.index[name]; ok {
			v.list[i], v.recs[i] = n.sched, n.rec
			v.memo.Forget(i)
		}
	}
	if v.index == nil {
		var names []string
		for name, n := range v.nodes {
			if n.rec != nil {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		v.list, v.recs, v.index = make([]scheduler.Node, len(names)), make([]*store.Node, len(names)), make(map[string]int, len(names))
		for i, name := range names {
			n := v.nodes[name]
			v.list[i], v.recs[i], v.index[name] = n.sched, n.rec, i
		}
		v.memo.Reset()
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
// watch, and then only a progress notification moves the view. With rev 0 it waits for
// moved (a v.moved the caller read) to close instead, without asking.
func (v *view) waitFor(ctx context.Context, rev int64, moved chan struct{}, patience time.Duration) bool {
	deadline := time.Now().Add(patience)
	ask := time.Now()
	for {
		if rev == 0 {
			t := time.NewTimer(max(time.Until(deadline), 0))
			defer t.Stop()
			select {
			case <-moved:
				return true
			case <-ctx.Done():
			case <-t.C:
			}
			return false
		}
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
	if !v.waitFor(ctx, rev, nil, 5*time.Second) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("the fleet view did not catch up with etcd in 5s")
	}
	return nil
}

// decide runs the scheduler on the view: on the nodes keep accepts (all when nil). When
// the node it chooses is one busy names (another placement of this central is reserving
// there), the best other fitting node is taken instead, if there is one. It asks the
// scheduler for the choice and a short list (scheduler.PlaceShort), long enough to hold
// the best node that is not busy and the ten a launch answers with, rather than a
// verdict for every node. It returns the decision and the chosen node's record.
func (v *view) decide(req scheduler.Request, pol scheduler.Policy, keep func(*store.Node) bool,
	busy map[string]bool) (scheduler.Decision, *store.Node, error) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	nodes, recs := v.list, v.recs
	if keep != nil {
		all, allRecs := nodes, recs
		nodes, recs = nil, nil
		for i, r := range allRecs {
			if keep(r) {
				nodes, recs = append(nodes, all[i]), append(recs, r)
			}
		}
	}
	var d scheduler.Decision
	var err error
	if keep == nil {
		v.memoMu.Lock()
		d, err = scheduler.PlaceShortMemo(nodes, &v.memo, req, pol, scheduler.BinPack, ShortList+len(busy))
		v.memoMu.Unlock()
	} else {
		d, err = scheduler.PlaceShort(nodes, req, pol, scheduler.BinPack, ShortList+len(busy))
	}
	if err != nil {
		return d, nil, err
	}
	if busy != nil && req.Node == "" && busy[d.Node] {
		best := -1
		for i, vd := range d.Considered { // in name order: a tie goes to the first
			if vd.Fits && !busy[vd.Node] && (best < 0 || vd.Score > d.Considered[best].Score) {
				best = i
			}
		}
		if best >= 0 {
			d.Reason = fmt.Sprintf("bin-pack: the fullest of the fitting nodes no other create of this central is reserving on (%s was)", d.Node)
			d.Node = d.Considered[best].Node
		}
	}
	if keep == nil {
		if i, ok := v.index[d.Node]; ok {
			return d, recs[i], nil
		}
	} else {
		for i := range nodes {
			if nodes[i].Name == d.Node {
				return d, recs[i], nil
			}
		}
	}
	return d, nil, errors.New("the scheduler chose a node it was not given")
}

// ShortList is how many fitting nodes' verdicts a placement keeps besides those it passes
// over as busy: what a launch answers with (the chosen node and the best others).
const ShortList = 10

// snapshot is the fleet as Placer.Snapshot gives it, from the view.
func (v *view) snapshot() ([]store.Node, []scheduler.Node) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.recordsLocked(), slices.Clone(v.list)
}

// records is a copy of every listed node's record, in name order (Placer.Nodes).
func (v *view) records() []store.Node {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.recordsLocked()
}

func (v *view) recordsLocked() []store.Node {
	stored := make([]store.Node, len(v.recs))
	for i, r := range v.recs {
		stored[i] = *r
	}
	return stored
}

// seen is what the view holds for a reservation on node by tenant, once it holds this
// process's last writes of their counters (nil if it does not soon: Reserve then reads).
func (v *view) seen(ctx context.Context, tenant, node string, wrote store.Wrote) *store.Seen {
	caught := func() bool {
		if v.rev >= max(wrote.Node, wrote.Tenant) {
			return true
		}
		n, t := v.nodes[node], v.tenants[tenant]
		return n != nil && n.usageRev >= wrote.Node && (tenant == "" || (t != nil && t.usageRev >= wrote.Tenant))
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for {
		v.mu.RLock()
		ok, moved := caught(), v.moved
		v.mu.RUnlock()
		if ok {
			break
		}
		if !v.waitFor(ctx, 0, moved, time.Until(deadline)) {
			return nil
		}
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

// took applies a reservation that Reserve committed at rev on what seen gave: the
// counters it rewrote (same usage, next generation) and the reservation keys it added.
// Its compare proved nothing else had touched those counters, so this is their state at
// rev. Those are all the transaction wrote, so the watch skips its events when they come
// (taken); should they come first, applying them again changes nothing.
func (v *view) took(rev int64, res *store.Reservation) {
	cs := []store.FleetChange{{Kind: store.FleetNodeReservation, Name: res.Node, ID: res.ID, ModRev: rev, Usage: res.Size()}}
	if res.Tenant != "" {
		cs = append(cs, store.FleetChange{Kind: store.FleetTenantReservation, Name: res.Tenant, ID: res.ID, ModRev: rev, Usage: res.Size()})
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if n := v.nodes[res.Node]; n != nil {
		cs = append(cs, store.FleetChange{Kind: store.FleetNodeUsage, Name: res.Node, ModRev: rev, Usage: n.usage, Gen: n.gen + 1})
	}
	if t := v.tenants[res.Tenant]; res.Tenant != "" && t != nil {
		cs = append(cs, store.FleetChange{Kind: store.FleetTenantUsage, Name: res.Tenant, ModRev: rev, Usage: t.usage, Gen: t.gen + 1})
	}
	// 0: the view's own revision does not move (writes before rev may still be on their way).
	v.applyLocked(0, cs)
	if rev > v.rev { // not yet brought by the watch
		v.takenMu.Lock()
		if v.taken == nil {
			v.taken = map[int64]struct{}{}
		}
		v.taken[rev] = struct{}{}
		v.takenMu.Unlock()
	}
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
	return t.rec, t.usage.Add(t.reserved)
}
