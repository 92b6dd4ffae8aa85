package vms

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
)

// TestListShowsEachTenantItsOwn: the list merges a real node's VMs with a
// down node's last heartbeat and the ledger; a tenant sees only its own VMs
// and only the unreachable nodes that run them, without their errors; the
// operator sees everything.
func TestListShowsEachTenantItsOwn(t *testing.T) {
	ctx := context.Background()
	node := nodetest.Start(t)
	st := storetest.Open(t)
	now := time.Now().UTC()
	for _, n := range []*store.Node{
		{FleetNode: sdk.FleetNode{Name: "up", URL: node.URL, State: store.NodeUp, LastHeartbeat: now}},
		{FleetNode: sdk.FleetNode{Name: "down", URL: "http://127.0.0.1:1", State: store.NodeDown, LastHeartbeat: now.Add(-time.Hour),
			VMs: []sdk.HeartbeatVM{{ID: "vm-d1", Name: "old", Tenant: "t-bob", State: sdk.StateRunning, VCPUs: 1, MemoryMiB: 64}}}},
	} {
		if err := st.PutNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(node.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct{ name, tenant string }{{"a", "t-alice"}, {"b", "t-bob"}} {
		vm, err := nc.CreateVM(ctx, sdk.CreateVMRequest{Name: v.name, Image: node.Image, VCPUs: 1, MemoryMiB: 64, Tenant: v.tenant})
		if err != nil {
			t.Fatal(err)
		}
		if v.name == "a" { // launched through central, from catalog image tiny
			if _, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: v.tenant, Node: "up", VMID: vm.ID, Name: vm.Name, VCPUs: 1, MemoryMiB: 64,
				GuestOS: store.GuestLinux, Image: "tiny", StartedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	imageOf := func(list *sdk.FleetVMList, name string) string {
		for _, vm := range list.VMs {
			if vm.Name == name {
				return vm.ImageName
			}
		}
		return "(no vm " + name + ")"
	}
	l := NewLister(st, nodecall.New(node.AdminToken))

	names := func(list *sdk.FleetVMList) map[string]bool {
		out := map[string]bool{}
		for _, vm := range list.VMs {
			out[vm.Node+"/"+vm.Name] = true
		}
		return out
	}
	alice, err := l.List(ctx, "t-alice")
	if err != nil || len(alice.VMs) != 1 || !names(alice)["up/a"] || len(alice.UnreachableNodes) != 0 {
		t.Fatalf("alice's list = %+v, %v; want only up/a and no unreachable node", alice, err)
	}
	bob, err := l.List(ctx, "t-bob")
	if err != nil || len(bob.VMs) != 2 || !names(bob)["up/b"] || !names(bob)["down/old"] {
		t.Fatalf("bob's list = %+v, %v; want up/b and down/old", bob, err)
	}
	if len(bob.UnreachableNodes) != 1 || bob.UnreachableNodes[0].Node != "down" || bob.UnreachableNodes[0].Error != "" {
		t.Fatalf("bob's unreachable nodes = %+v; want down, without its error", bob.UnreachableNodes)
	}
	op, err := l.List(ctx, "")
	if err != nil || len(op.VMs) != 3 || len(op.UnreachableNodes) != 1 || op.UnreachableNodes[0].Error == "" {
		t.Fatalf("the operator's list = %+v, %v; want all three VMs and the down node's error", op, err)
	}
	// The catalog image's name, where the ledger has it.
	if imageOf(alice, "a") != "tiny" || imageOf(op, "a") != "tiny" || imageOf(op, "b") != "" {
		t.Fatalf("image names: alice's a %q, the operator's a %q and b %q; want tiny, tiny and none",
			imageOf(alice, "a"), imageOf(op, "a"), imageOf(op, "b"))
	}

	// Find: names are per tenant; another tenant's VM is not there; the
	// operator must use an id for a name two tenants share.
	var sameA *sdk.VM
	for _, tenant := range []string{"t-alice", "t-bob"} {
		vm, err := nc.CreateVM(ctx, sdk.CreateVMRequest{Name: "same", Image: node.Image, VCPUs: 1, MemoryMiB: 64, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		if tenant == "t-alice" {
			sameA = vm
		}
	}
	if got, err := l.Find(ctx, "up", "same", "t-alice"); err != nil || got.ID != sameA.ID || got.Name != "same" {
		t.Fatalf("alice finding same = %+v, %v; want her own", got, err)
	}
	if _, err := l.Find(ctx, "up", sameA.ID, "t-bob"); !errors.Is(err, ErrNoVM) {
		t.Fatalf("bob finding alice's vm by id: %v, want ErrNoVM", err)
	}
	var amb *AmbiguousError
	if _, err := l.Find(ctx, "up", "same", ""); !errors.As(err, &amb) {
		t.Fatalf("the operator finding same: %v, want an AmbiguousError", err)
	}
	if got, err := l.Find(ctx, "up", sameA.ID, ""); err != nil || got.ID != sameA.ID || got.Name != "same" {
		t.Fatalf("the operator finding by id = %+v, %v", got, err)
	}
	if _, err := l.Find(ctx, "nope", "same", "t-alice"); !errors.Is(err, ErrNoVM) {
		t.Fatalf("a VM on an unknown node: %v, want ErrNoVM", err)
	}
}
