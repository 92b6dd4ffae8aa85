package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// PreviewOperator is the owner of the operator's previews in the key
// layout (no tenant id starts with '_').
const PreviewOperator = "_operator"

// Preview is central's record of an open preview (central/previews): what
// the API shows and the boot of the VM it belongs to. It is in etcd so that
// every central serves it and a restarted one still does.
type Preview struct {
	sdk.Preview
	// Owner is the tenant id, or PreviewOperator.
	Owner string `json:"owner"`
	// VMStartedAt is when the VM's boot began that the preview was opened
	// in: a VM started again is another boot, and the preview is gone.
	VMStartedAt time.Time `json:"vm_started_at"`
}

func (s *Store) previewOwnerPrefix(owner string) string { return s.prefix + "previews/" + owner + "/" }

// NewPreviewID is the id of a new preview: "prv_" and 16 random hex digits.
func NewPreviewID() string { return newID("prv_") }

// AddPreview records rec under its owner in one transaction with decide,
// which sees the owner's previews as they are in that transaction: it
// returns an error to refuse (a limit), a record to hand back instead of
// writing rec (the same VM and port already open), or nil to write rec.
func (s *Store) AddPreview(ctx context.Context, rec *Preview, decide func(existing []Preview) (*Preview, error)) (*Preview, error) {
	if rec.Owner != PreviewOperator {
		if err := checkName("tenant id", rec.Owner); err != nil {
			return nil, err
		}
	}
	for _, n := range []struct{ kind, v string }{{"node", rec.Node}, {"vm id", rec.VM}, {"preview id", rec.ID}} {
		if err := checkName(n.kind, n.v); err != nil {
			return nil, err
		}
	}
	what := fmt.Sprintf("record a preview of port %d of vm %s", rec.Port, rec.VMName)
	prefix := s.previewOwnerPrefix(rec.Owner)
	var out *Preview
	err := s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		existing := make([]Preview, 0, len(r.Kvs))
		for _, kv := range r.Kvs {
			var p Preview
			if err := json.Unmarshal(kv.Value, &p); err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kv.Key, err)
			}
			existing = append(existing, p)
		}
		same, err := decide(existing)
		if err != nil {
			return false, err
		}
		if same != nil {
			out = same
			return true, nil
		}
		c, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, nil, prefix)...).
			Then(clientv3.OpPut(prefix+rec.ID, mustJSON(rec))).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		out = rec
		return c.Succeeded, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// OwnerPreviews reads the previews of one owner (a tenant id or
// PreviewOperator), oldest first.
func (s *Store) OwnerPreviews(ctx context.Context, owner string) ([]Preview, error) {
	if owner != PreviewOperator && !ValidName(owner) {
		return nil, nil
	}
	out, err := listJSON[Preview](ctx, s, s.previewOwnerPrefix(owner))
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	sortPreviews(out)
	return out, nil
}

// ListPreviewRecords reads every preview, oldest first.
func (s *Store) ListPreviewRecords(ctx context.Context) ([]Preview, error) {
	out, err := listJSON[Preview](ctx, s, s.prefix+"previews/")
	if err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	sortPreviews(out)
	return out, nil
}

func sortPreviews(ps []Preview) {
	sort.SliceStable(ps, func(i, j int) bool {
		if !ps[i].OpenedAt.Equal(ps[j].OpenedAt) {
			return ps[i].OpenedAt.Before(ps[j].OpenedAt)
		}
		return ps[i].ID < ps[j].ID
	})
}

// DropPreview removes a preview's record; one already gone is no error.
func (s *Store) DropPreview(ctx context.Context, owner, id string) error {
	if (owner != PreviewOperator && !ValidName(owner)) || !ValidName(id) {
		return nil
	}
	if _, err := s.kv(ctx).Delete(ctx, s.previewOwnerPrefix(owner)+id); err != nil {
		return fmt.Errorf("drop preview %s: %w", id, err)
	}
	return nil
}
