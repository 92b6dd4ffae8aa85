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

// keepVolume records a volume of tenant as central does (pending, then
// made) of sizeGiB from from; grown to grownGiB at grownAt when grownAt is
// set; deleted at to when to is set.
func keepVolume(t *testing.T, st *store.Store, tenant, name string, sizeGiB int64, from time.Time, grownGiB int64, grownAt, to time.Time, pending bool) {
	t.Helper()
	ctx := context.Background()
	rec := &store.Volume{FleetVolume: sdk.FleetVolume{ID: store.NewVolumeID(), Name: name, Tenant: tenant, Node: "shared-1", SizeGiB: sizeGiB, CreatedAt: from},
		Pending: true, Sizes: []store.VolumeSize{{GiB: sizeGiB, From: from}}}
	if err := st.AddVolume(ctx, rec, 0); err != nil {
		t.Fatal(err)
	}
	if pending {
		return
	}
	rec.Pending = false
	if err := st.PutVolume(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if !grownAt.IsZero() {
		grown, err := st.GrowVolume(ctx, rec.ID, grownGiB, 0, grownAt)
		if err != nil {
			t.Fatal(err)
		}
		rec = grown
	}
	if !to.IsZero() {
		rec.DeletedAt = to
		if err := st.PutVolume(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVolumeStorageIsGiBHoursTimesThePriceExactly: with volume_gib_per_hour
// in the price list, a tenant's statement has one Volume storage line whose
// amount is the GiB-hours its volumes existed in the month (attached or
// not, at each size they had) times the price, to the millionth: a deleted
// one for its hours, one across the month's start for its hours in the
// month, one grown half-way at each size, one still kept up to the
// injected clock (and more as the clock moves); a pending one, the
// operator's and another month's count for nothing.
func TestVolumeStorageIsGiBHoursTimesThePriceExactly(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	const price = 137 // 0.000137 per GiB-hour
	if _, err := st.PutPrices(ctx, billing.Prices{Currency: "USD", MacClasses: []billing.MacClass{}, VolumeGiBPerHour: price},
		october.AddDate(0, -1, 0)); err != nil {
		t.Fatal(err)
	}
	acme := newTenant(t, st, "acme")
	day := func(d, h, m int) time.Time { return time.Date(2026, 10, d, h, m, 0, 0, time.UTC) }
	var none time.Time
	keepVolume(t, st, acme.ID, "deleted", 3, day(2, 10, 0), 0, none, day(2, 20, 0), false)                   // 30 GiB-hours
	keepVolume(t, st, acme.ID, "across", 2, october.Add(-time.Hour), 0, none, october.Add(time.Hour), false) // 2 in October
	keepVolume(t, st, acme.ID, "grown", 1, day(3, 0, 0), 4, day(3, 2, 0), day(3, 5, 0), false)               // 1*2 + 4*3 = 14
	keepVolume(t, st, acme.ID, "kept", 5, day(19, 22, 0), 0, none, none, false)                              // 10 up to the clock
	keepVolume(t, st, acme.ID, "pending", 7, day(19, 22, 0), 0, none, none, true)
	keepVolume(t, st, acme.ID, "september", 9, october.AddDate(0, -1, 0), 0, none, october.Add(-2*time.Hour), false)
	keepVolume(t, st, "", "operators", 11, day(2, 0, 0), 0, none, none, false)
	clk := &clock{t: day(20, 0, 0)}
	m := New(st, st, clk.now, hclog.NewNullLogger())

	checkStorageLine(t, m, clk, acme.ID, billing.KindVolume, "Volume storage", price, []gibHoursAt{{0, 30 + 2 + 14 + 10}, {36 * time.Minute, 30 + 2 + 14 + 10 + 3}})
}
