package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// FleetVolume is a volume as central lists it (docs/volumes.md): a disk on
// one node that keeps its data when the VM using it is deleted.
type FleetVolume struct {
	// ID is "vol-" and 12 hex digits: the disk's serial in the guest
	// (/dev/disk/by-id/virtio-<id>).
	ID string `json:"id"`
	// Name is 1-40 lowercase letters, digits and '-', unique per tenant.
	Name string `json:"name"`
	// Tenant is the owner's id (shown to the operator).
	Tenant string `json:"tenant,omitempty"`
	// Node is where the volume lives; a VM that uses it runs there.
	Node    string `json:"node"`
	SizeGiB int64  `json:"size_gib"`
	// AttachedTo is the id of the VM that uses it, as its node says (empty:
	// free, or the node did not answer).
	AttachedTo string `json:"attached_to,omitempty"`
	// Path is the file on the node (shown to the operator only).
	Path      string    `json:"path,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// FleetCreateVolumeRequest is POST /fleet/volumes.
type FleetCreateVolumeRequest struct {
	Name string `json:"name"`
	// SizeGiB is MinVolumeGiB-MaxVolumeGiB.
	SizeGiB int64 `json:"size_gib"`
	// Node puts it on that node; empty: a node the tenant leases, else the
	// one with the most free memory.
	Node string `json:"node,omitempty"`
}

// FleetResizeVolumeRequest is POST /fleet/volumes/{name}/resize.
type FleetResizeVolumeRequest struct {
	SizeGiB int64 `json:"size_gib"`
}

// FleetVolumeList is GET /fleet/volumes.
type FleetVolumeList struct {
	Volumes []FleetVolume `json:"volumes"`
	// UsedGiB is what the tenant's volumes hold against max_volume_gib
	// (LimitGiB, 0: no limit); both are for a tenant's own listing.
	UsedGiB  int64 `json:"used_gib"`
	LimitGiB int64 `json:"limit_gib"`
}

func fleetVolumePath(nameOrID string, rest ...string) string {
	p := "/fleet/volumes/" + url.PathEscape(nameOrID)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// ListVolumes lists the caller's volumes (the operator's: every tenant's,
// or tenant's when set).
func (f *FleetClient) ListVolumes(ctx context.Context, tenant string) (*FleetVolumeList, error) {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	var out FleetVolumeList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/volumes", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateVolume makes a volume. Refusals: IsQuota (max_volume_gib),
// IsConflict (the name is taken), 400 for a size outside 1-2048 GiB.
func (f *FleetClient) CreateVolume(ctx context.Context, req FleetCreateVolumeRequest) (*FleetVolume, error) {
	return f.CreateVolumeFor(ctx, "", req)
}

// CreateVolumeFor is CreateVolume for the operator on behalf of a tenant
// (id or name; "" the operator's own), under its quota and names.
func (f *FleetClient) CreateVolumeFor(ctx context.Context, tenant string, req FleetCreateVolumeRequest) (*FleetVolume, error) {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	var out FleetVolume
	if err := f.c.call(ctx, http.MethodPost, "/fleet/volumes", q, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetVolume returns one volume by name or id.
func (f *FleetClient) GetVolume(ctx context.Context, nameOrID string) (*FleetVolume, error) {
	var out FleetVolume
	if err := f.c.call(ctx, http.MethodGet, fleetVolumePath(nameOrID), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ResizeVolume grows a free volume. Refusals: IsConflict (attached), 400
// (smaller), IsQuota (max_volume_gib).
func (f *FleetClient) ResizeVolume(ctx context.Context, nameOrID string, sizeGiB int64) (*FleetVolume, error) {
	var out FleetVolume
	if err := f.c.call(ctx, http.MethodPost, fleetVolumePath(nameOrID, "resize"), nil, FleetResizeVolumeRequest{SizeGiB: sizeGiB}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVolume deletes a free volume and its data. Refusal: IsConflict
// (attached).
func (f *FleetClient) DeleteVolume(ctx context.Context, nameOrID string) error {
	return f.c.call(ctx, http.MethodDelete, fleetVolumePath(nameOrID), nil, nil, nil)
}
