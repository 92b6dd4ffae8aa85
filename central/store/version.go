package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Whole documents that operators read, edit and write back (the policy, the price list) carry
// a version, which the API hands out as an ETag: the highest ModRevision among the document's
// keys, 0 while nothing is stored. A write given the version it was read at (If-Match) applies
// only while nothing under those keys was written after it, so two operators editing at once
// cannot silently undo each other's change: the second is told (ErrStale) and reads again.

// ErrStale: the write was for a version of the document that has changed since.
var ErrStale = errors.New("changed since it was read")

// versionOf reads a document's version: the highest ModRevision of key (or of the keys under
// it, with prefix).
func (s *Store) versionOf(ctx context.Context, key string, prefix bool) (int64, error) {
	opts := []clientv3.OpOption{clientv3.WithKeysOnly()}
	if prefix {
		opts = append(opts, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	}
	r, err := s.client.Get(ctx, key, opts...)
	if err != nil {
		return 0, err
	}
	if len(r.Kvs) == 0 {
		return 0, nil
	}
	return r.Kvs[0].ModRevision, nil
}

// sameVersion is the compare under which a document is still at version v.
func sameVersion(key string, prefix bool, v int64) clientv3.Cmp {
	if prefix {
		return clientv3.Compare(clientv3.ModRevision(key), "<", v+1).WithPrefix()
	}
	return clientv3.Compare(clientv3.ModRevision(key), "=", v)
}

// onlyVersion is the optional version of a write: at most one.
func onlyVersion(what string, ifVersion []int64) (v int64, given bool, err error) {
	switch len(ifVersion) {
	case 0:
		return 0, false, nil
	case 1:
		return ifVersion[0], true, nil
	}
	return 0, false, fmt.Errorf("%w: %s: at most one version", ErrInvalid, what)
}

// PolicyVersion reads the policy with its version (0: never stored, the defaults).
func (s *Store) PolicyVersion(ctx context.Context) (sdk.Policy, int64, error) {
	p, rev, err := getJSON[sdk.Policy](ctx, s, s.policyKey())
	if errors.Is(err, ErrNotFound) {
		return DefaultPolicy(), 0, nil
	}
	if err != nil {
		return sdk.Policy{}, 0, fmt.Errorf("get policy: %w", err)
	}
	return *p, rev, nil
}

// PricesVersion is the version of the price list (of its whole history).
func (s *Store) PricesVersion(ctx context.Context) (int64, error) {
	v, err := s.versionOf(ctx, s.pricesPrefix(), true)
	if err != nil {
		return 0, fmt.Errorf("read the version of the prices: %w", err)
	}
	return v, nil
}
