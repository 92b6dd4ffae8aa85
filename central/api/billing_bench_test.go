package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/billing/billingtest"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkBillingStatements measures GET /fleet/billing through the real
// HTTP API on rows stored in etcd (docs/benchmarks.md, "Billing"), next to
// the time it takes to read the same rows from etcd in the same run (the
// store's TenantEntriesIn and ListLeases, which the route calls),
// alternating which goes first: the ratio, taken round by round and printed
// as a median with its p10–p90, is what computing and encoding the
// statements adds to the read. The rows come
// from billingtest.Ledger, the generator of package billing's own
// benchmarks. Sub-benchmarks: one tenant with 100,000 rows, and 1,000
// tenants with 100 rows each (every tenant's statement, operator).
func BenchmarkBillingStatements(b *testing.B) {
	month := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		tenants, rows   int
		path, tenantRef string
	}{
		{"one-tenant-100k-rows", 1, 100_000, "/fleet/billing?month=2026-10&tenant=tenant-0000", "tenant-0000"},
		{"1000-tenants-100-rows", 1000, 100, "/fleet/billing?month=2026-10", ""},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st := fxStore(b, nil)
			c := newLxCentral(b, st, newLxClock(billingtest.AsOf(month)))
			fxMust(b, "PUT", c.url+"/fleet/prices", fxToken, bxSpecPrices, http.StatusOK, nil)
			vms, leases := billingtest.Ledger(1, tc.tenants, tc.rows, month)
			tenant := ""
			if tc.tenantRef != "" {
				// The route finds the tenant by name; its rows carry its id.
				id, _ := fxTenant(b, c.url, tc.tenantRef, nil)
				tenant = id
				for i := range vms {
					vms[i].Tenant = id
				}
				for i := range leases {
					leases[i].Tenant = id
				}
			}
			bbLoad(b, st, vms, leases)
			ctx := context.Background()
			if _, err := st.MigrateLedgerIndex(ctx); err != nil { // as an upgraded central does
				b.Fatal(err)
			}
			end := month.AddDate(0, 1, 0)
			inMonth := 0
			for _, v := range vms {
				if v.Start.Before(end) && (v.End.IsZero() || v.End.After(month)) {
					inMonth++
				}
			}
			read := func() {
				es, err := st.TenantEntriesIn(ctx, tenant, month, end)
				if err != nil {
					b.Fatal(err)
				}
				ls, err := st.ListLeases(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if len(es) != inMonth || len(ls) != len(leases) {
					b.Fatalf("read %d entries and %d leases, stored %d of October and %d", len(es), len(ls), inMonth, len(leases))
				}
			}
			statement := func() {
				if data := bbGet(b, c.url+tc.path); len(data) < 100 {
					b.Fatalf("%s: %.200s", tc.path, data)
				}
			}
			read()
			statement() // warm both up
			var reading, stating []time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				benchstat.Interleave(i,
					func() { reading = append(reading, timed(read)) },
					func() {
						b.StartTimer()
						stating = append(stating, timed(statement))
						b.StopTimer()
					})
			}
			ss, rs, ratio := benchstat.Seconds(stating), benchstat.Seconds(reading), benchstat.RatiosOfSeconds(stating, reading)
			benchstat.Report(b, ss.Scaled(1000), "ms/statement")
			benchstat.Report(b, rs.Scaled(1000), "ms/etcd-read")
			benchstat.Report(b, ratio, "statement/read")
			b.ReportMetric(float64(len(vms)+len(leases)), "rows")
			b.Logf("%d rows: statement, ms: %v; etcd read of its rows, ms: %v; statement/read round by round %v",
				len(vms)+len(leases), ss.Scaled(1000), rs.Scaled(1000), ratio)
		})
	}
}

// bbGet is GET url as the operator, without the schema checks of fxCall
// (they would be most of what is timed): the body of a 200.
func bbGet(b testing.TB, url string) []byte {
	b.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+fxToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("GET %s: %d %.200s", url, resp.StatusCode, data)
	}
	return data
}

// bbLoad writes rows straight into etcd as a central from before the
// ledger's month index did: the entries, running ones with their running
// copies, and the leases; and no marker of the index's migration.
func bbLoad(b testing.TB, st *store.Store, vms []billing.VM, leases []billing.Lease) {
	b.Helper()
	bbUnmark(b, st)
	entries := make([]store.LedgerEntry, 0, len(vms))
	for _, v := range vms {
		guest := "linux"
		if v.MacOS {
			guest = "macos"
		}
		entries = append(entries, store.LedgerEntry{ID: v.ID, Tenant: v.Tenant, Node: v.Node, VMID: v.ID, Name: v.Name, VCPUs: v.VCPUs,
			MemoryMiB: v.MemoryMiB, GuestOS: guest, Image: v.Image, StartedAt: v.Start, EndedAt: v.End})
	}
	bbLoadEntries(b, st, entries)
	var ops []clientv3.Op
	for _, l := range leases {
		data, err := json.Marshal(store.Lease{Lease: sdk.Lease{ID: l.ID, Tenant: l.Tenant, Node: l.Node, StartedAt: l.Start, EndsAt: l.EndsAt,
			MinEnd: l.MinEnd, PricePerHour: l.PricePerHour, PriceClass: l.Class, Currency: "USD", ReleasedAt: l.ReleasedAt}})
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(st.Prefix()+"leases/"+l.ID, string(data)))
	}
	bbWrite(b, st, ops)
}

// bbUnmark deletes the marker that says the ledger is indexed, which a
// store opened on a new etcd writes: an etcd an older central wrote has none.
func bbUnmark(b testing.TB, st *store.Store) {
	b.Helper()
	if _, err := st.Client().Delete(context.Background(), st.Prefix()+"migrations/"+store.LedgerIndexMigration); err != nil {
		b.Fatal(err)
	}
}

// bbLoadEntries writes ledger entries as a central from before the month
// index did: each entry, and for a running one its copies under
// running/node/ and running/tenant/.
func bbLoadEntries(b testing.TB, st *store.Store, entries []store.LedgerEntry) {
	b.Helper()
	ops := make([]clientv3.Op, 0, len(entries)+len(entries)/10)
	for _, e := range entries {
		data, err := json.Marshal(&e)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(st.Prefix()+"ledger/"+e.ID, string(data)))
		if e.EndedAt.IsZero() {
			ops = append(ops, clientv3.OpPut(st.Prefix()+"running/node/"+e.Node+"/"+e.ID, string(data)))
			if e.Tenant != "" {
				ops = append(ops, clientv3.OpPut(st.Prefix()+"running/tenant/"+e.Tenant+"/"+e.ID, string(data)))
			}
		}
	}
	bbWrite(b, st, ops)
}

// bbWrite commits ops in transactions of 120 (etcd takes at most 128 by
// default), eight transactions in flight at once so that etcd syncs many
// with each fsync, as it does for concurrent writers.
func bbWrite(b testing.TB, st *store.Store, ops []clientv3.Op) {
	b.Helper()
	const perTxn, writers = 120, 8
	batches := make(chan []clientv3.Op)
	var failed sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for batch := range batches {
				if _, err := st.Client().Txn(context.Background()).Then(batch...).Commit(); err != nil {
					failed.Do(func() { firstErr = fmt.Errorf("load rows: %w", err) })
				}
			}
		}()
	}
	for len(ops) > 0 {
		n := min(len(ops), perTxn)
		batches <- ops[:n]
		ops = ops[n:]
	}
	close(batches)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
