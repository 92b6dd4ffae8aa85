package vms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
)

// TestListShowsEachTenantItsOwn: the list merges real nodes' VMs with a
// down node's last heartbeat and the ledger; a tenant sees only its own VMs
// and only the unreachable nodes that run them, without their errors; the
// operator sees everything. A tenant's list asks only the nodes that hold
// its VMs (by ledger, reservation or heartbeat stamp), counted by the node's
// own request metric.
func TestListShowsEachTenantItsOwn(t *testing.T) {
	ctx := context.Background()
	token := "fvt_shared-admin"
	node := nodetest.Start(t, nodetest.WithAdminToken(token))
	other := nodetest.Start(t, nodetest.WithAdminToken(token))
	st := storetest.Open(t)
	now := time.Now().UTC()
	capacity := sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 8, MemoryMiB: 8192}, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 8192}}
	up := &store.Node{FleetNode: sdk.FleetNode{Name: "up", URL: node.URL, State: store.NodeUp, LastHeartbeat: now, Capacity: capacity}}
	for _, n := range []*store.Node{
		up,
		{FleetNode: sdk.FleetNode{Name: "other", URL: other.URL, State: store.NodeUp, LastHeartbeat: now, Capacity: capacity}},
		{FleetNode: sdk.FleetNode{Name: "down", URL: "http://127.0.0.1:1", State: store.NodeDown, LastHeartbeat: now.Add(-time.Hour),
			VMs: []sdk.HeartbeatVM{{ID: "vm-d1", Name: "old", Tenant: "t-bob", State: sdk.StateRunning, VCPUs: 1, MemoryMiB: 64}}}},
	} {
		if err := st.PutNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	oc, err := sdk.NewNodeClient(other.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	var b *sdk.VM
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
		} else {
			b = vm // made on the node outside central: no ledger entry
		}
	}
	// Carol's create is under way on other: reserved, made on the node, not yet recorded.
	if _, err := st.Reserve(ctx, store.ReserveRequest{Tenant: "t-carol", Node: "other", VCPUs: 1, MemoryMiB: 64,
		Quotas: &sdk.Quotas{MaxVMs: 5, MaxVCPUs: 5, MaxMemoryMiB: 1024}}); err != nil {
		t.Fatal(err)
	}
	if _, err := oc.CreateVM(ctx, sdk.CreateVMRequest{Name: "c", Image: other.Image, VCPUs: 1, MemoryMiB: 64, Tenant: "t-carol"}); err != nil {
		t.Fatal(err)
	}
	imageOf := func(list *sdk.FleetVMList, name string) string {
		for _, vm := range list.VMs {
			if vm.Name == name {
				return vm.ImageName
			}
		}
		return "(no vm " + name + ")"
	}
	l := NewLister(st, nodecall.New(token))

	names := func(list *sdk.FleetVMList) map[string]bool {
		out := map[string]bool{}
		for _, vm := range list.VMs {
			out[vm.Node+"/"+vm.Name] = true
		}
		return out
	}
	otherAsked := func() int { return listCalls(t, other) }
	asked := otherAsked()
	alice, err := l.List(ctx, "t-alice")
	if err != nil || len(alice.VMs) != 1 || !names(alice)["up/a"] || len(alice.UnreachableNodes) != 0 {
		t.Fatalf("alice's list = %+v, %v; want only up/a and no unreachable node", alice, err)
	}
	if n := otherAsked(); n != asked {
		t.Fatalf("alice's list asked node other for its VMs (%d times); it holds none of hers", n-asked)
	}
	carol, err := l.List(ctx, "t-carol")
	if err != nil || len(carol.VMs) != 1 || !names(carol)["other/c"] {
		t.Fatalf("carol's list = %+v, %v; want other/c, whose create is under way", carol, err)
	}
	if n := otherAsked(); n != asked+1 {
		t.Fatalf("carol's list asked node other %d times; want once", n-asked)
	}
	// Bob's b, made outside central, shows once a heartbeat carries it.
	bob, err := l.List(ctx, "t-bob")
	if err != nil || len(bob.VMs) != 1 || !names(bob)["down/old"] {
		t.Fatalf("bob's list before a heartbeat carries b = %+v, %v; want down/old alone", bob, err)
	}
	up.VMs = []sdk.HeartbeatVM{{ID: b.ID, Name: b.Name, Tenant: "t-bob", State: b.State, VCPUs: 1, MemoryMiB: 64}}
	if err := st.PutNode(ctx, up); err != nil {
		t.Fatal(err)
	}
	bob, err = l.List(ctx, "t-bob")
	if err != nil || len(bob.VMs) != 2 || !names(bob)["up/b"] || !names(bob)["down/old"] {
		t.Fatalf("bob's list = %+v, %v; want up/b and down/old", bob, err)
	}
	if len(bob.UnreachableNodes) != 1 || bob.UnreachableNodes[0].Node != "down" || bob.UnreachableNodes[0].Error != "" {
		t.Fatalf("bob's unreachable nodes = %+v; want down, without its error", bob.UnreachableNodes)
	}
	asked = otherAsked()
	op, err := l.List(ctx, "")
	if err != nil || len(op.VMs) != 4 || len(op.UnreachableNodes) != 1 || op.UnreachableNodes[0].Error == "" {
		t.Fatalf("the operator's list = %+v, %v; want all four VMs and the down node's error", op, err)
	}
	if n := otherAsked(); n != asked+1 {
		t.Fatalf("the operator's list asked node other %d times; want once", n-asked)
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

// listCalls is how many GET /v1/vms a real node has answered, from its own
// request metric.
func listCalls(t *testing.T, n *nodetest.Node) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, n.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.ReadOnlyToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the node's metrics: %d, %v", resp.StatusCode, err)
	}
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "fluxvm_api_requests_total{") && strings.Contains(line, `route="GET /v1/vms"`) {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			total += int(v)
		}
	}
	return total
}

// countScans is the real store, counting reads of a node's whole running list.
type countScans struct {
	*store.Store
	scans int
}

func (c *countScans) RunningOnNode(ctx context.Context, node string) ([]store.LedgerEntry, error) {
	c.scans++
	return c.Store.RunningOnNode(ctx, node)
}

// TestFindByIDReadsOneEntry: a VM named by its id is found by its entry's key,
// without reading everything the node runs; a name still is looked for among
// the node's entries; another tenant's id is not found.
func TestFindByIDReadsOneEntry(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	now := time.Now().UTC()
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "busy", URL: "http://127.0.0.1:1", State: store.NodeDown, LastHeartbeat: now}}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		tenant := []string{"t-alice", "t-bob"}[i%2]
		if _, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: tenant, Node: "busy", VMID: fmt.Sprintf("vm-%02d", i), Name: fmt.Sprintf("web-%02d", i),
			VCPUs: 1, MemoryMiB: 64, StartedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	cs := &countScans{Store: st}
	l := NewLister(cs, nodecall.New(""))
	got, err := l.Find(ctx, "busy", "vm-04", "t-alice")
	if err != nil || got.Entry == nil || got.ID != "vm-04" || got.Name != "web-04" || cs.scans != 0 {
		t.Fatalf("alice finding vm-04 = %+v, %v after %d scans; want her web-04 and no scan", got, err, cs.scans)
	}
	if got, err = l.Find(ctx, "busy", "web-06", "t-alice"); err != nil || got.ID != "vm-06" || cs.scans != 1 {
		t.Fatalf("alice finding web-06 = %+v, %v after %d scans; want vm-06 after one scan", got, err, cs.scans)
	}
	if _, err := l.Find(ctx, "busy", "vm-05", "t-alice"); !errors.Is(err, ErrNoVM) {
		t.Fatalf("alice finding bob's vm-05: %v, want ErrNoVM", err)
	}
	if got, err = l.Find(ctx, "busy", "vm-05", ""); err != nil || got.Entry == nil || got.Entry.Tenant != "t-bob" {
		t.Fatalf("the operator finding vm-05 = %+v, %v; want bob's", got, err)
	}
}
