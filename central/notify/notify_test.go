package notify

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestClipHoldsTheBoundsWithoutSplittingACharacter: long text is cut to
// the bounds, at a character boundary, and short text is left alone.
func TestClipHoldsTheBoundsWithoutSplittingACharacter(t *testing.T) {
	e := Event{Title: strings.Repeat("é", MaxTitleLen), Detail: strings.Repeat("x", MaxDetailLen+5), Link: "/fleet/leases/l-1"}
	Clip(&e)
	if len(e.Title) > MaxTitleLen || !utf8.ValidString(e.Title) || len(e.Title) < MaxTitleLen-1 {
		t.Fatalf("title clipped to %d bytes, valid %v", len(e.Title), utf8.ValidString(e.Title))
	}
	if len(e.Detail) != MaxDetailLen || e.Link != "/fleet/leases/l-1" {
		t.Fatalf("detail %d bytes, link %q", len(e.Detail), e.Link)
	}
}
