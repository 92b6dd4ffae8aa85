package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestTwoCentralsClaimAMonthsInvoiceOnce: eight claims of one tenant's
// month, from two centrals on one etcd at once: one wins, the others get
// the winner's record.
func TestTwoCentralsClaimAMonthsInvoiceOnce(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, Options{})
	tn := testTenant(t, a, "acme", sdk.Quotas{})
	ctx := context.Background()
	var wg sync.WaitGroup
	wins := make(chan int, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			got, claimed, err := s.ClaimInvoice(ctx, &sdk.Invoice{ID: tn.ID + "-2026-10", Tenant: tn.ID, Month: "2026-10", TotalCents: int64(i), Status: sdk.InvoiceCreating})
			if err != nil {
				t.Error(err)
				return
			}
			if claimed {
				wins <- i
			} else if got.Status != sdk.InvoiceCreating {
				t.Errorf("a losing claim got %+v", got)
			}
		}()
	}
	wg.Wait()
	close(wins)
	var won []int
	for i := range wins {
		won = append(won, i)
	}
	if len(won) != 1 {
		t.Fatalf("%d claims won: %v", len(won), won)
	}
	inv, err := b.ListInvoices(ctx, tn.ID)
	if err != nil || len(inv) != 1 || inv[0].TotalCents != int64(won[0]) {
		t.Fatalf("stored %+v %v, want the winner's", inv, err)
	}
}

// TestAStripeEventIsAppliedOnceFromTwoCentrals: the same event delivered
// to two centrals at once (Stripe retries; a load balancer spreads them)
// changes the invoice once.
func TestAStripeEventIsAppliedOnceFromTwoCentrals(t *testing.T) {
	a := openEmbedded(t, Options{})
	b := openPeer(t, a, Options{})
	tn := testTenant(t, a, "acme", sdk.Quotas{})
	ctx := context.Background()
	if _, _, err := a.ClaimInvoice(ctx, &sdk.Invoice{ID: "x", Tenant: tn.ID, Month: "2026-10", Status: sdk.InvoiceOpen}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.UpdateInvoice(ctx, tn.ID, "2026-10", func(x *sdk.Invoice) { x.StripeInvoiceID = "in_1" }); err != nil {
		t.Fatal(err)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
		seen    int
	)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			err := s.ApplyStripeEvent(ctx, "evt_1", "in_1", func(x *sdk.Invoice) {
				x.Status, x.UpdatedAt = sdk.InvoicePaid, time.Now()
			}, "", nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				applied++
			case errors.Is(err, ErrEventSeen):
				seen++
			default:
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if applied != 1 || seen != 5 {
		t.Fatalf("applied %d, seen %d; want 1 and 5", applied, seen)
	}
	inv, _ := a.ListInvoices(ctx, tn.ID)
	if inv[0].Status != sdk.InvoicePaid {
		t.Errorf("status %s", inv[0].Status)
	}
	// An event about an invoice nobody knows is recorded and changes nothing.
	if err := a.ApplyStripeEvent(ctx, "evt_2", "in_unknown", func(*sdk.Invoice) { t.Error("applied to nothing") }, "", nil); err != nil {
		t.Fatal(err)
	}
	if err := b.ApplyStripeEvent(ctx, "evt_2", "", nil, "", nil); !errors.Is(err, ErrEventSeen) {
		t.Errorf("the unknown invoice's event again: %v", err)
	}
}
