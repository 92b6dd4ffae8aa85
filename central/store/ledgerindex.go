package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// How a statement finds its rows without reading the whole ledger
//
// A statement or a usage report over a window [from, to) needs the tenant entries that ran at
// some moment of it: started before to, and running or ended after from. Two indexes hold
// them, so a reader reads those entries and (nearly) nothing else:
//
//   - running/tenant/<tenant>/<id>, the copy of a running entry that Commit and RecordEntry
//     write and EndEntry deletes (reserve.go), holds every running tenant entry.
//   - ledger-months/<month>/<tenant>/<id> (month as YYYY-MM, UTC) holds a copy of an ended
//     tenant entry, under every month from the one it started in to the one it ended in, both
//     included. An ended entry never changes again, so its copies cannot go stale. EndEntry
//     writes them in the transaction that ends the entry (so at every revision a tenant entry
//     is either in the running index or under all its months), and DropEndedBefore deletes
//     them with the entry. The one exception: a VM that ran for more months than one
//     transaction takes keys for has its earlier months written first, while it still runs,
//     and those keys hold only its id, which cannot go stale whoever ends it and when.
//
// TenantEntriesIn reads the running copies and the keys of the window's months at one
// revision (and, for a key holding an id, the entry at that revision), and applies the same
// test a scan of the whole ledger applied. The keys name a superset of what that test accepts
// (an entry accepted for a window ran at a moment p inside it, and p's month is both one of
// the window's months and one of the entry's), so the rows, and so the statements, are
// exactly those of the scan.
//
// The operator's own entries are not billed and not indexed. A ledger written before the index
// existed gets its keys from MigrateLedgerIndex, once (central runs it at start).

// maxTxnOps is how many operations this store puts in one transaction when a write may have
// many: etcd refuses a transaction of more than --max-txn-ops (128 by default), and the ends
// and drops that write month keys have a few operations of their own.
const maxTxnOps = 100

// LedgerIndexMigration names the marker key (migrations/<name>) that MigrateLedgerIndex
// writes once every ended tenant entry has its month keys.
const LedgerIndexMigration = "ledger-months"

func (s *Store) ledgerMonthPrefix(month time.Time) string {
	return s.prefix + "ledger-months/" + month.Format("2006-01") + "/"
}
func (s *Store) migrationKey(name string) string { return s.prefix + "migrations/" + name }

// monthStart is the first instant of t's month, in UTC.
func monthStart(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// months lists the months from a's to b's, both included (none when b's is before a's).
func months(a, b time.Time) []time.Time {
	var out []time.Time
	for m, last := monthStart(a), monthStart(b); !m.After(last); m = m.AddDate(0, 1, 0) {
		out = append(out, m)
	}
	return out
}

// monthKeys are the month-index keys of an ended tenant entry (none for a running entry or
// the operator's). An end before the start, which a skewed clock can write, indexes the
// months between the two, so the keys still cover every window a scan would find it in.
func (s *Store) monthKeys(e *LedgerEntry) []string {
	if e.Tenant == "" || e.Running() {
		return nil
	}
	first, last := e.StartedAt, e.EndedAt
	if last.Before(first) {
		first, last = last, first
	}
	ms := months(first, last)
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = s.ledgerMonthPrefix(m) + e.Tenant + "/" + e.ID
	}
	return keys
}

// TenantEntriesIn reads the entries of tenant ("" every tenant; the operator's own entries
// never) that ran at some moment of [from, to): started before to, and running or ended
// after from. They come ordered by start (then id), as ListEntries orders them, and are read
// through the indexes above, so the cost is the rows of the window, not the ledger's size.
//
// Until the ledger has been indexed (MigrateLedgerIndex), it scans the whole ledger instead.
func (s *Store) TenantEntriesIn(ctx context.Context, tenant string, from, to time.Time) ([]LedgerEntry, error) {
	if !s.ledgerIndexed.Load() {
		done, err := s.migrated(ctx, LedgerIndexMigration)
		if err != nil {
			return nil, err
		}
		if !done {
			return s.ListEntries(ctx, func(e *LedgerEntry) bool { return ranIn(e, tenant, from, to) })
		}
		s.ledgerIndexed.Store(true)
	}
	return s.entriesThroughIndex(ctx, tenant, from, to)
}

// ranIn is the test TenantEntriesIn answers: a tenant entry of tenant ("" any) that ran at
// some moment of [from, to).
func ranIn(e *LedgerEntry, tenant string, from, to time.Time) bool {
	return e.Tenant != "" && (tenant == "" || e.Tenant == tenant) && e.StartedAt.Before(to) && (e.Running() || e.EndedAt.After(from))
}

// entriesThroughIndex is TenantEntriesIn on an indexed ledger.
func (s *Store) entriesThroughIndex(ctx context.Context, tenant string, from, to time.Time) ([]LedgerEntry, error) {
	what := fmt.Sprintf("read the ledger of tenant %q from %s to %s", tenant, from.Format(time.RFC3339), to.Format(time.RFC3339))
	runningPrefix := s.prefix + "running/tenant/"
	if tenant != "" {
		runningPrefix = s.runningTenantPrefix(tenant)
	}
	var out []LedgerEntry
	seen := map[string]bool{}
	rev, err := s.scan(ctx, runningPrefix, 0, func(kv *mvccpb.KeyValue) error {
		var e LedgerEntry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		seen[e.ID] = true
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// The months of the window. An empty or inverted one (to not after from) still has the
	// entries that ran over all of [to, from]; they ran in to's month.
	first, last := from, to.Add(-time.Nanosecond)
	if !to.After(from) {
		first, last = to, to
	}
	var ids []string
	for _, m := range months(first, last) {
		prefix := s.ledgerMonthPrefix(m)
		if tenant != "" {
			prefix += tenant + "/"
		}
		if _, err := s.scan(ctx, prefix, rev, func(kv *mvccpb.KeyValue) error {
			if len(kv.Value) == 0 || kv.Value[0] != '{' { // an id, written ahead of a long run's end
				if id := string(kv.Value); !seen[id] {
					seen[id] = true
					ids = append(ids, id)
				}
				return nil
			}
			var e LedgerEntry
			if err := json.Unmarshal(kv.Value, &e); err != nil {
				return fmt.Errorf("decode %s: %w", kv.Key, err)
			}
			if !seen[e.ID] {
				seen[e.ID] = true
				out = append(out, e)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	for _, id := range ids {
		var r *clientv3.GetResponse
		err := s.retryTransient(ctx, "read ledger entry "+id, func() (err error) {
			r, err = s.client.Get(ctx, s.ledgerKey(id), clientv3.WithRev(rev))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var e LedgerEntry
		if n, err := decodeOne(r.Kvs, &e); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		} else if n != 0 {
			out = append(out, e)
		}
	}
	kept := out[:0]
	for _, e := range out {
		if ranIn(&e, tenant, from, to) {
			kept = append(kept, e)
		}
	}
	sort.Slice(kept, func(i, j int) bool {
		if !kept[i].StartedAt.Equal(kept[j].StartedAt) {
			return kept[i].StartedAt.Before(kept[j].StartedAt)
		}
		return kept[i].ID < kept[j].ID
	})
	return kept, nil
}

// MigrateLedgerIndex gives every ended tenant entry its month keys, once: a ledger written
// by a central from before the index has none, and its statements would miss those entries.
// It returns how many entries it indexed (0 when the marker says it ran before). Each write
// compares the entry's revision as scanned, so an entry dropped meanwhile is not indexed
// again; entries ended meanwhile got their keys from EndEntry. It writes the marker
// migrations/ledger-months last, so a central that dies halfway migrates again at its next
// start. Until the marker is there, TenantEntriesIn reads by a full scan.
func (s *Store) MigrateLedgerIndex(ctx context.Context) (int, error) {
	const what = "index the ledger by month"
	marker := s.migrationKey(LedgerIndexMigration)
	if done, err := s.migrated(ctx, LedgerIndexMigration); err != nil || done {
		return 0, err
	}
	// Writers take batches as the scan makes them: etcd syncs the transactions of several
	// writers with one fsync, which one writer waiting for each would not let it do.
	const writers = 4
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan []guardedWrite, writers)
	var indexed atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var once sync.Once
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range batches {
				n, err := s.writeGuarded(ctx, b)
				indexed.Add(int64(n))
				if err != nil {
					once.Do(func() { firstErr = err; cancel() })
				}
			}
		}()
	}
	var batch []guardedWrite
	ops := 0
	_, err := s.scanEntries(ctx, 0, func(e *LedgerEntry, kv *mvccpb.KeyValue) error {
		keys := s.monthKeys(e)
		if len(keys) == 0 {
			return nil
		}
		w := guardedWrite{key: string(kv.Key), rev: kv.ModRevision}
		for _, k := range keys {
			w.ops = append(w.ops, clientv3.OpPut(k, string(kv.Value))) // the entry as stored
		}
		if ops+len(w.ops) > maxTxnOps && len(batch) > 0 {
			select {
			case batches <- batch:
			case <-ctx.Done():
				return ctx.Err()
			}
			batch, ops = nil, 0
		}
		batch = append(batch, w)
		ops += len(w.ops)
		return nil
	})
	if err == nil && len(batch) > 0 {
		batches <- batch
	}
	close(batches)
	wg.Wait()
	if firstErr != nil {
		err = firstErr
	}
	n := int(indexed.Load())
	if err != nil {
		return n, fmt.Errorf("%s: %w", what, err)
	}
	done := mustJSON(map[string]any{"at": time.Now().UTC(), "entries": n})
	if _, err := s.kv(ctx).Put(ctx, marker, done); err != nil {
		return n, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// markEmptyLedgerIndexed writes the ledger index's migration marker when the ledger is
// empty (a new etcd): there is nothing to index, and no central may read it by full scans
// for want of a marker. A ledger with entries is left to MigrateLedgerIndex.
func (s *Store) markEmptyLedgerIndexed(ctx context.Context) error {
	if done, err := s.migrated(ctx, LedgerIndexMigration); err != nil || done {
		return err
	}
	ledger := s.prefix + "ledger/"
	r, err := s.client.Get(ctx, ledger, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		return fmt.Errorf("read the ledger: %w", err)
	}
	if len(r.Kvs) > 0 {
		return nil
	}
	// Still empty when the marker is written: the compare reads no entry.
	_, err = s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(ledger), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(s.migrationKey(LedgerIndexMigration), mustJSON(map[string]any{"at": time.Now().UTC(), "entries": 0}))).Commit()
	if err != nil {
		return fmt.Errorf("mark the empty ledger indexed: %w", err)
	}
	return nil
}

// migrated reports whether the migration name has run (its marker is there).
func (s *Store) migrated(ctx context.Context, name string) (bool, error) {
	r, err := s.client.Get(ctx, s.migrationKey(name), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("read the marker of migration %s: %w", name, err)
	}
	return r.Count > 0, nil
}

// guardedWrite is writes that stand only while key still has revision rev.
type guardedWrite struct {
	key string
	rev int64
	ops []clientv3.Op
}

// writeGuarded commits ws in as few transactions as maxTxnOps allows, each comparing the
// revisions of the keys its writes stand on, and returns how many were written. A
// transaction that loses a compare is done again one write at a time, so only the writes
// whose key changed are left out.
func (s *Store) writeGuarded(ctx context.Context, ws []guardedWrite) (int, error) {
	written := 0
	for len(ws) > 0 {
		n, ops := 0, 0
		for n < len(ws) && ops+len(ws[n].ops) <= maxTxnOps {
			ops += len(ws[n].ops)
			n++
		}
		batch := ws[:max(n, 1)]
		ws = ws[len(batch):]
		if len(batch) > 1 {
			ok, err := s.commitGuarded(ctx, batch)
			if err != nil {
				return written, err
			}
			if ok {
				written += len(batch)
				continue
			}
		}
		for _, w := range batch {
			ok, err := s.commitGuarded(ctx, []guardedWrite{w})
			if err != nil {
				return written, err
			}
			if ok {
				written++
			}
		}
	}
	return written, nil
}

// commitGuarded commits the writes of ws on condition that their keys are unchanged. A
// single write of more than maxTxnOps operations goes in several transactions, each with
// the same compare; it stops at the first that loses.
func (s *Store) commitGuarded(ctx context.Context, ws []guardedWrite) (bool, error) {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, w := range ws {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(w.key), "=", w.rev))
		ops = append(ops, w.ops...)
	}
	for len(ops) > 0 {
		chunk := ops[:min(len(ops), maxTxnOps)]
		ops = ops[len(chunk):]
		r, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(chunk...).Commit()
		if err != nil {
			return false, err
		}
		if !r.Succeeded {
			return false, nil
		}
	}
	return true, nil
}
