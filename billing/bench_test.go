package billing_test

import (
	"testing"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/billing/billingtest"
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
// costlier case: the forecast computes the month a second time.

func BenchmarkStatementOneTenant100k(b *testing.B) {
	vms, leases := billingtest.Ledger(1, 1, 100_000, benchMonth)
	h, now := specHistory(), billingtest.AsOf(benchMonth)
	b.ReportAllocs()
	for b.Loop() {
		st := billing.ComputeStatement("tenant-0000", benchMonth, h, vms, leases, now)
		if len(st.Lines) == 0 || st.Forecast == nil {
			b.Fatal("empty statement")
		}
	}
}

func BenchmarkStatementsAllTenants1000(b *testing.B) {
	vms, leases := billingtest.Ledger(1, 1000, 100, benchMonth)
	h, now := specHistory(), billingtest.AsOf(benchMonth)
	b.ReportAllocs()
	for b.Loop() {
		if sts := billing.ComputeStatements(benchMonth, h, vms, leases, now); len(sts) != 1000 {
			b.Fatalf("%d statements; want 1000", len(sts))
		}
	}
}
