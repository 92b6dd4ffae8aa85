// Package billingtest generates ledgers for billing's benchmarks, so central's
// benchmarks can store the very same rows and compare.
package billingtest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fluxvm/fluxvm/billing"
)

// AsOf is the instant a ledger from Ledger is current at: the 21st of the
// month, 00:00 UTC. Every row starts before it, and every row that ended did so
// before it.
func AsOf(month time.Time) time.Time {
	y, m, _ := month.UTC().Date()
	return time.Date(y, m, 21, 0, 0, 0, 0, time.UTC)
}

// macSizes are the Macs tenants lease: one that meets no class of the spec's
// example prices, a "Mac mini" and a "Mac Studio".
var macSizes = []struct {
	class string
	price billing.Micros
}{
	{"", 600_000}, {"Mac mini", 850_000}, {"Mac Studio", 1_950_000},
}

// sharedHosts is how many hosts run VMs outside leases.
const sharedHosts = 32

// Ledger returns rowsPerTenant rows for each of tenants tenants (named
// tenant-0000, tenant-0001, …), about 70% VMs and 30% leases, spread from ten
// days before month to AsOf(month): VMs on shared hosts and on their tenant's
// leased Macs, some still running; leases released after their minimum,
// released early (as a forced release is), expired at EndsAt, or still active.
// Each tenant leases its own Macs and a Mac's leases never overlap, so the rows
// are a valid ledger. The same seed gives the same rows.
func Ledger(seed int64, tenants, rowsPerTenant int, month time.Time) ([]billing.VM, []billing.Lease) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c656467))
	asOf := AsOf(month)
	windowStart := asOf.AddDate(0, 0, -30) // ten days before the month
	window := asOf.Sub(windowStart)
	// instant adds a random sub-second part, which billing must drop.
	instant := func(t time.Time) time.Time { return t.Add(time.Duration(rng.Int64N(int64(time.Second)))) }
	hours := func(lo, hi int64) time.Duration { return time.Duration(lo+rng.Int64N(hi-lo+1)) * time.Hour }

	vms := make([]billing.VM, 0, tenants*(rowsPerTenant-rowsPerTenant*3/10))
	leases := make([]billing.Lease, 0, tenants*rowsPerTenant*3/10)
	for t := range tenants {
		tenant := fmt.Sprintf("tenant-%04d", t)
		nLeases := rowsPerTenant * 3 / 10
		// Four leases per Mac, at most 144 hours apart each, fit the 30 days.
		macs := max(1, (nLeases+3)/4)
		cursor := make([]time.Time, macs)
		for m := range cursor {
			cursor[m] = windowStart.Add(hours(0, 48))
		}
		for i := range nLeases {
			m := i % macs
			size := macSizes[m%len(macSizes)]
			start := cursor[m]
			if !start.Before(asOf) {
				break
			}
			l := billing.Lease{
				ID: fmt.Sprintf("%s-lease-%d", tenant, i), Tenant: tenant, Node: fmt.Sprintf("%s-mac-%d", tenant, m),
				Class: size.class, PricePerHour: size.price,
				Start: instant(start), MinEnd: start.Add(24 * time.Hour),
			}
			var end time.Time
			switch rng.IntN(4) {
			case 0: // released after its minimum
				end = start.Add(hours(24, 96))
			case 1: // released early, by the tenant's choice or forced
				end = start.Add(hours(1, 23))
			case 2: // expired at the end agreed when it was taken
				l.EndsAt = start.Add(hours(24, 96))
				end = l.EndsAt
			default: // open-ended
				end = start.Add(hours(1, 96))
			}
			if end.Before(asOf) {
				l.ReleasedAt = instant(end)
			}
			leases = append(leases, l)
			cursor[m] = end.Add(hours(0, 48))
		}
		for i := range rowsPerTenant - nLeases {
			v := billing.VM{
				ID: fmt.Sprintf("%s-vm-%d", tenant, i), Tenant: tenant, Name: fmt.Sprintf("vm-%d", i),
				Image: "debian-13", VCPUs: 1 << rng.IntN(4), MemoryMiB: 1024 << rng.IntN(5),
			}
			if rng.IntN(10) < 6 {
				v.Node = fmt.Sprintf("shared-%02d", rng.IntN(sharedHosts))
			} else {
				v.Node = fmt.Sprintf("%s-mac-%d", tenant, rng.IntN(macs))
				if rng.IntN(2) == 0 {
					v.MacOS, v.Image = true, "macos-15"
				}
			}
			// Random nanoseconds give these instants sub-second parts already.
			v.Start = windowStart.Add(time.Duration(rng.Int64N(int64(window))))
			if end := v.Start.Add(time.Duration(rng.Int64N(int64(120 * time.Hour)))); end.Before(asOf) {
				v.End = end
			}
			vms = append(vms, v)
		}
	}
	return vms, leases
}
