package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// FleetSnapshot is one snapshot of a VM as central lists it (docs/snapshots.md).
type FleetSnapshot struct {
	// Name is 1-64 letters, digits, '.', '_' and '-', starting with a letter
	// or digit, unique per VM (without regard to case).
	Name string `json:"name"`
	// Node, VMID and VM (its name) say whose snapshot it is.
	Node string `json:"node"`
	VMID string `json:"vm_id"`
	VM   string `json:"vm"`
	// Memory: the snapshot holds the guest's memory and device state too,
	// and a restore resumes it where it was.
	Memory bool `json:"memory"`
	// SizeGiB is the snapshot's size as its node last reported it, in whole
	// GiB rounded up (0: the node's driver does not report sizes).
	SizeGiB int64     `json:"size_gib"`
	TakenAt time.Time `json:"taken_at,omitzero"`
	// VMState is the VM's state when the snapshot was taken.
	VMState string `json:"vm_state,omitempty"`
}

// FleetSnapshotRequest is POST /fleet/vms/{node}/{id}/snapshots.
type FleetSnapshotRequest struct {
	// Name defaults to snap-<UTC time> (snap-20261203-181500).
	Name string `json:"name,omitempty"`
	// IncludeMemory saves memory and device state too: the VM must be
	// running or paused.
	IncludeMemory bool `json:"include_memory,omitempty"`
}

// FleetSnapshotList is GET /fleet/vms/{node}/{id}/snapshots: the VM's
// snapshots, oldest first, and the limit that applies to it.
type FleetSnapshotList struct {
	Snapshots []FleetSnapshot `json:"snapshots"`
	// Limit is max_snapshots_per_vm for the VM's tenant (0: snapshots off).
	Limit int64 `json:"limit"`
}

// FleetCloneRequest is POST /fleet/vms/{node}/{id}/clone: a new VM on the
// source's node, from one of its snapshots or (empty Snapshot) from its
// disk, which needs the source stopped.
type FleetCloneRequest struct {
	Name     string `json:"name"`
	Snapshot string `json:"snapshot,omitempty"`
}

// TakeSnapshot snapshots a VM (POST /fleet/vms/{node}/{id}/snapshots).
// Refusals: IsQuota (max_snapshots_per_vm reached, or snapshots off),
// IsConflict (a memory snapshot of a VM that does not run, a name taken).
func (f *FleetClient) TakeSnapshot(ctx context.Context, node, id string, req FleetSnapshotRequest) (*FleetSnapshot, error) {
	var out FleetSnapshot
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, "snapshots"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSnapshots lists a VM's snapshots, oldest first.
func (f *FleetClient) ListSnapshots(ctx context.Context, node, id string) (*FleetSnapshotList, error) {
	var out FleetSnapshotList
	if err := f.c.call(ctx, http.MethodGet, fleetVMPath(node, id, "snapshots"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSnapshot deletes one of a VM's snapshots.
func (f *FleetClient) DeleteSnapshot(ctx context.Context, node, id, name string) error {
	return f.c.call(ctx, http.MethodDelete, fleetVMPath(node, id, "snapshots", url.PathEscape(name)), nil, nil, nil)
}

// RestoreSnapshot puts a VM back to one of its snapshots: the VM is stopped,
// restored and started (a memory snapshot resumes where it was). Everything
// written since the snapshot is lost.
func (f *FleetClient) RestoreSnapshot(ctx context.Context, node, id, name string) (*FleetVM, error) {
	var out FleetVM
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, "snapshots", url.PathEscape(name), "restore"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CloneVM makes a new VM on the source's node (POST
// /fleet/vms/{node}/{id}/clone); it counts against the tenant's quota like
// a launch. Refusals: IsQuota, IsConflict (the node is cordoned or
// draining, the source runs and no snapshot was named).
func (f *FleetClient) CloneVM(ctx context.Context, node, id string, req FleetCloneRequest) (*FleetCreateVMResponse, error) {
	var out FleetCreateVMResponse
	if err := f.c.call(ctx, http.MethodPost, fleetVMPath(node, id, "clone"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
