package api_test

import (
	"fmt"
	"testing"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/scheduler"
)

func TestALaunchOnALargeFleetAnswersWithTheChosenNodeAndTheBestOthers(t *testing.T) {
	var vs []scheduler.Verdict
	for i := range 2000 {
		v := scheduler.Verdict{Node: fmt.Sprintf("n-%04d", i), Reasons: []string{"full"}}
		if i%100 == 0 { // 20 fit; n-1900 scores best, n-0000 worst
			v = scheduler.Verdict{Node: v.Node, Fits: true, Score: float64(i)}
		}
		vs = append(vs, v)
	}
	got := api.Shortlist(vs, "n-0000") // chosen, though not the best score (a busy node was passed over)
	if len(got) != 10 {
		t.Fatalf("shortlist of 2,000 verdicts has %d; want 10", len(got))
	}
	want := []string{"n-0000", "n-1100", "n-1200", "n-1300", "n-1400", "n-1500", "n-1600", "n-1700", "n-1800", "n-1900"}
	for i, v := range got {
		if v.Node != want[i] || !v.Fits {
			t.Fatalf("shortlist = %+v; want the chosen n-0000 and the 9 best-scored fitting nodes in name order %v", got, want)
		}
	}
	small := api.Shortlist(vs[:3], "n-0000")
	if len(small) != 3 {
		t.Fatalf("shortlist of 3 verdicts = %+v; want all 3, refused ones too", small)
	}
}
