package vms

import (
	"context"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/hashicorp/go-hclog"
)

// TestRemoverKeepsTheLedgerInStep deletes through a real node agent (sim
// driver) and a real embedded etcd: a VM with an entry ends it; a VM
// without one is marked deleted, so its create can no longer record it; a
// VM its node no longer has ends as vanished; DeleteMatching deletes only
// the matching tenant's VMs.
func TestRemoverKeepsTheLedgerInStep(t *testing.T) {
	ctx := context.Background()
	node := nodetest.Start(t)
	st := storetest.Open(t)
	n := &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: node.URL, State: store.NodeUp}}
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(node.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	create := func(name, tenant string) *sdk.VM {
		vm, err := nc.CreateVM(ctx, sdk.CreateVMRequest{Name: name, Image: node.Image, VCPUs: 1, MemoryMiB: 64, Tenant: tenant})
		if err != nil {
			t.Fatal(err)
		}
		return vm
	}
	r := New(st, nodecall.New(node.AdminToken), time.Now, hclog.NewNullLogger())

	// With an entry: it ends as "deleted".
	a := create("a", "t-alice")
	e, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: "t-alice", Node: "n1", VMID: a.ID, Name: "a", VCPUs: 1, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if gone, err := r.Delete(ctx, n, a.ID, e, "deleted"); err != nil || gone {
		t.Fatalf("delete a = %v, %v", gone, err)
	}
	if got, err := st.GetEntry(ctx, e.ID); err != nil || got.Running() || got.EndReason != "deleted" {
		t.Fatalf("a's entry = %+v, %v; want ended as deleted", got, err)
	}

	// Without an entry: marked, so a late create's commit records nothing.
	b := create("b", "t-alice")
	if _, err := r.Delete(ctx, n, b.ID, nil, "deleted"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: "t-alice", Node: "n1", VMID: b.ID, Name: "b", VCPUs: 1, MemoryMiB: 64}); err == nil {
		t.Fatal("a VM deleted before its entry was written could still be recorded")
	}

	// Gone already: the entry says vanished.
	e2, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: "t-alice", Node: "n1", VMID: "vm-never", Name: "ghost", VCPUs: 1, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	if gone, err := r.Delete(ctx, n, "vm-never", e2, "deleted"); err != nil || !gone {
		t.Fatalf("delete a VM the node lacks = %v, %v; want gone", gone, err)
	}
	if got, _ := st.GetEntry(ctx, e2.ID); got == nil || got.EndReason != "vanished" {
		t.Fatalf("the entry of a VM already gone = %+v; want vanished", got)
	}

	// DeleteMatching: only bob's go.
	create("c", "t-alice")
	create("d", "t-bob")
	create("e", "t-bob")
	deleted, err := r.DeleteMatching(ctx, n, func(tenant string) bool { return tenant == "t-bob" }, "lease-ended")
	if err != nil || len(deleted) != 2 {
		t.Fatalf("DeleteMatching = %v, %v; want bob's two", deleted, err)
	}
	left, err := nc.ListVMs(ctx)
	if err != nil || len(left) != 1 || left[0].Name != "c" {
		t.Fatalf("left on the node: %+v, %v; want alice's c", left, err)
	}
}
