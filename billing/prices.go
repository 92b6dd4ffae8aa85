package billing

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// MacClass prices the lease of a Mac that has at least MinVCPUs and
// MinMemoryGiB.
type MacClass struct {
	Name         string `json:"name"`
	MinVCPUs     int64  `json:"min_vcpus"`
	MinMemoryGiB int64  `json:"min_memory_gib"`
	PerHour      Micros `json:"per_hour"`
}

// Prices is the operator's price list. Every rate is per hour; usage is metered
// to the second and charged pro rata.
type Prices struct {
	// Currency is an ISO 4217 code such as "USD"; amounts are in its units.
	Currency string `json:"currency"`
	// MacClasses price leases by the size of the Mac (see LeasePrice);
	// MacPerHour prices a lease of a Mac that meets no class.
	MacClasses []MacClass `json:"mac_classes"`
	MacPerHour Micros     `json:"mac_per_hour"`
	// VM time on hosts the VM's tenant does not lease: a flat rate per VM, one
	// per vCPU, one per GiB of memory, and a surcharge for macOS guests.
	VMPerHour        Micros `json:"vm_per_hour"`
	VCPUPerHour      Micros `json:"vcpu_per_hour"`
	MemoryGiBPerHour Micros `json:"memory_gib_per_hour"`
	MacOSVMPerHour   Micros `json:"macos_vm_per_hour"`
	// SnapshotGiBPerHour charges each GiB of a snapshot's size for as long
	// as it is kept, on leased Macs too (a "Snapshot storage" line).
	// VolumeGiBPerHour charges each GiB of a volume for as long as it exists,
	// attached or not, at its size of the moment (a "Volume storage" line).
	SnapshotGiBPerHour Micros `json:"snapshot_gib_per_hour"`
	VolumeGiBPerHour   Micros `json:"volume_gib_per_hour"`
	// ChargeVMsOnLeasedMacs charges VM time on a Mac its tenant leases too; by
	// default the lease covers it.
	ChargeVMsOnLeasedMacs bool `json:"charge_vms_on_leased_macs"`
	// Note is the operator's word on the list, shown with it (for example
	// that it is a sample); at most MaxNoteLength characters, one line.
	Note string `json:"note,omitempty"`
}

// MaxNoteLength bounds Prices.Note.
const MaxNoteLength = 200

// DefaultPrices is the price list of a fleet whose operator has set none: US
// dollars and every rate zero, so metering runs from the first day but nothing
// is charged until the operator publishes prices.
func DefaultPrices() Prices {
	return Prices{Currency: "USD", MacClasses: []MacClass{}}
}

// maxClassName bounds a class name, which appears in lease descriptions.
const maxClassName = 64

// Validate reports every problem with the price list in one error that wraps
// ErrInvalid and names the fields.
func (p *Prices) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if len(p.Currency) != 3 || strings.IndexFunc(p.Currency, func(r rune) bool { return r < 'A' || r > 'Z' }) >= 0 {
		bad("currency %q is not three uppercase letters (an ISO 4217 code such as USD or EUR)", p.Currency)
	}
	seen := make(map[string]bool, len(p.MacClasses))
	for i, c := range p.MacClasses {
		field := fmt.Sprintf("mac_classes[%d]", i)
		switch n := utf8.RuneCountInString(c.Name); {
		case c.Name == "":
			bad("%s.name is empty", field)
		case n > maxClassName:
			bad("%s.name is %d characters; at most %d are allowed", field, n, maxClassName)
		case !utf8.ValidString(c.Name) || strings.IndexFunc(c.Name, unicode.IsControl) >= 0:
			// Names end up in statements and CSV files.
			bad("%s.name %q has a control character or invalid UTF-8", field, c.Name)
		case seen[c.Name]:
			bad("%s.name %q appears twice", field, c.Name)
		}
		seen[c.Name] = true
		if c.MinVCPUs < 0 {
			bad("%s.min_vcpus is %d; it must be 0 or more", field, c.MinVCPUs)
		}
		if c.MinMemoryGiB < 0 {
			bad("%s.min_memory_gib is %d; it must be 0 or more", field, c.MinMemoryGiB)
		}
		if c.PerHour < 0 {
			bad("%s.per_hour is %s; it must be 0 or more", field, c.PerHour)
		}
	}
	for _, f := range []struct {
		name string
		v    Micros
	}{
		{"mac_per_hour", p.MacPerHour}, {"vm_per_hour", p.VMPerHour}, {"vcpu_per_hour", p.VCPUPerHour},
		{"memory_gib_per_hour", p.MemoryGiBPerHour}, {"macos_vm_per_hour", p.MacOSVMPerHour},
		{"snapshot_gib_per_hour", p.SnapshotGiBPerHour}, {"volume_gib_per_hour", p.VolumeGiBPerHour},
	} {
		// JSON input cannot be negative, but a price list built in Go can.
		if f.v < 0 {
			bad("%s is %s; it must be 0 or more", f.name, f.v)
		}
	}
	switch n := utf8.RuneCountInString(p.Note); {
	case n > MaxNoteLength:
		bad("note is %d characters; at most %d are allowed", n, MaxNoteLength)
	case !utf8.ValidString(p.Note) || strings.IndexFunc(p.Note, unicode.IsControl) >= 0:
		bad("note has a control character or invalid UTF-8; it is one line of text")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w price list: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// LeasePrice is the hourly price of leasing a Mac with vcpus and memoryMiB, and
// the name of the class that sets it: the largest class the Mac meets, largest
// meaning the greatest MinVCPUs and then the greatest MinMemoryGiB (the first
// listed wins a tie). A Mac that meets no class costs MacPerHour and class "".
func (p *Prices) LeasePrice(vcpus, memoryMiB int64) (perHour Micros, class string) {
	// Comparing whole GiB (memoryMiB/1024 >= min) instead of memoryMiB >=
	// min*1024 gives the same answer for non-negative sizes and cannot overflow.
	memGiB := max(memoryMiB, 0) / 1024
	best := -1
	for i, c := range p.MacClasses {
		if vcpus < c.MinVCPUs || memGiB < c.MinMemoryGiB {
			continue
		}
		if best < 0 || c.MinVCPUs > p.MacClasses[best].MinVCPUs ||
			(c.MinVCPUs == p.MacClasses[best].MinVCPUs && c.MinMemoryGiB > p.MacClasses[best].MinMemoryGiB) {
			best = i
		}
	}
	if best < 0 {
		return p.MacPerHour, ""
	}
	return p.MacClasses[best].PerHour, p.MacClasses[best].Name
}

// PriceVersion is a price list and the instant it took effect. A price history
// is a []PriceVersion in order of EffectiveFrom; the version in effect at an
// instant is the last one that took effect at or before it. The first version
// counts as in effect since the beginning of time, so no row falls outside
// every version: central's history starts with DefaultPrices at the Unix epoch
// (stored with the first list the operator publishes), so that list does not
// price what ran before it. An empty history means DefaultPrices throughout.
type PriceVersion struct {
	EffectiveFrom time.Time `json:"effective_from"`
	Prices
}

// PricesAt is the price list in effect at t.
func PricesAt(history []PriceVersion, t time.Time) Prices {
	ps := pricePeriods(history)
	return *ps[periodAt(ps, t.Unix())].prices
}

// pricePeriod is the span [from, to) of Unix seconds in which one price version
// is in effect.
type pricePeriod struct {
	from, to int64
	prices   *Prices
}

// pricePeriods turns a history into back-to-back periods covering all time. The
// history is sorted (stably, on a copy) in case the caller's is not; of two
// versions that take effect in the same second the later one listed wins.
func pricePeriods(history []PriceVersion) []pricePeriod {
	if len(history) == 0 {
		def := DefaultPrices()
		return []pricePeriod{{from: math.MinInt64, to: math.MaxInt64, prices: &def}}
	}
	h := slices.Clone(history)
	slices.SortStableFunc(h, func(a, b PriceVersion) int { return a.EffectiveFrom.Compare(b.EffectiveFrom) })
	ps := make([]pricePeriod, len(h))
	for i := range h {
		ps[i] = pricePeriod{from: math.MinInt64, to: math.MaxInt64, prices: &h[i].Prices}
		if i > 0 {
			ps[i].from = h[i].EffectiveFrom.Unix()
			ps[i-1].to = ps[i].from
		}
	}
	return ps
}

// periodAt is the index of the period containing the second t.
func periodAt(ps []pricePeriod, t int64) int {
	i, _ := slices.BinarySearchFunc(ps, t, func(p pricePeriod, t int64) int {
		if p.to <= t {
			return -1
		}
		return 1
	})
	return min(i, len(ps)-1)
}

// Estimate is what the console shows before a tenant leases a Mac or launches a
// VM.
type Estimate struct {
	Currency string `json:"currency"`
	PerHour  Micros `json:"per_hour"`
	// PerHourDisplay keeps up to six decimals (at least two): cents would show a
	// small VM's 0.122 an hour as 0.12.
	PerHourDisplay string `json:"per_hour_display"`
	// MinimumHours is the least that will be billed (a lease's minimum term; 0
	// for VMs), Minimum its cost.
	MinimumHours   int64  `json:"minimum_hours"`
	Minimum        Micros `json:"minimum"`
	MinimumDisplay string `json:"minimum_display"`
	// Class is the Mac class that prices a lease ("" for mac_per_hour or a VM).
	Class string `json:"class,omitempty"`
	// Note explains a zero price.
	Note string `json:"note,omitempty"`
}

// LeaseEstimate prices a lease of a Mac with vcpus and memoryMiB that is billed
// for at least minHours.
func (p *Prices) LeaseEstimate(vcpus, memoryMiB, minHours int64) Estimate {
	perHour, class := p.LeasePrice(vcpus, memoryMiB)
	minHours = max(minHours, 0)
	minimum := Micros(mulDiv(int64(perHour), minHours, 1))
	return Estimate{
		Currency: p.Currency, PerHour: perHour, PerHourDisplay: rateDisplay(perHour),
		MinimumHours: minHours, Minimum: minimum, MinimumDisplay: minimum.Cents(), Class: class,
	}
}

// VMEstimate prices an hour of a VM. On a Mac the tenant leases (onOwnLease)
// the lease covers it unless the price list charges VMs there too. VMs have no
// minimum term.
func (p *Prices) VMEstimate(vcpus, memoryMiB int64, macOS, onOwnLease bool) Estimate {
	e := Estimate{Currency: p.Currency, PerHourDisplay: rateDisplay(0), MinimumDisplay: Micros(0).Cents()}
	if onOwnLease && !p.ChargeVMsOnLeasedMacs {
		e.Note = "covered by your lease of this Mac"
		return e
	}
	perHour := satAdd(int64(p.VMPerHour), mulDiv(int64(p.VCPUPerHour), vcpus, 1))
	perHour = satAdd(perHour, mulDiv(int64(p.MemoryGiBPerHour), memoryMiB, 1024))
	if macOS {
		perHour = satAdd(perHour, int64(p.MacOSVMPerHour))
	}
	e.PerHour = Micros(perHour)
	e.PerHourDisplay = rateDisplay(e.PerHour)
	return e
}

// rateDisplay shows a rate with two to six decimals.
func rateDisplay(m Micros) string {
	s := m.String()
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) < 2 {
		frac += strings.Repeat("0", 2-len(frac))
	}
	return whole + "." + frac
}

// satAdd adds amounts, counting a negative one (possible only in a price list
// built in Go that skipped Validate) as zero and stopping at MaxInt64 instead of
// wrapping.
func satAdd(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Budget states reported by BudgetState.
const (
	BudgetOK   = "ok"
	BudgetNear = "near"
	BudgetOver = "over"
)

// BudgetNearPercent is the share of the budget from which BudgetState warns.
const BudgetNearPercent = 80

// BudgetState compares a month's spend with the tenant's monthly budget: ""
// when there is no budget (budget <= 0), BudgetOver from the budget on,
// BudgetNear from BudgetNearPercent of it, else BudgetOK. Budgets only inform;
// nothing is stopped.
func BudgetState(spend, budget Micros) string {
	switch {
	case budget <= 0:
		return ""
	case spend >= budget:
		return BudgetOver
	case spend < 0:
		return BudgetOK
	}
	// spend*100 >= budget*80, in 128 bits.
	sh, sl := bits.Mul64(uint64(spend), 100)
	bh, bl := bits.Mul64(uint64(budget), BudgetNearPercent)
	if sh > bh || (sh == bh && sl >= bl) {
		return BudgetNear
	}
	return BudgetOK
}
