package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Overlays: tenants' private networks across nodes (central/overlays). Keys,
// next to those in crud.go:
//
//	P overlays/<tenant>/<name>               Overlay
//	P overlay-indexes/<n>                    "<tenant>/<name>" holding index n
//	P overlay-locks/<tenant>/<name>/         concurrency.Mutex keys (leased) while one change runs
//
// An overlay's index n (0 to 255) makes its subnet (10.231.<n>.0/24) and its
// port (51820 + n); it is taken with the record in one transaction.

// MaxOverlays is how many overlays the fleet holds: n is one octet.
const MaxOverlays = 256

// ErrNoOverlayIndex: every overlay index is taken.
var ErrNoOverlayIndex = errors.New("no free overlay index")

// Overlay is an overlay's record: the wire form plus what only central uses.
type Overlay struct {
	sdk.Overlay
	// ID is the overlay's network id on nodes: "ov-" and 12 hex digits.
	ID string `json:"id"`
	// Index is n: subnet and port come from it.
	Index int `json:"index"`
	// LocalEgress is the tenant's own policy as asked, before the floor.
	LocalEgress *sdk.EgressPolicy `json:"local_egress,omitempty"`
}

func (s *Store) overlayPrefix(tenant string) string { return s.prefix + "overlays/" + tenant + "/" }
func (s *Store) overlayKey(tenant, name string) string {
	return s.overlayPrefix(tenant) + name
}
func (s *Store) overlayIndexKey(n int) string { return s.prefix + "overlay-indexes/" + strconv.Itoa(n) }

// CreateOverlay stores a new overlay with the lowest free index (set on
// rec). ErrExists when the tenant has one of that name, ErrNoOverlayIndex
// when all are taken.
func (s *Store) CreateOverlay(ctx context.Context, rec *Overlay) error {
	if !ValidName(rec.Tenant) || !ValidName(rec.Name) {
		return fmt.Errorf("create overlay: bad tenant or name")
	}
	return s.casLoop(ctx, "create overlay "+rec.Name, func(bool) (bool, error) {
		resp, err := s.client.Get(ctx, s.prefix+"overlay-indexes/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return false, err
		}
		taken := map[int]bool{}
		for _, kv := range resp.Kvs {
			n, _ := strconv.Atoi(string(kv.Key[len(s.prefix+"overlay-indexes/"):]))
			taken[n] = true
		}
		rec.Index = -1
		for n := 0; n < MaxOverlays; n++ {
			if !taken[n] {
				rec.Index = n
				break
			}
		}
		if rec.Index < 0 {
			return false, ErrNoOverlayIndex
		}
		key, ik := s.overlayKey(rec.Tenant, rec.Name), s.overlayIndexKey(rec.Index)
		owner, _ := json.Marshal(rec.Tenant + "/" + rec.Name)
		tx, err := s.kv(ctx).Txn(ctx).If(
			clientv3.Compare(clientv3.CreateRevision(key), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(ik), "=", 0),
		).Then(clientv3.OpPut(key, mustJSON(rec)), clientv3.OpPut(ik, string(owner))).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return false, fmt.Errorf("create overlay %s: %w", rec.Name, err)
		}
		if !tx.Succeeded {
			if len(tx.Responses[0].GetResponseRange().Kvs) > 0 {
				return false, fmt.Errorf("overlay %s: %w", rec.Name, ErrExists)
			}
			return false, nil // the index was taken meanwhile: choose again
		}
		return true, nil
	})
}

// GetOverlay reads one overlay of a tenant.
func (s *Store) GetOverlay(ctx context.Context, tenant, name string) (*Overlay, error) {
	if !ValidName(tenant) || !ValidName(name) {
		return nil, ErrNotFound
	}
	o, _, err := getJSON[Overlay](ctx, s, s.overlayKey(tenant, name))
	return o, err
}

// ListOverlays lists a tenant's overlays, or every tenant's for "".
func (s *Store) ListOverlays(ctx context.Context, tenant string) ([]Overlay, error) {
	prefix := s.prefix + "overlays/"
	if tenant != "" {
		if !ValidName(tenant) {
			return nil, nil
		}
		prefix = s.overlayPrefix(tenant)
	}
	return listJSON[Overlay](ctx, s, prefix)
}

// PutOverlay writes an existing overlay whole (its changes run under
// LockOverlay, so no compare is needed beyond its existence).
func (s *Store) PutOverlay(ctx context.Context, rec *Overlay) error {
	key := s.overlayKey(rec.Tenant, rec.Name)
	tx, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).
		Then(clientv3.OpPut(key, mustJSON(rec))).Commit()
	if err != nil {
		return fmt.Errorf("put overlay %s: %w", rec.Name, err)
	}
	if !tx.Succeeded {
		return fmt.Errorf("overlay %s: %w", rec.Name, ErrNotFound)
	}
	return nil
}

// DeleteOverlay removes an overlay and frees its index.
func (s *Store) DeleteOverlay(ctx context.Context, rec *Overlay) error {
	_, err := s.kv(ctx).Txn(ctx).Then(
		clientv3.OpDelete(s.overlayKey(rec.Tenant, rec.Name)),
		clientv3.OpDelete(s.overlayIndexKey(rec.Index)),
	).Commit()
	if err != nil {
		return fmt.Errorf("delete overlay %s: %w", rec.Name, err)
	}
	return nil
}

// LockOverlay holds the overlay's lock, on every central, until unlock: its
// changes (members, keys) call nodes one after another and must not
// interleave.
func (s *Store) LockOverlay(ctx context.Context, tenant, name string) (unlock func(), err error) {
	sess, err := s.Session(ctx)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(sess, s.prefix+"overlay-locks/"+tenant+"/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, fmt.Errorf("lock overlay %s: %w", name, err)
	}
	return func() { _ = m.Unlock(context.WithoutCancel(ctx)) }, nil
}
