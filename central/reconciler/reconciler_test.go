package reconciler

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/leases"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/hashicorp/go-hclog"
)

// TestReconcileMakesTheLedgerAgreeWithARealNode runs a pass against a real
// node agent and a real etcd: an entry whose VM the node no longer lists
// ends as vanished; a stamped VM the ledger lacks is adopted under its
// store.EntryID and counts against its tenant's quota; a stamped VM marked
// deleted is not adopted; a second pass changes nothing.
func TestReconcileMakesTheLedgerAgreeWithARealNode(t *testing.T) {
	ctx := context.Background()
	node := nodetest.Start(t)
	st := storetest.Open(t)
	acme := &store.Tenant{Tenant: sdk.Tenant{Name: "acme", Quota: sdk.Quotas{MaxVMs: 1}}, TokenSHA256: store.HashToken("fvt_acme")}
	if err := st.CreateTenant(ctx, acme); err != nil {
		t.Fatal(err)
	}
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: node.URL, State: store.NodeUp, GuestOS: []string{store.GuestLinux},
		Drivers:       []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}},
		Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 8, MemoryMiB: 8192}},
		LastHeartbeat: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(node.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) *sdk.VM {
		vm, err := nc.CreateVM(ctx, sdk.CreateVMRequest{Name: name, Image: node.Image, VCPUs: 1, MemoryMiB: 64, Tenant: acme.ID})
		if err != nil {
			t.Fatal(err)
		}
		return vm
	}
	gone, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: acme.ID, Node: "n1", VMID: "vm-gone", Name: "gone", VCPUs: 1, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	// The VM's ledger entry counted against MaxVMs 1; it ends below, so
	// the stamped VM can take the room.
	orphan := create("orphan")
	deleted := create("deleted")
	if _, err := st.MarkDeleted(ctx, "n1", deleted.ID, "deleted", time.Now()); err != nil {
		t.Fatal(err)
	}

	callers := nodecall.New(node.AdminToken)
	rc := New(Options{Store: st, Nodes: callers,
		Leases: leases.New(st, vms.New(st, callers, time.Now, hclog.NewNullLogger()), time.Now, hclog.NewNullLogger())})
	rep, err := rc.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.NodesChecked, []string{"n1"}) || len(rep.NodesSkipped) != 0 {
		t.Fatalf("checked %v, skipped %v; want n1 checked", rep.NodesChecked, rep.NodesSkipped)
	}
	if len(rep.Ended) != 1 || rep.Ended[0].Entry != gone.ID || rep.Ended[0].VMID != "vm-gone" {
		t.Fatalf("ended %+v; want the entry of vm-gone", rep.Ended)
	}
	if e, err := st.GetEntry(ctx, gone.ID); err != nil || e.Running() || e.EndReason != "vanished" {
		t.Fatalf("vm-gone's entry = %+v, %v; want ended as vanished", e, err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0].VMID != orphan.ID || rep.Adopted[0].Entry != store.EntryID("n1", orphan.ID) ||
		rep.Adopted[0].Tenant != acme.ID {
		t.Fatalf("adopted %+v; want only %s (not %s, marked deleted) as entry %s", rep.Adopted, orphan.ID, deleted.ID, store.EntryID("n1", orphan.ID))
	}
	// The adopted VM fills acme's quota of one VM.
	_, err = st.Reserve(ctx, store.ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 1, MemoryMiB: 64})
	var qe *store.QuotaError
	if !errors.As(err, &qe) {
		t.Fatalf("reserve past the adopted VM = %v; want a quota error", err)
	}

	again, err := rc.Reconcile(ctx)
	if err != nil || len(again.Ended)+len(again.Adopted) != 0 {
		t.Fatalf("second pass = %+v, %v; want nothing ended or adopted", again, err)
	}
}

// TestMarkDownMarksOnlySilentNodes: a node past the silence is marked down
// once; a node that heartbeated within it stays up.
func TestMarkDownMarksOnlySilentNodes(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	now := time.Now().UTC()
	for name, last := range map[string]time.Time{"quiet": now.Add(-time.Minute), "chatty": now.Add(-time.Second)} {
		if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: "http://" + name + ":7777", State: store.NodeUp, LastHeartbeat: last}}); err != nil {
			t.Fatal(err)
		}
	}
	rc := New(Options{Store: st, Silence: 30 * time.Second, Now: func() time.Time { return now }})
	down, err := rc.MarkDown(ctx)
	if err != nil || !slices.Equal(down, []string{"quiet"}) {
		t.Fatalf("MarkDown = %v, %v; want [quiet]", down, err)
	}
	for name, want := range map[string]string{"quiet": store.NodeDown, "chatty": store.NodeUp} {
		if n, err := st.GetNode(ctx, name); err != nil || n.State != want {
			t.Errorf("node %s = %+v, %v; want %s", name, n, err, want)
		}
	}
	if down, err := rc.MarkDown(ctx); err != nil || len(down) != 0 {
		t.Fatalf("second MarkDown = %v, %v; want nothing", down, err)
	}
}
