package api

import (
	"context"
	"errors"
	"fmt"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
)

// adoptGrace is how old a stamped VM the ledger lacks must be before the
// reconciler adopts it while its tenant still holds a reservation on that
// node: such a VM is usually a create in flight whose ledger entry is about
// to be written. It is longer than a create may take.
const adoptGrace = 2 * nodecall.CreateTimeout

// ReconcileReport says what one reconcile pass saw and did.
type ReconcileReport struct {
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// NodesChecked are the nodes whose VM lists were compared with the ledger.
	NodesChecked []string `json:"nodes_checked"`
	// NodesSkipped are down or did not answer: their entries are left alone,
	// because a VM out of sight is not a VM gone.
	NodesSkipped []SkippedNode `json:"nodes_skipped"`
	// Ended are entries closed because their node no longer lists the VM.
	Ended []LedgerChange `json:"ended"`
	// Adopted are VMs a node runs with a tenant stamp that the ledger lacked.
	Adopted []LedgerChange `json:"adopted"`
	// Dropped counts ended entries older than ledger_retention_days.
	Dropped int `json:"dropped"`
	// CountersFixed are usage counters the recount found wrong and rewrote.
	CountersFixed []CounterFix `json:"counters_fixed"`
	// LeasesEnded are leases whose end time passed, ended by this pass (their
	// nodes are scrub pending and the lessee's VMs there deleted).
	LeasesEnded []string `json:"leases_ended"`
}

// SkippedNode is a node a reconcile pass could not check.
type SkippedNode struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// LedgerChange is one ledger entry a reconcile pass closed or wrote.
type LedgerChange struct {
	Entry  string `json:"entry"`
	Node   string `json:"node"`
	VMID   string `json:"vm_id"`
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
}

// CounterFix is a usage counter the recount rewrote.
type CounterFix struct {
	Scope string      `json:"scope"`
	Name  string      `json:"name"`
	Was   store.Usage `json:"was"`
	Now   store.Usage `json:"now"`
}

// reconcile is POST /fleet/reconcile: one pass now, on whichever central
// is asked (passes are safe to run side by side).
func (s *Server) reconcile(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	rep, err := s.Reconcile(ctx)
	if err != nil {
		s.storeError(w, "reconcile", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, rep)
}

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
func (s *Server) Reconcile(ctx context.Context) (*ReconcileReport, error) {
	start := s.opts.Now()
	rep := &ReconcileReport{StartedAt: start.UTC(), NodesChecked: []string{}, NodesSkipped: []SkippedNode{},
		Ended: []LedgerChange{}, Adopted: []LedgerChange{}, CountersFixed: []CounterFix{}, LeasesEnded: []string{}}
	// Leases first: the VMs an ended lease deletes are then not reported as
	// vanished below. A node that does not answer keeps them for the next pass.
	ended, err := s.EndExpiredLeases(ctx)
	if err != nil {
		return nil, err
	}
	rep.LeasesEnded = ended
	if err := s.ResumeDrains(ctx); err != nil {
		s.log.Warn("resume unfinished drains; retrying next pass", "error", err)
	}
	ns, err := s.opts.Store.ListNodes(ctx)
	if err != nil {
		return nil, err
	}
	for i := range ns {
		n := &ns[i]
		if n.State != store.NodeUp {
			rep.NodesSkipped = append(rep.NodesSkipped, SkippedNode{Node: n.Name, Reason: "down"})
			continue
		}
		if err := s.reconcileNode(ctx, n, rep); err != nil {
			var skip *skipError
			if !errors.As(err, &skip) {
				return nil, err
			}
			rep.NodesSkipped = append(rep.NodesSkipped, SkippedNode{Node: n.Name, Reason: skip.reason})
			continue
		}
		rep.NodesChecked = append(rep.NodesChecked, n.Name)
	}

	pol, err := s.opts.Store.GetPolicy(ctx)
	if err != nil {
		return nil, err
	}
	if keep := pol.LedgerRetention(); keep > 0 {
		cut := s.opts.Now().Add(-keep)
		if rep.Dropped, err = s.opts.Store.DropEndedBefore(ctx, cut); err != nil {
			return nil, err
		}
	}
	rc, err := s.opts.Store.Recount(ctx)
	if err != nil {
		return nil, err
	}
	for _, f := range rc.Fixed {
		s.log.Warn("usage counter was wrong; rewritten from the ledger", "scope", f.Scope, "name", f.Name, "was", f.Was, "now", f.Now)
		rep.CountersFixed = append(rep.CountersFixed, CounterFix{Scope: f.Scope, Name: f.Name, Was: f.Was, Now: f.Now})
	}
	if err := s.CheckBudgets(ctx); err != nil {
		s.log.Warn("check budgets; retrying next pass", "error", err)
	}
	rep.DurationMS = s.opts.Now().Sub(start).Milliseconds()
	if len(rep.Ended)+len(rep.Adopted)+rep.Dropped+len(rep.CountersFixed)+len(rep.LeasesEnded) > 0 {
		s.log.Info("reconciled", "leases_ended", len(rep.LeasesEnded), "ended", len(rep.Ended), "adopted", len(rep.Adopted), "dropped", rep.Dropped,
			"counters_fixed", len(rep.CountersFixed), "nodes_skipped", len(rep.NodesSkipped))
	}
	return rep, nil
}

// skipError is a node a pass cannot check now.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

func (s *Server) reconcileNode(ctx context.Context, n *store.Node, rep *ReconcileReport) error {
	// The ledger is read before the node's list: an entry written before
	// this read is for a VM created before it, so a VM missing from the later
	// list is really gone, never a create still under way.
	entries, err := s.opts.Store.RunningOnNode(ctx, n.Name)
	if err != nil {
		return err
	}
	nc, err := s.nodes.Client(n)
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
		if _, err := s.opts.Store.EndEntry(ctx, e.ID, "vanished", s.opts.Now()); err != nil {
			return fmt.Errorf("end ledger entry %s: %w", e.ID, err)
		}
		s.log.Info("ledger entry ended: its vm is gone from the node", "node", n.Name, "vm", e.VMID, "entry", e.ID)
		rep.Ended = append(rep.Ended, LedgerChange{Entry: e.ID, Node: n.Name, VMID: e.VMID, Name: e.Name, Tenant: e.Tenant})
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
	rs, err := s.opts.Store.ListReservations(ctx)
	if err != nil {
		return err
	}
	reserving := map[string]bool{}
	for _, r := range rs {
		if r.Node == n.Name {
			reserving[r.Tenant] = true
		}
	}
	again, err := s.opts.Store.RunningOnNode(ctx, n.Name)
	if err != nil {
		return err
	}
	for _, e := range again {
		known[e.VMID] = true
	}
	for _, i := range orphans {
		vm := vms[i]
		if known[vm.ID] || (reserving[vm.Tenant] && s.opts.Now().Sub(vm.CreatedAt) < adoptGrace) {
			continue
		}
		if !store.ValidName(vm.Tenant) || vm.VCPUs < 1 || vm.MemoryMiB < 1 {
			s.log.Warn("vm has a tenant stamp central cannot adopt", "node", n.Name, "vm", vm.ID)
			continue
		}
		started := vm.CreatedAt
		if started.IsZero() {
			started = s.opts.Now()
		}
		e, err := s.opts.Store.RecordEntry(ctx, store.LedgerEntry{Tenant: vm.Tenant, Node: n.Name,
			VMID: vm.ID, Name: vm.Name, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, GuestOS: vm.GuestOS, Image: vm.Image,
			StartedAt: started.UTC()})
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrDeleted) {
			continue // another pass or its create recorded it, or it was deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("adopt vm %s on node %s: %w", vm.ID, n.Name, err)
		}
		s.log.Warn("adopted a vm the ledger lacked", "node", n.Name, "vm", vm.ID, "tenant", vm.Tenant, "entry", e.ID)
		rep.Adopted = append(rep.Adopted, LedgerChange{Entry: e.ID, Node: n.Name, VMID: vm.ID, Name: vm.Name, Tenant: vm.Tenant})
	}
	return nil
}
