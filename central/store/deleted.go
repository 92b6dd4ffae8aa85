package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// How a delete and a create of the same VM agree
//
// A tenant sees its VM in GET /fleet/vms (from the node's tenant stamp) as soon as the node
// has created it, which is before the creating request has written the ledger entry. A delete
// in that window finds no entry to end. Two keys close the gap:
//
//   - The entry id of a VM is derived from its node and VM id (EntryID), so the create, a
//     drain and the reconciler all write the same key and a VM is recorded at most once.
//   - A delete that found no entry marks the VM deleted (MarkDeleted) after the node deleted
//     it, and then ends the entry if one arrived meanwhile. Commit and RecordEntry refuse, in
//     their transaction, to record a VM that carries the mark (ErrDeleted).
//
// Either the create's transaction commits before the mark is written, and then the delete's
// read after the mark finds the entry and ends it; or it commits after, and then it sees the
// mark and writes nothing. No entry outlives its VM, and no reconcile pass is needed.

// ErrDeleted: the VM was deleted before its ledger entry could be written.
var ErrDeleted = errors.New("vm was deleted")

// DeletedMarkTTL is how long the mark of a deleted VM lives: far longer than a create may
// take between the node's answer and its ledger write.
const DeletedMarkTTL = 15 * time.Minute

// EntryID is the ledger entry id of the VM vmID on node. It is the same for every writer, so
// that a VM is recorded once whoever records it.
func EntryID(node, vmID string) string {
	sum := sha256.Sum256([]byte(node + "/" + vmID))
	return "e-" + hex.EncodeToString(sum[:8])
}

func (s *Store) deletedKey(entryID string) string { return s.prefix + "deleted-vms/" + entryID }

// MarkDeleted records that the VM vmID on node is gone (its node deleted it), so that a create
// of it still in flight cannot record it afterwards, and ends its running entry if one was
// recorded before the mark. It returns the ended entry, or nil when there was none. The mark
// expires after DeletedMarkTTL.
func (s *Store) MarkDeleted(ctx context.Context, node, vmID, reason string, at time.Time) (*LedgerEntry, error) {
	if err := checkName("node", node); err != nil {
		return nil, err
	}
	if vmID == "" {
		return nil, fmt.Errorf("%w: mark deleted: empty vm id", ErrInvalid)
	}
	id := EntryID(node, vmID)
	what := fmt.Sprintf("mark vm %s on node %s deleted", vmID, node)
	err := s.retryTransient(ctx, what, func() error {
		grant, err := s.client.Grant(ctx, int64(DeletedMarkTTL/time.Second))
		if err != nil {
			return err
		}
		_, err = s.kv(ctx).Put(ctx, s.deletedKey(id), at.UTC().Format(time.RFC3339Nano), clientv3.WithLease(grant.ID))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	e, err := s.EndEntry(ctx, id, reason, at)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return e, nil
}
