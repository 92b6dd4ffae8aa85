package billing_test

import (
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/billing/billingtest"
	"github.com/fluxvm/fluxvm/internal/benchstat"
)

var benchMonth, _ = billing.MonthOf("2026-10")

func specHistory() []billing.PriceVersion {
	var pv billing.PriceVersion
	pv.Prices = billing.Prices{
		Currency: "USD",
		MacClasses: []billing.MacClass{
			{Name: "Mac mini", MinVCPUs: 8, MinMemoryGiB: 16, PerHour: 850_000},
			{Name: "Mac Studio", MinVCPUs: 20, MinMemoryGiB: 64, PerHour: 1_950_000},
		},
		MacPerHour: 600_000, VMPerHour: 10_000, VCPUPerHour: 20_000, MemoryGiBPerHour: 4_000, MacOSVMPerHour: 100_000,
	}
	return []billing.PriceVersion{pv}
}

// The benchmarks compute the month under way (as of billingtest.AsOf), the
// costlier case: the forecast computes the month a second time. They have no
// baseline: each reports the time of one computation as the median of the
// computations timed one by one, with its p10–p90.

// reportMs reports the times kept in milliseconds as unit and logs them.
func reportMs(b *testing.B, took *benchstat.Samples, unit, what string) {
	b.Helper()
	s := took.Seconds().Scaled(1000)
	benchstat.Report(b, s, unit)
	b.Logf("%s, ms: %v", what, s)
}

func BenchmarkStatementOneTenant100k(b *testing.B) {
	vms, leases := billingtest.Ledger(1, 1, 100_000, benchMonth)
	h, now := specHistory(), billingtest.AsOf(benchMonth)
	b.ReportAllocs()
	took := benchstat.NewSamples()
	for b.Loop() {
		t0 := time.Now()
		st := billing.ComputeStatement("tenant-0000", benchMonth, h, vms, leases, now)
		took.Add(time.Since(t0))
		if len(st.Lines) == 0 || st.Forecast == nil {
			b.Fatal("empty statement")
		}
	}
	reportMs(b, took, "ms/statement", "one tenant's statement of 100,000 rows")
}

func BenchmarkStatementsAllTenants1000(b *testing.B) {
	vms, leases := billingtest.Ledger(1, 1000, 100, benchMonth)
	h, now := specHistory(), billingtest.AsOf(benchMonth)
	b.ReportAllocs()
	took := benchstat.NewSamples()
	for b.Loop() {
		t0 := time.Now()
		sts := billing.ComputeStatements(benchMonth, h, vms, leases, now)
		took.Add(time.Since(t0))
		if len(sts) != 1000 {
			b.Fatalf("%d statements; want 1000", len(sts))
		}
	}
	reportMs(b, took, "ms/1000-statements", "1,000 tenants' statements of 100 rows each, all at once")
}
