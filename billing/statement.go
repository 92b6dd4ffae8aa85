package billing

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Line kinds.
const (
	KindLease   = "lease"
	KindVM      = "vm"
	KindVCPU    = "vcpu"
	KindMemory  = "memory"
	KindMacOSVM = "macos_vm"
	// KindSnapshot is snapshot storage: GiB-hours of snapshots' sizes.
	KindSnapshot = "snapshot"
	// KindVolume is volume storage: GiB-hours of volumes' sizes, attached or not.
	KindVolume = "volume"
)

// Line is one charge on a statement: a lease, or one kind of VM time at one
// price.
type Line struct {
	Kind        string `json:"kind"`
	Description string `json:"description"`
	// LeaseID and Node are set on lease lines.
	LeaseID string `json:"lease_id,omitempty"`
	Node    string `json:"node,omitempty"`
	// Quantity is in Unit (hours, vCPU-hours or GiB-hours) with six decimals,
	// rounded half-up for reading; Amount is computed from QuantitySeconds, the
	// exact integer it shows: seconds for lease, vm and macos_vm lines,
	// vCPU-seconds for vcpu lines, MiB-seconds for memory lines and
	// GiB-seconds for snapshot lines.
	Quantity        string `json:"quantity"`
	QuantitySeconds int64  `json:"quantity_seconds"`
	Unit            string `json:"unit"`
	UnitPrice       Micros `json:"unit_price"`
	// Amount is exact; AmountDisplay is in cents, allocated so that the lines'
	// cents add up to the statement's TotalDisplay (see Statement).
	Amount        Micros `json:"amount"`
	AmountDisplay string `json:"amount_display"`
	// From and To bound the time the line covers inside the month: the billed
	// part of a lease (which may run past AsOf to the minimum end), or for VM
	// time the span up to AsOf in which its unit price held.
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
}

// Statement is what one tenant owes for one calendar month (UTC).
type Statement struct {
	Tenant   string `json:"tenant"`
	Month    string `json:"month"` // "2026-10"
	Currency string `json:"currency"`
	// From and To are the month, [first day 00:00 UTC, first day of the next).
	From time.Time `json:"from"`
	To   time.Time `json:"to"`
	// AsOf is the instant the statement was computed for, at most To.
	AsOf  time.Time `json:"as_of"`
	Lines []Line    `json:"lines"`
	// Total is the exact sum of the lines' amounts. TotalDisplay is it rounded
	// half-up to cents; each line's AmountDisplay is its amount rounded down or
	// up to a cent, the cents going to the largest remainders, so the displayed
	// lines add up to the displayed total.
	Total        Micros `json:"total"`
	TotalDisplay string `json:"total_display"`
	// Forecast, for the month under way only, is the total if everything
	// running now runs to the month's end and every active lease is kept to
	// the month's end (or its EndsAt, if earlier).
	Forecast        *Micros `json:"forecast,omitempty"`
	ForecastDisplay string  `json:"forecast_display,omitempty"`
}

// MonthOf parses a month written "YYYY-MM" and returns its first instant in
// UTC.
func MonthOf(s string) (time.Time, error) {
	bad := func() (time.Time, error) {
		return time.Time{}, invalidf("month %q is not in the form YYYY-MM (e.g. 2026-10)", shorten(s))
	}
	if len(s) != 7 || s[4] != '-' || !allDigits(s[:4]) || !allDigits(s[5:]) {
		return bad()
	}
	year := int(s[0]-'0')*1000 + int(s[1]-'0')*100 + int(s[2]-'0')*10 + int(s[3]-'0')
	month := int(s[5]-'0')*10 + int(s[6]-'0')
	if year < 1 || month < 1 || month > 12 {
		return bad()
	}
	return time.Date(year, time.Month(month), 1, 0, 0, 0, 0, time.UTC), nil
}

// monthStart is the first instant (UTC) of the month that contains t.
func monthStart(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// rows are one tenant's ledger rows.
type rows struct {
	vms       []*VM
	leases    []*Lease
	snapshots []*Snapshot
	volumes   []*Volume
}

// ComputeStatement is tenant's statement for the month that contains month, as
// of now, from VMs and leases (ComputeStatementOf takes snapshots too).
func ComputeStatement(tenant string, month time.Time, prices []PriceVersion, vms []VM, leases []Lease, now time.Time) Statement {
	return ComputeStatementOf(tenant, month, prices, Rows{VMs: vms, Leases: leases}, now)
}

// ComputeStatementOf is tenant's statement for the month that contains month,
// as of now. Past months are final; the month under way also has a forecast;
// a month that has not begun has no lines.
func ComputeStatementOf(tenant string, month time.Time, prices []PriceVersion, in Rows, now time.Time) Statement {
	var r rows
	for i := range in.VMs {
		if in.VMs[i].Tenant == tenant {
			r.vms = append(r.vms, &in.VMs[i])
		}
	}
	for i := range in.Leases {
		if in.Leases[i].Tenant == tenant {
			r.leases = append(r.leases, &in.Leases[i])
		}
	}
	for i := range in.Snapshots {
		if in.Snapshots[i].Tenant == tenant {
			r.snapshots = append(r.snapshots, &in.Snapshots[i])
		}
	}
	for i := range in.Volumes {
		if in.Volumes[i].Tenant == tenant {
			r.volumes = append(r.volumes, &in.Volumes[i])
		}
	}
	st, _ := statement(tenant, monthStart(month), pricePeriods(prices), &r, now.Unix())
	return st
}

// ComputeStatements is ComputeStatementsOf from VMs and leases.
func ComputeStatements(month time.Time, prices []PriceVersion, vms []VM, leases []Lease, now time.Time) []Statement {
	return ComputeStatementsOf(month, prices, Rows{VMs: vms, Leases: leases}, now)
}

// ComputeStatementsOf is the statement of every tenant with a lease, VM or
// snapshot that counts in the month, sorted by tenant. The rows are grouped
// by tenant in one pass, so the cost grows with the rows, not rows × tenants.
func ComputeStatementsOf(month time.Time, prices []PriceVersion, in Rows, now time.Time) []Statement {
	vms, leases := in.VMs, in.Leases
	ms := monthStart(month)
	from, to, n := ms.Unix(), ms.AddDate(0, 1, 0).Unix(), now.Unix()
	// Rows outside the month are dropped before grouping. The horizon is the
	// month's end while it is under way, so rows that count only toward the
	// forecast are kept.
	horizon := n
	if n >= from && n < to {
		horizon = to
	}
	byTenant := make(map[string]*rows)
	group := func(tenant string) *rows {
		r := byTenant[tenant]
		if r == nil {
			r = &rows{}
			byTenant[tenant] = r
		}
		return r
	}
	for i := range vms {
		if s, e := vms[i].running(horizon); overlap(s, e, from, to) > 0 {
			r := group(vms[i].Tenant)
			r.vms = append(r.vms, &vms[i])
		}
	}
	// Dropping a lease that is not billed in the month loses no free VM time:
	// the time a lease is held lies inside the time it is billed.
	for i := range leases {
		if s, e := leases[i].billed(horizon); overlap(s, e, from, to) > 0 {
			r := group(leases[i].Tenant)
			r.leases = append(r.leases, &leases[i])
		}
	}
	for i := range in.Snapshots {
		if s, e := in.Snapshots[i].kept(horizon); overlap(s, e, from, to) > 0 {
			r := group(in.Snapshots[i].Tenant)
			r.snapshots = append(r.snapshots, &in.Snapshots[i])
		}
	}
	for i := range in.Volumes {
		if s, e := in.Volumes[i].kept(horizon); overlap(s, e, from, to) > 0 {
			r := group(in.Volumes[i].Tenant)
			r.volumes = append(r.volumes, &in.Volumes[i])
		}
	}
	ps := pricePeriods(prices)
	out := make([]Statement, 0, len(byTenant))
	for tenant, r := range byTenant {
		if st, counted := statement(tenant, ms, ps, r, n); counted {
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b Statement) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}

// statement computes one tenant's statement for the month starting at ms;
// counted reports whether any row counts toward it or its forecast.
func statement(tenant string, ms time.Time, ps []pricePeriod, r *rows, now int64) (st Statement, counted bool) {
	from, to := ms.Unix(), ms.AddDate(0, 1, 0).Unix()
	asOf := min(now, to)
	lines, counted := statementLines(r, from, to, ps, now)
	st = Statement{
		Tenant: tenant, Month: ms.Format("2006-01"),
		// A fleet keeps one currency; should it ever change, the statement uses
		// the one in effect at the end of the time it covers.
		Currency: ps[periodAt(ps, max(from, asOf-1))].prices.Currency,
		From:     timeOf(from), To: timeOf(to), AsOf: timeOf(asOf),
		Lines: lines,
	}
	st.Total = sumAmounts(lines)
	st.TotalDisplay = allocateCents(lines, st.Total)
	if now >= from && now < to {
		rest, countedLater := statementLines(r, from, to, ps, to)
		f := sumAmounts(rest)
		st.Forecast, st.ForecastDisplay = &f, f.Cents()
		counted = counted || countedLater
	}
	return st, counted
}

// maxSnapshotGiB bounds a snapshot row's size (central's store.MaxSnapshotGiB).
const maxSnapshotGiB = 1 << 20

// maxVolumeGiB bounds a volume row's size (sdk.MaxVolumeGiB, with room).
const maxVolumeGiB = 1 << 20

// span is a stretch [start, end) of Unix seconds.
type span struct{ start, end int64 }

// vmTotals is charged VM time, and snapshot storage, under one price period.
type vmTotals struct{ secs, vcpuSecs, mibSecs, macOSSecs, snapGiBSecs, volGiBSecs int64 }

const (
	secondsPerHour    = 3600
	mibSecondsPerGiBH = 1024 * secondsPerHour
)

// statementLines computes the lines of the month [from, to) as of now, sorted:
// leases by start then ID, then VM time by kind and price period. counted
// reports whether some row had time in the month, priced or not.
func statementLines(r *rows, from, to int64, ps []pricePeriod, now int64) (lines []Line, counted bool) {
	lines = []Line{}
	if now < from {
		return lines, false
	}
	end := min(now, to) // VM time is metered only up to now

	slices.SortFunc(r.leases, func(a, b *Lease) int {
		return cmp.Or(cmp.Compare(a.Start.Unix(), b.Start.Unix()), strings.Compare(a.ID, b.ID))
	})
	for _, l := range r.leases {
		start, stop := l.billed(now)
		secs := overlap(start, stop, from, to)
		if secs == 0 {
			continue
		}
		counted = true
		price := max(int64(l.PricePerHour), 0)
		// The amount is the lease's cost up to the month's end minus its cost
		// before the month, each rounded down, so the months of a lease add up
		// to exactly what the whole lease would cost at once.
		before := overlap(start, stop, math.MinInt64, from)
		amount := mulDiv(price, before+secs, secondsPerHour) - mulDiv(price, before, secondsPerHour)
		desc := "Lease of " + l.Node
		if l.Class != "" {
			desc += " (" + l.Class + ")"
		}
		lines = append(lines, Line{
			Kind: KindLease, Description: desc, LeaseID: l.ID, Node: l.Node,
			Quantity: decimal6(secs, secondsPerHour), QuantitySeconds: secs, Unit: "hour",
			UnitPrice: Micros(price), Amount: Micros(amount),
			From: timeOf(max(start, from)), To: timeOf(min(stop, to)),
		})
	}

	// The tenant's own leases make VM time on their Macs free while held.
	var free map[string][]span
	for _, l := range r.leases {
		if s, e := l.held(now); e > s {
			if free == nil {
				free = make(map[string][]span)
			}
			free[l.Node] = append(free[l.Node], span{s, e})
		}
	}
	for node, spans := range free {
		free[node] = merge(spans)
	}

	acc := make([]vmTotals, len(ps))
	for _, v := range r.vms {
		start, stop := v.running(now)
		a, b := max(start, from), min(stop, end)
		if b <= a {
			continue
		}
		counted = true
		// charge adds [x, y) to every price period it crosses, unless it is
		// free under that period's prices.
		charge := func(x, y int64, isFree bool) {
			for j := periodAt(ps, x); j < len(ps) && ps[j].from < y; j++ {
				if isFree && !ps[j].prices.ChargeVMsOnLeasedMacs {
					continue
				}
				secs := overlap(x, y, ps[j].from, ps[j].to)
				acc[j].secs += secs
				acc[j].vcpuSecs += secs * max(v.VCPUs, 0)
				acc[j].mibSecs += secs * max(v.MemoryMiB, 0)
				if v.MacOS {
					acc[j].macOSSecs += secs
				}
			}
		}
		spans := free[v.Node]
		cursor := a
		for i := sort.Search(len(spans), func(i int) bool { return spans[i].end > a }); i < len(spans) && spans[i].start < b; i++ {
			fs, fe := max(spans[i].start, a), min(spans[i].end, b)
			if fs > cursor {
				charge(cursor, fs, false)
			}
			charge(fs, fe, true)
			cursor = fe
		}
		if cursor < b {
			charge(cursor, b, false)
		}
	}

	// Snapshots are charged for the time they are kept, leases or not.
	for _, sn := range r.snapshots {
		start, stop := sn.kept(now)
		a, b := max(start, from), min(stop, end)
		if b <= a {
			continue
		}
		counted = true
		for j := periodAt(ps, a); j < len(ps) && ps[j].from < b; j++ {
			// Sizes are at most store.MaxSnapshotGiB (2^20) and a month under
			// 2^22 seconds: the product cannot overflow.
			acc[j].snapGiBSecs = satAdd(acc[j].snapGiBSecs, overlap(a, b, ps[j].from, ps[j].to)*min(max(sn.SizeGiB, 0), maxSnapshotGiB))
		}
	}

	// Volumes are charged for the time they exist, attached or not, at the
	// size of each stretch.
	for _, v := range r.volumes {
		start, stop := v.kept(now)
		a, b := max(start, from), min(stop, end)
		if b <= a {
			continue
		}
		counted = true
		for j := periodAt(ps, a); j < len(ps) && ps[j].from < b; j++ {
			acc[j].volGiBSecs = satAdd(acc[j].volGiBSecs, overlap(a, b, ps[j].from, ps[j].to)*min(max(v.SizeGiB, 0), maxVolumeGiB))
		}
	}

	kinds := []struct {
		kind, desc, unit string
		price            func(*Prices) Micros
		qty              func(*vmTotals) int64
		den              int64
	}{
		{KindVM, "VM time", "hour", func(p *Prices) Micros { return p.VMPerHour }, func(t *vmTotals) int64 { return t.secs }, secondsPerHour},
		{KindVCPU, "vCPU time", "vCPU-hour", func(p *Prices) Micros { return p.VCPUPerHour }, func(t *vmTotals) int64 { return t.vcpuSecs }, secondsPerHour},
		{KindMemory, "Memory", "GiB-hour", func(p *Prices) Micros { return p.MemoryGiBPerHour }, func(t *vmTotals) int64 { return t.mibSecs }, mibSecondsPerGiBH},
		{KindMacOSVM, "macOS guest time", "hour", func(p *Prices) Micros { return p.MacOSVMPerHour }, func(t *vmTotals) int64 { return t.macOSSecs }, secondsPerHour},
		{KindSnapshot, "Snapshot storage", "GiB-hour", func(p *Prices) Micros { return p.SnapshotGiBPerHour }, func(t *vmTotals) int64 { return t.snapGiBSecs }, secondsPerHour},
		{KindVolume, "Volume storage", "GiB-hour", func(p *Prices) Micros { return p.VolumeGiBPerHour }, func(t *vmTotals) int64 { return t.volGiBSecs }, secondsPerHour},
	}
	for _, k := range kinds {
		// Consecutive periods that charge the same for this kind make one line,
		// so a price change elsewhere in the list does not split it. A line
		// with nothing to pay (no time, or a zero price) is left out.
		for j := 0; j < len(ps); {
			price := max(k.price(ps[j].prices), 0)
			var qty int64
			first := j
			for ; j < len(ps) && max(k.price(ps[j].prices), 0) == price; j++ {
				qty += k.qty(&acc[j])
			}
			if qty == 0 || price == 0 {
				continue
			}
			lf, lt := max(ps[first].from, from), min(ps[j-1].to, end)
			desc := k.desc
			if lf != from || lt != end {
				desc += fmt.Sprintf(" (%s to %s UTC)", timeOf(lf).Format(time.DateTime), timeOf(lt).Format(time.DateTime))
			}
			lines = append(lines, Line{
				Kind: k.kind, Description: desc,
				Quantity: decimal6(qty, k.den), QuantitySeconds: qty, Unit: k.unit,
				UnitPrice: price, Amount: Micros(mulDiv(int64(price), qty, k.den)),
				From: timeOf(lf), To: timeOf(lt),
			})
		}
	}
	return lines, counted
}

// merge sorts spans and joins those that overlap or touch.
func merge(spans []span) []span {
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	out := spans[:1]
	for _, s := range spans[1:] {
		last := &out[len(out)-1]
		if s.start <= last.end {
			last.end = max(last.end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

func sumAmounts(lines []Line) Micros {
	var total int64
	for _, l := range lines {
		total = satAdd(total, int64(l.Amount))
	}
	return Micros(total)
}

// allocateCents sets each line's AmountDisplay and returns the total's. The
// total is rounded half-up to cents; each line gets its amount rounded down to
// a cent, and the cents still missing from the total go one each to the lines
// with the largest remainders (the earlier line on a tie). Lines therefore add
// up to the total on paper, and no line is off by a cent or more.
func allocateCents(lines []Line, total Micros) string {
	want := uint64(total) / microsPerCent
	if uint64(total)%microsPerCent >= microsPerCent/2 {
		want++
	}
	cents := make([]uint64, len(lines))
	var have uint64
	for i, l := range lines {
		cents[i] = uint64(l.Amount) / microsPerCent
		have += cents[i]
	}
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(lines[b].Amount%microsPerCent, lines[a].Amount%microsPerCent)
	})
	// The remainders are each under a cent, so at most one cent per line is
	// missing.
	for _, i := range order[:min(want-have, uint64(len(lines)))] {
		cents[i]++
	}
	for i := range lines {
		lines[i].AmountDisplay = formatCents(false, cents[i])
	}
	return formatCents(false, want)
}
