// Package benchstat summarises benchmark rounds for `make bench`: a figure is the median of
// its rounds with the spread between their 10th and 90th percentiles, and a ratio is taken
// round by round from a figure and its baseline measured side by side (interleaved), so a
// reader can tell a difference from run-to-run noise. Every benchmark that prints a ratio
// uses it (docs/benchmarks.md).
package benchstat

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// Summary is the median of a figure's rounds and its p10–p90 spread.
type Summary struct {
	Median, P10, P90 float64
	N                int
}

// Of summarises xs (nearest-rank percentiles; all NaN for no rounds).
func Of(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{Median: math.NaN(), P10: math.NaN(), P90: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Summary{Median: med, P10: at(0.10), P90: at(0.90), N: len(s)}
}

// Seconds summarises durations in seconds.
func Seconds(ds []time.Duration) Summary {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = d.Seconds()
	}
	return Of(xs)
}

// Ratios summarises num[i]/den[i], round by round (the slices pair up the rounds).
func Ratios(num, den []float64) Summary {
	n := min(len(num), len(den))
	xs := make([]float64, 0, n)
	for i := range n {
		xs = append(xs, num[i]/den[i])
	}
	return Of(xs)
}

// RatiosOfSeconds is Ratios of durations.
func RatiosOfSeconds(num, den []time.Duration) Summary {
	a, b := make([]float64, len(num)), make([]float64, len(den))
	for i := range num {
		a[i] = num[i].Seconds()
	}
	for i := range den {
		b[i] = den[i].Seconds()
	}
	return Ratios(a, b)
}

func (s Summary) String() string {
	return fmt.Sprintf("%.4g (p10–p90 %.4g–%.4g, %d rounds)", s.Median, s.P10, s.P90, s.N)
}

// Report reports s as three metrics: unit (the median), unit-p10 and unit-p90.
func Report(b *testing.B, s Summary, unit string) {
	b.Helper()
	b.ReportMetric(s.Median, unit)
	b.ReportMetric(s.P10, unit+"-p10")
	b.ReportMetric(s.P90, unit+"-p90")
}
