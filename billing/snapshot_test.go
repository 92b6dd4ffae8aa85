package billing

import (
	"testing"
	"time"
)

// TestSnapshotStorageIsChargedByPricePeriodAndAlone: a tenant with nothing
// but snapshots gets a statement; its Snapshot storage line is GiB-hours ×
// price to the millionth in each price period (a price change splits it,
// with the periods named), a snapshot is charged on the tenant's own
// leased Mac too, and the forecast runs a kept snapshot to the month's end.
func TestSnapshotStorageIsChargedByPricePeriodAndAlone(t *testing.T) {
	oct := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	h := func(hours int) time.Time { return oct.Add(time.Duration(hours) * time.Hour) }
	prices := []PriceVersion{
		{EffectiveFrom: time.Unix(0, 0), Prices: Prices{Currency: "USD", SnapshotGiBPerHour: 100}},
		{EffectiveFrom: h(10), Prices: Prices{Currency: "USD", SnapshotGiBPerHour: 250}},
	}
	rows := Rows{
		Snapshots: []Snapshot{
			{ID: "s1", Tenant: "acme", Node: "mac-1", SizeGiB: 4, Start: h(4), End: h(14)}, // 6 h at 100, 4 h at 250
			{ID: "s2", Tenant: "acme", Node: "mac-1", SizeGiB: 1, Start: h(20)},            // kept: 4 h at 250 up to now
		},
		Leases: []Lease{{ID: "l1", Tenant: "acme", Node: "mac-1", Start: h(0), MinEnd: h(24)}}, // free of charge, but no cover for snapshots
	}
	now := h(24)
	sts := ComputeStatementsOf(oct, prices, rows, now)
	if len(sts) != 1 || sts[0].Tenant != "acme" {
		t.Fatalf("statements: %+v", sts)
	}
	var lines []Line
	for _, l := range sts[0].Lines {
		if l.Kind == KindSnapshot {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("snapshot lines: %+v", sts[0].Lines)
	}
	for i, want := range []struct {
		gibHours int64
		price    Micros
	}{{4 * 6, 100}, {4*4 + 1*4, 250}} {
		l := lines[i]
		if l.QuantitySeconds != want.gibHours*3600 || l.UnitPrice != want.price || l.Amount != Micros(want.gibHours)*want.price ||
			l.Unit != "GiB-hour" || l.Description[:16] != "Snapshot storage" {
			t.Errorf("line %d: %+v, want %d GiB-hours at %d", i, l, want.gibHours, want.price)
		}
	}
	// To the month's end the kept 1 GiB runs on at 250 for 31 days less 24 hours.
	if want := sts[0].Total + Micros((31*24-24)*250); sts[0].Forecast == nil || *sts[0].Forecast != want {
		t.Errorf("forecast %v, want %d", sts[0].Forecast, want)
	}
	if one := ComputeStatementOf("acme", oct, prices, rows, now); one.Total != sts[0].Total {
		t.Errorf("ComputeStatementOf totals %d, ComputeStatementsOf %d", one.Total, sts[0].Total)
	}
}
