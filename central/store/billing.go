package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Prices are kept as a history: every PUT adds a version that takes effect at
// once, and statements price each moment with the version then in effect
// (billing.PriceVersion). Versions are never rewritten.

func (s *Store) pricesPrefix() string { return s.prefix + "prices/" }

// PriceHistory reads every price version, oldest first. With none written it
// is one version of billing.DefaultPrices in effect since the zero time; the
// first PutPrices stores that version too, at the Unix epoch.
func (s *Store) PriceHistory(ctx context.Context) ([]billing.PriceVersion, error) {
	vs, err := listJSON[billing.PriceVersion](ctx, s, s.pricesPrefix())
	if err != nil {
		return nil, fmt.Errorf("read prices: %w", err)
	}
	if len(vs) == 0 {
		return []billing.PriceVersion{{Prices: billing.DefaultPrices()}}, nil
	}
	sort.SliceStable(vs, func(i, j int) bool { return vs[i].EffectiveFrom.Before(vs[j].EffectiveFrom) })
	return vs, nil
}

// CurrentPrices is the newest price version.
func (s *Store) CurrentPrices(ctx context.Context) (*billing.PriceVersion, error) {
	vs, err := s.PriceHistory(ctx)
	if err != nil {
		return nil, err
	}
	return &vs[len(vs)-1], nil
}

// PutPrices validates p and adds it as the version in effect from at (now).
// A version may not take effect before the newest one (ErrConflict): the past
// is never re-priced. Given a version (PricesVersion), it adds p only while
// the price list is still at that version, else ErrStale.
func (s *Store) PutPrices(ctx context.Context, p billing.Prices, at time.Time, ifVersion ...int64) (*billing.PriceVersion, error) {
	if err := p.Validate(); err != nil {
		return nil, invalid{err} // billing's message names every field
	}
	version, given, err := onlyVersion("set prices", ifVersion)
	if err != nil {
		return nil, err
	}
	v := &billing.PriceVersion{EffectiveFrom: at.UTC().Truncate(time.Second), Prices: p}
	// Keys sort by time: fixed-width Unix seconds.
	key := fmt.Sprintf("%s%020d", s.pricesPrefix(), v.EffectiveFrom.Unix())
	err = s.casLoop(ctx, "set prices", func(bool) (bool, error) {
		last, err := s.client.Get(ctx, s.pricesPrefix(), clientv3.WithLastKey()...)
		if err != nil {
			return false, fmt.Errorf("set prices: %w", err)
		}
		var lastKey string
		var lastRev int64
		if len(last.Kvs) > 0 {
			lastKey, lastRev = string(last.Kvs[0].Key), last.Kvs[0].ModRevision
			if lastKey > key {
				return false, fmt.Errorf("%w: set prices: the newest price list takes effect after %s", ErrConflict, v.EffectiveFrom.Format(time.RFC3339))
			}
		}
		// The newest version must still be the one read. The first list
		// published also records the defaults as in effect before it, so it
		// does not reach back and price what ran while nothing was charged.
		// Two puts within one second: the later one replaces the earlier (same key).
		ops := []clientv3.Op{clientv3.OpPut(key, mustJSON(v))}
		var cmp clientv3.Cmp
		if lastKey != "" {
			cmp = clientv3.Compare(clientv3.ModRevision(lastKey), "=", lastRev)
		} else {
			first := fmt.Sprintf("%s%020d", s.pricesPrefix(), 0)
			cmp = clientv3.Compare(clientv3.CreateRevision(first), "=", 0)
			if first != key {
				ops = append(ops, clientv3.OpPut(first, mustJSON(&billing.PriceVersion{EffectiveFrom: time.Unix(0, 0).UTC(), Prices: billing.DefaultPrices()})))
			}
		}
		cmps := []clientv3.Cmp{cmp}
		if given {
			cmps = append(cmps, sameVersion(s.pricesPrefix(), true, version))
		}
		r, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("set prices: %w", err)
		}
		if !r.Succeeded && given {
			if now, err := s.PricesVersion(ctx); err == nil && now != version {
				return false, fmt.Errorf("set prices: %w", ErrStale)
			}
		}
		return r.Succeeded, nil
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// invalid is an error from package billing that counts as ErrInvalid here,
// with billing's message as it is.
type invalid struct{ error }

func (e invalid) Is(target error) bool { return target == ErrInvalid }
func (e invalid) Unwrap() error        { return e.error }
