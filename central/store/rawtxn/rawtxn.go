// Package rawtxn measures the baseline of central's benchmarks: bare etcd
// transactions of the shape of central's guarded writes. It imports nothing
// of central, so that the store's own tests can use it as well as the
// packages built on the store.
package rawtxn

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rate is the baseline of central's benchmarks: bare etcd transactions
// from workers goroutines, each on its own key, of the shape of every
// guarded write in central/store (put, if the key's revision is still the
// one this worker last wrote). It runs ops transactions, or for d when ops is
// 0, and returns transactions per second.
func Rate(cli *clientv3.Client, workers, ops int, d time.Duration) (float64, error) {
	ctx := context.Background()
	var next atomic.Int64
	start := time.Now()
	elapsed, err := workersRun(workers, func(w int) error {
		key := fmt.Sprintf("/bench/raw/%d", w)
		var rev int64
		for {
			n := next.Add(1)
			if (ops > 0 && n > int64(ops)) || (ops == 0 && time.Since(start) >= d) {
				return nil
			}
			r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, strconv.FormatInt(n, 10))).Else(clientv3.OpGet(key)).Commit()
			if err != nil {
				return err
			}
			if r.Succeeded {
				rev = r.Header.Revision
			} else if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				rev = kvs[0].ModRevision
			}
		}
	})
	if err != nil {
		return 0, fmt.Errorf("raw txn: %w", err)
	}
	done := next.Load() - int64(workers) // each worker's last Add did not run
	return float64(done) / elapsed.Seconds(), nil
}
