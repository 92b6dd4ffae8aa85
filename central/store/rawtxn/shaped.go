package rawtxn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Shape is the etcd work of one unit of something central does (a reservation,
// a launch), without central: the reads it sends, then its transactions in
// order. ShapedRate runs units of a shape to show what etcd alone allows that
// work, next to the bare baseline (Rate), on the same etcd.
type Shape struct {
	// Reads are single-key linearizable reads of keys that exist, each its own
	// request, sent before the transactions.
	Reads int
	Txns  []TxnShape
}

// TxnShape is one transaction: Compares on ModRevisions (all true), then Puts
// of ValueBytes each, and Deletes of keys the transaction before it put (in
// the order it put them). Of the puts, the first Leased are attached to the
// lease and the next Fresh are not: both are new keys each unit (as a
// reservation's, a ledger entry's); the others rewrite the same keys unit after
// unit (as a usage counter).
type TxnShape struct {
	Compares, Puts, Leased, Fresh, Deletes, ValueBytes int
}

// ShapedRate runs ops units of s from workers goroutines, each on keys of its
// own under prefix, and returns units per second. The leased keys are attached
// to a lease of the run's own (as a central's session lease holds its
// reservations); the keys and the lease go once the run is timed.
func ShapedRate(cli *clientv3.Client, prefix string, workers, ops int, s Shape) (float64, error) {
	ctx := context.Background()
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		return 0, fmt.Errorf("shaped txn: %w", err)
	}
	if s.Reads > 0 {
		if _, err := cli.Put(ctx, prefix+"read", "x"); err != nil {
			return 0, fmt.Errorf("shaped txn: %w", err)
		}
	}
	var next atomic.Int64
	elapsed, err := workersRun(workers, func(w int) error {
		return runShape(ctx, cli, lease.ID, fmt.Sprintf("%s%d/", prefix, w), prefix+"read", s, func() (int64, bool) {
			n := next.Add(1)
			return n, n <= int64(ops)
		})
	})
	_, derr := cli.Delete(ctx, prefix, clientv3.WithPrefix())
	_, rerr := cli.Revoke(ctx, lease.ID)
	if err := errors.Join(err, derr, rerr); err != nil {
		return 0, fmt.Errorf("shaped txn: %w", err)
	}
	return float64(ops) / elapsed.Seconds(), nil
}

// workersRun runs fn(0) .. fn(workers-1) at once and returns how long they
// took together and their errors.
func workersRun(workers int, fn func(w int) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[w] = fn(w)
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// runShape runs units of s on keys under k, reading readKey, while more says so.
func runShape(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, k, readKey string, s Shape, more func() (int64, bool)) error {
	for {
		n, ok := more()
		if !ok {
			return nil
		}
		for range s.Reads {
			if _, err := cli.Get(ctx, readKey); err != nil {
				return err
			}
		}
		var before []string // the keys the transaction before put, leased first
		for t, ts := range s.Txns {
			val := strings.Repeat("x", ts.ValueBytes)
			cmps := make([]clientv3.Cmp, ts.Compares)
			for c := range cmps {
				cmps[c] = clientv3.Compare(clientv3.ModRevision(fmt.Sprintf("%sc%d-%d", k, t, c)), ">", -1)
			}
			var ops []clientv3.Op
			var put []string
			for p := range ts.Puts {
				var opts []clientv3.OpOption
				key := fmt.Sprintf("%sp%d-%d", k, t, p)
				if p < ts.Leased+ts.Fresh {
					key = fmt.Sprintf("%s-%d", key, n)
				}
				if p < ts.Leased {
					opts = append(opts, clientv3.WithLease(lease))
				}
				ops = append(ops, clientv3.OpPut(key, val, opts...))
				put = append(put, key)
			}
			for d := range min(ts.Deletes, len(before)) {
				ops = append(ops, clientv3.OpDelete(before[d]))
			}
			if _, err := cli.Txn(ctx).If(cmps...).Then(ops...).Commit(); err != nil {
				return err
			}
			before = put
		}
	}
}
