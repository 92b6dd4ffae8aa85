package metering

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/hashicorp/go-hclog"
)

// fullScan is the store as metering read it before the ledger had its month
// index: every entry scanned, the window's kept.
type fullScan struct{ *store.Store }

func (f fullScan) TenantEntriesIn(ctx context.Context, tenant string, from, to time.Time) ([]store.LedgerEntry, error) {
	return f.ListEntries(ctx, func(e *store.LedgerEntry) bool {
		return e.Tenant != "" && (tenant == "" || e.Tenant == tenant) && e.StartedAt.Before(to) && (e.Running() || e.EndedAt.After(from))
	})
}

// TestStatementsAndUsageThroughTheIndexEqualAFullScan writes random ledgers
// (four tenants and the operator, VMs across months and years, running ones,
// a retention drop) and asks a service reading through the month index and
// one scanning the whole ledger for the same statements (one tenant's and
// every tenant's, past months and the month under way) and usage windows:
// every answer is the same.
func TestStatementsAndUsageThroughTheIndexEqualAFullScan(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 10, 21, 0, 0, 0, 0, time.UTC)
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			st := storetest.Open(t)
			rng := rand.New(rand.NewPCG(seed, 0x6d6574))
			var p billing.Prices
			if err := json.Unmarshal([]byte(specPrices), &p); err != nil {
				t.Fatal(err)
			}
			if _, err := st.PutPrices(ctx, p, now.AddDate(-2, 0, 0)); err != nil {
				t.Fatal(err)
			}
			var tenants []string
			for i := range 4 {
				tenants = append(tenants, newTenant(t, st, fmt.Sprintf("t%d", i)).ID)
			}
			span := now.Sub(now.AddDate(-2, 0, 0))
			for i := range 120 {
				tenant := ""
				if rng.IntN(6) > 0 {
					tenant = tenants[rng.IntN(len(tenants))]
				}
				from := now.Add(-time.Duration(rng.Int64N(int64(span))))
				var to time.Time
				switch rng.IntN(6) {
				case 0: // still running
				case 1: // for a year or more
					to = from.AddDate(1, rng.IntN(12), 0)
				default:
					to = from.Add(time.Duration(rng.Int64N(int64(60 * 24 * time.Hour))))
				}
				if to.After(now) {
					to = time.Time{}
				}
				runVM(t, st, tenant, fmt.Sprintf("shared-%d", rng.IntN(3)), fmt.Sprintf("vm-%d", i), 1+rng.Int64N(8), 1024<<rng.IntN(4), from, to)
			}
			if _, err := st.DropEndedBefore(ctx, now.AddDate(-1, -rng.IntN(6), 0)); err != nil {
				t.Fatal(err)
			}
			clk := func() time.Time { return now }
			indexed := New(st, st, clk, hclog.NewNullLogger())
			scanned := New(fullScan{st}, st, clk, hclog.NewNullLogger())

			for back := range 26 {
				month := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC).AddDate(0, -back, 0)
				for _, tenant := range append([]string{""}, tenants...) {
					q := StatementQuery{Tenant: tenant, Month: month}
					got, err := indexed.Statements(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					want, err := scanned.Statements(ctx, q)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("statement of tenant %q for %s:\nthrough the index %+v\nby a full scan    %+v", tenant, month.Format("2006-01"), got, want)
					}
				}
			}
			for range 40 {
				from := now.Add(-time.Duration(rng.Int64N(int64(span))))
				to := from.Add(time.Duration(1 + rng.Int64N(int64(400*24*time.Hour))))
				for _, tenant := range append([]string{""}, tenants...) {
					got, err := indexed.Usage(ctx, tenant, from, to)
					if err != nil {
						t.Fatal(err)
					}
					want, err := scanned.Usage(ctx, tenant, from, to)
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("usage of tenant %q over [%s, %s):\nthrough the index %+v\nby a full scan    %+v", tenant, from, to, got, want)
					}
				}
			}
		})
	}
}
