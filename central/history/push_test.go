package history

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestConsentBelongsToTheMembershipAndThePreviewCountsOnlyFinishedVMs:
// consent given under one membership is gone under the next (a new member
// id), with every key the push kept for the old one; running VMs are not
// in the preview. (The drains themselves run against a real owner in
// central/api's history tests.)
func TestConsentBelongsToTheMembershipAndThePreviewCountsOnlyFinishedVMs(t *testing.T) {
	st := storetest.Open(t)
	ctx := context.Background()
	var mu sync.Mutex
	cur := &Membership{MemberID: "mem-first", OwnerURL: "http://owner.invalid", Token: "fleet-token"}
	p := NewPusher(PusherOptions{Store: st, Membership: func(context.Context) (*Membership, error) {
		mu.Lock()
		defer mu.Unlock()
		return cur, nil
	}, Activity: func(_ context.Context, e store.LedgerEntry) []byte {
		return []byte(`{"target":"` + e.Name + `"}` + "\n")
	}})
	end := time.Now().UTC().Truncate(time.Second)
	for i, e := range []store.LedgerEntry{
		{ID: "done-1", Node: "n", Name: "a", StartedAt: end.Add(-time.Hour), EndedAt: end},
		{ID: "done-2", Node: "n", Name: "b", StartedAt: end.Add(-time.Hour), EndedAt: end},
		{ID: "running", Node: "n", Name: "c", StartedAt: end.Add(-time.Hour)},
	} {
		b, _ := json.Marshal(e)
		if _, err := st.Client().Put(ctx, st.Prefix()+"ledger/"+e.ID, string(b)); err != nil {
			t.Fatal(i, err)
		}
	}
	pv, err := p.Preview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pv.Rows != 2 || pv.Payloads != 2 || pv.UnsentRows != 2 || pv.Bytes == 0 || len(pv.NeverSent) == 0 {
		t.Fatalf("preview: %+v", pv)
	}
	if _, err := p.Drain(ctx, true); !errors.Is(err, ErrConsent) {
		t.Fatalf("drain before consent: %v", err)
	}
	s, err := p.SetConsent(ctx, true)
	if err != nil || !s.Consent || s.State != sdk.HistoryIdle || s.Preview == nil {
		t.Fatalf("consent: %+v %v", s, err)
	}

	mu.Lock()
	cur = &Membership{MemberID: "mem-second", OwnerURL: "http://owner.invalid", Token: "another"}
	mu.Unlock()
	s, err = p.Status(ctx)
	if err != nil || s.Consent || s.State != sdk.HistoryConsentRequired {
		t.Fatalf("status under a new membership: %+v %v", s, err)
	}
	if g, _ := st.Client().Get(ctx, st.Prefix()+"history/push/mem-first/state"); len(g.Kvs) != 0 {
		t.Fatal("the old membership's consent is still kept")
	}

	mu.Lock()
	cur = nil // left the fleet
	mu.Unlock()
	if _, err := p.SetConsent(ctx, true); !errors.Is(err, ErrNoFleet) {
		t.Fatalf("consent outside a fleet: %v", err)
	}
}
