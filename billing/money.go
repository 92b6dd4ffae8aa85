package billing

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// ErrInvalid marks a price list, amount or month that cannot be used; the error
// text names the field and says what is allowed.
var ErrInvalid = errors.New("invalid")

// invalidError is an ErrInvalid whose message is its own text only (no
// "invalid: " in front), since it is shown to people as it is.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Micros is an amount of money in millionths of the currency unit. In JSON it
// is a plain number in currency units (850000 is 0.85), written and read
// exactly, never through a float.
type Micros int64

const (
	microsPerUnit = 1_000_000
	microsPerCent = 10_000
	// maxWhole is the largest whole-unit part a Micros can hold.
	maxWhole = math.MaxInt64 / microsPerUnit
)

// String is the exact amount in currency units with trailing zeros dropped:
// "0.85", "1.95", "500", "0".
func (m Micros) String() string {
	neg, u := magnitude(int64(m))
	whole, frac := u/microsPerUnit, u%microsPerUnit
	s := strconv.FormatUint(whole, 10)
	if frac != 0 {
		f := fmt.Sprintf("%06d", frac)
		s += "." + strings.TrimRight(f, "0")
	}
	if neg {
		s = "-" + s
	}
	return s
}

// Cents is the amount rounded half-up to cents, with exactly two decimals
// ("0.85", "12.30"). Negative amounts round half away from zero.
func (m Micros) Cents() string {
	neg, u := magnitude(int64(m))
	c := u / microsPerCent
	if u%microsPerCent >= microsPerCent/2 {
		c++
	}
	return formatCents(neg, c)
}

// MarshalJSON writes the amount as a JSON number in currency units.
func (m Micros) MarshalJSON() ([]byte, error) {
	return []byte(m.String()), nil
}

// UnmarshalJSON reads a JSON number in currency units exactly. It refuses
// strings, exponents, negative amounts, more than six decimals and amounts an
// int64 of millionths cannot hold. A JSON null leaves the amount unchanged, as
// encoding/json does for other types.
func (m *Micros) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if string(data) == "null" {
		return nil
	}
	if len(data) > 0 && data[0] == '"' {
		return invalidf("amount %s is a string; write it as a JSON number, like 500 or 0.85", shorten(string(data)))
	}
	v, err := ParseMicros(string(data))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// ParseMicros reads an amount in currency units written as plain digits with an
// optional fraction of at most six digits ("500", "0.85", "0.000001"). It is
// what UnmarshalJSON accepts, for amounts typed on a command line.
func ParseMicros(s string) (Micros, error) {
	shown := shorten(s)
	switch {
	case s == "":
		return 0, invalidf("amount is empty; want a number like 500 or 0.85")
	case s[0] == '-':
		return 0, invalidf("amount %s is negative; amounts are zero or more", shown)
	case strings.ContainsAny(s, "eE"):
		return 0, invalidf("amount %s uses an exponent; write the digits out, like 1000 or 0.0005", shown)
	}
	whole, frac, dotted := strings.Cut(s, ".")
	if !allDigits(whole) || (dotted && !allDigits(frac)) {
		return 0, invalidf("amount %s is not a number; want digits with an optional fraction, like 500 or 0.85", shown)
	}
	if len(frac) > 6 {
		return 0, invalidf("amount %s has more than 6 decimals; the smallest amount is 0.000001", shown)
	}
	tooLarge := func() error {
		return invalidf("amount %s is too large; the largest is %s", shown, Micros(math.MaxInt64))
	}
	var w uint64
	for _, d := range whole {
		w = w*10 + uint64(d-'0')
		if w > maxWhole {
			return 0, tooLarge()
		}
	}
	var f uint64
	for i := range 6 {
		f *= 10
		if i < len(frac) {
			f += uint64(frac[i] - '0')
		}
	}
	// w*microsPerUnit fits because w <= maxWhole; adding f may still pass MaxInt64.
	total := w*microsPerUnit + f
	if total > math.MaxInt64 {
		return 0, tooLarge()
	}
	return Micros(total), nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// shorten keeps error messages readable when the offending input is huge.
func shorten(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// magnitude splits v into its sign and absolute value; the uint64 holds even
// the magnitude of math.MinInt64.
func magnitude(v int64) (neg bool, u uint64) {
	u = uint64(v)
	if v < 0 {
		return true, -u
	}
	return false, u
}

// formatCents writes a count of cents as units with two decimals.
func formatCents(neg bool, c uint64) string {
	s := fmt.Sprintf("%d.%02d", c/100, c%100)
	if neg && c != 0 {
		s = "-" + s
	}
	return s
}

// mulDiv is floor(x*y/d) for x, y >= 0 and d > 0, computed in 128 bits so the
// product never overflows. A quotient above MaxInt64 would need prices and
// usage many orders of magnitude beyond any real fleet; it is clamped to
// MaxInt64 rather than wrapping into a negative amount.
func mulDiv(x, y, d int64) int64 {
	if x <= 0 || y <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(x), uint64(y))
	if hi >= uint64(d) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(d))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// decimal6 writes num/den with exactly six decimals, rounded half-up, from
// integers only (num >= 0, den > 0): decimal6(5400, 3600) is "1.500000".
func decimal6(num, den int64) string {
	if num <= 0 {
		return "0.000000"
	}
	hi, lo := bits.Mul64(uint64(num), microsPerUnit)
	if hi >= uint64(den) {
		return Micros(math.MaxInt64).fixed6()
	}
	q, r := bits.Div64(hi, lo, uint64(den))
	if r >= uint64(den)-r {
		q++
	}
	if q > math.MaxInt64 {
		q = math.MaxInt64
	}
	return Micros(q).fixed6()
}

// fixed6 writes the amount with all six decimals ("24.000000").
func (m Micros) fixed6() string {
	neg, u := magnitude(int64(m))
	s := fmt.Sprintf("%d.%06d", u/microsPerUnit, u%microsPerUnit)
	if neg {
		s = "-" + s
	}
	return s
}
