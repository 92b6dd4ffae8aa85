package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/placement"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Drain modes.
const (
	DrainCordon         = "cordon"
	DrainEvictEphemeral = "evict-ephemeral"
	DrainReschedule     = "reschedule"
)

// ReservedLabelPrefix starts the labels FluxVM sets itself (PoolLabel):
// tenants may not set them, but for EphemeralLabel.
const ReservedLabelPrefix = "fluxvm.dev/"

// EphemeralLabel marks a VM that a drain may delete, like one with a TTL.
const EphemeralLabel = "fluxvm.dev/ephemeral"

// drainTimeout bounds one drain's work on the node.
const drainTimeout = 5 * time.Minute

// isEphemeral: a VM with a TTL or labelled fluxvm.dev/ephemeral=true.
func isEphemeral(vm *sdk.VM) bool {
	return vm.ExpiresAt != nil || vm.Labels[EphemeralLabel] == "true"
}

// nodeFromPath reads the route's node, or answers 404.
func (s *Server) nodeFromPath(w http.ResponseWriter, r *http.Request) (*store.Node, bool) {
	name := mux.Vars(r)["name"]
	if !store.ValidName(name) {
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+jsonapi.Echo(name), "GET /fleet/nodes lists the nodes")
		return nil, false
	}
	n, err := s.opts.Store.GetNode(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+name, "GET /fleet/nodes lists the nodes")
		return nil, false
	}
	if err != nil {
		s.storeError(w, "read node "+name, err)
		return nil, false
	}
	return n, true
}

// setNodeFlags changes the central-owned flags of the route's node.
func (s *Server) setNodeFlags(w http.ResponseWriter, r *http.Request, fn func(*store.Node)) (*store.Node, bool) {
	n, ok := s.nodeFromPath(w, r)
	if !ok {
		return nil, false
	}
	n, err := s.opts.Store.UpdateNode(r.Context(), n.Name, false, func(n *store.Node) error { fn(n); return nil })
	if errors.Is(err, store.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+mux.Vars(r)["name"], "GET /fleet/nodes lists the nodes")
		return nil, false
	}
	if err != nil {
		s.storeError(w, "update node", err)
		return nil, false
	}
	return n, true
}

// cordonNode is POST /fleet/nodes/{name}/cordon: no new VM or lease lands
// there; what runs stays.
func (s *Server) cordonNode(w http.ResponseWriter, r *http.Request) {
	if n, ok := s.setNodeFlags(w, r, func(n *store.Node) { n.Cordoned = true }); ok {
		s.log.Info("node cordoned", "node", n.Name)
		jsonapi.Write(w, http.StatusOK, n)
	}
}

// uncordonNode is POST /fleet/nodes/{name}/uncordon: it ends a cordon and a
// drain (the drain's record stays for GET .../drain).
func (s *Server) uncordonNode(w http.ResponseWriter, r *http.Request) {
	if n, ok := s.setNodeFlags(w, r, func(n *store.Node) { n.Cordoned, n.Draining = false, false }); ok {
		s.log.Info("node uncordoned", "node", n.Name)
		jsonapi.Write(w, http.StatusOK, n)
	}
}

// drainNode is POST /fleet/nodes/{name}/drain?mode=cordon|evict-ephemeral|
// reschedule[&force=true]: it cordons the node, marks it draining, then handles each
// VM by mode and records what it did (GET .../drain). A leased node needs
// force: draining it breaks the tenant's sole use.
func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) {
	mode := r.URL.Query().Get("mode")
	if mode == "" {
		mode = DrainCordon
	}
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	switch mode {
	case DrainCordon, DrainEvictEphemeral, DrainReschedule:
	default:
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("mode %q is not a drain mode", jsonapi.Echo(mode)),
			"use mode=cordon (keep every VM), mode=evict-ephemeral (delete VMs with a TTL or label fluxvm.dev/ephemeral=true) "+
				"or mode=reschedule (also recreate reschedulable VMs on other nodes)")
		return
	}
	n, ok := s.nodeFromPath(w, r)
	if !ok {
		return
	}
	if n.LeasedBy != "" && !force {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s is leased (lease %s): draining it breaks the tenant's sole use", n.Name, n.LeaseID),
			"add force=true to drain it anyway, or wait for the lease to end")
		return
	}
	n, ok = s.setNodeFlags(w, r, func(n *store.Node) { n.Cordoned, n.Draining = true, true })
	if !ok {
		return
	}
	now := s.opts.Now().UTC()
	d := &store.Drain{Node: n.Name, Mode: mode, Forced: force, StartedAt: now, UpdatedAt: now, VMs: []store.DrainVM{}}
	if err := s.opts.Store.PutDrain(r.Context(), d); err != nil {
		s.storeError(w, "record the drain", err)
		return
	}
	s.log.Info("drain started", "node", n.Name, "mode", mode, "forced", force)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), drainTimeout)
	defer cancel()
	if err := s.runDrain(ctx, n, d); err != nil {
		s.log.Warn("drain not finished; the reconciler goes on with it", "node", n.Name, "error", err)
	}
	jsonapi.Write(w, http.StatusOK, d)
}

// runDrain handles each VM of the node by the drain's mode and records the
// outcome. It finishes the drain when every VM is kept or deleted; a VM that
// failed (or a node that does not answer) leaves it unfinished, for the
// reconciler to take up again.
func (s *Server) runDrain(ctx context.Context, n *store.Node, d *store.Drain) error {
	save := func() error {
		d.UpdatedAt = s.opts.Now().UTC()
		return s.opts.Store.PutDrain(ctx, d)
	}
	if n.State != store.NodeUp {
		return fmt.Errorf("node %s is down", n.Name)
	}
	nc, err := s.nodes.Client(n)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
	vms, err := nc.ListVMs(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list the vms of node %s: %w", n.Name, err)
	}
	entries, err := s.opts.Store.RunningOnNode(ctx, n.Name)
	if err != nil {
		return err
	}
	byVM := map[string]*store.LedgerEntry{}
	for i := range entries {
		byVM[entries[i].VMID] = &entries[i]
	}
	// Earlier outcomes (a drain taken up again) are kept: a deleted VM is no
	// longer listed, and must stay in the report.
	seen := map[string]int{}
	for i, v := range d.VMs {
		seen[v.ID] = i
	}
	failed := false
	for i := range vms {
		vm := &vms[i]
		dv := store.DrainVM{ID: vm.ID, Name: vm.Name, Tenant: vm.Tenant, Ephemeral: isEphemeral(vm), Action: "kept"}
		if e := byVM[vm.ID]; e != nil {
			dv.Tenant = e.Tenant
		}
		var prev *store.DrainVM
		if j, ok := seen[vm.ID]; ok {
			prev = &d.VMs[j]
		}
		put := func() {
			if j, ok := seen[vm.ID]; ok {
				d.VMs[j] = dv
			} else {
				seen[vm.ID] = len(d.VMs)
				d.VMs = append(d.VMs, dv)
			}
		}
		switch {
		case (d.Mode == DrainEvictEphemeral || d.Mode == DrainReschedule) && dv.Ephemeral:
			if _, err := s.vms.Delete(ctx, n, vm.ID, byVM[vm.ID], "drained"); err != nil {
				dv.Action, dv.Error, failed = "failed", err.Error(), true
			} else {
				dv.Action = "deleted"
			}
		case d.Mode == DrainReschedule && byVM[vm.ID] != nil:
			to, err := s.moveVM(ctx, n, vm, byVM[vm.ID], prev, func(target string) error {
				dv.Action, dv.MovedTo = "pending", target
				put()
				return save()
			})
			switch {
			case errors.Is(err, errNotReschedulable):
				dv.Action, dv.MovedTo = "kept", ""
			case err != nil:
				dv.Action, dv.Error, failed = "failed", err.Error(), true
			default:
				dv.Action, dv.MovedTo = "moved", to
			}
		}
		put()
	}
	if !failed {
		d.Finished, d.FinishedAt = true, s.opts.Now().UTC()
		s.log.Info("drain finished", "node", n.Name, "mode", d.Mode, "vms", len(d.VMs))
	}
	if err := save(); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("some vms of node %s could not be deleted or moved", n.Name)
	}
	return nil
}

// errNotReschedulable: the VM keeps no spec, so a reschedule keeps it.
var errNotReschedulable = errors.New("not reschedulable")

// keptSpec is what central keeps (in etcd, under specs/<entry id>) of a VM
// created with "reschedulable": true: the node's create request as resolved
// at creation (image path, size, labels, TTL, tenant stamp) and the
// placement constraints. A pin to one node is not kept: the VM is meant to
// move.
type keptSpec struct {
	Spec         sdk.CreateVMRequest `json:"spec"`
	Image        string              `json:"image,omitempty"`
	NodeSelector map[string]string   `json:"node_selector,omitempty"`
	Nested       bool                `json:"nested,omitempty"`
}

func (k *keptSpec) encode() []byte {
	b, err := json.Marshal(k)
	if err != nil {
		panic(err) // plain struct
	}
	return b
}

// moveVM recreates a reschedulable VM (entry e, on the draining node n) on
// another node and then deletes it from n. It returns the new node. Order:
// place, reserve as a replacement of e (the tenant's quota does not count
// the old VM twice; the new node's capacity is checked as for any create),
// record the target in the drain (pending), create on the target, commit
// the new ledger entry with the spec and Replaces = e, and only then delete
// the old VM. A drain taken up again (this central died, the node did not
// answer) first looks for the copy it made: a running entry that replaces
// e, or, if the drain was pending on a target, a VM of that name and tenant
// there that the ledger has not recorded yet. So a VM is never created twice
// by one move, and the old one goes only once the new one is recorded.
// Disk state does not move: the new VM boots from the spec's image.
func (s *Server) moveVM(ctx context.Context, n *store.Node, vm *sdk.VM, e *store.LedgerEntry, prev *store.DrainVM, pending func(target string) error) (string, error) {
	raw, err := s.opts.Store.GetSpec(ctx, e.ID)
	if errors.Is(err, store.ErrNotFound) {
		return "", errNotReschedulable
	}
	if err != nil {
		return "", err
	}
	var kept keptSpec
	if err := json.Unmarshal(raw, &kept); err != nil {
		return "", fmt.Errorf("read the kept spec of vm %s: %w", vm.Name, err)
	}
	finish := func(target string) (string, error) {
		// The old VM goes only once the copy runs (and answers, if the old
		// one's guest agent did): a copy that fails to boot leaves the
		// workload where it was, and the drain says why.
		if err := s.waitCopy(ctx, target, vm); err != nil {
			return "", fmt.Errorf("recreated on %s, but the old vm stays: %w", target, err)
		}
		if _, err := s.vms.Delete(ctx, n, vm.ID, e, "rescheduled"); err != nil {
			return "", fmt.Errorf("recreated on %s, but the old vm stays: %w", target, err)
		}
		s.log.Info("vm rescheduled", "vm", vm.Name, "tenant", e.Tenant, "from", n.Name, "to", target)
		return target, nil
	}
	// 1. A copy this move already recorded.
	var running []store.LedgerEntry
	if e.Tenant != "" {
		running, err = s.opts.Store.RunningForTenant(ctx, e.Tenant)
	} else {
		running, err = s.opts.Store.ListEntries(ctx, func(x *store.LedgerEntry) bool { return x.Running() && x.Tenant == "" })
	}
	if err != nil {
		return "", err
	}
	for _, x := range running {
		if x.Replaces == e.ID {
			return finish(x.Node)
		}
	}
	// 2. A copy created on the target but not recorded (central died
	// between the node's create and the commit).
	if prev != nil && prev.Action == "pending" && prev.MovedTo != "" {
		if target, ok, err := s.adoptCopy(ctx, prev.MovedTo, vm, e, raw); err != nil {
			return "", err
		} else if ok {
			return finish(target)
		}
	}
	// 3. Place and create.
	pol, err := s.opts.Store.GetPolicy(ctx)
	if err != nil {
		return "", err
	}
	spec := kept.Spec
	macOS := spec.GuestOS == store.GuestMacOS
	placeReq := scheduler.Request{Tenant: e.Tenant, GuestOS: spec.GuestOS, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB,
		NodeSelector: kept.NodeSelector, Nested: kept.Nested}
	_, target, res, err := s.place.PlaceAndReserve(ctx, placeReq, pol, store.ReserveRequest{Tenant: e.Tenant,
		VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, MacOS: macOS, Replaces: e.ID,
		ExclusiveLeases: pol.ExclusiveLeasedHosts,
		RequireLease:    pol.RequireLeaseForMacOS && macOS && e.Tenant != ""},
		func(c *store.Node) bool { return c.Name != n.Name }) // never recreate in place
	var np *scheduler.NoPlacementError
	var qe *store.QuotaError
	switch {
	case errors.As(err, &np):
		return "", fmt.Errorf("no other node takes it: %s", np.Summary)
	case errors.As(err, &qe):
		return "", fmt.Errorf("quota: %s", qe.Error())
	case err != nil:
		return "", err
	}
	if err := pending(target.Name); err != nil {
		_ = s.opts.Store.Release(ctx, res)
		return "", fmt.Errorf("record the move: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, nodecall.CreateTimeout)
	nvm, err := s.nodes.Create(cctx, target, spec)
	cancel()
	if err != nil {
		if rerr := s.opts.Store.Release(ctx, res); rerr != nil {
			s.log.Warn("release reservation (it lapses with this central's lease)", "reservation", res.ID, "error", rerr)
		}
		return "", fmt.Errorf("create on node %s: %w", target.Name, err)
	}
	entry := store.LedgerEntry{VMID: nvm.ID, Name: nvm.Name, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB,
		GuestOS: spec.GuestOS, Image: kept.Image, StartedAt: s.opts.Now().UTC(), Replaces: e.ID}
	if _, err := s.opts.Store.CommitSpec(ctx, res, entry, raw); err != nil {
		// The copy runs; the next attempt finds it by name on the target.
		_ = s.opts.Store.Release(ctx, res)
		return "", fmt.Errorf("record the copy on node %s: %w", target.Name, err)
	}
	return finish(target.Name)
}

// copyReadyTimeout bounds how long a move waits for the copy to boot.
const copyReadyTimeout = 3 * time.Minute

// waitCopy waits until the copy of old (same name) on node target runs, and
// when old's guest agent was ready, until the copy's is too.
func (s *Server) waitCopy(ctx context.Context, target string, old *sdk.VM) error {
	tn, err := s.opts.Store.GetNode(ctx, target)
	if err != nil {
		return err
	}
	nc, err := s.nodes.Client(tn)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, copyReadyTimeout)
	defer cancel()
	for {
		cp, err := nodecall.TenantVMNamed(ctx, nc, old.Tenant, old.Name) // names are per tenant
		switch {
		case sdk.IsNotFound(err):
			return fmt.Errorf("the copy is gone from node %s", target)
		case err != nil:
			// A slow node, or the time is up (below): ask again.
		case cp.State == sdk.StateStopped || cp.State == sdk.StateLost:
			return fmt.Errorf("the copy on node %s is %s: %s", target, cp.State, cp.LastError)
		case cp.State == sdk.StateRunning && (cp.AgentReady || !old.AgentReady):
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the copy on node %s did not become ready within %v", target, copyReadyTimeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// adoptCopy looks on node target for the copy an earlier attempt of a move
// created but did not record (same name, same tenant stamp), and records
// it as replacing e, with the kept spec. ok is false when there is none.
func (s *Server) adoptCopy(ctx context.Context, target string, vm *sdk.VM, e *store.LedgerEntry, raw []byte) (string, bool, error) {
	tn, err := s.opts.Store.GetNode(ctx, target)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if tn.State != store.NodeUp {
		return "", false, fmt.Errorf("node %s, where an earlier attempt moved it, is down", target)
	}
	nc, err := s.nodes.Client(tn)
	if err != nil {
		return "", false, err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
	vms, err := nc.ListVMs(lctx)
	cancel()
	if err != nil {
		return "", false, fmt.Errorf("list the vms of node %s: %w", target, err)
	}
	for _, c := range vms {
		if c.Name != vm.Name || c.Tenant != e.Tenant {
			continue
		}
		id := store.EntryID(target, c.ID) // the id every writer gives it
		ne, err := s.opts.Store.RecordEntry(ctx, store.LedgerEntry{ID: id, Tenant: e.Tenant, Node: target, VMID: c.ID,
			Name: c.Name, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, GuestOS: e.GuestOS, Image: e.Image,
			StartedAt: s.opts.Now().UTC(), Replaces: e.ID})
		switch {
		case errors.Is(err, store.ErrExists): // the reconciler adopted it first
		case err != nil:
			return "", false, err
		default:
			id = ne.ID
		}
		if err := s.opts.Store.PutSpec(ctx, id, raw); err != nil {
			return "", false, err
		}
		return target, true, nil
	}
	return "", false, nil
}

// drainStatus is GET /fleet/nodes/{name}/drain: the node's latest drain,
// each VM with what happened to it, and whether it finished.
func (s *Server) drainStatus(w http.ResponseWriter, r *http.Request) {
	n, ok := s.nodeFromPath(w, r)
	if !ok {
		return
	}
	d, err := s.opts.Store.GetDrain(r.Context(), n.Name)
	if errors.Is(err, store.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "node "+n.Name+" has not been drained", "POST /fleet/nodes/"+n.Name+"/drain starts one")
		return
	}
	if err != nil {
		s.storeError(w, "read the drain", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, drainView{Drain: *d, Draining: n.Draining})
}

// drainView is a drain with whether the node is still draining (uncordon
// ends that).
type drainView struct {
	store.Drain
	Draining bool `json:"draining"`
}

// ResumeDrains takes up drains left unfinished (a central that died, a VM
// that failed to delete) whose node is still draining and that nobody
// touched for a minute. The leader runs it with each reconcile pass.
func (s *Server) ResumeDrains(ctx context.Context) error {
	ds, err := s.opts.Store.ListDrains(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range ds {
		d := &ds[i]
		if d.Finished || s.opts.Now().Sub(d.UpdatedAt) < time.Minute {
			continue
		}
		n, err := s.opts.Store.GetNode(ctx, d.Node)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !n.Draining {
			continue // uncordoned meanwhile
		}
		if err := s.runDrain(ctx, n, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// scrubResult is POST /fleet/nodes/{name}/scrub.
type scrubResult struct {
	Node         string   `json:"node"`
	ScrubPending bool     `json:"scrub_pending"`
	Deleted      []string `json:"deleted"`
	// Workspaces are VM folders no VM owned that the scrub destroyed
	// (force); Proof says what the node showed at the end.
	Workspaces []string `json:"workspaces_removed"`
	Proof      string   `json:"proof"`
}

// scrubNode is POST /fleet/nodes/{name}/scrub[?force=true]: refused while
// VMs remain on the node (force deletes them); then the node must prove
// through its API that it lists no VM and no VM workspace (force has it
// destroy leftover workspaces), and the node's scrub_pending is cleared. A node under an active lease is refused: release the lease first.
func (s *Server) scrubNode(w http.ResponseWriter, r *http.Request) {
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	n, ok := s.nodeFromPath(w, r)
	if !ok {
		return
	}
	if n.LeasedBy != "" {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s is leased (lease %s)", n.Name, n.LeaseID),
			"a scrub follows a lease's end: release the lease first (POST /fleet/leases/"+n.LeaseID+"/release?force=true)")
		return
	}
	if n.State != store.NodeUp {
		jsonapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("node %s is down: a scrub needs it to answer", n.Name),
			"retry once the node reports again")
		return
	}
	nc, err := s.nodes.Client(n)
	if err != nil {
		jsonapi.WriteError(w, http.StatusBadGateway, err.Error(), "the node's heartbeat must carry its API address")
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), drainTimeout)
	defer cancel()
	list := func() ([]sdk.VM, bool) {
		lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
		defer cancel()
		vms, err := nc.ListVMs(lctx)
		if err != nil {
			s.nodeError(w, PrincipalOf(r.Context()), n, "list its vms", err)
			return nil, false
		}
		return vms, true
	}
	vms, ok := list()
	if !ok {
		return
	}
	res := scrubResult{Node: n.Name, Deleted: []string{}, Workspaces: []string{}}
	if len(vms) > 0 {
		if !force {
			names := make([]string, 0, min(len(vms), 5))
			for _, vm := range vms[:min(len(vms), 5)] {
				names = append(names, vm.Name)
			}
			jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s still runs %d VMs (%v)", n.Name, len(vms), names),
				"delete them first, or add force=true to delete them with the scrub")
			return
		}
		deleted, err := s.vms.DeleteMatching(ctx, n, func(string) bool { return true }, "scrubbed")
		res.Deleted = append(res.Deleted, deleted...)
		if err != nil {
			jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("node %s: could not delete every VM: %v", n.Name, err),
				"retry the scrub; the node keeps scrub_pending until it lists no VM")
			return
		}
		if vms, ok = list(); !ok {
			return
		}
	}
	if len(vms) > 0 {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s still lists %d VMs after the deletes", n.Name, len(vms)),
			"retry the scrub with force=true; the node keeps scrub_pending until it lists no VM")
		return
	}
	// No VM; now nothing of one on disk either.
	if res.Proof, ok = s.scrubWorkspaces(ctx, w, r, nc, n, force, &res); !ok {
		return
	}
	n, err = s.opts.Store.UpdateNode(ctx, n.Name, false, func(n *store.Node) error { n.ScrubPending = false; return nil })
	if err != nil {
		s.storeError(w, "clear scrub_pending", err)
		return
	}
	s.log.Info("node scrubbed", "node", n.Name, "deleted", len(res.Deleted))
	res.ScrubPending = n.ScrubPending
	jsonapi.Write(w, http.StatusOK, res)
}

// scrubWorkspaces makes the node show that no VM folder is left in its
// drivers' state directories: leftovers (a create cut short) refuse the scrub
// unless force, which has the node destroy them. It answers itself and
// returns false on a refusal; else it returns the proof to report.
func (s *Server) scrubWorkspaces(ctx context.Context, w http.ResponseWriter, r *http.Request, nc *sdk.NodeClient, n *store.Node,
	force bool, res *scrubResult) (string, bool) {
	list := func() ([]sdk.Workspace, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
		defer cancel()
		return nc.Workspaces(lctx)
	}
	ws, err := list()
	if sdk.IsNotFound(err) {
		return "the node lists no VM (its agent is too old to list VM workspaces)", true
	}
	if err != nil {
		s.nodeError(w, PrincipalOf(r.Context()), n, "list its vm workspaces", err)
		return "", false
	}
	if len(ws) > 0 && force {
		cctx, cancel := context.WithTimeout(ctx, nodecall.CallTimeout)
		removed, err := nc.CleanWorkspaces(cctx)
		cancel()
		for _, x := range removed {
			res.Workspaces = append(res.Workspaces, x.Driver+"/"+x.ID)
		}
		if err != nil {
			s.nodeError(w, PrincipalOf(r.Context()), n, "destroy leftover vm workspaces", err)
			return "", false
		}
		if ws, err = list(); err != nil {
			s.nodeError(w, PrincipalOf(r.Context()), n, "list its vm workspaces", err)
			return "", false
		}
	}
	if len(ws) > 0 {
		ids := make([]string, 0, min(len(ws), 5))
		for _, x := range ws[:min(len(ws), 5)] {
			ids = append(ids, x.Driver+"/"+x.ID)
		}
		hint := "add force=true to have the node destroy them with the scrub"
		if force {
			hint = "the node could not destroy them: see its log, then retry"
		}
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s runs no VM but still holds %d VM workspaces (%v)", n.Name, len(ws), ids), hint)
		return "", false
	}
	return "the node lists no VM and no VM workspace", true
}

// tenantNodeView is what a tenant sees of a node it leases: its size, what
// is free, its drivers and the lease; never its address or labels.
type tenantNodeView struct {
	Name     string               `json:"name"`
	State    string               `json:"state"`
	Capacity store.Capacity       `json:"capacity"`
	Drivers  []store.DriverStatus `json:"drivers"`
	GuestOS  []string             `json:"guest_os"`
	Nested   bool                 `json:"nested"`
	LeaseID  string               `json:"lease_id"`
	VMs      int                  `json:"vms"`
}

// leasedNodeView shows n to its lessee, with free capacity as central
// counts it (running and reserved through central, or what the node
// reports, whichever is more).
func (s *Server) leasedNodeView(ctx context.Context, n *store.Node) (tenantNodeView, error) {
	u, err := s.opts.Store.NodeUsage(ctx, n.Name)
	if err != nil {
		return tenantNodeView{}, err
	}
	sn := placement.SchedulerNode(n, u)
	t := n.Capacity.Total
	v := tenantNodeView{Name: n.Name, State: n.State, Nested: n.Nested, LeaseID: n.LeaseID, VMs: len(n.VMs),
		Drivers: append([]store.DriverStatus{}, n.Drivers...), GuestOS: append([]string{}, n.GuestOS...),
		Capacity: store.Capacity{Total: t, Free: store.Resources{
			VCPUs:      max(t.VCPUs-sn.Used.VCPUs, 0),
			MemoryMiB:  max(t.MemoryMiB-sn.Used.MemoryMiB, 0),
			MacOSSlots: max(t.MacOSSlots-sn.Used.MacOSSlots, 0),
		}}}
	return v, nil
}
