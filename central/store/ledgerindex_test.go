package store

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// scanIn is what TenantEntriesIn must equal: the whole ledger scanned with the test
// metering applied before the index existed.
func scanIn(t *testing.T, s *Store, tenant string, from, to time.Time) []LedgerEntry {
	t.Helper()
	es, err := s.ListEntries(context.Background(), func(e *LedgerEntry) bool {
		return e.Tenant != "" && (tenant == "" || e.Tenant == tenant) && e.StartedAt.Before(to) && (e.Running() || e.EndedAt.After(from))
	})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// checkMonthIndex reads every month-index key and checks that it is exactly the set the
// remaining entries call for, none missing and none left behind, each holding a copy of its
// entry as stored (or, ahead of a long run's end, its id).
func checkMonthIndex(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	resp, err := s.client.Get(ctx, s.prefix+"ledger-months/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]string{}
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	ledger, err := s.client.Get(ctx, s.prefix+"ledger/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{} // key -> the entry's id and its stored value
	for _, kv := range ledger.Kvs {
		var e LedgerEntry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			t.Fatal(err)
		}
		for _, k := range s.monthKeys(&e) {
			want[k] = [2]string{e.ID, string(kv.Value)}
		}
	}
	for k, w := range want {
		v, ok := have[k]
		switch {
		case !ok:
			t.Errorf("missing %s", k)
		case v != w[0] && v != w[1]:
			t.Errorf("%s holds %.80s, not the entry %s", k, v, w[0])
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok {
			t.Errorf("left behind %s", k)
		}
	}
}

// TestTenantEntriesInEqualsAFullScanOnRandomLedgers builds random ledgers through the
// store's own writes (VMs of three tenants and the operator; short and long runs, runs
// across months and years, ends on a month's first instant, ends before their start as a
// skewed clock writes them, VMs still running, retention drops) and asks for random windows
// (whole months, arbitrary instants, empty and inverted ones) of each tenant and of all:
// the indexed read returns exactly the rows, in the order, of a scan of the whole ledger.
func TestTenantEntriesInEqualsAFullScanOnRandomLedgers(t *testing.T) {
	ctx := testCtx(t)
	base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			s := openEmbedded(t, Options{UnsafeNoFsync: true})
			rng := rand.New(rand.NewPCG(seed, 0x6c6467))
			testNode(t, s, "n1", 1<<20, 1<<30, 0)
			var tenants []string
			for i := range 3 {
				tenants = append(tenants, testTenant(t, s, fmt.Sprintf("t%d", i), sdk.Quotas{}).ID)
			}
			// instant is a random moment of 2025-2027, on a month's first instant one time
			// in five.
			instant := func() time.Time {
				if rng.IntN(5) == 0 {
					return base.AddDate(0, rng.IntN(36), 0)
				}
				return base.Add(time.Duration(rng.Int64N(int64(3 * 365 * 24 * time.Hour))))
			}
			for i := range 150 {
				tenant := ""
				if rng.IntN(8) > 0 {
					tenant = tenants[rng.IntN(len(tenants))]
				}
				start := instant()
				e, err := s.RecordEntry(ctx, LedgerEntry{Tenant: tenant, Node: "n1", VMID: fmt.Sprintf("vm-%d", i), Name: "vm",
					VCPUs: 1, MemoryMiB: 64, StartedAt: start})
				if err != nil {
					t.Fatal(err)
				}
				var end time.Time
				switch rng.IntN(10) {
				case 0, 1: // still running
					continue
				case 2: // to a month's first instant
					end = monthStart(start).AddDate(0, 1+rng.IntN(3), 0)
				case 3: // for years (more months than one transaction holds, now and then)
					end = start.AddDate(rng.IntN(10), rng.IntN(12), 0)
				case 4: // a skewed clock ends it before it started
					end = start.Add(-time.Duration(rng.Int64N(int64(48 * time.Hour))))
				default:
					end = start.Add(time.Duration(rng.Int64N(int64(90 * 24 * time.Hour))))
				}
				if _, err := s.EndEntry(ctx, e.ID, "deleted", end); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.DropEndedBefore(ctx, base.AddDate(0, rng.IntN(12), 0)); err != nil {
				t.Fatal(err)
			}
			checkMonthIndex(t, s)

			for range 120 {
				var from, to time.Time
				switch rng.IntN(4) {
				case 0: // a statement's month
					from = base.AddDate(0, rng.IntN(48)-6, 0)
					to = from.AddDate(0, 1, 0)
				case 1: // inverted or empty
					from = instant()
					to = from.Add(-time.Duration(rng.Int64N(int64(40 * 24 * time.Hour))))
				default:
					from = instant()
					to = from.Add(time.Duration(rng.Int64N(int64(400 * 24 * time.Hour))))
				}
				for _, tenant := range append([]string{""}, tenants...) {
					got, err := s.TenantEntriesIn(ctx, tenant, from, to)
					if err != nil {
						t.Fatal(err)
					}
					if !s.ledgerIndexed.Load() {
						t.Fatal("TenantEntriesIn read by a full scan: the new etcd's ledger was not marked indexed")
					}
					if want := scanIn(t, s, tenant, from, to); !sameEntries(got, want) {
						t.Fatalf("tenant %q, [%s, %s): the index read %d entries, the scan %d\nindex: %v\nscan:  %v",
							tenant, from, to, len(got), len(want), ids(got), ids(want))
					}
				}
			}
		})
	}
}

// sameEntries: the same entries, field for field, in the same order (none equals nil).
func sameEntries(a, b []LedgerEntry) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}

func ids(es []LedgerEntry) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// TestAVMThatRanForYearsIsFoundInEveryMonthAndDroppedWhole ends an entry that ran for twelve
// years, more months than one etcd transaction takes keys for: every month of them finds
// it, and retention takes its keys with it.
func TestAVMThatRanForYearsIsFoundInEveryMonthAndDroppedWhole(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	testNode(t, s, "n1", 64, 65536, 0)
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	start := time.Date(2014, 3, 10, 12, 0, 0, 0, time.UTC)
	end := time.Date(2026, 5, 2, 8, 0, 0, 0, time.UTC)
	e, err := s.RecordEntry(ctx, LedgerEntry{Tenant: acme.ID, Node: "n1", VMID: "vm-1", Name: "old", VCPUs: 1, MemoryMiB: 64, StartedAt: start})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EndEntry(ctx, e.ID, "deleted", end); err != nil {
		t.Fatal(err)
	}
	if n := len(s.monthKeys(&LedgerEntry{ID: e.ID, Tenant: acme.ID, StartedAt: start, EndedAt: end})); n <= maxTxnOps {
		t.Fatalf("the entry has %d month keys; the test needs more than %d", n, maxTxnOps)
	}
	checkMonthIndex(t, s)
	for _, m := range months(start, end) {
		es, err := s.TenantEntriesIn(ctx, acme.ID, m, m.AddDate(0, 1, 0))
		if err != nil || len(es) != 1 || es[0].ID != e.ID {
			t.Fatalf("month %s: %v, %v; want the entry", m.Format("2006-01"), ids(es), err)
		}
	}
	if es, _ := s.TenantEntriesIn(ctx, acme.ID, end.AddDate(0, 1, 0), end.AddDate(0, 2, 0)); len(es) != 0 {
		t.Errorf("the month after its end finds %v", ids(es))
	}
	if n, err := s.DropEndedBefore(ctx, end.Add(time.Second)); err != nil || n != 1 {
		t.Fatalf("dropped %d, %v; want 1", n, err)
	}
	checkMonthIndex(t, s)
}

// putOldLedger writes entries as a central from before the month index did: the entry, and
// for a running one its running copies, and nothing else.
func putOldLedger(t *testing.T, s *Store, es []LedgerEntry) {
	t.Helper()
	for _, e := range es {
		ops := []clientv3.Op{clientv3.OpPut(s.ledgerKey(e.ID), mustJSON(&e))}
		if e.Running() {
			ops = append(ops, clientv3.OpPut(s.runningNodePrefix(e.Node)+e.ID, mustJSON(&e)))
			if e.Tenant != "" {
				ops = append(ops, clientv3.OpPut(s.runningTenantPrefix(e.Tenant)+e.ID, mustJSON(&e)))
			}
		}
		if _, err := s.client.Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigrateLedgerIndexIndexesAnOlderLedgerOnce upgrades a ledger an older central wrote
// (no month keys, no marker): opening a store on it writes no marker; until the migration,
// TenantEntriesIn answers by a full scan, as the index alone would miss the ended entries;
// after it, the index alone equals a scan of the whole ledger; the marker is written, and a
// second run (another central starting) writes nothing.
func TestMigrateLedgerIndexIndexesAnOlderLedgerOnce(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	if done, err := s.migrated(ctx, LedgerIndexMigration); err != nil || !done {
		t.Fatalf("a new etcd's empty ledger is not marked indexed: %v, %v", done, err)
	}
	// An etcd an older central wrote has no marker.
	if _, err := s.client.Delete(ctx, s.migrationKey(LedgerIndexMigration)); err != nil {
		t.Fatal(err)
	}
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	var old []LedgerEntry
	for i := range 250 { // more than one transaction of keys
		e := LedgerEntry{ID: fmt.Sprintf("e-%03d", i), Tenant: fmt.Sprintf("t-%d", i%4), Node: "n1", VMID: fmt.Sprintf("vm-%d", i),
			Name: "vm", VCPUs: 1, MemoryMiB: 64, GuestOS: GuestLinux, StartedAt: oct.Add(time.Duration(i) * time.Hour)}
		switch i % 5 {
		case 0: // running
		case 1: // the operator's
			e.Tenant, e.EndedAt = "", e.StartedAt.Add(time.Hour)
		case 2: // into the next month
			e.EndedAt = e.StartedAt.AddDate(0, 1, 0)
		default:
			e.EndedAt = e.StartedAt.Add(time.Duration(i) * time.Minute)
		}
		old = append(old, e)
	}
	// and one that ran for eleven years
	old = append(old, LedgerEntry{ID: "e-long", Tenant: "t-0", Node: "n1", VMID: "vm-long", Name: "vm", VCPUs: 1, MemoryMiB: 64,
		GuestOS: GuestLinux, StartedAt: oct.AddDate(-11, 0, 0), EndedAt: oct.Add(time.Hour)})
	putOldLedger(t, s, old)

	nov := oct.AddDate(0, 1, 0)
	peer := openPeer(t, s, Options{})
	if done, err := peer.migrated(ctx, LedgerIndexMigration); err != nil || done {
		t.Fatalf("opening a store on an older ledger marked it indexed: %v, %v", done, err)
	}
	through, err := s.entriesThroughIndex(ctx, "", oct, nov)
	if err != nil {
		t.Fatal(err)
	}
	want := scanIn(t, s, "", oct, nov)
	if len(through) >= len(want) {
		t.Fatalf("before the migration the index read %d of %d entries; the test needs an unindexed ledger", len(through), len(want))
	}
	if got := mustIn(t, peer, "", oct, nov); !sameEntries(got, want) {
		t.Fatalf("before the migration TenantEntriesIn read %d entries, a full scan %d", len(got), len(want))
	}
	n, err := s.MigrateLedgerIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended := 0
	for _, e := range old {
		if e.Tenant != "" && !e.Running() {
			ended++
		}
	}
	if n != ended {
		t.Errorf("migrated %d entries, want the %d ended tenant entries", n, ended)
	}
	checkMonthIndex(t, s)
	for _, w := range [][2]time.Time{{oct, nov}, {nov, nov.AddDate(0, 1, 0)}, {oct.AddDate(-5, 0, 0), oct.AddDate(-5, 1, 0)}, {oct.Add(36 * time.Hour), nov.Add(time.Hour)}} {
		for _, tenant := range []string{"", "t-0", "t-3"} {
			got, err := s.entriesThroughIndex(ctx, tenant, w[0], w[1])
			if err != nil {
				t.Fatal(err)
			}
			if want := scanIn(t, s, tenant, w[0], w[1]); !sameEntries(got, want) {
				t.Errorf("after the migration, tenant %q [%s, %s): index %d entries, scan %d", tenant, w[0], w[1], len(got), len(want))
			}
		}
	}
	marker, err := s.client.Get(ctx, s.migrationKey(LedgerIndexMigration))
	if err != nil || len(marker.Kvs) != 1 || !json.Valid(marker.Kvs[0].Value) {
		t.Fatalf("marker: %v, %v", marker, err)
	}
	before := marker.Header.Revision
	if n, err := s.MigrateLedgerIndex(ctx); err != nil || n != 0 {
		t.Errorf("second migration = %d, %v; want 0", n, err)
	}
	if r, _ := s.client.Get(ctx, s.migrationKey(LedgerIndexMigration)); r.Header.Revision != before {
		t.Errorf("the second migration wrote: revision %d, then %d", before, r.Header.Revision)
	}
}

func mustIn(t *testing.T, s *Store, tenant string, from, to time.Time) []LedgerEntry {
	t.Helper()
	es, err := s.TenantEntriesIn(context.Background(), tenant, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// TestWriteGuardedLeavesOutOnlyWhatChanged gives writeGuarded a batch in which one key it
// stands on changed after it was read: the others are written, that one is not, and a write
// too large for one transaction is written whole.
func TestWriteGuardedLeavesOutOnlyWhatChanged(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	var ws []guardedWrite
	for i := range 5 {
		k := s.prefix + fmt.Sprintf("probe-guard/%d", i)
		r, err := s.client.Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		w := guardedWrite{key: k, rev: r.Header.Revision}
		for j := range 1 + i*60 { // the last is 241 operations
			w.ops = append(w.ops, clientv3.OpPut(fmt.Sprintf("%s/out/%03d", k, j), "x"))
		}
		ws = append(ws, w)
	}
	if _, err := s.client.Put(ctx, ws[1].key, "changed"); err != nil {
		t.Fatal(err)
	}
	n, err := s.writeGuarded(ctx, ws)
	if err != nil || n != 4 {
		t.Fatalf("wrote %d, %v; want 4 of 5", n, err)
	}
	for i, w := range ws {
		r, err := s.client.Get(ctx, w.key+"/out/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		want := int64(len(w.ops))
		if i == 1 {
			want = 0
		}
		if r.Count != want {
			t.Errorf("write %d: %d of its %d keys, want %d", i, r.Count, len(w.ops), want)
		}
	}
}
