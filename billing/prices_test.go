package billing

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// specPrices is the example price list of the spec.
func specPrices() Prices {
	return Prices{
		Currency: "USD",
		MacClasses: []MacClass{
			{Name: "Mac mini", MinVCPUs: 8, MinMemoryGiB: 16, PerHour: 850_000},
			{Name: "Mac Studio", MinVCPUs: 20, MinMemoryGiB: 64, PerHour: 1_950_000},
		},
		MacPerHour: 600_000,
		VMPerHour:  10_000, VCPUPerHour: 20_000, MemoryGiBPerHour: 4_000, MacOSVMPerHour: 100_000,
	}
}

const specPricesJSON = `{"currency": "USD",
 "mac_classes": [{"name": "Mac mini", "min_vcpus": 8, "min_memory_gib": 16, "per_hour": 0.85},
                 {"name": "Mac Studio", "min_vcpus": 20, "min_memory_gib": 64, "per_hour": 1.95}],
 "mac_per_hour": 0.60,
 "vm_per_hour": 0.01, "vcpu_per_hour": 0.02, "memory_gib_per_hour": 0.004, "macos_vm_per_hour": 0.10,
 "charge_vms_on_leased_macs": false}`

func TestSpecPriceListDecodesExactlyAndValidates(t *testing.T) {
	var p Prices
	if err := json.Unmarshal([]byte(specPricesJSON), &p); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, specPrices()) {
		t.Fatalf("decoded %+v\nwant    %+v", p, specPrices())
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultPricesAreValidAndChargeNothing(t *testing.T) {
	p := DefaultPrices()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	want := Prices{Currency: "USD", MacClasses: []MacClass{}}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("DefaultPrices() = %+v; want USD and every rate zero", p)
	}
	if got, _ := json.Marshal(p); !strings.Contains(string(got), `"mac_classes":[]`) {
		t.Errorf("default prices marshal classes as %s; want an empty list, not null", got)
	}
}

func TestValidateNamesTheFieldAndWrapsErrInvalid(t *testing.T) {
	for _, c := range []struct {
		name   string
		mutate func(*Prices)
		want   string
	}{
		{"lowercase currency", func(p *Prices) { p.Currency = "usd" }, `currency "usd" is not three uppercase letters`},
		{"long currency", func(p *Prices) { p.Currency = "USDT" }, `currency "USDT"`},
		{"empty currency", func(p *Prices) { p.Currency = "" }, `currency ""`},
		{"duplicate class", func(p *Prices) { p.MacClasses[1].Name = "Mac mini" }, `mac_classes[1].name "Mac mini" appears twice`},
		{"empty class name", func(p *Prices) { p.MacClasses[0].Name = "" }, `mac_classes[0].name is empty`},
		{"long class name", func(p *Prices) { p.MacClasses[0].Name = strings.Repeat("é", 65) }, `mac_classes[0].name is 65 characters; at most 64`},
		{"control character", func(p *Prices) { p.MacClasses[0].Name = "Mac\nmini" }, `mac_classes[0].name "Mac\nmini" has a control character`},
		{"negative vcpus", func(p *Prices) { p.MacClasses[1].MinVCPUs = -1 }, `mac_classes[1].min_vcpus is -1`},
		{"negative memory", func(p *Prices) { p.MacClasses[0].MinMemoryGiB = -16 }, `mac_classes[0].min_memory_gib is -16`},
		{"negative class price", func(p *Prices) { p.MacClasses[0].PerHour = -1 }, `mac_classes[0].per_hour is -0.000001`},
		{"negative rate", func(p *Prices) { p.MemoryGiBPerHour = -4000 }, `memory_gib_per_hour is -0.004`},
		{"long note", func(p *Prices) { p.Note = strings.Repeat("n", MaxNoteLength+1) }, `note is 201 characters; at most 200`},
		{"note on two lines", func(p *Prices) { p.Note = "sample\nprices" }, `note has a control character`},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := specPrices()
			c.mutate(&p)
			err := p.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate() = %v; want ErrInvalid mentioning %q", err, c.want)
			}
		})
	}
	// Every problem is reported at once.
	p := specPrices()
	p.Currency, p.MacClasses[0].Name = "x", ""
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "currency") || !strings.Contains(err.Error(), "mac_classes[0]") {
		t.Fatalf("Validate() = %v; want both problems", err)
	}
	// 64 characters is allowed.
	p = specPrices()
	p.MacClasses[0].Name = strings.Repeat("é", 64)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLeasePriceIsTheLargestClassTheMacMeets(t *testing.T) {
	const gib = 1024
	for _, c := range []struct {
		name          string
		vcpus, memMiB int64
		wantPrice     Micros
		wantClass     string
	}{
		{"exactly Mac Studio", 20, 64 * gib, 1_950_000, "Mac Studio"},
		{"beyond Mac Studio", 32, 192 * gib, 1_950_000, "Mac Studio"},
		{"exactly Mac mini", 8, 16 * gib, 850_000, "Mac mini"},
		{"Studio vCPUs, mini memory", 20, 32 * gib, 850_000, "Mac mini"},
		{"one MiB short of Mac mini", 8, 16*gib - 1, 600_000, ""},
		{"too few vCPUs for any class", 4, 64 * gib, 600_000, ""},
		{"nonsense negative size", -1, -1, 600_000, ""},
	} {
		p := specPrices()
		if got, class := p.LeasePrice(c.vcpus, c.memMiB); got != c.wantPrice || class != c.wantClass {
			t.Errorf("%s: LeasePrice(%d, %d) = %s %q; want %s %q", c.name, c.vcpus, c.memMiB, got, class, c.wantPrice, c.wantClass)
		}
		p.MacClasses[0], p.MacClasses[1] = p.MacClasses[1], p.MacClasses[0]
		if got, class := p.LeasePrice(c.vcpus, c.memMiB); got != c.wantPrice || class != c.wantClass {
			t.Errorf("%s with classes listed the other way: got %s %q", c.name, got, class)
		}
	}
	// "Largest" orders by vCPUs first: 24 vCPUs/32 GiB beats 16 vCPUs/128 GiB.
	p := Prices{MacClasses: []MacClass{
		{Name: "memory", MinVCPUs: 16, MinMemoryGiB: 128, PerHour: 1},
		{Name: "cores", MinVCPUs: 24, MinMemoryGiB: 32, PerHour: 2},
	}}
	if _, class := p.LeasePrice(24, 128*gib); class != "cores" {
		t.Errorf("class %q; want the one with more vCPUs", class)
	}
}

func TestPricesAtTakesTheLastVersionInEffect(t *testing.T) {
	t0 := time.Date(2026, 10, 10, 12, 0, 0, 0, time.UTC)
	v := func(vm Micros, at time.Time) PriceVersion {
		p := DefaultPrices()
		p.VMPerHour = vm
		return PriceVersion{EffectiveFrom: at, Prices: p}
	}
	// Listed out of order on purpose: the history is sorted before use.
	h := []PriceVersion{v(2, t0), v(1, t0.Add(-time.Hour)), v(3, t0.Add(time.Hour))}
	for _, c := range []struct {
		at   time.Time
		want Micros
	}{
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 1}, // the first version reaches back to the beginning
		{t0.Add(-time.Nanosecond), 1},                    // truncated to the second before t0
		{t0, 2},
		{t0.Add(999 * time.Millisecond), 2},
		{t0.Add(time.Hour), 3},
		{t0.AddDate(5, 0, 0), 3},
	} {
		if got := PricesAt(h, c.at).VMPerHour; got != c.want {
			t.Errorf("PricesAt(%v) has vm_per_hour %d; want %d", c.at, got, c.want)
		}
	}
	if got := PricesAt(nil, t0); !reflect.DeepEqual(got, DefaultPrices()) {
		t.Errorf("PricesAt(no history) = %+v; want DefaultPrices", got)
	}
	if h[0].VMPerHour != 2 {
		t.Error("PricesAt reordered the caller's history")
	}
}

func TestPriceVersionJSONIsFlat(t *testing.T) {
	pv := PriceVersion{EffectiveFrom: time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), Prices: specPrices()}
	b, err := json.Marshal(pv)
	if err != nil {
		t.Fatal(err)
	}
	var flat map[string]any
	if err := json.Unmarshal(b, &flat); err != nil {
		t.Fatal(err)
	}
	if flat["effective_from"] != "2026-10-01T00:00:00Z" || flat["currency"] != "USD" || flat["vm_per_hour"] != 0.01 {
		t.Fatalf("PriceVersion JSON %s is not flat", b)
	}
	var back PriceVersion
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, pv) {
		t.Fatalf("round trip gave %+v, %v", back, err)
	}
}

func TestBudgetStateWarnsFromEightyPercent(t *testing.T) {
	for _, c := range []struct {
		spend, budget Micros
		want          string
	}{
		{100, 0, ""}, {100, -5, ""},
		{0, 500_000_000, BudgetOK},
		{399_999_999, 500_000_000, BudgetOK},
		{400_000_000, 500_000_000, BudgetNear},
		{499_999_999, 500_000_000, BudgetNear},
		{500_000_000, 500_000_000, BudgetOver},
		{900_000_000, 500_000_000, BudgetOver},
		{-1, 500_000_000, BudgetOK},
		{1<<62 + 1<<61, 1 << 62, BudgetOver},
		{1 << 62, 1<<62 + 1<<60, BudgetNear}, // 80 %: spend*100 overflows int64, not 128 bits
		{7, 10, BudgetOK}, {8, 10, BudgetNear},
	} {
		if got := BudgetState(c.spend, c.budget); got != c.want {
			t.Errorf("BudgetState(%d, %d) = %q; want %q", c.spend, c.budget, got, c.want)
		}
	}
}

func TestLeaseEstimateUsesTheClassAndMinimum(t *testing.T) {
	p := specPrices()
	e := p.LeaseEstimate(20, 64*1024, 24)
	want := Estimate{Currency: "USD", PerHour: 1_950_000, PerHourDisplay: "1.95", MinimumHours: 24,
		Minimum: 46_800_000, MinimumDisplay: "46.80", Class: "Mac Studio"}
	if e != want {
		t.Fatalf("LeaseEstimate = %+v\nwant %+v", e, want)
	}
	if e := p.LeaseEstimate(4, 8*1024, 24); e.PerHour != 600_000 || e.Class != "" || e.MinimumDisplay != "14.40" {
		t.Fatalf("small Mac estimate = %+v; want mac_per_hour", e)
	}
}

func TestVMEstimateAddsRatesAndIsFreeOnOwnLease(t *testing.T) {
	p := specPrices()
	// 0.01 + 4 × 0.02 + 8 × 0.004 = 0.122 an hour.
	if e := p.VMEstimate(4, 8*1024, false, false); e.PerHour != 122_000 || e.PerHourDisplay != "0.122" || e.MinimumHours != 0 || e.Minimum != 0 || e.Note != "" {
		t.Errorf("linux VM estimate = %+v", e)
	}
	// 0.01 + 8 × 0.02 + 16 × 0.004 + 0.10 = 0.334.
	if e := p.VMEstimate(8, 16*1024, true, false); e.PerHour != 334_000 {
		t.Errorf("macOS VM estimate = %+v", e)
	}
	// Memory is priced by the MiB: 1536 MiB is 1.5 GiB, 0.006 an hour.
	if e := p.VMEstimate(0, 1536, false, false); e.PerHour != 10_000+6_000 {
		t.Errorf("1.5 GiB estimate = %+v", e)
	}
	e := p.VMEstimate(8, 16*1024, true, true)
	if e.PerHour != 0 || e.PerHourDisplay != "0.00" || e.Note == "" {
		t.Errorf("VM on own lease = %+v; want free with a note", e)
	}
	p.ChargeVMsOnLeasedMacs = true
	if e := p.VMEstimate(8, 16*1024, true, true); e.PerHour != 334_000 || e.Note != "" {
		t.Errorf("VM on own lease with charge_vms_on_leased_macs = %+v; want charged", e)
	}
}
