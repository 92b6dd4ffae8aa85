package billing

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

var october = at("2026-10-01T00:00:00Z")

// since makes a one-version history in effect from the beginning.
func since(p Prices) []PriceVersion {
	return []PriceVersion{{EffectiveFrom: at("2026-01-01T00:00:00Z"), Prices: p}}
}

// lease24 is a lease of node by tenant with a 24-hour minimum.
func lease24(id, tenant, node string, price Micros, start time.Time) Lease {
	return Lease{ID: id, Tenant: tenant, Node: node, PricePerHour: price, Start: start, MinEnd: start.Add(24 * time.Hour)}
}

// kindSeconds maps each line kind to its QuantitySeconds (summed).
func kindSeconds(lines []Line) map[string]int64 {
	m := map[string]int64{}
	for _, l := range lines {
		m[l.Kind] += l.QuantitySeconds
	}
	return m
}

// TestWorkedExample is the example of docs/billing.md, with the spec's example
// prices. Tenant acme, October 2026, computed on 3 November (a closed month):
//
//   - Lease of mac-studio-1 (20 vCPUs, 64 GiB: class Mac Studio, 1.95/h) from
//     5 Oct 09:00 UTC, released after 30 h (past the 24 h minimum):
//     30 h × 1.95 = 58.50
//   - Linux VM build-1, 4 vCPUs, 8 GiB, on shared host shared-1, 12 Oct
//     08:00–18:00 (10 h):
//     VM time 10 h × 0.01 = 0.10
//     vCPU time 40 vCPU-h × 0.02 = 0.80
//     Memory 80 GiB-h × 0.004 = 0.32
//   - macOS VM xcode-1 (8 vCPUs, 16 GiB) on mac-studio-1, 5 Oct 10:00 to 6 Oct
//     14:00, inside the lease: free (28 h that would otherwise cost
//     28 × 0.334 = 9.352).
//
// Total 59.72, no forecast.
func TestWorkedExample(t *testing.T) {
	p := specPrices()
	price, class := p.LeasePrice(20, 64*1024)
	start := at("2026-10-05T09:00:00Z")
	leases := []Lease{{
		ID: "lease-1", Tenant: "acme", Node: "mac-studio-1", Class: class, PricePerHour: price,
		Start: start, MinEnd: start.Add(24 * time.Hour), ReleasedAt: start.Add(30 * time.Hour),
	}}
	vms := []VM{
		{ID: "vm-1", Tenant: "acme", Node: "shared-1", Name: "build-1", Image: "debian-13", VCPUs: 4, MemoryMiB: 8 * 1024,
			Start: at("2026-10-12T08:00:00Z"), End: at("2026-10-12T18:00:00Z")},
		{ID: "vm-2", Tenant: "acme", Node: "mac-studio-1", Name: "xcode-1", Image: "macos-15", VCPUs: 8, MemoryMiB: 16 * 1024, MacOS: true,
			Start: at("2026-10-05T10:00:00Z"), End: at("2026-10-06T14:00:00Z")},
	}
	st := ComputeStatement("acme", october, since(p), vms, leases, at("2026-11-03T10:00:00Z"))

	month, next := october, at("2026-11-01T00:00:00Z")
	want := Statement{
		Tenant: "acme", Month: "2026-10", Currency: "USD", From: month, To: next, AsOf: next,
		Lines: []Line{
			{Kind: "lease", Description: "Lease of mac-studio-1 (Mac Studio)", LeaseID: "lease-1", Node: "mac-studio-1",
				Quantity: "30.000000", QuantitySeconds: 30 * 3600, Unit: "hour", UnitPrice: 1_950_000,
				Amount: 58_500_000, AmountDisplay: "58.50", From: start, To: at("2026-10-06T15:00:00Z")},
			{Kind: "vm", Description: "VM time", Quantity: "10.000000", QuantitySeconds: 10 * 3600, Unit: "hour",
				UnitPrice: 10_000, Amount: 100_000, AmountDisplay: "0.10", From: month, To: next},
			{Kind: "vcpu", Description: "vCPU time", Quantity: "40.000000", QuantitySeconds: 40 * 3600, Unit: "vCPU-hour",
				UnitPrice: 20_000, Amount: 800_000, AmountDisplay: "0.80", From: month, To: next},
			{Kind: "memory", Description: "Memory", Quantity: "80.000000", QuantitySeconds: 8 * 1024 * 10 * 3600, Unit: "GiB-hour",
				UnitPrice: 4_000, Amount: 320_000, AmountDisplay: "0.32", From: month, To: next},
		},
		Total: 59_720_000, TotalDisplay: "59.72",
	}
	if !reflect.DeepEqual(st, want) {
		got, _ := json.MarshalIndent(st, "", "  ")
		exp, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("statement\n%s\nwant\n%s", got, exp)
	}
}

func TestLeaseReleasedEarlyIsBilledItsMinimum(t *testing.T) {
	start := at("2026-10-05T09:00:00Z")
	now := at("2026-10-05T13:00:00Z")
	for _, c := range []struct {
		name     string
		released time.Time
		now      time.Time
		want     int64 // billed seconds
	}{
		// The ledger has no notion of a forced release: an operator's forced
		// release after 3 hours is the same row as the tenant's.
		{"released after 3 hours", start.Add(3 * time.Hour), now, 24 * 3600},
		{"forced release after 3 hours, month closed", start.Add(3 * time.Hour), at("2026-11-02T00:00:00Z"), 24 * 3600},
		{"released after 30 hours", start.Add(30 * time.Hour), at("2026-10-07T00:00:00Z"), 30 * 3600},
		{"active for 4 hours owes the minimum already", time.Time{}, now, 24 * 3600},
		{"active for 2 days", time.Time{}, start.Add(48*time.Hour + 59*time.Minute), 48*3600 + 59*60},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := lease24("l", "acme", "mac-1", 850_000, start)
			l.ReleasedAt = c.released
			st := ComputeStatement("acme", october, since(specPrices()), nil, []Lease{l}, c.now)
			if len(st.Lines) != 1 || st.Lines[0].QuantitySeconds != c.want || st.Lines[0].Amount != Micros(mulDiv(850_000, c.want, 3600)) {
				t.Fatalf("lines %+v; want one lease line of %d s", st.Lines, c.want)
			}
		})
	}
	// Usage shows the real time next to the billable time.
	l := lease24("l", "acme", "mac-1", 850_000, start)
	l.ReleasedAt = start.Add(3 * time.Hour)
	u := ComputeUsage(nil, []Lease{l}, october, at("2026-11-01T00:00:00Z"), now)
	if len(u) != 1 || u[0].LeaseSeconds != 3*3600 || u[0].BillableLeaseSeconds != 24*3600 || u[0].LeasesStarted != 1 {
		t.Fatalf("usage %+v; want 3 h held, 24 h billable", u)
	}
}

func TestVMOnOwnLeaseIsFreeOnlyWhileTheLeaseIsHeld(t *testing.T) {
	start := at("2026-10-05T09:00:00Z")
	l := lease24("l", "acme", "mac-1", 850_000, start)
	l.ReleasedAt = start.Add(30 * time.Hour)
	// The VM starts 2 hours before the lease and ends 2 hours after it.
	vm := VM{ID: "v", Tenant: "acme", Node: "mac-1", VCPUs: 2, MemoryMiB: 4096,
		Start: start.Add(-2 * time.Hour), End: l.ReleasedAt.Add(2 * time.Hour)}
	now := at("2026-11-02T00:00:00Z")

	for _, c := range []struct {
		name   string
		charge bool
		lease  Lease
		want   int64
	}{
		{"free inside own lease", false, l, 4 * 3600},
		{"charge_vms_on_leased_macs charges it all", true, l, 34 * 3600},
		{"another tenant's lease frees nothing", false, func() Lease { o := l; o.Tenant = "other"; return o }(), 34 * 3600},
		{"own lease of another node frees nothing", false, func() Lease { o := l; o.Node = "mac-2"; return o }(), 34 * 3600},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := specPrices()
			p.ChargeVMsOnLeasedMacs = c.charge
			st := ComputeStatement("acme", october, since(p), []VM{vm}, []Lease{c.lease}, now)
			got := kindSeconds(st.Lines)
			if got["vm"] != c.want || got["vcpu"] != 2*c.want || got["memory"] != 4096*c.want || got["macos_vm"] != 0 {
				t.Fatalf("charged %v; want %d VM seconds", got, c.want)
			}
		})
	}
}

func TestVMFreeWhileLeaseHeldEvenIfBilledLonger(t *testing.T) {
	// Released after 3 h, billed 24 h: a VM running on after the release is
	// charged, because the Mac is no longer the tenant's.
	start := at("2026-10-05T09:00:00Z")
	l := lease24("l", "acme", "mac-1", 850_000, start)
	l.ReleasedAt = start.Add(3 * time.Hour)
	vm := VM{ID: "v", Tenant: "acme", Node: "mac-1", VCPUs: 1, MemoryMiB: 1024, Start: start, End: start.Add(5 * time.Hour)}
	st := ComputeStatement("acme", october, since(specPrices()), []VM{vm}, []Lease{l}, at("2026-11-02T00:00:00Z"))
	if got := kindSeconds(st.Lines); got["vm"] != 2*3600 || got["lease"] != 24*3600 {
		t.Fatalf("charged %v; want 2 h of VM time and 24 h of lease", got)
	}
}

func TestActiveLeaseIsNeverBilledPastEndsAt(t *testing.T) {
	start := at("2026-10-05T09:00:00Z")
	l := lease24("l", "acme", "mac-1", 1_950_000, start)
	l.EndsAt = start.Add(48 * time.Hour)
	vm := VM{ID: "v", Tenant: "acme", Node: "mac-1", VCPUs: 1, MemoryMiB: 1024, Start: start}
	// The reconciler has not ended the lease yet, three days after EndsAt.
	now := l.EndsAt.Add(72 * time.Hour)
	st := ComputeStatement("acme", october, since(specPrices()), []VM{vm}, []Lease{l}, now)
	got := kindSeconds(st.Lines)
	if got["lease"] != 48*3600 {
		t.Fatalf("lease billed %d s; want 48 h, its EndsAt", got["lease"])
	}
	// The VM left running on the Mac is charged from EndsAt on.
	if got["vm"] != 72*3600 {
		t.Fatalf("vm charged %d s; want the 72 h after EndsAt", got["vm"])
	}
	// The forecast does not extend the lease past EndsAt either.
	if st.Forecast == nil {
		t.Fatal("no forecast for the month under way")
	}
	rest := ComputeStatement("acme", october, since(specPrices()), []VM{vm}, []Lease{l}, at("2026-11-01T00:00:00Z"))
	if *st.Forecast != rest.Total || kindSeconds(rest.Lines)["lease"] != 48*3600 {
		t.Fatalf("forecast %s; want %s with the lease still at 48 h", st.Forecast, rest.Total)
	}
	u := ComputeUsage([]VM{vm}, []Lease{l}, october, at("2026-11-01T00:00:00Z"), now)
	if u[0].LeaseSeconds != 48*3600 || u[0].BillableLeaseSeconds != 48*3600 {
		t.Fatalf("usage %+v; want the lease held 48 h", u[0])
	}
}

func TestLeaseAcrossMonthBoundaryIsSplitExactly(t *testing.T) {
	// 0.85/h is 236 1/9 millionths a second. October gets 14387 s (5/9 of a
	// millionth over a whole number) and November 112442 s (5/9 again), so
	// rounding each month down on its own would lose a millionth.
	start := at("2026-10-31T20:00:13.5Z")
	l := lease24("l", "acme", "mac-1", 850_000, start)
	l.ReleasedAt = at("2026-11-02T07:14:02.9Z")
	now := at("2026-12-01T00:00:00Z")
	h := since(specPrices())
	oct := ComputeStatement("acme", october, h, nil, []Lease{l}, now)
	nov := ComputeStatement("acme", at("2026-11-01T00:00:00Z"), h, nil, []Lease{l}, now)
	if len(oct.Lines) != 1 || len(nov.Lines) != 1 {
		t.Fatalf("lines %+v / %+v; want one lease line in each month", oct.Lines, nov.Lines)
	}
	whole := l.ReleasedAt.Unix() - l.Start.Unix()
	o, n := oct.Lines[0], nov.Lines[0]
	if o.QuantitySeconds != 14387 || n.QuantitySeconds != 112442 || whole != 14387+112442 {
		t.Fatalf("seconds %d + %d of %d; want 14387 in October and 112442 in November", o.QuantitySeconds, n.QuantitySeconds, whole)
	}
	if o.Amount+n.Amount != Micros(mulDiv(850_000, whole, 3600)) {
		t.Fatalf("amounts %d + %d; want %d, the whole lease's", o.Amount, n.Amount, mulDiv(850_000, whole, 3600))
	}
	if !o.To.Equal(at("2026-11-01T00:00:00Z")) || !n.From.Equal(o.To) || !o.From.Equal(at("2026-10-31T20:00:13Z")) {
		t.Fatalf("line periods %v–%v and %v–%v", o.From, o.To, n.From, n.To)
	}
}

func TestForecastOnlyForTheMonthUnderWay(t *testing.T) {
	start := at("2026-10-05T09:00:00Z")
	l := lease24("l", "acme", "mac-1", 1_000_000, start)
	vm := VM{ID: "v", Tenant: "acme", Node: "shared-1", VCPUs: 1, MemoryMiB: 1024, Start: start}
	h := since(specPrices())
	now := at("2026-10-11T09:00:00Z") // both have run 6 days

	cur := ComputeStatement("acme", october, h, []VM{vm}, []Lease{l}, now)
	if cur.Forecast == nil || !cur.AsOf.Equal(now) {
		t.Fatalf("current month: forecast %v as of %v; want a forecast as of now", cur.Forecast, cur.AsOf)
	}
	// To the month's end the lease runs 26 days 15 hours at 1.00/h; the VM at
	// 0.01 + 0.02 + 0.004 = 0.034/h.
	hours := int64(26*24 + 15)
	if want := Micros(hours*1_000_000 + hours*34_000); *cur.Forecast != want || cur.ForecastDisplay != want.Cents() {
		t.Fatalf("forecast %s (%s); want %s", cur.Forecast, cur.ForecastDisplay, want)
	}
	if cur.Total != Micros(6*24*1_034_000) {
		t.Fatalf("month to date %s; want 6 days at 1.034/h", cur.Total)
	}

	past := ComputeStatement("acme", october, h, []VM{vm}, []Lease{l}, at("2026-11-05T00:00:00Z"))
	if past.Forecast != nil || past.ForecastDisplay != "" || !past.AsOf.Equal(at("2026-11-01T00:00:00Z")) {
		t.Fatalf("past month: forecast %v %q as of %v; want none, as of the month's end", past.Forecast, past.ForecastDisplay, past.AsOf)
	}
	if past.Total != *cur.Forecast {
		t.Fatalf("closed month %s differs from the forecast %s although nothing changed", past.Total, cur.Forecast)
	}

	future := ComputeStatement("acme", at("2026-11-01T00:00:00Z"), h, []VM{vm}, []Lease{l}, now)
	if future.Forecast != nil || len(future.Lines) != 0 || future.Total != 0 || future.Lines == nil {
		t.Fatalf("future month: %+v; want no lines (an empty list) and no forecast", future)
	}
	if sts := ComputeStatements(at("2026-11-01T00:00:00Z"), h, []VM{vm}, []Lease{l}, now); len(sts) != 0 {
		t.Fatalf("future month statements %+v; want none", sts)
	}
}

func TestPriceChangeSplitsOnlyTheKindsWhosePriceChanged(t *testing.T) {
	p1 := specPrices()
	p2 := specPrices()
	p2.VCPUPerHour = 30_000
	p2.MacPerHour = 700_000 // leases only: must not split VM lines
	change := at("2026-10-15T12:00:00Z")
	h := []PriceVersion{{EffectiveFrom: at("2026-01-01T00:00:00Z"), Prices: p1}, {EffectiveFrom: change, Prices: p2}}
	vm := VM{ID: "v", Tenant: "acme", Node: "shared-1", VCPUs: 2, MemoryMiB: 2048,
		Start: change.Add(-10 * time.Hour), End: change.Add(5 * time.Hour)}
	st := ComputeStatement("acme", october, h, []VM{vm}, nil, at("2026-11-01T00:00:00Z"))

	var got []string
	for _, l := range st.Lines {
		got = append(got, l.Kind+" "+l.UnitPrice.String()+" "+l.Quantity+" "+l.Description)
	}
	want := []string{
		"vm 0.01 15.000000 VM time",
		"vcpu 0.02 20.000000 vCPU time (2026-10-01 00:00:00 to 2026-10-15 12:00:00 UTC)",
		"vcpu 0.03 10.000000 vCPU time (2026-10-15 12:00:00 to 2026-11-01 00:00:00 UTC)",
		"memory 0.004 30.000000 Memory",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st.Total != 150_000+400_000+300_000+120_000 {
		t.Fatalf("total %s", st.Total)
	}
}

func TestLinesWithNothingToPayAreLeftOut(t *testing.T) {
	p := specPrices()
	p.VMPerHour, p.MacOSVMPerHour = 0, 0
	vm := VM{ID: "v", Tenant: "acme", Node: "shared-1", VCPUs: 2, MemoryMiB: 0, MacOS: true,
		Start: at("2026-10-02T00:00:00Z"), End: at("2026-10-02T01:00:00Z")}
	st := ComputeStatement("acme", october, since(p), []VM{vm}, nil, at("2026-11-01T00:00:00Z"))
	if got := kindSeconds(st.Lines); !reflect.DeepEqual(got, map[string]int64{"vcpu": 2 * 3600}) {
		t.Fatalf("lines %v; want only vCPU time (zero price or zero quantity elsewhere)", got)
	}
	// With the default prices a tenant still gets a statement, with nothing on it.
	sts := ComputeStatements(october, nil, []VM{vm}, nil, at("2026-11-01T00:00:00Z"))
	if len(sts) != 1 || len(sts[0].Lines) != 0 || sts[0].TotalDisplay != "0.00" || sts[0].Currency != "USD" {
		t.Fatalf("statements %+v; want one empty USD statement", sts)
	}
}

func TestDisplayedCentsAddUpToDisplayedTotal(t *testing.T) {
	// Three lines of half a cent each: rounded one by one they show 0.03, but
	// the total is 0.015, shown 0.02.
	lines := []Line{{Amount: 5_000}, {Amount: 5_000}, {Amount: 5_000}, {Amount: 12_340_000}}
	total := sumAmounts(lines)
	if got := allocateCents(lines, total); got != "12.36" {
		t.Fatalf("total %s; want 12.36", got)
	}
	var shown []string
	for _, l := range lines {
		shown = append(shown, l.AmountDisplay)
	}
	if want := []string{"0.01", "0.01", "0.00", "12.34"}; !reflect.DeepEqual(shown, want) {
		t.Fatalf("lines show %v; want %v (largest remainders, earlier first)", shown, want)
	}
	// Largest remainder wins over position.
	lines = []Line{{Amount: 4_000}, {Amount: 7_000}}
	allocateCents(lines, sumAmounts(lines))
	if lines[0].AmountDisplay != "0.00" || lines[1].AmountDisplay != "0.01" {
		t.Fatalf("lines show %s, %s; want 0.00, 0.01", lines[0].AmountDisplay, lines[1].AmountDisplay)
	}
}

func TestComputeStatementsCoversEveryTenantIncludingTheOperator(t *testing.T) {
	start := at("2026-10-05T09:00:00Z")
	vms := []VM{
		{ID: "a", Tenant: "zeta", Node: "shared-1", VCPUs: 1, MemoryMiB: 512, Start: start, End: start.Add(time.Hour)},
		{ID: "b", Tenant: "", Node: "shared-1", VCPUs: 1, MemoryMiB: 512, Start: start, End: start.Add(time.Hour)},
		{ID: "c", Tenant: "old", Node: "shared-1", VCPUs: 1, MemoryMiB: 512, Start: start.AddDate(0, -2, 0), End: start.AddDate(0, -2, 1)},
	}
	leases := []Lease{lease24("l", "acme", "mac-1", 850_000, start)}
	h := since(specPrices())
	now := at("2026-11-03T00:00:00Z")
	sts := ComputeStatements(october, h, vms, leases, now)
	var tenants []string
	for _, st := range sts {
		tenants = append(tenants, st.Tenant)
		if one := ComputeStatement(st.Tenant, october, h, vms, leases, now); !reflect.DeepEqual(one, st) {
			t.Errorf("tenant %q: ComputeStatements gave %+v, ComputeStatement %+v", st.Tenant, st, one)
		}
	}
	if want := []string{"", "acme", "zeta"}; !reflect.DeepEqual(tenants, want) {
		t.Fatalf("tenants %q; want %q (sorted, operator included, idle tenant left out)", tenants, want)
	}
}

func TestStatementMonthIsAnyInstantInIt(t *testing.T) {
	st := ComputeStatement("acme", at("2026-10-17T23:59:59+05:00"), nil, nil, nil, at("2026-12-01T00:00:00Z"))
	if st.Month != "2026-10" || !st.From.Equal(october) || !st.To.Equal(at("2026-11-01T00:00:00Z")) {
		t.Fatalf("month %s %v–%v; want October 2026 in UTC", st.Month, st.From, st.To)
	}
	b, _ := json.Marshal(st)
	if !strings.Contains(string(b), `"lines":[]`) || strings.Contains(string(b), "forecast") {
		t.Fatalf("JSON %s; want an empty list of lines and no forecast", b)
	}
}

func TestMonthOfIsStrict(t *testing.T) {
	if m, err := MonthOf("2026-09"); err != nil || !m.Equal(at("2026-09-01T00:00:00Z")) {
		t.Fatalf("MonthOf(2026-09) = %v, %v", m, err)
	}
	for _, s := range []string{"", "2026-9", "2026-13", "2026-00", "26-09", "2026/09", "2026-09-01", " 2026-09", "0000-01", "２０２６-09", "+026-09"} {
		if _, err := MonthOf(s); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "YYYY-MM") {
			t.Errorf("MonthOf(%q) = %v; want ErrInvalid naming YYYY-MM", s, err)
		}
	}
}
