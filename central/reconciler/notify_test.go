package reconciler

import (
	"context"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestNodeDownIsNotifiedOncePerSilence: a node marked down sends node.down
// to the operator once, even when two reconcilers (two centrals) judge it;
// after it comes back and falls silent again, it sends one more.
func TestNodeDownIsNotifiedOncePerSilence(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	beat := now.Add(-time.Minute)
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: "http://127.0.0.1:1", State: store.NodeUp, LastHeartbeat: beat}}); err != nil {
		t.Fatal(err)
	}
	a := New(Options{Store: st, Notify: st, Silence: 30 * time.Second, Now: clock})
	b := New(Options{Store: st, Notify: st, Silence: 30 * time.Second, Now: clock})
	count := func() int {
		t.Helper()
		evs, err := st.Events(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range evs {
			if e.Type == sdk.NotifyNodeDown {
				n++
				if e.Tenant != "" || e.Link != "/fleet/nodes/n1" || e.Title == "" {
					t.Fatalf("node.down %+v", e)
				}
			}
		}
		return n
	}
	if _, err := a.MarkDown(ctx); err != nil {
		t.Fatal(err)
	}
	// b read the node before a marked it: it judges the same silence again.
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: "http://127.0.0.1:1", State: store.NodeUp, LastHeartbeat: beat}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.MarkDown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d node.down for one silence, want 1", n)
	}
	// Back up, then silent again: a new silence, a new notification.
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: "http://127.0.0.1:1", State: store.NodeUp, LastHeartbeat: now}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if _, err := a.MarkDown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d node.down after a second silence, want 2", n)
	}
}
