package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Snapshot is central's record of one snapshot of a VM: what the API shows
// (sdk.FleetSnapshot) and what the limit and billing need besides. A record
// outlives its snapshot (DeletedAt set) so that statements can charge the
// time it was kept; a record is Pending while its node takes it, and holds
// its place under the limit meanwhile.
type Snapshot struct {
	sdk.FleetSnapshot
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"` // empty: the operator's VM
	// Pending: the node has not answered yet (TakenAt is then zero).
	Pending   bool      `json:"pending,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	DeletedAt time.Time `json:"deleted_at,omitzero"` // zero: kept
}

// Live reports whether the snapshot is kept (or being taken).
func (s *Snapshot) Live() bool { return s.DeletedAt.IsZero() }

func (s *Store) snapshotVMPrefix(node, vmID string) string {
	return s.prefix + "snapshots/" + node + "/" + vmID + "/"
}

// NewSnapshotID is the id of a new snapshot record.
func NewSnapshotID() string { return newID("s-") }

// AddSnapshot records a snapshot about to be taken (Pending), in one
// transaction with the check that its VM keeps fewer than limit live
// snapshots and none of that name (names compare without case: a Mac's
// file system may not tell them apart). Errors: *QuotaError for the limit
// (Field max_snapshots_per_vm), ErrExists for the name, ErrInvalid.
func (s *Store) AddSnapshot(ctx context.Context, rec *Snapshot, limit int64) error {
	for _, n := range []struct{ kind, v string }{{"node", rec.Node}, {"vm id", rec.VMID}, {"snapshot", rec.Name}, {"snapshot id", rec.ID}} {
		if err := checkName(n.kind, n.v); err != nil {
			return err
		}
	}
	what := fmt.Sprintf("record snapshot %s of vm %s", rec.Name, rec.VM)
	prefix := s.snapshotVMPrefix(rec.Node, rec.VMID)
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		var live int64
		for _, kv := range r.Kvs {
			var o Snapshot
			if err := json.Unmarshal(kv.Value, &o); err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kv.Key, err)
			}
			if !o.Live() {
				continue
			}
			live++
			if strings.EqualFold(o.Name, rec.Name) {
				return false, fmt.Errorf("%s: %w", what, ErrExists)
			}
		}
		if live >= limit {
			return false, fmt.Errorf("%s: %w", what, &QuotaError{Field: sdk.QuotaMaxSnapshotsPerVM, Limit: limit, Used: live, Asked: 1})
		}
		c, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, nil, prefix)...).
			Then(clientv3.OpPut(prefix+rec.ID, mustJSON(rec))).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return c.Succeeded, nil
	})
}

// PutSnapshot rewrites a snapshot's record (its key is its own: no one
// else writes it but the same snapshot's later steps).
func (s *Store) PutSnapshot(ctx context.Context, rec *Snapshot) error {
	if _, err := s.kv(ctx).Put(ctx, s.snapshotVMPrefix(rec.Node, rec.VMID)+rec.ID, mustJSON(rec)); err != nil {
		return fmt.Errorf("record snapshot %s of vm %s: %w", rec.Name, rec.VM, err)
	}
	return nil
}

// DropSnapshot removes the record of a snapshot that was never taken (its
// node refused it): there is nothing to charge.
func (s *Store) DropSnapshot(ctx context.Context, rec *Snapshot) error {
	if _, err := s.kv(ctx).Delete(ctx, s.snapshotVMPrefix(rec.Node, rec.VMID)+rec.ID); err != nil {
		return fmt.Errorf("drop the record of snapshot %s of vm %s: %w", rec.Name, rec.VM, err)
	}
	return nil
}

// VMSnapshots reads the snapshot records of a VM, kept and deleted, oldest
// first.
func (s *Store) VMSnapshots(ctx context.Context, node, vmID string) ([]Snapshot, error) {
	if !ValidName(node) || !ValidName(vmID) {
		return nil, nil
	}
	out, err := listJSON[Snapshot](ctx, s, s.snapshotVMPrefix(node, vmID))
	if err != nil {
		return nil, fmt.Errorf("list snapshots of vm %s: %w", vmID, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// ListSnapshotRecords reads the snapshot records keep accepts (billing
// reads those of a month).
func (s *Store) ListSnapshotRecords(ctx context.Context, keep func(*Snapshot) bool) ([]Snapshot, error) {
	all, err := listJSON[Snapshot](ctx, s, s.prefix+"snapshots/")
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	out := all[:0]
	for i := range all {
		if keep == nil || keep(&all[i]) {
			out = append(out, all[i])
		}
	}
	return out, nil
}
