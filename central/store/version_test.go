package store

import (
	"errors"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
)

// TestAStaleVersionIsRefused: two operators read the policy (and the price
// list) at one version; the first write lands, the second, still naming
// the version it read, is refused with ErrStale and changes nothing; a write
// without a version is unconditional.
func TestAStaleVersionIsRefused(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})

	p, v, err := s.PolicyVersion(ctx)
	if err != nil || v != 0 {
		t.Fatalf("version of a policy never stored = %d, %v; want 0", v, err)
	}
	first := p
	first.LedgerRetentionDays = 30
	if _, err := s.PutPolicy(ctx, first, v); err != nil {
		t.Fatalf("first write at version %d: %v", v, err)
	}
	second := p
	second.LedgerRetentionDays = 90
	if _, err := s.PutPolicy(ctx, second, v); !errors.Is(err, ErrStale) {
		t.Fatalf("second write at the stale version: %v, want ErrStale", err)
	}
	got, v2, err := s.PolicyVersion(ctx)
	if err != nil || got.LedgerRetentionDays != 30 || v2 == v {
		t.Fatalf("policy after the refused write = %+v at %d, %v; want the first write's", got, v2, err)
	}
	if _, err := s.PutPolicy(ctx, second, v2); err != nil {
		t.Fatalf("write at the current version: %v", err)
	}
	if _, err := s.PutPolicy(ctx, first); err != nil {
		t.Fatalf("write without a version: %v", err)
	}

	pv, err := s.PricesVersion(ctx)
	if err != nil || pv != 0 {
		t.Fatalf("version of prices never stored = %d, %v", pv, err)
	}
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.PutPrices(ctx, billing.DefaultPrices(), at, pv); err != nil {
		t.Fatalf("first price list: %v", err)
	}
	if _, err := s.PutPrices(ctx, billing.DefaultPrices(), at.Add(time.Hour), pv); !errors.Is(err, ErrStale) {
		t.Fatalf("second price list at the stale version: %v, want ErrStale", err)
	}
	if h, err := s.PriceHistory(ctx); err != nil || len(h) != 2 {
		t.Fatalf("history after the refused write = %d versions, %v; want the defaults and the first list", len(h), err)
	}
}
