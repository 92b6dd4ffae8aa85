// Package benchstat summarises benchmark rounds for `make bench`: a figure is the median of
// its rounds with the spread between their 10th and 90th percentiles, and a ratio is taken
// round by round from a figure and its baseline measured side by side (Interleave), so a
// reader can tell a difference from run-to-run noise; RatioOfMedians adds the ratio of the two
// medians with a bootstrap 95% interval. Every benchmark of `make bench` prints its figures
// through it (docs/benchmarks.md).
package benchstat

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Interleave runs the figures of one round in an order that rotates from round to round:
// round r starts with fs[r mod len(fs)], so with two figures each goes first every other
// round. On a shared machine whichever runs first after a pause is often the slower one, and
// a fixed order would hand that to the same figure every round.
func Interleave(round int, fs ...func()) {
	n := len(fs)
	for k := range fs {
		fs[((round+k)%n+n)%n]() // a negative round (a warm-up) too
	}
}

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
	return Of(seconds(ds))
}

// Samples keeps the times of a benchmark's operations, for a figure measured one operation at
// a time in a b.Loop: the first MaxSamples of them, in memory allocated up front, so that
// keeping them allocates nothing and the benchmark's allocs/op stay its own.
type Samples struct{ ds []time.Duration }

// MaxSamples is how many operations' times Samples keeps.
const MaxSamples = 1 << 16

// NewSamples allocates room for MaxSamples times.
func NewSamples() *Samples { return &Samples{ds: make([]time.Duration, 0, MaxSamples)} }

// Add keeps d while there is room.
func (s *Samples) Add(d time.Duration) {
	if len(s.ds) < cap(s.ds) {
		s.ds = append(s.ds, d)
	}
}

// Seconds summarises the times kept, in seconds.
func (s *Samples) Seconds() Summary { return Seconds(s.ds) }

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
	return Ratios(seconds(num), seconds(den))
}

// Scaled is s with its figures multiplied by k (k = 1000 turns seconds into milliseconds).
func (s Summary) Scaled(k float64) Summary {
	return Summary{Median: s.Median * k, P10: s.P10 * k, P90: s.P90 * k, N: s.N}
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

// Interval is the ratio of two figures' medians with a bootstrap 95% interval for it.
type Interval struct {
	Ratio, Lo, Hi float64
	N             int
}

// bootstrapDraws is how many times RatioOfMedians draws the rounds again.
const bootstrapDraws = 2000

// RatioOfMedians is median(num)/median(den) over the paired rounds, with a bootstrap 95%
// interval: the rounds are drawn again with replacement (a round keeps its two figures
// together) bootstrapDraws times, from a fixed seed so that a run's interval can be
// recomputed from its rounds. All NaN for no rounds.
func RatioOfMedians(num, den []float64) Interval {
	n := min(len(num), len(den))
	if n == 0 {
		return Interval{Ratio: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	}
	ratio := Of(num[:n]).Median / Of(den[:n]).Median
	rng := rand.New(rand.NewPCG(1, 2))
	rs := make([]float64, bootstrapDraws)
	sa, sb := make([]float64, n), make([]float64, n)
	for k := range rs {
		for i := range n {
			j := rng.IntN(n)
			sa[i], sb[i] = num[j], den[j]
		}
		rs[k] = Of(sa).Median / Of(sb).Median
	}
	slices.Sort(rs)
	return Interval{Ratio: ratio, Lo: rs[bootstrapDraws*25/1000], Hi: rs[bootstrapDraws*975/1000], N: n}
}

// RatioOfMediansOfSeconds is RatioOfMedians of durations.
func RatioOfMediansOfSeconds(num, den []time.Duration) Interval {
	return RatioOfMedians(seconds(num), seconds(den))
}

func (iv Interval) String() string {
	return fmt.Sprintf("%.4g (bootstrap 95%% interval %.4g–%.4g, %d rounds)", iv.Ratio, iv.Lo, iv.Hi, iv.N)
}

// ReportInterval reports iv as three metrics: unit (the ratio of the medians), unit-ci-lo and
// unit-ci-hi.
func ReportInterval(b *testing.B, iv Interval, unit string) {
	b.Helper()
	b.ReportMetric(iv.Ratio, unit)
	b.ReportMetric(iv.Lo, unit+"-ci-lo")
	b.ReportMetric(iv.Hi, unit+"-ci-hi")
}

func seconds(ds []time.Duration) []float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = d.Seconds()
	}
	return xs
}
