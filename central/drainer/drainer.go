// Package drainer empties nodes: a drain cordons a node and handles each of
// its VMs by the drain's mode (keep it, delete it when ephemeral, recreate it
// elsewhere when reschedulable), records what it did and is taken up again
// by the leader when it did not finish. It also scrubs a node a lease left
// and plans the moves that would relieve overloaded nodes.
package drainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// EphemeralLabel marks a VM that a drain may delete, like one with a TTL
// (defined with the other label rules, in central/vms).
const EphemeralLabel = vms.EphemeralLabel

// Timeout bounds one drain's (or scrub's) work on the node.
const Timeout = 5 * time.Minute

// copyReadyTimeout bounds how long a move waits for the copy to boot.
const copyReadyTimeout = 3 * time.Minute

// resumeAfter is how long an unfinished drain must be left alone before
// ResumeDrains takes it up (the central running it may be alive and busy).
const resumeAfter = time.Minute

// Store is what draining needs of central's store.
type Store interface {
	// TenantName is a tenant's name for logs (its id when unknown).
	TenantName(ctx context.Context, id string) string
	// GetNode reads a node record.
	GetNode(ctx context.Context, name string) (*store.Node, error)
	// UpdateNode changes a node record in a compare-and-swap loop.
	UpdateNode(ctx context.Context, name string, create bool, fn func(*store.Node) error) (*store.Node, error)
	// PutDrain writes a node's drain record whole.
	PutDrain(ctx context.Context, d *store.Drain) error
	// GetDrain reads a node's latest drain (store.ErrNotFound: never drained).
	GetDrain(ctx context.Context, node string) (*store.Drain, error)
	// ListDrains reads every node's latest drain.
	ListDrains(ctx context.Context) ([]store.Drain, error)
	// RunningOnNode reads the running ledger entries of a node.
	RunningOnNode(ctx context.Context, node string) ([]store.LedgerEntry, error)
	// RunningForTenant reads the running ledger entries of a tenant.
	RunningForTenant(ctx context.Context, tenant string) ([]store.LedgerEntry, error)
	// ListEntries reads the ledger entries keep accepts.
	ListEntries(ctx context.Context, keep func(*store.LedgerEntry) bool) ([]store.LedgerEntry, error)
	// GetSpec reads the spec kept for a ledger entry (store.ErrNotFound: none).
	GetSpec(ctx context.Context, entryID string) ([]byte, error)
	// PutSpec keeps a spec for a ledger entry.
	PutSpec(ctx context.Context, entryID string, spec []byte) error
	// GetPolicy reads the fleet policy.
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	// Release gives a reservation's room back.
	Release(ctx context.Context, res *store.Reservation) error
	// CommitSpec turns a reservation into a running ledger entry and keeps its spec.
	CommitSpec(ctx context.Context, res *store.Reservation, e store.LedgerEntry, spec []byte) (*store.LedgerEntry, error)
	// RecordEntry writes the ledger entry of a VM created without a reservation in hand.
	RecordEntry(ctx context.Context, e store.LedgerEntry) (*store.LedgerEntry, error)
}

// Errors callers branch on.
var (
	// ErrNoNode: no node has the name (or the name is not a valid one).
	ErrNoNode = errors.New("no such node")
	// ErrBadMode: the mode is none of sdk.DrainCordon, sdk.DrainEvictEphemeral, sdk.DrainReschedule.
	ErrBadMode = errors.New("not a drain mode")
	// ErrNotDrained: the node has never been drained.
	ErrNotDrained = errors.New("node never drained")
)

// LeasedError: the node is leased by a tenant. A drain needs force to break
// the tenant's sole use; a scrub waits for the lease's release.
type LeasedError struct {
	Node  string
	Lease string
}

func (e *LeasedError) Error() string {
	return fmt.Sprintf("node %s is leased (lease %s)", e.Node, e.Lease)
}

// Drainer drains and scrubs nodes. It is safe for concurrent use.
type Drainer struct {
	st      Store
	nodes   *nodecall.Caller
	place   *placement.Placer
	remover *vms.Remover
	now     func() time.Time
	log     hclog.Logger
	// Notify receives drain.done (nil: nothing is sent). Set it before use.
	Notify notify.Sink
}

// New makes a Drainer: it reads and writes state through st, calls nodes
// through nodes, places copies through place and deletes VMs through
// remover.
func New(st Store, nodes *nodecall.Caller, place *placement.Placer, remover *vms.Remover, now func() time.Time, log hclog.Logger) *Drainer {
	return &Drainer{st: st, nodes: nodes, place: place, remover: remover, now: now, log: log}
}

// isEphemeral: a VM with a TTL or labelled fluxvm.dev/ephemeral=true.
func isEphemeral(vm *sdk.VM) bool {
	return vm.ExpiresAt != nil || vm.Labels[EphemeralLabel] == "true"
}

// node reads node name: ErrNoNode, or a *store.OpError.
func (dr *Drainer) node(ctx context.Context, name string) (*store.Node, error) {
	if !store.ValidName(name) {
		return nil, fmt.Errorf("%w: %s", ErrNoNode, name)
	}
	n, err := dr.st.GetNode(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoNode, name)
	}
	if err != nil {
		return nil, &store.OpError{Op: "read node " + name, Err: err}
	}
	return n, nil
}

// Cordon cordons node name: no new VM or lease lands there; what runs
// stays. It returns the node as changed (ErrNoNode, or a *store.OpError).
func (dr *Drainer) Cordon(ctx context.Context, name string) (*store.Node, error) {
	n, err := dr.setFlags(ctx, name, func(n *store.Node) { n.Cordoned = true })
	if err != nil {
		return nil, err
	}
	dr.log.Info("node cordoned", "node", n.Name)
	return n, nil
}

// Uncordon ends node name's cordon and drain (the drain's record stays for
// Status). It returns the node as changed (ErrNoNode, or a *store.OpError).
func (dr *Drainer) Uncordon(ctx context.Context, name string) (*store.Node, error) {
	n, err := dr.setFlags(ctx, name, func(n *store.Node) { n.Cordoned, n.Draining = false, false })
	if err != nil {
		return nil, err
	}
	dr.log.Info("node uncordoned", "node", n.Name)
	return n, nil
}

// setFlags changes the central-owned flags of node name.
func (dr *Drainer) setFlags(ctx context.Context, name string, fn func(*store.Node)) (*store.Node, error) {
	n, err := dr.node(ctx, name)
	if err != nil {
		return nil, err
	}
	n, err = dr.st.UpdateNode(ctx, n.Name, false, func(n *store.Node) error { fn(n); return nil })
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoNode, name)
	}
	if err != nil {
		return nil, &store.OpError{Op: "update node", Err: err}
	}
	return n, nil
}

// Drain drains node name in mode (empty: sdk.DrainCordon): it cordons the
// node, marks it draining, records the drain, then handles each VM by mode
// and records what it did. A leased node needs force (*LeasedError). The
// work goes on past ctx's end (a caller gone must not leave a move half
// made), within Timeout, and a reschedule waits for each copy to boot. A
// drain that could not handle every VM is returned unfinished, not as an
// error: ResumeDrains takes it up.
func (dr *Drainer) Drain(ctx context.Context, name, mode string, force bool) (*store.Drain, error) {
	switch mode {
	case "":
		mode = sdk.DrainCordon
	case sdk.DrainCordon, sdk.DrainEvictEphemeral, sdk.DrainReschedule:
	default:
		return nil, ErrBadMode
	}
	n, err := dr.node(ctx, name)
	if err != nil {
		return nil, err
	}
	if n.LeasedBy != "" && !force {
		return nil, &LeasedError{Node: n.Name, Lease: n.LeaseID}
	}
	n, err = dr.setFlags(ctx, n.Name, func(n *store.Node) { n.Cordoned, n.Draining = true, true })
	if err != nil {
		return nil, err
	}
	now := dr.now().UTC()
	d := &store.Drain{Drain: sdk.Drain{Node: n.Name, Mode: mode, Forced: force, StartedAt: now, UpdatedAt: now, VMs: []sdk.DrainVM{}}}
	if err := dr.st.PutDrain(ctx, d); err != nil {
		return nil, &store.OpError{Op: "record the drain", Err: err}
	}
	dr.log.Info("drain started", "node", n.Name, "mode", mode, "forced", force)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	if err := dr.run(ctx, n, d); err != nil {
		dr.log.Warn("drain not finished; the reconciler goes on with it", "node", n.Name, "error", err)
	}
	return d, nil
}

// Status reads node name's latest drain and whether the node is still
// draining (an uncordon ends that): ErrNoNode, ErrNotDrained or a
// *store.OpError.
func (dr *Drainer) Status(ctx context.Context, name string) (*store.Drain, bool, error) {
	n, err := dr.node(ctx, name)
	if err != nil {
		return nil, false, err
	}
	d, err := dr.st.GetDrain(ctx, n.Name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, false, fmt.Errorf("%w: %s", ErrNotDrained, n.Name)
	}
	if err != nil {
		return nil, false, &store.OpError{Op: "read the drain", Err: err}
	}
	return d, n.Draining, nil
}

// ResumeDrains takes up drains left unfinished (a central that died, a VM
// that failed to delete) whose node is still draining and that nobody
// touched for a minute. The leader runs it with each reconcile pass.
func (dr *Drainer) ResumeDrains(ctx context.Context) error {
	ds, err := dr.st.ListDrains(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range ds {
		d := &ds[i]
		if d.Finished || dr.now().Sub(d.UpdatedAt) < resumeAfter {
			continue
		}
		n, err := dr.st.GetNode(ctx, d.Node)
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
		if err := dr.run(ctx, n, d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// run handles each VM of the node by the drain's mode and records the
// outcome. It finishes the drain when every VM is kept or deleted; a VM that
// failed (or a node that does not answer) leaves it unfinished, for the
// reconciler to take up again.
func (dr *Drainer) run(ctx context.Context, n *store.Node, d *store.Drain) error {
	save := func() error {
		d.UpdatedAt = dr.now().UTC()
		return dr.st.PutDrain(ctx, d)
	}
	if n.State != store.NodeUp {
		return fmt.Errorf("node %s is down", n.Name)
	}
	nc, err := dr.nodes.Client(n)
	if err != nil {
		return err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
	list, err := nc.ListVMs(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list the vms of node %s: %w", n.Name, err)
	}
	entries, err := dr.st.RunningOnNode(ctx, n.Name)
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
	for i := range list {
		vm := &list[i]
		dv := sdk.DrainVM{ID: vm.ID, Name: vm.Name, Tenant: vm.Tenant, Ephemeral: isEphemeral(vm), Action: "kept"}
		if e := byVM[vm.ID]; e != nil {
			dv.Tenant = e.Tenant
		}
		var prev *sdk.DrainVM
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
		case (d.Mode == sdk.DrainEvictEphemeral || d.Mode == sdk.DrainReschedule) && dv.Ephemeral:
			if _, err := dr.remover.Delete(ctx, n, vm.ID, byVM[vm.ID], "drained"); err != nil {
				dv.Action, dv.Error, failed = "failed", err.Error(), true
			} else {
				dv.Action = "deleted"
			}
		case d.Mode == sdk.DrainReschedule && byVM[vm.ID] != nil:
			to, err := dr.moveVM(ctx, n, vm, byVM[vm.ID], prev, func(target string) error {
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
		d.Finished, d.FinishedAt = true, dr.now().UTC()
		dr.log.Info("drain finished", "node", n.Name, "mode", d.Mode, "vms", len(d.VMs))
	}
	if err := save(); err != nil {
		return err
	}
	if failed {
		return fmt.Errorf("some vms of node %s could not be deleted or moved", n.Name)
	}
	notify.Send(ctx, dr.Notify, dr.log, notify.Event{Type: sdk.NotifyDrainDone,
		Title:  fmt.Sprintf("node %s is drained", n.Name),
		Detail: fmt.Sprintf("mode %s, %d VMs handled", d.Mode, len(d.VMs)), Link: "/fleet/nodes/" + n.Name + "/drain"},
		"drain.done/"+n.Name+"/"+d.StartedAt.UTC().Format(time.RFC3339Nano), dr.now().UTC())
	return nil
}

// errNotReschedulable: the VM keeps no spec, so a reschedule keeps it.
var errNotReschedulable = errors.New("not reschedulable")

// KeptSpec is what central keeps (in etcd, under specs/<entry id>) of a VM
// created with "reschedulable": true: the node's create request as resolved
// at creation (image path, size, labels, TTL, tenant stamp) and the
// placement constraints. A pin to one node is not kept: the VM is meant to
// move.
type KeptSpec struct {
	Spec         sdk.CreateVMRequest `json:"spec"`
	Image        string              `json:"image,omitempty"`
	NodeSelector map[string]string   `json:"node_selector,omitempty"`
	Nested       bool                `json:"nested,omitempty"`
}

// Encode is the kept spec as store.CommitSpec takes it.
func (k *KeptSpec) Encode() []byte {
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
func (dr *Drainer) moveVM(ctx context.Context, n *store.Node, vm *sdk.VM, e *store.LedgerEntry, prev *sdk.DrainVM, pending func(target string) error) (string, error) {
	raw, err := dr.st.GetSpec(ctx, e.ID)
	if errors.Is(err, store.ErrNotFound) {
		return "", errNotReschedulable
	}
	if err != nil {
		return "", err
	}
	var kept KeptSpec
	if err := json.Unmarshal(raw, &kept); err != nil {
		return "", fmt.Errorf("read the kept spec of vm %s: %w", vm.Name, err)
	}
	finish := func(target string) (string, error) {
		// The old VM goes only once the copy runs (and answers, if the old
		// one's guest agent did): a copy that fails to boot leaves the
		// workload where it was, and the drain says why.
		if err := dr.waitCopy(ctx, target, vm); err != nil {
			return "", fmt.Errorf("recreated on %s, but the old vm stays: %w", target, err)
		}
		if _, err := dr.remover.Delete(ctx, n, vm.ID, e, "rescheduled"); err != nil {
			return "", fmt.Errorf("recreated on %s, but the old vm stays: %w", target, err)
		}
		dr.log.Info("vm rescheduled", "vm", vm.Name, "tenant", dr.st.TenantName(ctx, e.Tenant), "from", n.Name, "to", target)
		return target, nil
	}
	// 1. A copy this move already recorded.
	var running []store.LedgerEntry
	if e.Tenant != "" {
		running, err = dr.st.RunningForTenant(ctx, e.Tenant)
	} else {
		running, err = dr.st.ListEntries(ctx, func(x *store.LedgerEntry) bool { return x.Running() && x.Tenant == "" })
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
		if target, ok, err := dr.adoptCopy(ctx, prev.MovedTo, vm, e, raw); err != nil {
			return "", err
		} else if ok {
			return finish(target)
		}
	}
	// 3. Place and create.
	pol, err := dr.st.GetPolicy(ctx)
	if err != nil {
		return "", err
	}
	spec := kept.Spec
	macOS := spec.GuestOS == store.GuestMacOS
	placeReq := scheduler.Request{Tenant: e.Tenant, GuestOS: spec.GuestOS, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB,
		NodeSelector: kept.NodeSelector, Nested: kept.Nested, TenantNetwork: spec.Network == vms.NetworkTenant}
	_, target, res, err := dr.place.PlaceAndReserve(ctx, placeReq, pol, store.ReserveRequest{Tenant: e.Tenant,
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
		_ = dr.st.Release(ctx, res)
		return "", fmt.Errorf("record the move: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, nodecall.CreateTimeout)
	nvm, err := dr.nodes.Create(cctx, target, spec)
	cancel()
	if err != nil {
		if rerr := dr.st.Release(ctx, res); rerr != nil {
			dr.log.Warn("release reservation (it lapses with this central's lease)", "reservation", res.ID, "error", rerr)
		}
		return "", fmt.Errorf("create on node %s: %w", target.Name, err)
	}
	entry := store.LedgerEntry{VMID: nvm.ID, Name: nvm.Name, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB,
		GuestOS: spec.GuestOS, Image: kept.Image, StartedAt: dr.now().UTC(), Replaces: e.ID}
	if _, err := dr.st.CommitSpec(ctx, res, entry, raw); err != nil {
		// The copy runs; the next attempt finds it by name on the target.
		_ = dr.st.Release(ctx, res)
		return "", fmt.Errorf("record the copy on node %s: %w", target.Name, err)
	}
	return finish(target.Name)
}

// waitCopy waits until the copy of old (same name) on node target runs, and
// when old's guest agent was ready, until the copy's is too.
func (dr *Drainer) waitCopy(ctx context.Context, target string, old *sdk.VM) error {
	tn, err := dr.st.GetNode(ctx, target)
	if err != nil {
		return err
	}
	nc, err := dr.nodes.Client(tn)
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
func (dr *Drainer) adoptCopy(ctx context.Context, target string, vm *sdk.VM, e *store.LedgerEntry, raw []byte) (string, bool, error) {
	tn, err := dr.st.GetNode(ctx, target)
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if tn.State != store.NodeUp {
		return "", false, fmt.Errorf("node %s, where an earlier attempt moved it, is down", target)
	}
	nc, err := dr.nodes.Client(tn)
	if err != nil {
		return "", false, err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
	list, err := nc.ListVMs(lctx)
	cancel()
	if err != nil {
		return "", false, fmt.Errorf("list the vms of node %s: %w", target, err)
	}
	for _, c := range list {
		if c.Name != vm.Name || c.Tenant != e.Tenant {
			continue
		}
		id := store.EntryID(target, c.ID) // the id every writer gives it
		ne, err := dr.st.RecordEntry(ctx, store.LedgerEntry{ID: id, Tenant: e.Tenant, Node: target, VMID: c.ID,
			Name: c.Name, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, GuestOS: e.GuestOS, Image: e.Image,
			StartedAt: dr.now().UTC(), Replaces: e.ID})
		switch {
		case errors.Is(err, store.ErrExists): // the reconciler adopted it first
		case err != nil:
			return "", false, err
		default:
			id = ne.ID
		}
		if err := dr.st.PutSpec(ctx, id, raw); err != nil {
			return "", false, err
		}
		return target, true, nil
	}
	return "", false, nil
}
