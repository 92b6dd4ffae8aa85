package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Volume is central's record of a volume (docs/volumes.md): what the API
// shows (sdk.FleetVolume) and what the quota and billing need besides. A
// record outlives its volume (DeletedAt set) so that statements can charge
// the time it was kept; Sizes holds each size it had and from when, so a
// resize charges the new size from its moment on. A record is Pending while
// its node makes the file, and holds its place under the quota meanwhile.
type Volume struct {
	sdk.FleetVolume
	Pending   bool         `json:"pending,omitempty"`
	Sizes     []VolumeSize `json:"sizes"`
	DeletedAt time.Time    `json:"deleted_at,omitzero"` // zero: kept
}

// VolumeSize is one size a volume had from From on (until the next one's
// From, or its deletion).
type VolumeSize struct {
	GiB  int64     `json:"gib"`
	From time.Time `json:"from"`
}

// Live reports whether the volume is kept (or being made).
func (v *Volume) Live() bool { return v.DeletedAt.IsZero() }

// NewVolumeID is the id of a new volume: "vol-" and 12 hex digits, short
// enough to be a virtio-blk serial (20 bytes).
func NewVolumeID() string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return "vol-" + hex.EncodeToString(b[:])
}

func (s *Store) volumesPrefix() string { return s.prefix + "volumes/" }

// TenantVolumeGiB is what a tenant's live volumes hold, in GiB.
func TenantVolumeGiB(all []Volume, tenant string) int64 {
	var used int64
	for i := range all {
		if all[i].Live() && all[i].Tenant == tenant {
			used += all[i].SizeGiB
		}
	}
	return used
}

// AddVolume records a volume about to be made (Pending), in one
// transaction with the checks that its tenant has no live volume of that
// name and that its volumes then hold at most limitGiB (0: no limit).
// Errors: *QuotaError (Field max_volume_gib), ErrExists, ErrInvalid.
func (s *Store) AddVolume(ctx context.Context, rec *Volume, limitGiB int64) error {
	if err := checkName("node", rec.Node); err != nil {
		return err
	}
	what := fmt.Sprintf("record volume %s", rec.Name)
	prefix := s.volumesPrefix()
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		all, err := decodeVolumes(r.Kvs)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		for i := range all {
			if all[i].Live() && all[i].Tenant == rec.Tenant && (all[i].Name == rec.Name || all[i].ID == rec.ID) {
				return false, fmt.Errorf("%s: %w", what, ErrExists)
			}
		}
		if used := TenantVolumeGiB(all, rec.Tenant); limitGiB > 0 && used+rec.SizeGiB > limitGiB {
			return false, fmt.Errorf("%s: %w", what, &QuotaError{Field: sdk.QuotaMaxVolumeGiB, Limit: limitGiB, Used: used, Asked: rec.SizeGiB})
		}
		c, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, nil, prefix)...).
			Then(clientv3.OpPut(prefix+rec.ID, mustJSON(rec))).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return c.Succeeded, nil
	})
}

// GrowVolume sets a live volume's size to sizeGiB from at on, in one
// transaction with the check that its tenant's volumes then hold at most
// limitGiB (0: no limit). Errors: *QuotaError, ErrNotFound.
func (s *Store) GrowVolume(ctx context.Context, id string, sizeGiB, limitGiB int64, at time.Time) (*Volume, error) {
	what := "resize volume " + id
	prefix := s.volumesPrefix()
	var out *Volume
	err := s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		all, err := decodeVolumes(r.Kvs)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		var rec *Volume
		for i := range all {
			if all[i].ID == id && all[i].Live() {
				rec = &all[i]
			}
		}
		if rec == nil {
			return false, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		if used := TenantVolumeGiB(all, rec.Tenant); limitGiB > 0 && used-rec.SizeGiB+sizeGiB > limitGiB {
			return false, fmt.Errorf("%s: %w", what, &QuotaError{Field: sdk.QuotaMaxVolumeGiB, Limit: limitGiB, Used: used, Asked: sizeGiB - rec.SizeGiB})
		}
		rec.SizeGiB = sizeGiB
		rec.Sizes = append(rec.Sizes, VolumeSize{GiB: sizeGiB, From: at})
		c, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, nil, prefix)...).
			Then(clientv3.OpPut(prefix+rec.ID, mustJSON(rec))).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		out = rec
		return c.Succeeded, nil
	})
	return out, err
}

func decodeVolumes(kvs []*mvccpb.KeyValue) ([]Volume, error) {
	out := make([]Volume, 0, len(kvs))
	for _, kv := range kvs {
		var v Volume
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// PutVolume rewrites a volume's record.
func (s *Store) PutVolume(ctx context.Context, rec *Volume) error {
	if _, err := s.kv(ctx).Put(ctx, s.volumesPrefix()+rec.ID, mustJSON(rec)); err != nil {
		return fmt.Errorf("record volume %s: %w", rec.Name, err)
	}
	return nil
}

// DropVolume removes the record of a volume that was never made (its
// node refused it): there is nothing to charge.
func (s *Store) DropVolume(ctx context.Context, rec *Volume) error {
	if _, err := s.kv(ctx).Delete(ctx, s.volumesPrefix()+rec.ID); err != nil {
		return fmt.Errorf("drop the record of volume %s: %w", rec.Name, err)
	}
	return nil
}

// ListVolumes reads the volume records keep accepts (nil: all), kept and
// deleted, by name.
func (s *Store) ListVolumes(ctx context.Context, keep func(*Volume) bool) ([]Volume, error) {
	all, err := listJSON[Volume](ctx, s, s.volumesPrefix())
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	out := all[:0]
	for i := range all {
		if keep == nil || keep(&all[i]) {
			out = append(out, all[i])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
