package snapshots

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
)

// TestNamesAreTheSpecsRule: 1-64 letters (either case), digits, '.', '_'
// and '-', starting with a letter or digit; anything else is an Invalid
// error (400) with a hint.
func TestNamesAreTheSpecsRule(t *testing.T) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"before-upgrade", true}, {"Warm", true}, {"snap-20261203-181500", true}, {"a", true}, {"9.x_y-z", true},
		{strings.Repeat("a", 64), true}, {strings.Repeat("a", 65), false}, {"", false}, {"-lead", false},
		{".lead", false}, {"with space", false}, {"a/b", false}, {"é", false},
	} {
		err := CheckName(c.name)
		var e *jsonapi.Error
		switch {
		case c.ok && err != nil:
			t.Errorf("CheckName(%q) = %v, want nil", c.name, err)
		case !c.ok && (!errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Hint == ""):
			t.Errorf("CheckName(%q) = %v, want a 400 with a hint", c.name, err)
		}
	}
}

// TestSizesAreWholeGiBRoundedUpWithinTheRange: a node's byte count becomes
// whole GiB, rounded up, never negative and never past store.MaxSnapshotGiB.
func TestSizesAreWholeGiBRoundedUpWithinTheRange(t *testing.T) {
	for _, c := range []struct{ bytes, gib int64 }{
		{-1, 0}, {0, 0}, {1, 1}, {1 << 30, 1}, {1<<30 + 1, 2}, {5 << 30, 5}, {1<<62 + 7, store.MaxSnapshotGiB},
		{1<<63 - 1, store.MaxSnapshotGiB},
	} {
		if got := gib(c.bytes); got != c.gib {
			t.Errorf("gib(%d) = %d, want %d", c.bytes, got, c.gib)
		}
	}
}
