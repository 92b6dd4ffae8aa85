package benchstat

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestOfTakesTheMedianAndNearestRankPercentiles(t *testing.T) {
	cases := []struct {
		name string
		xs   []float64
		want Summary
	}{
		{"one round", []float64{3}, Summary{3, 3, 3, 1}},
		{"odd, unsorted", []float64{5, 1, 4, 2, 3}, Summary{3, 1, 5, 5}},
		{"even: the middle two averaged", []float64{4, 1, 3, 2}, Summary{2.5, 1, 4, 4}},
		{"ten rounds: p10 the lowest, p90 the ninth", []float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, Summary{5.5, 1, 9, 10}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Of(c.xs); got != c.want {
				t.Fatalf("Of(%v) = %+v; want %+v", c.xs, got, c.want)
			}
		})
	}
	if s := Of(nil); !math.IsNaN(s.Median) || s.N != 0 {
		t.Fatalf("Of(nil) = %+v; want NaN with no rounds", s)
	}
}

func TestRatiosPairRoundsBeforeSummarising(t *testing.T) {
	// The ratio of medians would be 2/2 = 1; round by round the ratios are 0.5, 1 and 4.
	num := []time.Duration{1 * time.Second, 2 * time.Second, 8 * time.Second}
	den := []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}
	if s := RatiosOfSeconds(num, den); s.Median != 1 || s.P10 != 0.5 || s.P90 != 4 || s.N != 3 {
		t.Fatalf("RatiosOfSeconds = %+v; want median 1, p10 0.5, p90 4", s)
	}
	if s := Ratios([]float64{1, 2, 3}, []float64{1, 1}); s.N != 2 {
		t.Fatalf("Ratios of unequal rounds = %+v; want the 2 paired rounds", s)
	}
}

func TestInterleaveRotatesWhichFigureGoesFirst(t *testing.T) {
	var order []string
	run := func(round int, names ...string) {
		fs := make([]func(), len(names))
		for i, n := range names {
			fs[i] = func() { order = append(order, n) }
		}
		Interleave(round, fs...)
	}
	for round := range 3 {
		run(round, "a", "b")
	}
	if got := strings.Join(order, ""); got != "abbaab" {
		t.Errorf("two figures over three rounds ran %q; want abbaab", got)
	}
	order = nil
	for round := range 4 {
		run(round, "a", "b", "c")
	}
	if got := strings.Join(order, ""); got != "abcbcacababc" {
		t.Errorf("three figures over four rounds ran %q; want abcbcacababc", got)
	}
	order = nil
	run(-1, "a", "b", "c")
	if got := strings.Join(order, ""); got != "cab" {
		t.Errorf("round -1 ran %q; want cab, the round before round 0", got)
	}
}

func TestRatioOfMediansHoldsTheRatioInsideItsInterval(t *testing.T) {
	var num, den []time.Duration
	for i := range 24 {
		num = append(num, time.Duration(10+i%5)*time.Second/10) // 1.0 to 1.4 s, median 1.2
		den = append(den, time.Duration(20+i%7)*time.Second/10) // 2.0 to 2.6 s, median (2.2+2.3)/2
	}
	iv := RatioOfMediansOfSeconds(num, den)
	if want := 1.2 / 2.25; math.Abs(iv.Ratio-want) > 1e-9 || iv.N != 24 {
		t.Errorf("ratio of medians = %+v; want %v over 24 rounds", iv, want)
	}
	// Every resampled median lies between the least and the most of its rounds.
	if !(iv.Lo <= iv.Ratio && iv.Ratio <= iv.Hi) || iv.Lo < 1.0/2.6 || iv.Hi > 1.4/2.0 || iv.Lo == iv.Hi {
		t.Errorf("interval %v–%v: want it around %v, inside 1.0/2.6–1.4/2.0 and not a point", iv.Lo, iv.Hi, iv.Ratio)
	}
	if again := RatioOfMediansOfSeconds(num, den); again != iv {
		t.Errorf("a second computation gave %+v, then %+v; want the same (fixed seed)", iv, again)
	}
	// Constant rounds leave nothing to resample: the interval is the ratio itself.
	if c := RatioOfMedians([]float64{3, 3, 3}, []float64{6, 6, 6, 6}); c.Ratio != 0.5 || c.Lo != 0.5 || c.Hi != 0.5 || c.N != 3 {
		t.Errorf("constant rounds: %+v; want 0.5 (0.5–0.5) over the 3 paired rounds", c)
	}
	if e := RatioOfMedians(nil, nil); !math.IsNaN(e.Ratio) || e.N != 0 {
		t.Errorf("no rounds: %+v; want NaN", e)
	}
}

func TestRatiosDivideEachRoundByItsOwnBaseline(t *testing.T) {
	s := time.Second
	// Rounds where the machine was slow for both figures keep a ratio of 0.5; one outlier
	// round (1.0) is the last of ten, above the 90th percentile.
	a := []time.Duration{1 * s, 2 * s, 1 * s, 3 * s, 1 * s, 2 * s, 1 * s, 1 * s, 2 * s, 4 * s}
	b := []time.Duration{2 * s, 4 * s, 2 * s, 6 * s, 2 * s, 4 * s, 2 * s, 2 * s, 4 * s, 4 * s}
	if r := RatiosOfSeconds(a, b); r != (Summary{0.5, 0.5, 0.5, 10}) {
		t.Errorf("RatiosOfSeconds = %+v; want 0.5 (p10–p90 0.5–0.5) over 10 rounds", r)
	}
	if got := RatioOfMediansOfSeconds(a, b).Ratio; got != 1.5/3 {
		t.Errorf("ratio of medians = %v; want 1.5 s / 3 s", got)
	}
}

func TestStringsNameTheSpreadAndTheRounds(t *testing.T) {
	if got := (Summary{Median: 0.574, P10: 0.384, P90: 0.896, N: 24}).String(); got != "0.574 (p10–p90 0.384–0.896, 24 rounds)" {
		t.Errorf("Summary.String = %q", got)
	}
	if got := Seconds([]time.Duration{2 * time.Millisecond, time.Millisecond}).Scaled(1000).String(); got != "1.5 (p10–p90 1–2, 2 rounds)" {
		t.Errorf("milliseconds: %q", got)
	}
	if got := (Interval{Ratio: 0.589, Lo: 0.38, Hi: 0.782, N: 24}).String(); got != "0.589 (bootstrap 95% interval 0.38–0.782, 24 rounds)" {
		t.Errorf("Interval.String = %q", got)
	}
}

func TestSamplesKeepTheFirstMaxSamplesWithoutAllocating(t *testing.T) {
	s := NewSamples()
	if allocs := testing.AllocsPerRun(10, func() { s.Add(time.Millisecond) }); allocs != 0 {
		t.Errorf("Add allocated %v times", allocs)
	}
	for range MaxSamples {
		s.Add(3 * time.Millisecond)
	}
	// 10 (AllocsPerRun's runs) + 1 (its warm-up) of 1 ms, then 3 ms up to MaxSamples.
	if got := s.Seconds(); got.N != MaxSamples || got.P10 != 0.003 || got.Median != 0.003 {
		t.Errorf("Seconds = %+v; want %d samples of 3 ms", got, MaxSamples)
	}
}
