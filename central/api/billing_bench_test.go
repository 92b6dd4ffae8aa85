package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/billing/billingtest"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkBillingStatements measures GET /fleet/billing through the real
// HTTP API on rows stored in etcd (docs/benchmarks.md, "Billing"), next to
// the time it takes to read the same rows from etcd in the same run (the
// store's ListEntries and ListLeases, which the route calls): the ratio is
// what computing and encoding the statements adds to the read. The rows come
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
			if tc.tenantRef != "" {
				// The route finds the tenant by name; its rows carry its id.
				id, _ := fxTenant(b, c.url, tc.tenantRef, nil)
				for i := range vms {
					vms[i].Tenant = id
				}
				for i := range leases {
					leases[i].Tenant = id
				}
			}
			bbLoad(b, st, vms, leases)
			ctx := context.Background()
			read := func() {
				es, err := st.ListEntries(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				ls, err := st.ListLeases(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if len(es) != len(vms) || len(ls) != len(leases) {
					b.Fatalf("read %d entries and %d leases, stored %d and %d", len(es), len(ls), len(vms), len(leases))
				}
			}
			statement := func() {
				req, _ := http.NewRequest("GET", c.url+tc.path, nil)
				req.Header.Set("Authorization", "Bearer "+fxToken)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || len(data) < 100 {
					b.Fatalf("%s: %d %.200s", tc.path, resp.StatusCode, data)
				}
			}
			read()
			statement() // warm both up
			var reading, stating time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				t0 := time.Now()
				read()
				reading += time.Since(t0)
				b.StartTimer()
				t0 = time.Now()
				statement()
				stating += time.Since(t0)
			}
			b.StopTimer()
			b.ReportMetric(float64(stating.Milliseconds())/float64(b.N), "ms/statement")
			b.ReportMetric(float64(reading.Milliseconds())/float64(b.N), "ms/etcd-read")
			b.ReportMetric(stating.Seconds()/reading.Seconds(), "statement/read")
			b.ReportMetric(float64(len(vms)+len(leases)), "rows")
		})
	}
}

// bbLoad writes rows straight into the store's ledger and lease keys, in
// transactions of 100 puts.
func bbLoad(b *testing.B, st *store.Store, vms []billing.VM, leases []billing.Lease) {
	b.Helper()
	var ops []clientv3.Op
	put := func(key string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, clientv3.OpPut(st.Prefix()+key, string(data)))
		if len(ops) == 100 {
			bbFlush(b, st, ops)
			ops = ops[:0]
		}
	}
	for _, v := range vms {
		guest := "linux"
		if v.MacOS {
			guest = "macos"
		}
		put("ledger/"+v.ID, store.LedgerEntry{ID: v.ID, Tenant: v.Tenant, Node: v.Node, VMID: v.ID, Name: v.Name, VCPUs: v.VCPUs,
			MemoryMiB: v.MemoryMiB, GuestOS: guest, Image: v.Image, StartedAt: v.Start, EndedAt: v.End})
	}
	for _, l := range leases {
		put("leases/"+l.ID, store.Lease{Lease: sdk.Lease{ID: l.ID, Tenant: l.Tenant, Node: l.Node, StartedAt: l.Start, EndsAt: l.EndsAt,
			MinEnd: l.MinEnd, PricePerHour: l.PricePerHour, PriceClass: l.Class, Currency: "USD", ReleasedAt: l.ReleasedAt}})
	}
	bbFlush(b, st, ops)
}

func bbFlush(b *testing.B, st *store.Store, ops []clientv3.Op) {
	b.Helper()
	if len(ops) == 0 {
		return
	}
	if _, err := st.Client().Txn(context.Background()).Then(ops...).Commit(); err != nil {
		b.Fatal(fmt.Errorf("load rows: %w", err))
	}
}
