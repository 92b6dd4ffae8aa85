package store

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestOverlayIndexesAreTakenOnceAndFreedByDelete: eight concurrent creates
// get distinct indexes; a name is taken once per tenant;
// a deleted overlay's index is the next one given.
func TestOverlayIndexesAreTakenOnceAndFreedByDelete(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	now := time.Now().UTC()
	var wg sync.WaitGroup
	recs := make([]*Overlay, 8)
	errs := make([]error, 8)
	for i := range recs {
		recs[i] = &Overlay{Overlay: sdk.Overlay{Name: "net" + string(rune('a'+i)), Tenant: acme.ID, CreatedAt: now}, ID: "ov-x"}
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.CreateOverlay(ctx, recs[i]) }()
	}
	wg.Wait()
	seen := map[int]bool{}
	for i, r := range recs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if seen[r.Index] {
			t.Fatalf("index %d given twice", r.Index)
		}
		seen[r.Index] = true
	}
	if err := s.CreateOverlay(ctx, &Overlay{Overlay: sdk.Overlay{Name: "neta", Tenant: acme.ID}}); !errors.Is(err, ErrExists) {
		t.Fatalf("a second overlay named neta: %v, want ErrExists", err)
	}
	got, err := s.GetOverlay(ctx, acme.ID, "netc")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOverlay(ctx, got); err != nil {
		t.Fatal(err)
	}
	again := &Overlay{Overlay: sdk.Overlay{Name: "late", Tenant: acme.ID}}
	if err := s.CreateOverlay(ctx, again); err != nil {
		t.Fatal(err)
	}
	if again.Index != got.Index {
		t.Errorf("after deleting index %d the next overlay got %d", got.Index, again.Index)
	}
	l, err := s.ListOverlays(ctx, acme.ID)
	if err != nil || len(l) != 8 {
		t.Fatalf("list: %d overlays, %v", len(l), err)
	}
}
