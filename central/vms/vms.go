// Package vms removes VMs from nodes and keeps the ledger in step with
// them: a deleted VM's ledger entry ends with it, and a VM deleted before its
// entry was written is marked so that its create cannot record it
// afterwards (store.MarkDeleted). Drains, leases, scrubs, the macOS pool
// and DELETE /fleet/vms all delete through it.
package vms

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

// ErrNotRecorded: the VM is gone from its node, but its ledger entry could
// not be ended (or the VM marked deleted); the reconciler ends it later.
var ErrNotRecorded = errors.New("vm deleted, ledger not updated")

// Ledger is what removing VMs needs of central's store.
type Ledger interface {
	// RunningOnNode reads the running ledger entries of a node.
	RunningOnNode(ctx context.Context, node string) ([]store.LedgerEntry, error)
	// EndEntry ends a running entry.
	EndEntry(ctx context.Context, id, reason string, at time.Time) (*store.LedgerEntry, error)
	// MarkDeleted marks a VM without entry deleted (and ends one that arrived meanwhile).
	MarkDeleted(ctx context.Context, node, vmID, reason string, at time.Time) (*store.LedgerEntry, error)
	// ForgetVM takes a deleted VM out of its node's record and frees its room.
	ForgetVM(ctx context.Context, node, vmID string) error
	// TenantName is a tenant's name for logs (its id when unknown).
	TenantName(ctx context.Context, id string) string
}

// Remover deletes VMs. It is safe for concurrent use.
type Remover struct {
	ledger Ledger
	nodes  *nodecall.Caller
	now    func() time.Time
	log    hclog.Logger
	// Notify receives vm.deleted (nil: nothing is sent). Set it before use.
	Notify notify.Sink
	// Deleted, when set, hears of each VM deleted (central/snapshots ends
	// the records of its snapshots). Set it before use.
	Deleted func(ctx context.Context, node, vmID string)
}

// New makes a Remover.
func New(ledger Ledger, nodes *nodecall.Caller, now func() time.Time, log hclog.Logger) *Remover {
	return &Remover{ledger: ledger, nodes: nodes, now: now, log: log}
}

// Delete deletes VM vmID on node n and ends its ledger entry e (nil: the VM
// has none yet, and is marked deleted instead). A VM the node no longer has
// counts as deleted: gone is then true and the entry ends as "vanished". A
// failure to end or mark, once the VM is gone from its node, is
// ErrNotRecorded (the reconciler ends a stale entry later).
func (r *Remover) Delete(ctx context.Context, n *store.Node, vmID string, e *store.LedgerEntry, reason string) (gone bool, err error) {
	gone, err = r.nodes.Delete(ctx, n, vmID)
	if err != nil {
		return false, fmt.Errorf("delete vm %s on node %s: %w", vmID, n.Name, err)
	}
	if gone {
		reason = "vanished" // the entry says the VM was already gone
	}
	// Its room is placeable as soon as the caller hears it is deleted, not
	// at the node's next heartbeat. Failing that costs only the wait.
	if err := r.ledger.ForgetVM(ctx, n.Name, vmID); err != nil {
		r.log.Warn("vm deleted; its room shows at the next heartbeat", "node", n.Name, "vm", vmID, "error", err)
	}
	if e != nil {
		if _, err := r.ledger.EndEntry(ctx, e.ID, reason, r.now()); err != nil {
			return gone, fmt.Errorf("%w: end ledger entry %s: %w", ErrNotRecorded, e.ID, err)
		}
	} else if _, err := r.ledger.MarkDeleted(ctx, n.Name, vmID, reason, r.now()); err != nil {
		return gone, fmt.Errorf("%w: mark vm %s on node %s deleted: %w", ErrNotRecorded, vmID, n.Name, err)
	}
	if r.Deleted != nil {
		r.Deleted(ctx, n.Name, vmID)
	}
	name, tenant := vmID, ""
	if e != nil {
		name, tenant = e.Name, e.Tenant
	}
	r.log.Info("vm deleted", "node", n.Name, "vm", name, "vm_id", vmID, "tenant", r.ledger.TenantName(ctx, tenant), "reason", reason)
	notify.Send(ctx, r.Notify, r.log, notify.Event{Type: sdk.NotifyVMDeleted, Tenant: tenant,
		Title:  fmt.Sprintf("VM %s on node %s was deleted", name, n.Name),
		Detail: "reason: " + reason, Link: "/fleet/vms"}, "vm.deleted/"+n.Name+"/"+vmID, r.now().UTC())
	return gone, nil
}

// DeleteMatching deletes every VM on node n whose tenant (its ledger
// entry's, else its stamp's) match accepts, and returns the ids it deleted.
// It goes on past a VM it cannot delete and returns the errors joined.
func (r *Remover) DeleteMatching(ctx context.Context, n *store.Node, match func(tenant string) bool, reason string) ([]string, error) {
	if n.State != store.NodeUp {
		return nil, fmt.Errorf("node %s is down", n.Name)
	}
	entries, err := r.ledger.RunningOnNode(ctx, n.Name)
	if err != nil {
		return nil, err
	}
	byVM := map[string]*store.LedgerEntry{}
	for i := range entries {
		byVM[entries[i].VMID] = &entries[i]
	}
	nc, err := r.nodes.Client(n)
	if err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
	vms, err := nc.ListVMs(lctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("list the vms of node %s: %w", n.Name, err)
	}
	var deleted []string
	var errs []error
	for _, vm := range vms {
		tenant := vm.Tenant
		if e := byVM[vm.ID]; e != nil {
			tenant = e.Tenant
		}
		if !match(tenant) {
			continue
		}
		if _, err := r.Delete(ctx, n, vm.ID, byVM[vm.ID], reason); err != nil {
			errs = append(errs, err)
			continue
		}
		deleted = append(deleted, vm.ID)
	}
	return deleted, errors.Join(errs...)
}
