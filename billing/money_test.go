package billing

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestMicrosMarshalsAsExactDecimalWithoutTrailingZeros(t *testing.T) {
	for _, c := range []struct {
		m    Micros
		want string
	}{
		{850_000, "0.85"}, {1_950_000, "1.95"}, {0, "0"}, {500_000_000, "500"},
		{1, "0.000001"}, {4_000, "0.004"}, {12_300_000, "12.3"},
		{math.MaxInt64, "9223372036854.775807"}, {-500_000, "-0.5"}, {math.MinInt64, "-9223372036854.775808"},
	} {
		got, err := json.Marshal(c.m)
		if err != nil || string(got) != c.want {
			t.Errorf("Marshal(%d) = %s, %v; want %s", int64(c.m), got, err, c.want)
		}
	}
}

func TestMicrosUnmarshalReadsDigitsExactly(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Micros
	}{
		{"0.85", 850_000}, {"500", 500_000_000}, {"0", 0}, {"0.000001", 1}, {"1.950", 1_950_000},
		{"0.1", 100_000}, {" 2.5 ", 2_500_000}, {"9223372036854.775807", math.MaxInt64},
		// 0.29 is 0.28999999999999998 as a float64; a float path would give 289999.
		{"0.29", 290_000},
	} {
		var m Micros
		if err := json.Unmarshal([]byte(c.in), &m); err != nil || m != c.want {
			t.Errorf("Unmarshal(%s) = %d, %v; want %d", c.in, int64(m), err, int64(c.want))
		}
	}
}

func TestMicrosUnmarshalRefusesWhatItCannotHoldExactly(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"0.1234567", "amount 0.1234567 has more than 6 decimals"},
		{"-1", "amount -1 is negative"},
		{"-0", "is negative"},
		{"1e3", "amount 1e3 uses an exponent"},
		{"1.5E-2", "uses an exponent"},
		{"9223372036854.775808", "is too large; the largest is 9223372036854.775807"},
		{"9223372036855", "is too large"},
		{"123456789012345678901234567890", "is too large"},
		{`"0.85"`, "is a string; write it as a JSON number"},
		{".5", "is not a number"},
		{"5.", "is not a number"},
		{"abc", "is not a number"},
		{"", "amount is empty"},
	} {
		var m Micros
		err := m.UnmarshalJSON([]byte(c.in))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("UnmarshalJSON(%s) = %v; want an ErrInvalid containing %q", c.in, err, c.want)
		}
		if m != 0 {
			t.Errorf("UnmarshalJSON(%s) changed the amount to %d on error", c.in, int64(m))
		}
	}
}

func TestMicrosUnmarshalNullLeavesAmountUnchanged(t *testing.T) {
	m := Micros(42)
	if err := json.Unmarshal([]byte("null"), &m); err != nil || m != 42 {
		t.Fatalf("null gave %d, %v; want 42 unchanged", int64(m), err)
	}
}

func TestParseMicrosTakesCommandLineAmounts(t *testing.T) {
	if m, err := ParseMicros("500"); err != nil || m != 500_000_000 {
		t.Errorf("ParseMicros(500) = %d, %v", int64(m), err)
	}
	if m, err := ParseMicros("0.85"); err != nil || m != 850_000 {
		t.Errorf("ParseMicros(0.85) = %d, %v", int64(m), err)
	}
	if _, err := ParseMicros("1,5"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseMicros(1,5) = %v; want ErrInvalid", err)
	}
}

func TestCentsRoundsHalfUpToTwoDecimals(t *testing.T) {
	for _, c := range []struct {
		m    Micros
		want string
	}{
		{850_000, "0.85"}, {12_300_000, "12.30"}, {0, "0.00"}, {5_000, "0.01"}, {4_999, "0.00"},
		{1_234_999, "1.23"}, {1_235_000, "1.24"}, {999_999_999, "1000.00"}, {-5_000, "-0.01"}, {-4_999, "0.00"},
		{math.MaxInt64, "9223372036854.78"},
	} {
		if got := c.m.Cents(); got != c.want {
			t.Errorf("Micros(%d).Cents() = %s; want %s", int64(c.m), got, c.want)
		}
	}
}

func TestMulDivComputesIn128Bits(t *testing.T) {
	for _, c := range []struct{ x, y, d, want int64 }{
		{1_950_000, 3600 * 30, 3600, 58_500_000},
		{850_000, 1, 3600, 236}, // 236.1 rounded down
		{1 << 40, 1 << 40, 1 << 30, 1 << 50},
		{math.MaxInt64, 3600, 3600, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{math.MaxInt64, 2, 1, math.MaxInt64}, // clamped, not wrapped
		{0, 5, 3, 0}, {-1, 5, 3, 0},
	} {
		if got := mulDiv(c.x, c.y, c.d); got != c.want {
			t.Errorf("mulDiv(%d, %d, %d) = %d; want %d", c.x, c.y, c.d, got, c.want)
		}
	}
}

func TestDecimal6RoundsHalfUpFromIntegers(t *testing.T) {
	for _, c := range []struct {
		num, den int64
		want     string
	}{
		{5400, 3600, "1.500000"}, {86400, 3600, "24.000000"}, {0, 3600, "0.000000"},
		{1, 3600, "0.000278"}, {1, 7200, "0.000139"}, {1, 2_000_000, "0.000001"}, {1, 2_000_001, "0.000000"},
		{8192 * 3600, 1024 * 3600, "8.000000"}, {math.MaxInt64, 1024 * 3600, "2501999792983.608889"},
	} {
		if got := decimal6(c.num, c.den); got != c.want {
			t.Errorf("decimal6(%d, %d) = %s; want %s", c.num, c.den, got, c.want)
		}
	}
}
