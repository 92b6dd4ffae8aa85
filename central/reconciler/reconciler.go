// Package reconciler keeps central's records in step with what the nodes
// do: it marks silent nodes down, ends the ledger entries of VMs gone from
// their node, adopts stamped VMs the ledger lacks and recounts usage. The
// leader runs it, with lease expiry, drain resumption and budget checks in
// each pass.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Store is what the reconciler needs of central's store.
type Store interface {
	// TenantName is a tenant's name for logs (its id when unknown).
	TenantName(ctx context.Context, id string) string
	// ListNodes reads every node record.
	ListNodes(ctx context.Context) ([]store.Node, error)
	// UpdateNode rewrites a node record in one transaction.
	UpdateNode(ctx context.Context, name string, create bool, fn func(*store.Node) error) (*store.Node, error)
	// RunningOnNode reads the running ledger entries of a node.
	RunningOnNode(ctx context.Context, node string) ([]store.LedgerEntry, error)
	// EndEntry ends a running entry.
	EndEntry(ctx context.Context, id, reason string, at time.Time) (*store.LedgerEntry, error)
	// RecordEntry writes a running entry (store.ErrExists, store.ErrDeleted when it may not).
	RecordEntry(ctx context.Context, e store.LedgerEntry) (*store.LedgerEntry, error)
	// ListReservations reads the reservations of creates in flight.
	ListReservations(ctx context.Context) ([]store.Reservation, error)
	// GetPolicy reads the fleet policy (ledger_retention_days).
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	// DropEndedBefore deletes the entries that ended before t.
	DropEndedBefore(ctx context.Context, t time.Time) (int, error)
	// Recount rewrites the usage counters from the ledger.
	Recount(ctx context.Context) (*store.RecountReport, error)
}

// LeaseEnder ends leases whose end time passed (central/leases).
type LeaseEnder interface {
	// EndExpired ends them, deletes their lessees' VMs and returns the ids ended.
	EndExpired(ctx context.Context) ([]string, error)
}

// DrainResumer takes up unfinished drains.
type DrainResumer interface {
	// ResumeDrains runs again the drains nobody touched for a while.
	ResumeDrains(ctx context.Context) error
}

// BudgetChecker records the budget events due (central/metering).
type BudgetChecker interface {
	// CheckBudgets records budget.near and budget.over for this month.
	CheckBudgets(ctx context.Context) error
}

// LeaseWarner sends lease.ending before leases end (central/leases).
type LeaseWarner interface {
	// NotifyEnding sends the warnings due, each once.
	NotifyEnding(ctx context.Context) error
}

// Options configure a Reconciler.
type Options struct {
	// Store is central's store.
	Store Store
	// Nodes calls the nodes for their VM lists.
	Nodes *nodecall.Caller
	// Leases, Drains and Budgets run first and last in each pass (nil:
	// none).
	Leases  LeaseEnder
	Drains  DrainResumer
	Budgets BudgetChecker
	// Ending sends lease.ending in each pass (nil: none).
	Ending LeaseWarner
	// Notify receives node.down (nil: nothing is sent).
	Notify notify.Sink
	// Silence is how long a node may go without a heartbeat before MarkDown
	// marks it down.
	Silence time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Logger logs what a pass changed (nil: nothing is logged).
	Logger hclog.Logger
}

// Reconciler makes central's records agree with the nodes. It is safe for
// concurrent use, and passes may run side by side (on two centrals too).
type Reconciler struct {
	opts Options
	log  hclog.Logger
}

// New makes a Reconciler.
func New(opts Options) *Reconciler {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	return &Reconciler{opts: opts, log: opts.Logger}
}

// adoptGrace is how old a stamped VM the ledger lacks must be before the
// reconciler adopts it while its tenant still holds a reservation on that
// node: such a VM is usually a create in flight whose ledger entry is about
// to be written. It is longer than a create may take.
const adoptGrace = 2 * nodecall.CreateTimeout

// Reconcile first ends leases whose end time passed (deleting the lessee's
// VMs on the node, which becomes scrub pending), finishes ended leases whose
// VMs were not all deleted and takes up unfinished drains. Then it makes the
// ledger agree with the nodes: it closes entries of VMs
// an up node no longer lists (deleted on the node, expired by a TTL), adopts
// VMs a node lists with a tenant stamp but the ledger lacks (central died
// between the node's create and the ledger write), drops ended entries past
// ledger_retention_days, recounts the usage counters and records the
// budget events due (budget.near, budget.over). The leader runs it
// every -reconcile-secs; two passes at once are harmless (ending is
// idempotent and a VM's entry id is derived from node and VM, so the
// second write finds it there).
func (rc *Reconciler) Reconcile(ctx context.Context) (*sdk.ReconcileReport, error) {
	st, now := rc.opts.Store, rc.opts.Now
	start := now()
	rep := &sdk.ReconcileReport{StartedAt: start.UTC(), NodesChecked: []string{}, NodesSkipped: []sdk.SkippedNode{},
		Ended: []sdk.LedgerChange{}, Adopted: []sdk.LedgerChange{}, CountersFixed: []sdk.CounterFix{}, LeasesEnded: []string{}}
	// Leases first: the VMs an ended lease deletes are then not reported as
	// vanished below. A node that does not answer keeps them for the next pass.
	if rc.opts.Leases != nil {
		ended, err := rc.opts.Leases.EndExpired(ctx)
		if err != nil {
			return nil, err
		}
		rep.LeasesEnded = ended
	}
	if rc.opts.Ending != nil {
		if err := rc.opts.Ending.NotifyEnding(ctx); err != nil {
			rc.log.Warn("notify leases ending; retrying next pass", "error", err)
		}
	}
	if rc.opts.Drains != nil {
		if err := rc.opts.Drains.ResumeDrains(ctx); err != nil {
			rc.log.Warn("resume unfinished drains; retrying next pass", "error", err)
		}
	}
	ns, err := st.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ns {
		n := &ns[i]
		if n.State != store.NodeUp {
			rep.NodesSkipped = append(rep.NodesSkipped, sdk.SkippedNode{Node: n.Name, Reason: "down"})
			continue
		}
		if err := rc.reconcileNode(ctx, n, rep); err != nil {
			var skip *skipError
			if !errors.As(err, &skip) {
				return nil, err
			}
			rep.NodesSkipped = append(rep.NodesSkipped, sdk.SkippedNode{Node: n.Name, Reason: skip.reason})
			continue
		}
		rep.NodesChecked = append(rep.NodesChecked, n.Name)
	}

	pol, err := st.GetPolicy(ctx)
	if err != nil {
		return nil, err
	}
	if keep := store.LedgerRetention(pol); keep > 0 {
		cut := now().Add(-keep)
		if rep.Dropped, err = st.DropEndedBefore(ctx, cut); err != nil {
			return nil, err
		}
	}
	counts, err := st.Recount(ctx)
	if err != nil {
		return nil, err
	}
	for _, f := range counts.Fixed {
		rc.log.Warn("usage counter was wrong; rewritten from the ledger", "scope", f.Scope, "name", f.Name, "was", f.Was, "now", f.Now)
		rep.CountersFixed = append(rep.CountersFixed, sdk.CounterFix{Scope: f.Scope, Name: f.Name, Was: sdk.Usage(f.Was), Now: sdk.Usage(f.Now)})
	}
	if rc.opts.Budgets != nil {
		if err := rc.opts.Budgets.CheckBudgets(ctx); err != nil {
			rc.log.Warn("check budgets; retrying next pass", "error", err)
		}
	}
	rep.DurationMS = now().Sub(start).Milliseconds()
	if len(rep.Ended)+len(rep.Adopted)+rep.Dropped+len(rep.CountersFixed)+len(rep.LeasesEnded) > 0 {
		rc.log.Info("reconciled", "leases_ended", len(rep.LeasesEnded), "ended", len(rep.Ended), "adopted", len(rep.Adopted), "dropped", rep.Dropped,
			"counters_fixed", len(rep.CountersFixed), "nodes_skipped", len(rep.NodesSkipped))
	}
	return rep, nil
}

// skipError is a node a pass cannot check now.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

func (rc *Reconciler) reconcileNode(ctx context.Context, n *store.Node, rep *sdk.ReconcileReport) error {
	st, now := rc.opts.Store, rc.opts.Now
	// The ledger is read before the node's list: an entry written before
	// this read is for a VM created before it, so a VM missing from the later
	// list is really gone, never a create still under way.
	entries, err := st.RunningOnNode(ctx, n.Name)
	if err != nil {
		return err
	}
	nc, err := rc.opts.Nodes.Client(n)
	if err != nil {
		return &skipError{err.Error()}
	}
	lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
	vms, err := nc.ListVMs(lctx)
	cancel()
	if err != nil {
		return &skipError{"does not answer: " + err.Error()}
	}
	listed := map[string]bool{}
	for _, vm := range vms {
		listed[vm.ID] = true
	}
	known := map[string]bool{}
	for _, e := range entries {
		known[e.VMID] = true
		if listed[e.VMID] {
			continue
		}
		if _, err := st.EndEntry(ctx, e.ID, "vanished", now()); err != nil {
			return fmt.Errorf("end ledger entry %s: %w", e.ID, err)
		}
		rc.log.Info("ledger entry ended: its vm is gone from the node", "node", n.Name, "vm", e.VMID, "entry", e.ID)
		rep.Ended = append(rep.Ended, sdk.LedgerChange{Entry: e.ID, Node: n.Name, VMID: e.VMID, Name: e.Name, Tenant: e.Tenant})
	}

	var orphans []int
	for i, vm := range vms {
		if vm.Tenant != "" && !known[vm.ID] {
			orphans = append(orphans, i)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	// A stamped VM without an entry is usually a create in flight. Its
	// reservation lives until the entry is written (or its central dies), so
	// read the reservations, then the ledger again: a VM whose tenant still
	// holds a reservation here waits, unless it is older than any create.
	rs, err := st.ListReservations(ctx)
	if err != nil {
		return err
	}
	reserving := map[string]bool{}
	for _, r := range rs {
		if r.Node == n.Name {
			reserving[r.Tenant] = true
		}
	}
	again, err := st.RunningOnNode(ctx, n.Name)
	if err != nil {
		return err
	}
	for _, e := range again {
		known[e.VMID] = true
	}
	for _, i := range orphans {
		vm := vms[i]
		if known[vm.ID] || (reserving[vm.Tenant] && now().Sub(vm.CreatedAt) < adoptGrace) {
			continue
		}
		if !store.ValidName(vm.Tenant) || vm.VCPUs < 1 || vm.MemoryMiB < 1 {
			rc.log.Warn("vm has a tenant stamp central cannot adopt", "node", n.Name, "vm", vm.ID)
			continue
		}
		started := vm.CreatedAt
		if started.IsZero() {
			started = now()
		}
		e, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: vm.Tenant, Node: n.Name,
			VMID: vm.ID, Name: vm.Name, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, GuestOS: vm.GuestOS, Image: vm.Image,
			StartedAt: started.UTC()})
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrDeleted) {
			continue // another pass or its create recorded it, or it was deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("adopt vm %s on node %s: %w", vm.ID, n.Name, err)
		}
		rc.log.Warn("adopted a vm the ledger lacked", "node", n.Name, "vm", vm.Name, "vm_id", vm.ID, "tenant", rc.opts.Store.TenantName(ctx, vm.Tenant), "entry", e.ID)
		rep.Adopted = append(rep.Adopted, sdk.LedgerChange{Entry: e.ID, Node: n.Name, VMID: vm.ID, Name: vm.Name, Tenant: vm.Tenant})
	}
	return nil
}

// MarkDown marks down every up node that has not heartbeated for Silence,
// and returns their names. The leader runs it several times per heartbeat
// interval; a node comes back up with its next heartbeat.
func (rc *Reconciler) MarkDown(ctx context.Context) ([]string, error) {
	ns, err := rc.opts.Store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	silence, now := rc.opts.Silence, rc.opts.Now
	var down []string
	for _, n := range ns {
		if n.State != store.NodeUp || now().Sub(n.LastHeartbeat) <= silence {
			continue
		}
		marked := false
		_, err := rc.opts.Store.UpdateNode(ctx, n.Name, false, func(n *store.Node) error {
			// Judged again on the record as it is now: a heartbeat may have won.
			marked = n.State == store.NodeUp && now().Sub(n.LastHeartbeat) > silence
			if marked {
				n.State = store.NodeDown
			}
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return down, fmt.Errorf("mark node %s down: %w", n.Name, err)
		}
		if marked {
			rc.log.Warn("node is down: no heartbeat", "node", n.Name, "last_heartbeat", n.LastHeartbeat.Format(time.RFC3339),
				"vms", len(n.VMs))
			down = append(down, n.Name)
			notify.Send(ctx, rc.opts.Notify, rc.log, notify.Event{Type: sdk.NotifyNodeDown,
				Title:  fmt.Sprintf("node %s is down: no heartbeat since %s", n.Name, n.LastHeartbeat.UTC().Format(time.RFC3339)),
				Detail: fmt.Sprintf("%d VMs were on it at its last heartbeat", len(n.VMs)), Link: "/fleet/nodes/" + n.Name},
				"node.down/"+n.Name+"/"+n.LastHeartbeat.UTC().Format(time.RFC3339Nano), now().UTC())
		}
	}
	return down, nil
}
