package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestEveryChangingRouteSaysWhatItDoes: each route that writes to the
// activity log has words for it ("launch vm"), short enough that a row with
// a VM's name fits 80 columns; reads and heartbeats have none. A route added
// without them fails here.
func TestEveryChangingRouteSaysWhatItDoes(t *testing.T) {
	for _, rt := range Routes() {
		changes := rt.Method != http.MethodGet && rt.Access != Public && !rt.NoActivity
		switch {
		case changes && rt.Action == "":
			t.Errorf("%s %s changes something but has no Action for the activity log", rt.Method, rt.Path)
		case !changes && rt.Action != "":
			t.Errorf("%s %s is never in the activity log but has Action %q", rt.Method, rt.Path, rt.Action)
		case len(rt.Action) > 24:
			t.Errorf("%s %s: Action %q is longer than 24 characters", rt.Method, rt.Path, rt.Action)
		case rt.Action != "" && rt.Action[:1] != strings.ToLower(rt.Action[:1]):
			t.Errorf("%s %s: Action %q starts with a capital", rt.Method, rt.Path, rt.Action)
		}
	}
}
