package benchstat

import (
	"math"
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
