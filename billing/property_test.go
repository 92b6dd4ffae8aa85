package billing

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The property tests run on small random worlds, denser than the benchmark
// ledger of package billingtest: few nodes and tenants, so VMs, leases, price
// changes and month boundaries keep running into each other, and rows that
// central would never write (two tenants leasing one Mac at once) to be sure
// the rules hold for them too.

const iterations = 2000

var (
	worldStart = at("2026-09-20T00:00:00Z")
	worldSpan  = int64(50 * 24 * 3600) // to 9 November
	tenants    = []string{"", "acme", "beta", "gamma"}
	nodes      = []string{"mac-1", "mac-2", "mac-3", "shared-1"}
)

type world struct {
	vms     []VM
	leases  []Lease
	history []PriceVersion
	now     time.Time
}

// randomWorld builds a world whose instants are whole multiples of quantum
// seconds (with a random sub-second part unless quantum > 1, so the brute-force
// reference below can step through it).
func randomWorld(rng *rand.Rand, quantum int64) world {
	instant := func(lo, hi int64) time.Time { // seconds from worldStart
		s := lo + rng.Int64N(hi-lo+1)
		s -= s % quantum
		t := worldStart.Add(time.Duration(s) * time.Second)
		if quantum == 1 {
			t = t.Add(time.Duration(rng.Int64N(int64(time.Second))))
		}
		return t
	}
	dur := func(maxHours int64) time.Duration {
		d := rng.Int64N(maxHours*3600) + quantum
		return time.Duration(d-d%quantum) * time.Second
	}
	offset := func(t time.Time) int64 { return int64(t.Sub(worldStart) / time.Second) }
	w := world{now: instant(8*24*3600, worldSpan)}
	nowOff := offset(w.now)

	for i := range rng.IntN(10) {
		start := instant(0, nowOff)
		l := Lease{ID: fmt.Sprintf("l%d", i), Tenant: tenants[rng.IntN(len(tenants))], Node: nodes[rng.IntN(3)],
			PricePerHour: Micros(rng.Int64N(3_000_000)), Start: start, MinEnd: start.Add(dur(48))}
		if rng.IntN(3) == 0 {
			l.EndsAt = l.MinEnd.Add(dur(96) - time.Duration(quantum)*time.Second)
		}
		if rng.IntN(3) > 0 { // released: early, forced, late, or at EndsAt
			end := start.Add(dur(120))
			if !l.EndsAt.IsZero() && end.After(l.EndsAt) {
				end = l.EndsAt
			}
			if end.Before(w.now) {
				l.ReleasedAt = end
			}
		}
		w.leases = append(w.leases, l)
	}
	for i := range rng.IntN(14) {
		v := VM{ID: fmt.Sprintf("v%d", i), Tenant: tenants[rng.IntN(len(tenants))], Node: nodes[rng.IntN(len(nodes))],
			VCPUs: 1 + rng.Int64N(16), MemoryMiB: 512 * (1 + rng.Int64N(64)), MacOS: rng.IntN(3) == 0,
			Start: instant(0, nowOff)}
		if end := v.Start.Add(dur(200)); rng.IntN(4) > 0 && end.Before(w.now) {
			v.End = end
		}
		w.vms = append(w.vms, v)
	}
	price := func() Micros {
		if rng.IntN(5) == 0 {
			return 0
		}
		return Micros(1 + rng.Int64N(2_000_000))
	}
	for i := range 1 + rng.IntN(4) {
		p := DefaultPrices()
		p.MacPerHour, p.VMPerHour, p.VCPUPerHour, p.MemoryGiBPerHour, p.MacOSVMPerHour = price(), price(), price(), price(), price()
		p.ChargeVMsOnLeasedMacs = rng.IntN(3) == 0
		eff := instant(0, worldSpan)
		if i == 0 {
			eff = worldStart.Add(-24 * time.Hour)
		}
		w.history = append(w.history, PriceVersion{EffectiveFrom: eff, Prices: p})
	}
	return w
}

var months = []time.Time{at("2026-09-01T00:00:00Z"), october, at("2026-11-01T00:00:00Z")}

// cents parses a display amount such as "12.30" into cents.
func cents(t *testing.T, s string) int64 {
	t.Helper()
	whole, frac, ok := strings.Cut(s, ".")
	w, err1 := strconv.ParseInt(whole, 10, 64)
	f, err2 := strconv.ParseInt(frac, 10, 64)
	if !ok || len(frac) != 2 || err1 != nil || err2 != nil {
		t.Fatalf("display amount %q is not units and two decimals", s)
	}
	return w*100 + f
}

func TestPropertyLinesAddUpToTotalExactlyAndOnPaper(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range iterations {
		w := randomWorld(rng, 1)
		for _, m := range months {
			for _, st := range ComputeStatements(m, w.history, w.vms, w.leases, w.now) {
				var sum Micros
				var shown int64
				for _, l := range st.Lines {
					sum += l.Amount
					shown += cents(t, l.AmountDisplay)
					if d := cents(t, l.AmountDisplay)*microsPerCent - int64(l.Amount); d <= -microsPerCent || d >= microsPerCent {
						t.Fatalf("world %d: line %+v shows %s, a cent or more off its amount", i, l, l.AmountDisplay)
					}
				}
				if sum != st.Total || st.TotalDisplay != st.Total.Cents() {
					t.Fatalf("world %d, %s, tenant %q: lines sum to %s, total %s shown %s", i, st.Month, st.Tenant, sum, st.Total, st.TotalDisplay)
				}
				if shown != cents(t, st.TotalDisplay) {
					t.Fatalf("world %d, %s, tenant %q: displayed lines add up to %d cents, total shows %s", i, st.Month, st.Tenant, shown, st.TotalDisplay)
				}
				if st.Forecast != nil && *st.Forecast < st.Total {
					t.Fatalf("world %d, %s, tenant %q: forecast %s below the month to date %s", i, st.Month, st.Tenant, st.Forecast, st.Total)
				}
			}
		}
	}
}

func TestPropertyUsageOverAWindowIsTheSumOverAnySplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	randomInstant := func() time.Time {
		return worldStart.Add(time.Duration(rng.Int64N(worldSpan * int64(time.Second))))
	}
	add := func(sum map[string]Usage, us []Usage) {
		for _, u := range us {
			s := sum[u.Tenant]
			s.Tenant = u.Tenant
			s.VMSeconds += u.VMSeconds
			s.VCPUSeconds += u.VCPUSeconds
			s.MemoryMiBSeconds += u.MemoryMiBSeconds
			s.MacOSVMSeconds += u.MacOSVMSeconds
			s.LeaseSeconds += u.LeaseSeconds
			s.BillableLeaseSeconds += u.BillableLeaseSeconds
			s.VMsStarted += u.VMsStarted
			s.LeasesStarted += u.LeasesStarted
			sum[u.Tenant] = s
		}
	}
	for i := range iterations {
		w := randomWorld(rng, 1)
		a, c := randomInstant(), randomInstant()
		if c.Before(a) {
			a, c = c, a
		}
		// Split points anywhere in between, sub-second parts included, and
		// half of them in the very second a row starts or ends.
		var edges []time.Time
		for _, v := range w.vms {
			edges = append(edges, v.Start, v.End)
		}
		for _, l := range w.leases {
			edges = append(edges, l.Start, l.MinEnd, l.EndsAt, l.ReleasedAt)
		}
		cuts := []time.Time{a}
		for range rng.IntN(6) {
			cut := a.Add(time.Duration(rng.Int64N(int64(c.Sub(a)) + 1)))
			if len(edges) > 0 && rng.IntN(2) == 0 {
				if e := edges[rng.IntN(len(edges))]; !e.IsZero() {
					cut = e.Truncate(time.Second).Add(time.Duration(rng.Int64N(int64(time.Second))))
				}
				if cut.Before(a) || cut.After(c) {
					cut = a
				}
			}
			cuts = append(cuts, cut)
		}
		cuts = append(cuts, c)
		for j := 1; j < len(cuts); j++ {
			if cuts[j].Before(cuts[j-1]) {
				cuts[j], cuts[j-1] = cuts[j-1], cuts[j]
				j = 0
			}
		}
		whole, parts := map[string]Usage{}, map[string]Usage{}
		add(whole, ComputeUsage(w.vms, w.leases, a, c, w.now))
		for j := 1; j < len(cuts); j++ {
			add(parts, ComputeUsage(w.vms, w.leases, cuts[j-1], cuts[j], w.now))
		}
		if !reflect.DeepEqual(whole, parts) {
			t.Fatalf("world %d: usage over [%v, %v)\n%+v\nsplit at %v\n%+v", i, a, c, whole, cuts, parts)
		}
	}
}

func TestPropertyPriceChangeNeverTouchesALeaseLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range iterations {
		w := randomWorld(rng, 1)
		m := months[rng.IntN(len(months))]
		change := m.Add(time.Duration(rng.Int64N(int64(30 * 24 * time.Hour))))
		p := DefaultPrices()
		p.MacPerHour, p.VMPerHour, p.VCPUPerHour = Micros(rng.Int64N(5_000_000)), 1, 1
		p.MacClasses = []MacClass{{Name: "any", PerHour: Micros(rng.Int64N(5_000_000))}}
		p.ChargeVMsOnLeasedMacs = rng.IntN(2) == 0
		changed := append(w.history[:len(w.history):len(w.history)], PriceVersion{EffectiveFrom: change, Prices: p})

		leaseAmounts := func(h []PriceVersion) map[string]Micros {
			out := map[string]Micros{}
			for _, st := range ComputeStatements(m, h, w.vms, w.leases, w.now) {
				for _, l := range st.Lines {
					if l.Kind == KindLease {
						out[l.LeaseID] = l.Amount
					}
				}
			}
			return out
		}
		before, after := leaseAmounts(w.history), leaseAmounts(changed)
		for _, l := range w.leases {
			if l.Start.Before(change) && before[l.ID] != after[l.ID] {
				t.Fatalf("world %d: lease %s (from %v) cost %s, then %s after a price change at %v", i, l.ID, l.Start, before[l.ID], after[l.ID], change)
			}
		}
	}
}

func TestPropertyComputeStatementsAgreesWithComputeStatement(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range iterations / 4 {
		w := randomWorld(rng, 1)
		m := months[rng.IntN(len(months))]
		got := map[string]Statement{}
		for _, st := range ComputeStatements(m, w.history, w.vms, w.leases, w.now) {
			got[st.Tenant] = st
		}
		for _, tenant := range tenants {
			one := ComputeStatement(tenant, m, w.history, w.vms, w.leases, w.now)
			st, listed := got[tenant]
			if listed && !reflect.DeepEqual(st, one) {
				t.Fatalf("world %d, tenant %q: ComputeStatements %+v\nComputeStatement %+v", i, tenant, st, one)
			}
			if !listed && (len(one.Lines) > 0 || (one.Forecast != nil && *one.Forecast != 0)) {
				t.Fatalf("world %d: tenant %q left out but owes %+v", i, tenant, one)
			}
		}
	}
}

// TestPropertyChargesMatchAQuarterHourCount checks statements against the
// rules written a second time, as plainly as possible: on a world where every
// instant is a multiple of 15 minutes, walk the month quarter by quarter and
// charge what runs in each.
func TestPropertyChargesMatchAQuarterHourCount(t *testing.T) {
	const q = 900
	rng := rand.New(rand.NewPCG(9, 10))
	for i := range iterations / 10 {
		w := randomWorld(rng, q)
		m := months[rng.IntN(len(months))]
		from, to, now := m.Unix(), m.AddDate(0, 1, 0).Unix(), w.now.Unix()
		type key struct {
			tenant, kind string
			price        Micros
		}
		want := map[key]int64{}
		leaseSecs := map[string]int64{}
		for x := from; x < to; x += q {
			p := PricesAt(w.history, time.Unix(x, 0))
			for _, l := range w.leases {
				billedTo := now
				if l.MinEnd.Unix() > billedTo {
					billedTo = l.MinEnd.Unix()
				}
				if !l.ReleasedAt.IsZero() {
					billedTo = max(l.ReleasedAt.Unix(), l.MinEnd.Unix())
				} else if !l.EndsAt.IsZero() && l.EndsAt.Unix() < billedTo {
					billedTo = l.EndsAt.Unix()
				}
				if l.Start.Unix() <= x && x < billedTo && now >= from {
					leaseSecs[l.ID] += q
				}
			}
			if x >= now {
				continue // VM time is counted up to now
			}
			for _, v := range w.vms {
				if v.Start.Unix() > x || (!v.End.IsZero() && v.End.Unix() <= x) {
					continue
				}
				free := false
				for _, l := range w.leases {
					heldTo := now
					if !l.ReleasedAt.IsZero() {
						heldTo = l.ReleasedAt.Unix()
					} else if !l.EndsAt.IsZero() && l.EndsAt.Unix() < now {
						heldTo = l.EndsAt.Unix()
					}
					if l.Tenant == v.Tenant && l.Node == v.Node && l.Start.Unix() <= x && x < heldTo {
						free = true
					}
				}
				if free && !p.ChargeVMsOnLeasedMacs {
					continue
				}
				want[key{v.Tenant, KindVM, p.VMPerHour}] += q
				want[key{v.Tenant, KindVCPU, p.VCPUPerHour}] += q * v.VCPUs
				want[key{v.Tenant, KindMemory, p.MemoryGiBPerHour}] += q * v.MemoryMiB
				if v.MacOS {
					want[key{v.Tenant, KindMacOSVM, p.MacOSVMPerHour}] += q
				}
			}
		}
		for k := range want {
			if k.price == 0 { // lines with nothing to pay are left out
				delete(want, k)
			}
		}
		got := map[key]int64{}
		gotLeases := map[string]int64{}
		for _, st := range ComputeStatements(m, w.history, w.vms, w.leases, w.now) {
			for _, l := range st.Lines {
				if l.Kind == KindLease {
					gotLeases[l.LeaseID] += l.QuantitySeconds
				} else {
					got[key{st.Tenant, l.Kind, l.UnitPrice}] += l.QuantitySeconds
				}
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("world %d, %s as of %v: VM charges\n%v\nwant\n%v", i, m.Format("2006-01"), w.now, got, want)
		}
		if !reflect.DeepEqual(gotLeases, leaseSecs) {
			t.Fatalf("world %d, %s as of %v: lease seconds\n%v\nwant\n%v", i, m.Format("2006-01"), w.now, gotLeases, leaseSecs)
		}
	}
}
