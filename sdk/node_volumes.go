package sdk

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// The range of a volume's size in GiB, on a node and through central. The
// node enforces it (CheckVolumeSize); central's API description carries the
// same bounds.
const (
	MinVolumeGiB = 1
	MaxVolumeGiB = 2048
)

// Volume is a node's volume: a sparse raw file that outlives the VMs that
// use it, attached to at most one VM at a time.
type Volume struct {
	// ID is "vol-" and 12 hex digits; it is the disk's serial in the guest
	// (/dev/disk/by-id/virtio-<id>).
	ID   string `json:"id"`
	Name string `json:"name"`
	// Tenant is the stamp of whoever created it (central's tenant id).
	Tenant  string `json:"tenant,omitempty"`
	SizeGiB int64  `json:"size_gib"`
	// AllocatedBytes is what the file takes on the node's disk now.
	AllocatedBytes int64 `json:"allocated_bytes"`
	// Path is the file on the node.
	Path string `json:"path,omitempty"`
	// AttachedTo is the id of the VM on the node that uses it; empty when free.
	AttachedTo string    `json:"attached_to,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// CreateVolumeRequest is POST /v1/volumes.
type CreateVolumeRequest struct {
	// Name is 1-63 letters, digits, '.', '_' or '-', unique on the node.
	Name string `json:"name"`
	// SizeGiB is MinVolumeGiB-MaxVolumeGiB.
	SizeGiB int64 `json:"size_gib"`
	// ID is the id to give it ("vol-" and 12 hex digits); the node picks one
	// when empty. Central names its own ids so that its record and the
	// node's agree.
	ID string `json:"id,omitempty"`
	// Tenant stamps the volume as a tenant's, as for VMs.
	Tenant string `json:"tenant,omitempty"`
}

// ResizeVolumeRequest is POST /v1/volumes/{name}/resize: the new size, at
// least the current one (volumes only grow).
type ResizeVolumeRequest struct {
	SizeGiB int64 `json:"size_gib"`
}

func volumePath(nameOrID string, rest ...string) string {
	p := "/v1/volumes/" + url.PathEscape(nameOrID)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Volumes lists the node's volumes by name.
func (n *NodeClient) Volumes(ctx context.Context) ([]Volume, error) {
	var out []Volume
	if err := n.c.call(ctx, http.MethodGet, "/v1/volumes", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateVolume makes a new, empty (all zero) volume.
func (n *NodeClient) CreateVolume(ctx context.Context, req CreateVolumeRequest) (*Volume, error) {
	var v Volume
	if err := n.c.call(ctx, http.MethodPost, "/v1/volumes", nil, req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// GetVolume returns one volume by name or id.
func (n *NodeClient) GetVolume(ctx context.Context, nameOrID string) (*Volume, error) {
	var v Volume
	if err := n.c.call(ctx, http.MethodGet, volumePath(nameOrID), nil, nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// DeleteVolume deletes a free volume and its data.
func (n *NodeClient) DeleteVolume(ctx context.Context, nameOrID string) error {
	return n.c.call(ctx, http.MethodDelete, volumePath(nameOrID), nil, nil, nil)
}

// ResizeVolume grows a free volume to sizeGiB.
func (n *NodeClient) ResizeVolume(ctx context.Context, nameOrID string, sizeGiB int64) (*Volume, error) {
	var v Volume
	if err := n.c.call(ctx, http.MethodPost, volumePath(nameOrID, "resize"), nil, ResizeVolumeRequest{SizeGiB: sizeGiB}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
