package vms

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Outcomes of a placement (fluxvm_central_placements_total{result}). A
// placement is a node chosen and room reserved on it; what the node then does
// with the create is a reservation's outcome.
const (
	PlacementPlaced      = "placed"
	PlacementNoPlacement = "no_placement" // no node fits, or none kept room under concurrent creates
	PlacementQuota       = "quota"        // the tenant's quota refused it
)

// Outcomes of a reservation (fluxvm_central_reservations_total{result}).
const (
	ReservationCommitted = "committed" // became a ledger entry
	ReservationReleased  = "released"  // the node refused or failed the create, or the ledger write failed
)

// Metrics counts what launches do.
type Metrics interface {
	// Placed counts a placement's outcome.
	Placed(result string)
	// ReservationEnded counts a reservation's end and how long it was held.
	ReservationEnded(result string, reserved time.Time)
}

// LaunchStore is what a launch needs of central's store.
type LaunchStore interface {
	// Commit turns a reservation into the VM's running ledger entry.
	Commit(ctx context.Context, res *store.Reservation, e store.LedgerEntry) (*store.LedgerEntry, error)
	// CommitSpec is Commit keeping the VM's create spec (a reschedulable VM).
	CommitSpec(ctx context.Context, res *store.Reservation, e store.LedgerEntry, spec []byte) (*store.LedgerEntry, error)
	// Release gives a reservation's room back.
	Release(ctx context.Context, res *store.Reservation) error
}

// Launcher launches VMs: place, reserve, create on the node, record. It is
// safe for concurrent use.
type Launcher struct {
	st      LaunchStore
	place   *placement.Placer
	nodes   *nodecall.Caller
	metrics Metrics
	now     func() time.Time
	log     hclog.Logger
	// Notify receives vm.created (nil: nothing is sent). Set it before use.
	Notify notify.Sink
	// AfterNodeCreate, when tests set it, runs between the node's create and
	// the ledger write: the fault-injection point of a central that dies
	// there.
	AfterNodeCreate func(node string, vm sdk.VM)
}

// NewLauncher makes a Launcher.
func NewLauncher(st LaunchStore, place *placement.Placer, nodes *nodecall.Caller, metrics Metrics, now func() time.Time, log hclog.Logger) *Launcher {
	return &Launcher{st: st, place: place, nodes: nodes, metrics: metrics, now: now, log: log}
}

// Launch is one VM to start through central.
type Launch struct {
	// Spec is the node's create request (tenant stamp, image path and size
	// resolved); Image the catalog image's name for the ledger.
	Spec  sdk.CreateVMRequest
	Image string
	// Place is what the scheduler places; Reserve the reservation to make
	// (its Node is chosen); Policy the fleet policy read for this launch.
	Place   scheduler.Request
	Reserve store.ReserveRequest
	Policy  sdk.Policy
	// Kept, when set, is the create spec kept with the entry (a
	// reschedulable VM): never logged, create bodies can carry secrets.
	Kept []byte
}

// Launched is a VM that runs, with where and why.
type Launched struct {
	Node     *store.Node
	VM       *sdk.VM
	Decision scheduler.Decision
}

// DeletedError is a VM deleted (DELETE /fleet/vms) before its create
// finished: nothing is recorded or charged. It wraps store.ErrDeleted.
type DeletedError struct {
	Node, Name string
}

func (e *DeletedError) Error() string {
	return fmt.Sprintf("vm %s on node %s was deleted before its create finished", e.Name, e.Node)
}
func (e *DeletedError) Unwrap() error { return store.ErrDeleted }

// Launch places the VM, reserves its room, has the node create it and
// records its ledger entry (or releases the room). The errors are
// placement's (*scheduler.NoPlacementError, *store.QuotaError,
// placement.ErrNoRoom, ...), *nodecall.NodeError and *DeletedError. A ledger write
// that fails otherwise leaves the VM running, for the reconciler to adopt
// from its tenant stamp: the launch still succeeds.
func (l *Launcher) Launch(ctx context.Context, req Launch) (*Launched, error) {
	d, node, res, err := l.place.PlaceAndReserve(ctx, req.Place, req.Policy, req.Reserve, nil)
	var np *scheduler.NoPlacementError
	var qe *store.QuotaError
	switch {
	case errors.As(err, &np), errors.Is(err, placement.ErrNoRoom):
		l.metrics.Placed(PlacementNoPlacement)
		return nil, err
	case errors.As(err, &qe):
		l.metrics.Placed(PlacementQuota)
		return nil, err
	case err != nil:
		return nil, err
	}
	l.metrics.Placed(PlacementPlaced)
	reserved := time.Now()

	// From here on the caller's context is not used: a client that goes
	// away must not leave a VM without its ledger entry or a reservation held.
	ctx = context.WithoutCancel(ctx)
	release := func() {
		if err := l.st.Release(ctx, res); err != nil {
			l.log.Warn("release reservation (it lapses with this central's lease)", "reservation", res.ID, "error", err)
		}
		l.metrics.ReservationEnded(ReservationReleased, reserved)
	}
	vm, err := l.nodes.Create(ctx, node, req.Spec)
	if err != nil {
		release()
		return nil, &nodecall.NodeError{Node: node, What: "create the vm", Err: err}
	}
	if l.AfterNodeCreate != nil {
		l.AfterNodeCreate(node.Name, *vm)
	}
	entry := store.LedgerEntry{VMID: vm.ID, Name: vm.Name, VCPUs: req.Spec.VCPUs, MemoryMiB: req.Spec.MemoryMiB,
		GuestOS: req.Spec.GuestOS, Image: req.Image, StartedAt: l.now().UTC()}
	if req.Kept != nil {
		_, err = l.st.CommitSpec(ctx, res, entry, req.Kept)
	} else {
		_, err = l.st.Commit(ctx, res, entry)
	}
	switch {
	case errors.Is(err, store.ErrDeleted):
		release()
		return nil, &DeletedError{Node: node.Name, Name: vm.Name}
	case errors.Is(err, store.ErrExists): // the reconciler adopted it first: it is recorded
		release()
	case err != nil:
		l.log.Error("record the ledger entry of a created vm; the reconciler will adopt it", "node", node.Name, "vm", vm.Name, "error", err)
		release()
	default:
		l.metrics.ReservationEnded(ReservationCommitted, reserved)
	}
	notify.Send(ctx, l.Notify, l.log, notify.Event{Type: sdk.NotifyVMCreated, Tenant: req.Spec.Tenant,
		Title:  fmt.Sprintf("VM %s was launched on node %s", vm.Name, node.Name),
		Detail: fmt.Sprintf("%d vCPUs, %d MiB, image %s", req.Spec.VCPUs, req.Spec.MemoryMiB, req.Image),
		Link:   "/fleet/vms/" + node.Name + "/" + vm.ID}, "vm.created/"+node.Name+"/"+vm.ID, l.now().UTC())
	return &Launched{Node: node, VM: vm, Decision: d}, nil
}
