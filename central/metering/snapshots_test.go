package metering

import (
	"context"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// keepSnapshot records a snapshot of tenant's VM as central does (pending,
// then taken), of sizeGiB, taken at from and, with a non-zero to, deleted
// then.
func keepSnapshot(t *testing.T, st *store.Store, tenant, name string, sizeGiB int64, from, to time.Time, pending bool) {
	t.Helper()
	ctx := context.Background()
	rec := &store.Snapshot{FleetSnapshot: sdk.FleetSnapshot{Name: name, Node: "shared-1", VMID: "vm-" + name, VM: "build-1"},
		ID: store.NewSnapshotID(), Tenant: tenant, Pending: true, CreatedAt: from}
	if err := st.AddSnapshot(ctx, rec, 20); err != nil {
		t.Fatal(err)
	}
	if pending {
		return
	}
	rec.Pending, rec.TakenAt, rec.SizeGiB, rec.DeletedAt = false, from, sizeGiB, to
	if err := st.PutSnapshot(ctx, rec); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotStorageIsGiBHoursTimesThePriceExactly: with
// snapshot_gib_per_hour in the price list, a tenant's statement has one
// Snapshot storage line whose amount is the GiB-hours its snapshots were
// kept in the month times the price, to the millionth: a deleted one for
// the hours it was kept, one kept across the month's start for its hours
// in the month, one still kept up to the injected clock (and more as the
// clock moves), one whose VM vanished for as long as the VM ran; a pending one, the operator's and another month's count
// for nothing.
func TestSnapshotStorageIsGiBHoursTimesThePriceExactly(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	const price = 123 // 0.000123 per GiB-hour
	if _, err := st.PutPrices(ctx, billing.Prices{Currency: "USD", MacClasses: []billing.MacClass{}, SnapshotGiBPerHour: price},
		october.AddDate(0, -1, 0)); err != nil {
		t.Fatal(err)
	}
	acme := newTenant(t, st, "acme")
	day := func(d, h, m int) time.Time { return time.Date(2026, 10, d, h, m, 0, 0, time.UTC) }
	keepSnapshot(t, st, acme.ID, "deleted", 3, day(2, 10, 0), day(2, 20, 0), false)                   // 30 GiB-hours
	keepSnapshot(t, st, acme.ID, "across", 2, october.Add(-time.Hour), october.Add(time.Hour), false) // 2 in October
	keepSnapshot(t, st, acme.ID, "kept", 5, day(19, 22, 0), time.Time{}, false)                       // 10 up to the clock
	keepSnapshot(t, st, acme.ID, "pending", 7, day(19, 22, 0), time.Time{}, true)
	keepSnapshot(t, st, acme.ID, "september", 9, october.AddDate(0, -1, 0), october.Add(-2*time.Hour), false)
	keepSnapshot(t, st, "", "operators", 11, day(2, 0, 0), time.Time{}, false)
	runVM(t, st, acme.ID, "shared-1", "vm-vanished", 1, 64, day(5, 0, 0), day(5, 4, 0))
	keepSnapshot(t, st, acme.ID, "vanished", 1, day(5, 1, 0), time.Time{}, false) // 3, while its VM ran
	clk := &clock{t: day(20, 0, 0)}
	m := New(st, st, clk.now, hclog.NewNullLogger())

	checkStorageLine(t, m, clk, acme.ID, billing.KindSnapshot, "Snapshot storage", price, []gibHoursAt{{0, 30 + 2 + 10 + 3}, {36 * time.Minute, 30 + 2 + 10 + 3 + 3}})
}

// gibHoursAt is a storage line's expected GiB-hours once the clock has
// moved on by advance.
type gibHoursAt struct {
	advance  time.Duration
	gibHours int64
}

// checkStorageLine moves clk through steps and checks, at each, that the
// tenant's October statement has exactly one line of kind, described as
// desc and priced per GiB-hour at price, that it is the whole charge, and
// that its amount is the step's GiB-hours times the price to the millionth.
func checkStorageLine(t *testing.T, m *Service, clk *clock, tenant, kind, desc string, price int64, steps []gibHoursAt) {
	t.Helper()
	for _, step := range steps {
		clk.add(step.advance)
		got, err := m.Statements(context.Background(), StatementQuery{Tenant: tenant, Month: october})
		if err != nil {
			t.Fatal(err)
		}
		var found []billing.Line
		for _, l := range got.Statements[0].Lines {
			if l.Kind == kind {
				found = append(found, l)
			}
		}
		if len(found) != 1 || found[0].Description != desc || found[0].Unit != "GiB-hour" || found[0].UnitPrice != billing.Micros(price) {
			t.Fatalf("%s lines: %+v", desc, got.Statements[0].Lines)
		}
		l := found[0]
		if got.Statements[0].Total != l.Amount {
			t.Fatalf("total %d, the %s line %d: nothing else is charged", got.Statements[0].Total, desc, l.Amount)
		}
		if l.QuantitySeconds != step.gibHours*3600 || l.Amount != billing.Micros(step.gibHours*price) {
			t.Fatalf("at %s: %s GiB-hours (%d GiB-seconds) for %d, want %d GiB-hours for exactly %d", clk.now().Format(time.DateTime),
				l.Quantity, l.QuantitySeconds, l.Amount, step.gibHours, step.gibHours*price)
		}
	}
}
