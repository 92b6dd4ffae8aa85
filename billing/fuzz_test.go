package billing

import (
	"encoding/json"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

// FuzzMicrosJSON: UnmarshalJSON never panics, and whatever it accepts is the
// exact value of the number it read and comes back unchanged through
// MarshalJSON.
func FuzzMicrosJSON(f *testing.F) {
	for _, s := range []string{"0.85", "500", "0", "0.000001", "1.950000", "9223372036854.775807", "9223372036854.775808",
		"0.1234567", "-1", "1e3", `"0.85"`, "null", ".5", "00.5", " 7 ", "", "1.", "１"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Micros
		if err := m.UnmarshalJSON(data); err != nil || strings.TrimSpace(string(data)) == "null" {
			return
		}
		if m < 0 {
			t.Fatalf("%q gave the negative amount %d", data, int64(m))
		}
		in, ok := new(big.Rat).SetString(strings.TrimSpace(string(data)))
		if !ok || in.Cmp(big.NewRat(int64(m), microsPerUnit)) != 0 {
			t.Fatalf("%q read as %d millionths", data, int64(m))
		}
		out, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var back Micros
		if err := json.Unmarshal(out, &back); err != nil || back != m {
			t.Fatalf("%q → %d → %s → %d, %v", data, int64(m), out, int64(back), err)
		}
		if again, _ := json.Marshal(back); string(again) != string(out) {
			t.Fatalf("%s marshals back as %s", out, again)
		}
	})
}

// FuzzPricesJSON: decoding and validating any document never panics, and a
// valid price list survives a round trip through JSON and can price leases and
// VMs.
func FuzzPricesJSON(f *testing.F) {
	f.Add([]byte(specPricesJSON))
	f.Add([]byte(`{"currency":"EUR","mac_classes":[{"name":"a","min_vcpus":-1}],"vm_per_hour":1e2}`))
	f.Add([]byte(`{"mac_classes":[{"name":"x","min_memory_gib":9223372036854775807,"per_hour":0.5}],"mac_per_hour":null}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Prices
		if err := json.Unmarshal(data, &p); err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			return
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back Prices
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s does not decode: %v", b, err)
		}
		// nil and empty class lists both marshal as an equivalent document.
		if len(p.MacClasses) == 0 {
			p.MacClasses, back.MacClasses = nil, nil
		}
		if !reflect.DeepEqual(back, p) {
			t.Fatalf("round trip changed %+v into %+v", p, back)
		}
		for _, size := range [][2]int64{{0, 0}, {8, 16 * 1024}, {1 << 40, 1 << 62}, {-1, -1}} {
			if price, _ := p.LeasePrice(size[0], size[1]); price < 0 {
				t.Fatalf("negative lease price %s", price)
			}
			p.LeaseEstimate(size[0], size[1], 24)
			if e := p.VMEstimate(size[0], size[1], true, false); e.PerHour < 0 {
				t.Fatalf("negative VM estimate %+v", e)
			}
		}
	})
}

// FuzzMonthOf: MonthOf never panics, and what it accepts is a first of the
// month that formats back to its input.
func FuzzMonthOf(f *testing.F) {
	for _, s := range []string{"2026-10", "2026-13", "0000-01", "9999-12", "2026-1", "abcd-ef", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := MonthOf(s)
		if err != nil {
			return
		}
		if m.Format("2006-01") != s || m.Day() != 1 || m.Hour() != 0 || m.Location().String() != "UTC" {
			t.Fatalf("MonthOf(%q) = %v", s, m)
		}
	})
}
