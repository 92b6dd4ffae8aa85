// Package placement puts a VM on the fleet: it keeps the nodes and what each
// has in use in memory, current through an etcd watch, lets the scheduler
// choose there, and reserves the room (the tenant's quota and the node's
// capacity) in one etcd transaction that compares the revisions the choice
// rests on, choosing again when the node filled up in between. Launches,
// drains and warm pools all place through it.
package placement

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

// Store is what placement needs of central's store.
type Store interface {
	// ListNodes reads every node record.
	ListNodes(ctx context.Context) ([]store.Node, error)
	// NodeUsage reads what central runs and reserves on a node.
	NodeUsage(ctx context.Context, node string) (store.UsageView, error)
	// Reserve holds room for one VM (see store.Reserve).
	Reserve(ctx context.Context, req store.ReserveRequest) (*store.Reservation, error)
	// QuotaLeft is a *store.QuotaError when the tenant's quota has no room.
	QuotaLeft(ctx context.Context, req store.ReserveRequest) error
	// LoadFleet, WatchFleet, FleetNow, FleetProgress and Context keep the
	// watched view (view.go; store.WatchFleet).
	LoadFleet(ctx context.Context) ([]store.FleetChange, int64, error)
	WatchFleet(ctx context.Context, rev int64, apply func(rev int64, changes []store.FleetChange), skip func(rev int64) bool) error
	FleetNow(ctx context.Context) (int64, error)
	FleetProgress(ctx context.Context) error
	Context() context.Context
}

// Tries bounds how often a placement is made again when the node it chose
// filled up (or went) between the decision and the reservation.
const Tries = 5

// ErrNoRoom is a placement whose chosen nodes kept filling up (or going)
// under concurrent creates, try after try. It wraps the last capacity error.
var ErrNoRoom = errors.New("no node kept room under concurrent creates")

// Placer places VMs. It is safe for concurrent use.
//
// It decides on a view of the fleet kept in memory and current through an
// etcd watch (view.go), started on first use and kept until the store
// closes; should the view fail to load, a placement reads the fleet from
// etcd as it is (and the next one tries the view again).
type Placer struct {
	st Store

	mu     sync.Mutex
	v      *view
	inFlow map[string]int // node -> reservations this Placer is making on it
}

// New makes a Placer over st.
func New(st Store) *Placer { return &Placer{st: st, inFlow: map[string]int{}} }

// view is the watched view, started on first use (nil: it could not load).
func (p *Placer) view(ctx context.Context) *view {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.v == nil {
		v, err := startView(ctx, p.st)
		if err != nil {
			return nil
		}
		p.v = v
	}
	return p.v
}

// Snapshot is the fleet: the node records, and for each the scheduler's
// view (what it has, runs and reserves), in the same order. It holds every
// write committed before it was called.
func (p *Placer) Snapshot(ctx context.Context) ([]store.Node, []scheduler.Node, error) {
	if v := p.view(ctx); v != nil {
		if err := v.sync(ctx); err != nil {
			return nil, nil, err
		}
		ns, sn := v.snapshot()
		return ns, sn, nil
	}
	return p.read(ctx)
}

// Nodes is every node record, in name order, holding every write committed before it was
// called: Snapshot's records, from the watched view without the etcd read and decode of
// every record (or from etcd, should the view not load).
func (p *Placer) Nodes(ctx context.Context) ([]store.Node, error) {
	v := p.view(ctx)
	if v == nil {
		return p.st.ListNodes(ctx)
	}
	if err := v.sync(ctx); err != nil {
		return nil, err
	}
	return v.records(), nil
}

// read reads the fleet from etcd: every node record and its usage.
func (p *Placer) read(ctx context.Context) ([]store.Node, []scheduler.Node, error) {
	ns, err := p.st.ListNodes(ctx)
	if err != nil {
		return nil, nil, err
	}
	out := make([]scheduler.Node, len(ns))
	errs := make([]error, len(ns))
	var wg sync.WaitGroup
	for i := range ns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u, err := p.st.NodeUsage(ctx, ns[i].Name)
			errs[i] = err
			out[i] = SchedulerNode(&ns[i], u)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return ns, out, nil
}

// PlaceAndReserve places a VM with the scheduler and reserves its room,
// placing again, up to Tries times, when the node it chose filled up or went
// since the decision. keep, when set, limits the nodes considered. rr is the
// reservation to make; its Node is set on each try. The errors are the
// scheduler's (*scheduler.NoPlacementError, scheduler.ErrInvalidRequest), the
// store's (*store.QuotaError, store.ErrInvalid for a disabled tenant, ...)
// and ErrNoRoom.
//
// The decision is made on the watched view and committed by one Reserve
// transaction comparing the revisions of the view's keys it rests on (the
// node's counter and record, the tenant's counter and record); a view that
// was behind loses the compare and Reserve decides again on what it reads.
// A refusal, by quota or for want of a node, is confirmed on a view brought
// up to date first, so a stale view never refuses what fits. While another
// placement of this Placer is reserving on a node, others pass over it when
// any other node fits: bin-packing yields to concurrency, rather than
// queueing every create of a burst on one node's counter.
func (p *Placer) PlaceAndReserve(ctx context.Context, req scheduler.Request, pol sdk.Policy, rr store.ReserveRequest,
	keep func(*store.Node) bool) (scheduler.Decision, *store.Node, *store.Reservation, error) {
	v := p.view(ctx)
	if v == nil {
		return p.placeRead(ctx, req, pol, rr, keep)
	}
	// The quota first: a tenant that filled it hears that, not "no node fits".
	if rr.Tenant != "" && rr.Replaces == "" && rr.Quotas == nil {
		if t, used := v.tenantUsage(rr.Tenant); t == nil || store.QuotaRoom(t.Quota, used, rr) != nil {
			if err := p.st.QuotaLeft(ctx, rr); err != nil { // confirmed in etcd
				return scheduler.Decision{}, nil, nil, err
			}
		}
	}
	var last error
	synced := false
	for range Tries {
		d, node, err := v.decide(req, SchedulerPolicy(pol), keep, p.busy())
		var np *scheduler.NoPlacementError
		if errors.As(err, &np) && !synced {
			// Confirm on an up-to-date view: a node may have joined or freed room.
			if err := v.sync(ctx); err != nil {
				return d, nil, nil, fmt.Errorf("read the fleet: %w", err)
			}
			synced = true
			d, node, err = v.decide(req, SchedulerPolicy(pol), keep, p.busy())
		}
		if err != nil {
			return d, nil, nil, err
		}
		rr.Node = d.Node
		rr.Seen = func(ctx context.Context, wrote store.Wrote) *store.Seen { return v.seen(ctx, rr.Tenant, d.Node, wrote) }
		rr.Took = v.took
		p.flow(d.Node, 1)
		res, err := p.st.Reserve(ctx, rr)
		p.flow(d.Node, -1)
		var qe *store.QuotaError
		switch {
		case err == nil:
			return d, node, res, nil
		case errors.As(err, &qe):
			return d, node, nil, err
		case errors.Is(err, store.ErrNoCapacity), errors.Is(err, store.ErrNotFound):
			// The node filled up or went since the view saw it: bring the view up to
			// date and place again.
			last = err
			if err := v.sync(ctx); err != nil {
				return d, nil, nil, fmt.Errorf("read the fleet: %w", err)
			}
			synced = true
		default:
			return d, node, nil, err
		}
	}
	return scheduler.Decision{}, nil, nil, fmt.Errorf("%w: %w", ErrNoRoom, last)
}

// busy is the set of nodes this Placer is reserving on now (nil: none).
func (p *Placer) busy() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.inFlow) == 0 {
		return nil
	}
	set := make(map[string]bool, len(p.inFlow))
	for n := range p.inFlow {
		set[n] = true
	}
	return set
}

func (p *Placer) flow(node string, delta int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlow[node] += delta; p.inFlow[node] <= 0 {
		delete(p.inFlow, node)
	}
}

// placeRead is PlaceAndReserve on the fleet read from etcd, for when the
// view could not load.
func (p *Placer) placeRead(ctx context.Context, req scheduler.Request, pol sdk.Policy, rr store.ReserveRequest,
	keep func(*store.Node) bool) (scheduler.Decision, *store.Node, *store.Reservation, error) {
	if err := p.st.QuotaLeft(ctx, rr); err != nil {
		return scheduler.Decision{}, nil, nil, err
	}
	var last error
	for range Tries {
		stored, nodes, err := p.read(ctx)
		if err != nil {
			return scheduler.Decision{}, nil, nil, fmt.Errorf("read the fleet: %w", err)
		}
		if keep != nil {
			var ks []store.Node
			var kn []scheduler.Node
			for i := range stored {
				if keep(&stored[i]) {
					ks, kn = append(ks, stored[i]), append(kn, nodes[i])
				}
			}
			stored, nodes = ks, kn
		}
		d, err := scheduler.Place(nodes, req, SchedulerPolicy(pol), scheduler.BinPack)
		if err != nil {
			return d, nil, nil, err
		}
		var node *store.Node
		for i := range stored {
			if stored[i].Name == d.Node {
				node = &stored[i]
			}
		}
		rr.Node = d.Node
		res, err := p.st.Reserve(ctx, rr)
		var qe *store.QuotaError
		switch {
		case err == nil:
			return d, node, res, nil
		case errors.As(err, &qe):
			return d, node, nil, err
		case errors.Is(err, store.ErrNoCapacity), errors.Is(err, store.ErrNotFound):
			last = err // the node filled up or went since the snapshot: place again
		default:
			return d, node, nil, err
		}
	}
	return scheduler.Decision{}, nil, nil, fmt.Errorf("%w: %w", ErrNoRoom, last)
}

// SchedulerNode is the scheduler's view of a node: its record, and as used
// the larger of what central counts and what the node reports, plus what is
// reserved.
func SchedulerNode(n *store.Node, u store.UsageView) scheduler.Node {
	t, f := n.Capacity.Total, n.Capacity.Free
	reported := store.Usage{VCPUs: t.VCPUs - f.VCPUs, MemoryMiB: t.MemoryMiB - f.MemoryMiB, MacOS: t.MacOSSlots - f.MacOSSlots}
	used := scheduler.Resources{
		VCPUs:      max(u.Running.VCPUs, reported.VCPUs) + u.Reserved.VCPUs,
		MemoryMiB:  max(u.Running.MemoryMiB, reported.MemoryMiB) + u.Reserved.MemoryMiB,
		MacOSSlots: max(u.Running.MacOS, reported.MacOS) + u.Reserved.MacOS,
	}
	sn := scheduler.Node{
		Name: n.Name, Up: n.State == store.NodeUp, Healthy: n.Healthy(), GuestOS: n.GuestOS,
		Cordoned: n.Cordoned, Draining: n.Draining, ScrubPending: n.ScrubPending,
		Labels: n.Labels, Nested: n.Nested, Networks: n.Networks, Mac: slices.Contains(n.GuestOS, scheduler.GuestMacOS), LeasedBy: n.LeasedBy,
		Total: scheduler.Resources{VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB, MacOSSlots: t.MacOSSlots},
		Used:  used,
	}
	for _, vm := range n.VMs {
		sn.VMs = append(sn.VMs, scheduler.VMRef{Tenant: vm.Tenant, GuestOS: vm.GuestOS})
	}
	return sn
}

// SchedulerPolicy is the part of the fleet policy the scheduler applies.
func SchedulerPolicy(p sdk.Policy) scheduler.Policy {
	return scheduler.Policy{RequireLeaseForMacOS: p.RequireLeaseForMacOS, ExclusiveLeasedHosts: p.ExclusiveLeasedHosts}
}
