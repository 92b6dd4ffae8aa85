package drainer

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestScrubProvesTheNodeEmpty: a scrub is refused on a leased node, a down
// node, and a node with a VM left (without force, naming it); with force it
// deletes the VM (its entry ends as scrubbed), the node shows no VM and no
// workspace, and scrub_pending is cleared.
func TestScrubProvesTheNodeEmpty(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, "host")
	acme := mustTenant(t, f.st, "acme")
	stray := f.launch(t, "host", acme, sdk.CreateVMRequest{Name: "stray"}, false)
	set := func(fn func(n *store.Node)) {
		t.Helper()
		if _, err := f.st.UpdateNode(ctx, "host", false, func(n *store.Node) error { fn(n); return nil }); err != nil {
			t.Fatal(err)
		}
	}

	set(func(n *store.Node) { n.LeasedBy, n.LeaseID, n.ScrubPending = acme, "l-1", true })
	var le *LeasedError
	if _, err := f.dr.Scrub(ctx, "host", true); !errors.As(err, &le) || le.Lease != "l-1" {
		t.Fatalf("scrub of a leased node = %v; want a LeasedError", err)
	}
	set(func(n *store.Node) { n.LeasedBy, n.LeaseID, n.State = "", "", store.NodeDown })
	if _, err := f.dr.Scrub(ctx, "host", true); !errors.Is(err, ErrNodeDown) {
		t.Fatalf("scrub of a down node = %v; want ErrNodeDown", err)
	}
	set(func(n *store.Node) { n.State = store.NodeUp })

	var lo *LeftoverError
	if _, err := f.dr.Scrub(ctx, "host", false); !errors.As(err, &lo) || lo.Forced || lo.Count != 1 || !slices.Equal(lo.Sample, []string{"stray"}) {
		t.Fatalf("scrub with a VM left = %v; want a LeftoverError naming stray", err)
	}
	if n, _ := f.st.GetNode(ctx, "host"); !n.ScrubPending {
		t.Fatal("a refused scrub cleared scrub_pending")
	}

	res, err := f.dr.Scrub(ctx, "host", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.ScrubPending || len(res.Deleted) != 1 || res.Proof != "the node lists no VM and no VM workspace" {
		t.Fatalf("forced scrub = %+v", res)
	}
	if got := f.names(t, "host"); len(got) != 0 {
		t.Fatalf("host still runs %v", got)
	}
	if e, err := f.st.GetEntry(ctx, stray.ID); err != nil || e.Running() || e.EndReason != "scrubbed" {
		t.Fatalf("stray's entry = %+v, %v; want ended as scrubbed", e, err)
	}
	if n, _ := f.st.GetNode(ctx, "host"); n.ScrubPending {
		t.Fatal("scrub_pending survived the scrub")
	}
}

// TestPlanMovesOnlyMovableVMsOffOverloadedNodes: on a full node, the
// reschedulable and the ephemeral VM are planned onto the roomy node and
// the plain one is not; nothing moves.
func TestPlanMovesOnlyMovableVMsOffOverloadedNodes(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, "busy", "roomy")
	if _, err := f.st.UpdateNode(ctx, "busy", false, func(n *store.Node) error {
		n.Capacity.Total.VCPUs, n.Capacity.Free.VCPUs = 3, 3
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	acme := mustTenant(t, f.st, "acme")
	f.launch(t, "busy", acme, sdk.CreateVMRequest{Name: "mover"}, true)
	f.launch(t, "busy", acme, sdk.CreateVMRequest{Name: "eph", Labels: map[string]string{EphemeralLabel: "true"}}, false)
	f.launch(t, "busy", acme, sdk.CreateVMRequest{Name: "plain"}, false)

	plan, err := f.dr.Plan(ctx, 0.5, 10)
	if err != nil {
		t.Fatal(err)
	}
	var moved []string
	for _, m := range plan.Moves {
		if m.From != "busy" || m.To != "roomy" || m.Tenant != acme {
			t.Fatalf("move %+v; want busy to roomy, acme's", m)
		}
		moved = append(moved, m.Name)
	}
	slices.Sort(moved)
	if !slices.Equal(moved, []string{"eph", "mover"}) || len(plan.NodesSkipped) != 0 {
		t.Fatalf("plan moves %v, skips %v; want eph and mover, no skip", moved, plan.NodesSkipped)
	}
	if got := f.names(t, "busy"); len(got) != 3 {
		t.Fatalf("a plan changed busy: %v", got)
	}
}
