// Package storetest opens central's store on a real embedded etcd for the
// tests of the packages built on it, in a temporary directory that goes away
// with the test, makes the tenants those tests need, and measures the bare
// etcd transactions central's benchmarks compare themselves with.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Open starts an embedded etcd and opens the store on it; both stop when the
// test ends. For a test the etcd skips fsync (the data is thrown away); for a
// benchmark it fsyncs, as central runs it (OpenDurable).
func Open(t testing.TB) *store.Store {
	t.Helper()
	if _, bench := t.(*testing.B); bench {
		return OpenDurable(t)
	}
	st, err := store.Open(context.Background(), store.Options{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("open the embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Tenant creates a tenant without quotas whose primary token is "fvt_" and
// its name.
func Tenant(t testing.TB, st *store.Store, name string) *store.Tenant {
	t.Helper()
	tn := &store.Tenant{Tenant: sdk.Tenant{Name: name}, TokenSHA256: store.HashToken("fvt_" + name)}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	return tn
}

// OpenDurable is Open with fsync on, as central runs: for benchmarks, whose
// figures fsync decides.
func OpenDurable(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("open the embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// RawTxns is the baseline of central's benchmarks: bare etcd transactions
// from workers goroutines, each on its own key, of the shape of every
// guarded write in central/store (put, if the key's revision is still the
// one this worker last wrote). It runs ops transactions, or for d when ops is
// 0, and returns transactions per second.
func RawTxns(cli *clientv3.Client, workers, ops int, d time.Duration) (float64, error) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("/bench/raw/%d", w)
			var rev int64
			for {
				n := next.Add(1)
				if (ops > 0 && n > int64(ops)) || (ops == 0 && time.Since(start) >= d) {
					return
				}
				r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
					Then(clientv3.OpPut(key, strconv.FormatInt(n, 10))).Else(clientv3.OpGet(key)).Commit()
				if err != nil {
					errs[w] = err
					return
				}
				if r.Succeeded {
					rev = r.Header.Revision
				} else if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					rev = kvs[0].ModRevision
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, fmt.Errorf("raw txn: %w", err)
	}
	done := next.Load() - int64(workers) // each worker's last Add did not run
	return float64(done) / elapsed.Seconds(), nil
}
