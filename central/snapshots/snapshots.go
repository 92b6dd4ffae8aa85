// Package snapshots takes, lists, restores and deletes VMs' snapshots and
// clones VMs through their nodes, with central's rules around them. It keeps
// a record of every snapshot in the store for the per-VM limit and for
// billing, and sends vm.snapshot, vm.restored and vm.cloned notifications.
package snapshots

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// NodeTimeout bounds one snapshot, restore or clone call to a node: a memory
// snapshot writes the guest's RAM, a clone copies a disk.
const NodeTimeout = 5 * time.Minute

// pendingGrace is how long a record may stay pending (its node taking the
// snapshot) before a listing that does not find it on the node drops it.
const pendingGrace = NodeTimeout + time.Minute

// Store is what snapshots need of central's store.
type Store interface {
	AddSnapshot(ctx context.Context, rec *store.Snapshot, limit int64) error
	PutSnapshot(ctx context.Context, rec *store.Snapshot) error
	DropSnapshot(ctx context.Context, rec *store.Snapshot) error
	VMSnapshots(ctx context.Context, node, vmID string) ([]store.Snapshot, error)
	GetTenant(ctx context.Context, id string) (*store.Tenant, error)
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	Reserve(ctx context.Context, req store.ReserveRequest) (*store.Reservation, error)
	Commit(ctx context.Context, res *store.Reservation, e store.LedgerEntry) (*store.LedgerEntry, error)
	Release(ctx context.Context, res *store.Reservation) error
}

// Service does the snapshot and clone routes' work. It is safe for
// concurrent use.
type Service struct {
	st    Store
	nodes *nodecall.Caller
	now   func() time.Time
	log   hclog.Logger
	// Notify receives vm.snapshot, vm.restored and vm.cloned (nil: nothing
	// is sent). Set it before use.
	Notify notify.Sink
}

// New makes a Service.
func New(st Store, nodes *nodecall.Caller, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, nodes: nodes, now: now, log: log}
}

// CheckName refuses a snapshot name the spec does not allow (the rule of
// every name central keeps: store.ValidName).
func CheckName(name string) error {
	if !store.ValidName(name) {
		return &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("snapshot name %q is not valid", jsonapi.Echo(name)),
			Hint: "a snapshot name is 1-64 letters, digits, '.', '_' and '-', starting with a letter or digit"}
	}
	return nil
}

// Limit is the snapshot limit of tenant's VMs ("" the operator's: the
// policy's).
func (s *Service) Limit(ctx context.Context, tenant string) (int64, error) {
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return 0, &store.OpError{Op: "read the policy", Err: err}
	}
	if tenant == "" {
		return pol.MaxSnapshotsPerVM, nil
	}
	t, err := s.st.GetTenant(ctx, tenant)
	if err != nil {
		return 0, &store.OpError{Op: "read the tenant", Err: err}
	}
	return store.SnapshotsPerVM(t.Quota, pol), nil
}

// owner is the tenant a target's VM belongs to.
func owner(t *vms.Target, vm *sdk.VM) string {
	if t.Entry != nil {
		return t.Entry.Tenant
	}
	if vm != nil {
		return vm.Tenant
	}
	return ""
}

func (s *Service) client(t *vms.Target) (*sdk.NodeClient, error) {
	nc, err := s.nodes.Client(t.Node)
	if err != nil {
		return nil, &nodecall.NodeError{Node: t.Node, What: "reach the node", Err: err}
	}
	return nc, nil
}

// Take snapshots the target VM. The record holds the snapshot's place
// under the limit (in the transaction that checks it) before the node is
// asked, so parallel snapshots cannot overshoot it.
func (s *Service) Take(ctx context.Context, t *vms.Target, req sdk.FleetSnapshotRequest) (*sdk.FleetSnapshot, error) {
	now := s.now().UTC()
	if req.Name == "" {
		req.Name = "snap-" + now.Format("20060102-150405")
	}
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	nc, err := s.client(t)
	if err != nil {
		return nil, err
	}
	vm, err := nc.GetVM(ctx, t.ID)
	if err != nil {
		return nil, &nodecall.NodeError{Node: t.Node, What: "read the vm", Err: err}
	}
	tenant := owner(t, vm)
	limit, err := s.Limit(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if limit == 0 {
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: "snapshots are turned off for this VM's tenant (max_snapshots_per_vm is 0)",
			Hint: "the operator sets max_snapshots_per_vm in the policy or in the tenant's quota"}
	}
	if req.IncludeMemory && vm.State != sdk.StateRunning && vm.State != sdk.StatePaused {
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("vm %s is %s: a snapshot with memory needs a running or paused VM", vm.Name, vm.State),
			Hint: "start the VM first (fluxctl fleet start), or take a disk-only snapshot (without --memory)"}
	}
	rec := &store.Snapshot{FleetSnapshot: sdk.FleetSnapshot{Name: req.Name, Node: t.Node.Name, VMID: vm.ID, VM: vm.Name, Memory: req.IncludeMemory},
		ID: store.NewSnapshotID(), Tenant: tenant, Pending: true, CreatedAt: now}
	var qe *store.QuotaError
	switch err := s.st.AddSnapshot(ctx, rec, limit); {
	case errors.As(err, &qe):
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: fmt.Sprintf("vm %s keeps %d snapshots, its limit (max_snapshots_per_vm %d)", vm.Name, qe.Used, limit),
			Hint: "delete one first (fluxctl fleet snapshot-rm VM SNAPSHOT), or ask the operator to raise max_snapshots_per_vm"}
	case errors.Is(err, store.ErrExists):
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("vm %s has a snapshot named %s already", vm.Name, req.Name),
			Hint: "names are unique per VM, without regard to case: pick another, or delete the old one first"}
	case err != nil:
		return nil, &store.OpError{Op: "record the snapshot", Err: err}
	}
	// From here on the record must be settled whatever the caller does.
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	snap, err := nc.SnapshotVM(cctx, vm.ID, sdk.SnapshotRequest{Tag: req.Name, Memory: req.IncludeMemory})
	if err != nil {
		if derr := s.st.DropSnapshot(ctx, rec); derr != nil {
			s.log.Warn("drop the record of a snapshot not taken; a listing drops it", "vm", vm.Name, "snapshot", req.Name, "error", derr)
		}
		return nil, &nodecall.NodeError{Node: t.Node, What: "take the snapshot", Err: err}
	}
	rec.Pending, rec.TakenAt, rec.VMState = false, s.now().UTC(), snap.VMState
	rec.SizeGiB = gib(snap.SizeBytes)
	if err := s.st.PutSnapshot(ctx, rec); err != nil {
		s.log.Error("record a snapshot taken; a listing records it", "vm", vm.Name, "snapshot", req.Name, "error", err)
	}
	kind := "disk"
	if req.IncludeMemory {
		kind = "disk and memory"
	}
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyVMSnapshot, Tenant: tenant,
		Title:  fmt.Sprintf("snapshot %s of VM %s was taken on node %s", req.Name, vm.Name, t.Node.Name),
		Detail: kind, Link: "/fleet/vms/" + t.Node.Name + "/" + vm.ID + "/snapshots"}, "vm.snapshot/"+rec.ID, rec.TakenAt)
	out := rec.FleetSnapshot
	return &out, nil
}

// gib is a size in bytes in whole GiB, rounded up, at most
// store.MaxSnapshotGiB.
func gib(bytes int64) int64 {
	if bytes <= 0 {
		return 0
	}
	return min(bytes>>30+min(bytes&(1<<30-1), 1), store.MaxSnapshotGiB)
}

// List lists the target VM's snapshots as its node has them and brings the
// records in line: a snapshot the node has and central does not is
// recorded (since the node says it was taken), one central keeps that the
// node lacks ends now, and sizes follow the node's.
func (s *Service) List(ctx context.Context, t *vms.Target) (*sdk.FleetSnapshotList, error) {
	nc, err := s.client(t)
	if err != nil {
		return nil, err
	}
	vm, err := nc.GetVM(ctx, t.ID)
	if err != nil {
		return nil, &nodecall.NodeError{Node: t.Node, What: "read the vm", Err: err}
	}
	onNode, err := nc.Snapshots(ctx, vm.ID)
	if err != nil {
		return nil, &nodecall.NodeError{Node: t.Node, What: "list the snapshots", Err: err}
	}
	tenant := owner(t, vm)
	limit, err := s.Limit(ctx, tenant)
	if err != nil {
		return nil, err
	}
	recs, err := s.st.VMSnapshots(ctx, t.Node.Name, vm.ID)
	if err != nil {
		return nil, &store.OpError{Op: "read the snapshot records", Err: err}
	}
	now := s.now().UTC()
	live := map[string]*store.Snapshot{}
	for i := range recs {
		if recs[i].Live() {
			live[recs[i].Name] = &recs[i]
		}
	}
	out := &sdk.FleetSnapshotList{Snapshots: []sdk.FleetSnapshot{}, Limit: limit}
	for _, ns := range onNode {
		rec := live[ns.Tag]
		delete(live, ns.Tag)
		if rec == nil {
			rec = &store.Snapshot{FleetSnapshot: sdk.FleetSnapshot{Name: ns.Tag, Node: t.Node.Name, VMID: vm.ID, VM: vm.Name},
				ID: store.NewSnapshotID(), Tenant: tenant, CreatedAt: ns.CreatedAt}
			if !store.ValidName(ns.Tag) {
				continue // not one central could have taken or can name
			}
		}
		changed := rec.Pending || rec.Memory != ns.Memory || rec.SizeGiB != gib(ns.SizeBytes) || rec.VM != vm.Name
		rec.Pending, rec.Memory, rec.SizeGiB, rec.VM, rec.VMState = false, ns.Memory, gib(ns.SizeBytes), vm.Name, ns.VMState
		if rec.TakenAt.IsZero() {
			rec.TakenAt, changed = ns.CreatedAt, true
		}
		if changed {
			if err := s.st.PutSnapshot(ctx, rec); err != nil {
				return nil, &store.OpError{Op: "record the snapshot", Err: err}
			}
		}
		out.Snapshots = append(out.Snapshots, rec.FleetSnapshot)
	}
	for _, rec := range live {
		switch {
		case rec.Pending && now.Sub(rec.CreatedAt) < pendingGrace:
			continue // its node is taking it
		case rec.Pending:
			err = s.st.DropSnapshot(ctx, rec)
		default:
			rec.DeletedAt = now
			err = s.st.PutSnapshot(ctx, rec)
		}
		if err != nil {
			return nil, &store.OpError{Op: "record the snapshot's end", Err: err}
		}
	}
	return out, nil
}

// find is the target VM's kept snapshot of that name (without regard to
// case), as the node lists it, and the VM.
func (s *Service) find(ctx context.Context, nc *sdk.NodeClient, t *vms.Target, name string) (*sdk.VM, *sdk.Snapshot, error) {
	if err := CheckName(name); err != nil {
		return nil, nil, err
	}
	vm, err := nc.GetVM(ctx, t.ID)
	if err != nil {
		return nil, nil, &nodecall.NodeError{Node: t.Node, What: "read the vm", Err: err}
	}
	snaps, err := nc.Snapshots(ctx, vm.ID)
	if err != nil {
		return nil, nil, &nodecall.NodeError{Node: t.Node, What: "list the snapshots", Err: err}
	}
	for i := range snaps {
		if strings.EqualFold(snaps[i].Tag, name) {
			return vm, &snaps[i], nil
		}
	}
	return vm, nil, &jsonapi.Error{Status: http.StatusNotFound, Msg: fmt.Sprintf("vm %s has no snapshot %s", vm.Name, jsonapi.Echo(name)),
		Hint: "fluxctl fleet snapshots VM lists its snapshots"}
}

// Delete deletes one of the target VM's snapshots and ends its record. It
// returns the snapshot's name as the node has it (names match without
// regard to case).
func (s *Service) Delete(ctx context.Context, t *vms.Target, name string) (string, error) {
	nc, err := s.client(t)
	if err != nil {
		return "", err
	}
	vm, snap, err := s.find(ctx, nc, t, name)
	if err != nil {
		return "", err
	}
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	if err := nc.DeleteSnapshot(cctx, vm.ID, snap.Tag); err != nil && !sdk.IsNotFound(err) {
		return "", &nodecall.NodeError{Node: t.Node, What: "delete the snapshot", Err: err}
	}
	s.end(ctx, t.Node.Name, vm.ID, func(r *store.Snapshot) bool { return r.Name == snap.Tag })
	return snap.Tag, nil
}

// end marks the live records match accepts deleted now.
func (s *Service) end(ctx context.Context, node, vmID string, match func(*store.Snapshot) bool) {
	recs, err := s.st.VMSnapshots(ctx, node, vmID)
	if err != nil {
		s.log.Warn("read snapshot records to end them; a listing ends them", "node", node, "vm", vmID, "error", err)
		return
	}
	for i := range recs {
		if r := &recs[i]; r.Live() && match(r) {
			r.DeletedAt = s.now().UTC()
			if err := s.st.PutSnapshot(ctx, r); err != nil {
				s.log.Warn("end a snapshot record", "node", node, "vm", r.VM, "snapshot", r.Name, "error", err)
			}
		}
	}
}

// VMDeleted ends the records of a deleted VM's snapshots: a snapshot is
// deleted with its VM. central/vms calls it after each delete.
func (s *Service) VMDeleted(ctx context.Context, node, vmID string) {
	s.end(ctx, node, vmID, func(*store.Snapshot) bool { return true })
}

// Restore puts the target VM back to a snapshot: a disk snapshot into the
// VM stopped (it is stopped first) and then started; a memory snapshot into
// the VM running (it is started first), which then resumes where the
// snapshot was taken. It returns the VM and the snapshot's name as the node
// has it.
func (s *Service) Restore(ctx context.Context, t *vms.Target, name string) (*sdk.VM, string, error) {
	nc, err := s.client(t)
	if err != nil {
		return nil, "", err
	}
	vm, snap, err := s.find(ctx, nc, t, name)
	if err != nil {
		return nil, "", err
	}
	ctx = context.WithoutCancel(ctx)
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	runs := vm.State == sdk.StateRunning || vm.State == sdk.StatePaused
	switch {
	case snap.Memory && !runs:
		if _, err := nc.StartVM(cctx, vm.ID); err != nil {
			return nil, "", &nodecall.NodeError{Node: t.Node, What: "start the vm to restore its memory", Err: err}
		}
	case !snap.Memory && runs:
		if _, err := nc.StopVM(cctx, vm.ID, 0); err != nil {
			return nil, "", &nodecall.NodeError{Node: t.Node, What: "stop the vm to restore its disk", Err: err}
		}
	}
	out, err := nc.RestoreVM(cctx, vm.ID, snap.Tag)
	if err != nil {
		return nil, "", &nodecall.NodeError{Node: t.Node, What: "restore the vm", Err: err}
	}
	if !snap.Memory {
		if out, err = nc.StartVM(cctx, vm.ID); err != nil {
			return nil, "", &nodecall.NodeError{Node: t.Node, What: "start the restored vm", Err: err}
		}
	}
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyVMRestored, Tenant: owner(t, vm),
		Title: fmt.Sprintf("VM %s on node %s was restored to snapshot %s", vm.Name, t.Node.Name, snap.Tag),
		Link:  "/fleet/vms/" + t.Node.Name + "/" + vm.ID}, "", s.now().UTC())
	return out, snap.Tag, nil
}

// Clone makes a new VM on the target's node from one of its snapshots or,
// with no snapshot named, from its disk (the source must be stopped). The
// clone belongs to the source's tenant and is reserved like a launch: the
// tenant's quota and the node's room and state (not cordoned, draining or
// down) are checked in the reservation's transaction.
func (s *Service) Clone(ctx context.Context, t *vms.Target, req sdk.FleetCloneRequest) (*sdk.FleetCreateVMResponse, error) {
	if !store.ValidName(req.Name) {
		return nil, &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("clone name %q is not valid", jsonapi.Echo(req.Name)),
			Hint: "a VM name is 1-64 letters, digits, '.', '_' and '-', starting with a letter or digit"}
	}
	if t.Entry == nil {
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("vm %s was not launched through central: its size is not recorded", t.Name),
			Hint: "clone a VM central launched; the reconciler records adopted VMs within a minute"}
	}
	nc, err := s.client(t)
	if err != nil {
		return nil, err
	}
	var vm *sdk.VM
	if req.Snapshot != "" {
		var snap *sdk.Snapshot
		if vm, snap, err = s.find(ctx, nc, t, req.Snapshot); err != nil {
			return nil, err
		}
		req.Snapshot = snap.Tag
	} else {
		if vm, err = nc.GetVM(ctx, t.ID); err != nil {
			return nil, &nodecall.NodeError{Node: t.Node, What: "read the vm", Err: err}
		}
		if vm.State != sdk.StateStopped {
			return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("vm %s is %s: a clone of its disk needs it stopped", vm.Name, vm.State),
				Hint: "stop it first (fluxctl fleet stop), or clone one of its snapshots (--snapshot)"}
		}
	}
	e := t.Entry
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "read the policy", Err: err}
	}
	// The lease rules of a launch hold too, checked against the lessee the
	// node record names in the reservation's transaction: a Mac leased
	// since by another tenant takes no clone of this one's VM.
	macOS := e.GuestOS == store.GuestMacOS
	res, err := s.st.Reserve(ctx, store.ReserveRequest{Tenant: e.Tenant, Node: t.Node.Name, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, MacOS: macOS,
		ExclusiveLeases: pol.ExclusiveLeasedHosts && e.Tenant != "",
		RequireLease:    pol.RequireLeaseForMacOS && macOS && e.Tenant != ""})
	var qe *store.QuotaError
	var ce *store.CapacityError
	switch {
	case errors.As(err, &qe):
		return nil, &jsonapi.Error{Status: http.StatusTooManyRequests, Msg: "a clone counts against the tenant's quota: " + qe.Error(),
			Hint: fmt.Sprintf("%s is a quota of the tenant (VMs being created count too): delete a VM (fluxctl fleet rm NAME), or ask the operator to raise it", qe.Field)}
	case errors.As(err, &ce) && ce.Resource == "state":
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: fmt.Sprintf("cannot clone onto node %s: it is %s", t.Node.Name, strings.TrimPrefix(ce.Reason, "it is ")),
			Hint: "a clone is made on its source's node, which takes no new VMs now; clone once the operator uncordons it, or launch a new VM elsewhere"}
	case errors.As(err, &ce):
		return nil, &jsonapi.Error{Status: http.StatusConflict, Msg: "cannot clone: " + ce.Error(),
			Hint: "a clone is made on its source's node; free room there (fluxctl fleet rm NAME) and try again"}
	case err != nil:
		return nil, &store.OpError{Op: "reserve room for the clone", Err: err}
	}
	ctx = context.WithoutCancel(ctx)
	release := func() {
		if err := s.st.Release(ctx, res); err != nil {
			s.log.Warn("release reservation (it lapses with this central's lease)", "reservation", res.ID, "error", err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, NodeTimeout)
	defer cancel()
	clone, err := nc.CloneVM(cctx, vm.ID, sdk.CloneRequest{Name: req.Name, Snapshot: req.Snapshot})
	if err != nil {
		release()
		return nil, &nodecall.NodeError{Node: t.Node, What: "clone the vm", Err: err}
	}
	entry := store.LedgerEntry{VMID: clone.ID, Name: clone.Name, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, GuestOS: e.GuestOS,
		Image: e.Image, StartedAt: s.now().UTC()}
	if _, err := s.st.Commit(ctx, res, entry); err != nil {
		// Adopted by the reconciler from its tenant stamp, like a launch's.
		s.log.Error("record the ledger entry of a clone; the reconciler will adopt it", "node", t.Node.Name, "vm", clone.Name, "error", err)
		release()
	}
	from := "its disk"
	if req.Snapshot != "" {
		from = "snapshot " + req.Snapshot
	}
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyVMCloned, Tenant: e.Tenant,
		Title:  fmt.Sprintf("VM %s was cloned from VM %s on node %s", clone.Name, vm.Name, t.Node.Name),
		Detail: "from " + from, Link: "/fleet/vms/" + t.Node.Name + "/" + clone.ID}, "vm.cloned/"+t.Node.Name+"/"+clone.ID, s.now().UTC())
	return &sdk.FleetCreateVMResponse{Node: t.Node.Name, VM: *clone,
		Placement: sdk.Placement{Reason: "a clone is made on its source's node", Considered: []sdk.PlacementVerdict{}}}, nil
}
