package store

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/notify"
)

// TestPriceHistory: before any list is published the history is the
// defaults; the first publish also stores the defaults at the epoch, so it
// does not price the time before it; versions only go forward; a bad list
// is refused.
func TestPriceHistory(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := context.Background()
	h, err := s.PriceHistory(ctx)
	if err != nil || len(h) != 1 || h[0].Currency != "USD" || h[0].VMPerHour != 0 {
		t.Fatalf("history before any publish: %+v %v", h, err)
	}
	at := time.Date(2026, 10, 5, 9, 0, 0, 500, time.UTC)
	p := billing.DefaultPrices()
	p.Currency, p.VMPerHour = "EUR", 10_000
	if _, err := s.PutPrices(ctx, p, at); err != nil {
		t.Fatal(err)
	}
	h, err = s.PriceHistory(ctx)
	if err != nil || len(h) != 2 || !h[0].EffectiveFrom.Equal(time.Unix(0, 0)) || h[0].VMPerHour != 0 ||
		!h[1].EffectiveFrom.Equal(at.Truncate(time.Second)) || h[1].Currency != "EUR" {
		t.Fatalf("history after the first publish: %+v %v", h, err)
	}
	if got := billing.PricesAt(h, at.Add(-time.Hour)); got.VMPerHour != 0 || got.Currency != "USD" {
		t.Fatalf("the first list reaches back: %+v", got)
	}
	// A second list within the same second replaces the first of that second.
	p.VMPerHour = 20_000
	if _, err := s.PutPrices(ctx, p, at); err != nil {
		t.Fatal(err)
	}
	if h, _ = s.PriceHistory(ctx); len(h) != 2 || h[1].VMPerHour != 20_000 {
		t.Fatalf("history after a second publish in the same second: %+v", h)
	}
	if _, err := s.PutPrices(ctx, p, at.Add(-time.Minute)); !errors.Is(err, ErrConflict) {
		t.Fatalf("a version before the newest: %v, want ErrConflict", err)
	}
	p.Currency = "euro"
	if _, err := s.PutPrices(ctx, p, at.Add(time.Hour)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad list: %v, want ErrInvalid", err)
	}
	cur, err := s.CurrentPrices(ctx)
	if err != nil || cur.VMPerHour != 20_000 {
		t.Fatalf("current prices: %+v %v", cur, err)
	}
}

// TestEmitOnce: an event with a once key is recorded the first time only;
// events come back in the order they were recorded, by tenant.
func TestEmitOnce(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := context.Background()
	at := time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)
	for i, e := range []struct {
		kind, tenant, once string
		want               bool
	}{
		{notify.BudgetNear, "t-1", "budget.near/t-1/2026-10", true},
		{notify.BudgetNear, "t-1", "budget.near/t-1/2026-10", false},
		{notify.BudgetOver, "t-1", "budget.over/t-1/2026-10", true},
		{notify.BudgetNear, "t-2", "budget.near/t-2/2026-10", true},
		{"note", "t-1", "", true},
		{"note", "t-1", "", true},
	} {
		ok, err := s.Emit(ctx, notify.Event{Type: e.kind, Tenant: e.tenant, Time: at}, e.once)
		if err != nil || ok != e.want {
			t.Fatalf("emit %d (%s %s): %v %v, want %v", i, e.kind, e.once, ok, err, e.want)
		}
	}
	evs, err := s.Events(ctx, "t-1")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e.Type)
		if e.ID == "" || e.Tenant != "t-1" {
			t.Fatalf("event %+v", e)
		}
	}
	if want := "budget.near budget.over note note"; strings.Join(kinds, " ") != want {
		t.Fatalf("t-1's events %q, want %q", strings.Join(kinds, " "), want)
	}
	if all, _ := s.Events(ctx, ""); len(all) != 5 {
		t.Fatalf("all events: %d, want 5", len(all))
	}
}
