package drainer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/hashicorp/go-hclog"
)

const testToken = "drainer-test-fleet-token"

// clock is a settable clock for the drainer.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fleet is a real embedded etcd and real node agents (sim driver) that
// accept one token and one image path, as central's nodes do.
type fleet struct {
	st    *store.Store
	clock *clock
	dr    *Drainer
	nodes map[string]*nodetest.Node
	image string
}

func newFleet(t *testing.T, names ...string) *fleet {
	t.Helper()
	ctx := context.Background()
	st := storetest.Open(t)
	f := &fleet{st: st, clock: &clock{t: time.Now().UTC()}, nodes: map[string]*nodetest.Node{}}
	for i, name := range names {
		var n *nodetest.Node
		if i == 0 {
			n = nodetest.Start(t, nodetest.WithAdminToken(testToken))
			f.image = n.Image
		} else {
			n = nodetest.Start(t, nodetest.WithAdminToken(testToken), nodetest.WithImage(f.image))
		}
		f.nodes[name] = n
		rec := &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: n.URL, State: store.NodeUp, GuestOS: []string{store.GuestLinux},
			Drivers:       []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}},
			Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 8, MemoryMiB: 8192}, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 8192}},
			LastHeartbeat: time.Now().UTC()}}
		if err := st.PutNode(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	calls := nodecall.New(testToken)
	log := hclog.NewNullLogger()
	f.dr = New(st, calls, placement.New(st), vms.New(st, calls, f.clock.now, log), f.clock.now, log)
	return f
}

func (f *fleet) client(t *testing.T, node string) *sdk.NodeClient {
	t.Helper()
	nc, err := sdk.NewNodeClient(f.nodes[node].URL, sdk.WithToken(testToken))
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// launch creates a VM on node as central does: on the node, then its
// ledger entry, and for a reschedulable one the kept spec.
func (f *fleet) launch(t *testing.T, node, tenant string, req sdk.CreateVMRequest, reschedulable bool) *store.LedgerEntry {
	t.Helper()
	ctx := context.Background()
	req.Image, req.Tenant, req.GuestOS, req.VCPUs, req.MemoryMiB = f.image, tenant, store.GuestLinux, 1, 256
	vm, err := f.client(t, node).CreateVM(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e, err := f.st.RecordEntry(ctx, store.LedgerEntry{Tenant: tenant, Node: node, VMID: vm.ID, Name: vm.Name,
		VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, GuestOS: req.GuestOS, StartedAt: f.clock.now()})
	if err != nil {
		t.Fatal(err)
	}
	if reschedulable {
		kept := KeptSpec{Spec: req}
		if err := f.st.PutSpec(ctx, e.ID, kept.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (f *fleet) names(t *testing.T, node string) []string {
	t.Helper()
	list, err := f.client(t, node).ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, vm := range list {
		out = append(out, vm.Name)
	}
	sort.Strings(out)
	return out
}

func actions(d *store.Drain) map[string]string {
	out := map[string]string{}
	for _, v := range d.VMs {
		a := v.Action
		if v.MovedTo != "" {
			a += " " + v.MovedTo
		}
		if v.Error != "" {
			a += ": " + v.Error
		}
		out[v.Name] = a
	}
	return out
}

func mustTenant(t *testing.T, st *store.Store, name string) string {
	t.Helper()
	tn := &store.Tenant{Tenant: sdk.Tenant{Name: name}, TokenSHA256: store.HashToken("fvt_" + name)}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn.ID
}

// TestDrainRefusesBadRequests: an unknown mode, an unknown node and a
// leased node without force are refused before anything changes.
func TestDrainRefusesBadRequests(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	if err := f.st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "leased", URL: "http://leased:7777", State: store.NodeUp,
		LeasedBy: "t-someone", LeaseID: "l-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.dr.Drain(ctx, "leased", "evacuate", false); !errors.Is(err, ErrBadMode) {
		t.Fatalf("mode evacuate = %v; want ErrBadMode", err)
	}
	for _, name := range []string{"nowhere", "not/a name"} {
		if _, err := f.dr.Drain(ctx, name, sdk.DrainCordon, false); !errors.Is(err, ErrNoNode) {
			t.Fatalf("drain of %q = %v; want ErrNoNode", name, err)
		}
	}
	var le *LeasedError
	if _, err := f.dr.Drain(ctx, "leased", sdk.DrainCordon, false); !errors.As(err, &le) || le.Lease != "l-1" {
		t.Fatalf("drain of a leased node = %v; want a LeasedError for l-1", err)
	}
	if n, _ := f.st.GetNode(ctx, "leased"); n.Cordoned || n.Draining {
		t.Fatalf("a refused drain changed the node: %+v", n)
	}
	if _, _, err := f.dr.Status(ctx, "leased"); !errors.Is(err, ErrNotDrained) {
		t.Fatalf("status of a node never drained = %v; want ErrNotDrained", err)
	}
}

// TestEvictEphemeralDeletesOnlyEphemeralVMs: of a VM with a TTL, one
// labelled ephemeral and a plain one, the drain deletes the first two (their
// entries end as drained), keeps the third, and finishes; an uncordon then
// ends the drain and keeps its record.
func TestEvictEphemeralDeletesOnlyEphemeralVMs(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, "src")
	acme := mustTenant(t, f.st, "acme")
	ttl := f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "eph-ttl", TTLSeconds: 3600}, false)
	label := f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "eph-label", Labels: map[string]string{EphemeralLabel: "true"}}, false)
	plain := f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "plain", Labels: map[string]string{EphemeralLabel: "false"}}, false)

	d, err := f.dr.Drain(ctx, "src", sdk.DrainEvictEphemeral, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"eph-ttl": "deleted", "eph-label": "deleted", "plain": "kept"}
	if got := actions(d); !d.Finished || !maps.Equal(got, want) {
		t.Fatalf("drain: finished %v, %v; want finished, %v", d.Finished, got, want)
	}
	if got := f.names(t, "src"); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("src runs %v; want only plain", got)
	}
	for _, e := range []*store.LedgerEntry{ttl, label} {
		if got, err := f.st.GetEntry(ctx, e.ID); err != nil || got.Running() || got.EndReason != "drained" {
			t.Fatalf("entry of %s = %+v, %v; want ended as drained", e.Name, got, err)
		}
	}
	if got, err := f.st.GetEntry(ctx, plain.ID); err != nil || !got.Running() {
		t.Fatalf("entry of plain = %+v, %v; want running", got, err)
	}
	saved, draining, err := f.dr.Status(ctx, "src")
	if err != nil || !draining || !saved.Finished || !maps.Equal(actions(saved), want) {
		t.Fatalf("status = %+v draining %v, %v", saved, draining, err)
	}
	if n, _ := f.st.GetNode(ctx, "src"); !n.Cordoned || !n.Draining {
		t.Fatalf("src after the drain: %+v; want cordoned and draining", n)
	}
	// An uncordon ends the drain; its record stays.
	if n, err := f.dr.Uncordon(ctx, "src"); err != nil || n.Cordoned || n.Draining {
		t.Fatalf("uncordon = %+v, %v", n, err)
	}
	if saved, draining, err := f.dr.Status(ctx, "src"); err != nil || draining || !saved.Finished {
		t.Fatalf("status after the uncordon = %+v draining %v, %v", saved, draining, err)
	}
}

// TestRescheduleMovesAVMToAnotherNode: a reschedulable VM is recreated on
// the other node (same name and tenant), its copy gets a new running entry
// that replaces the old one and keeps the spec, and the old VM goes with
// its entry ended as rescheduled; a VM without a kept spec stays.
func TestRescheduleMovesAVMToAnotherNode(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, "src", "dst")
	acme := mustTenant(t, f.st, "acme")
	old := f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "mover", Labels: map[string]string{"app": "web"}}, true)
	f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "plain"}, false)

	d, err := f.dr.Drain(ctx, "src", sdk.DrainReschedule, false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"mover": "moved dst", "plain": "kept"}
	if got := actions(d); !d.Finished || !maps.Equal(got, want) {
		t.Fatalf("drain: finished %v, %v; want finished, %v", d.Finished, got, want)
	}
	if got := f.names(t, "src"); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("src runs %v; want only plain", got)
	}
	moved, err := f.client(t, "dst").ListVMs(ctx)
	if err != nil || len(moved) != 1 || moved[0].Name != "mover" || moved[0].Tenant != acme || moved[0].Labels["app"] != "web" {
		t.Fatalf("dst runs %+v, %v; want acme's mover with its labels", moved, err)
	}
	if got, err := f.st.GetEntry(ctx, old.ID); err != nil || got.Running() || got.EndReason != "rescheduled" {
		t.Fatalf("the old entry = %+v, %v; want ended as rescheduled", got, err)
	}
	running, err := f.st.RunningOnNode(ctx, "dst")
	if err != nil || len(running) != 1 || running[0].VMID != moved[0].ID || running[0].Replaces != old.ID || running[0].Tenant != acme {
		t.Fatalf("dst's running entries = %+v, %v; want the copy, replacing %s", running, err, old.ID)
	}
	if _, err := f.st.GetSpec(ctx, running[0].ID); err != nil {
		t.Fatalf("the copy lost its kept spec: %v", err)
	}
}

// TestResumeDrainsFinishesAnUnfinishedDrain: a drain a central left
// unfinished is left alone while fresh, then taken up: the ephemeral VM
// still on the node goes, the outcome recorded before stays in the report,
// and the drain finishes. A drain whose node was uncordoned is not taken up.
func TestResumeDrainsFinishesAnUnfinishedDrain(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, "src", "other")
	acme := mustTenant(t, f.st, "acme")
	f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "eph", TTLSeconds: 3600}, false)
	f.launch(t, "src", acme, sdk.CreateVMRequest{Name: "plain"}, false)
	f.launch(t, "other", acme, sdk.CreateVMRequest{Name: "eph-other", TTLSeconds: 3600}, false)
	for _, name := range []string{"src", "other"} {
		if _, err := f.st.UpdateNode(ctx, name, false, func(n *store.Node) error { n.Cordoned, n.Draining = true, true; return nil }); err != nil {
			t.Fatal(err)
		}
		// What a central that died after its first delete left behind.
		now := f.clock.now()
		if err := f.st.PutDrain(ctx, &store.Drain{Drain: sdk.Drain{Node: name, Mode: sdk.DrainEvictEphemeral, StartedAt: now, UpdatedAt: now,
			VMs: []sdk.DrainVM{{ID: "vm-gone", Name: "gone", Tenant: acme, Ephemeral: true, Action: "deleted"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	// other is uncordoned: its drain ended.
	if _, err := f.st.UpdateNode(ctx, "other", false, func(n *store.Node) error { n.Cordoned, n.Draining = false, false; return nil }); err != nil {
		t.Fatal(err)
	}

	// Fresh: its central may still be at it.
	f.clock.advance(30 * time.Second)
	if err := f.dr.ResumeDrains(ctx); err != nil {
		t.Fatal(err)
	}
	if d, _ := f.st.GetDrain(ctx, "src"); d.Finished || len(f.names(t, "src")) != 2 {
		t.Fatalf("a drain touched 30 s ago was taken up: %+v", d)
	}

	f.clock.advance(time.Minute)
	if err := f.dr.ResumeDrains(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := f.st.GetDrain(ctx, "src")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"gone": "deleted", "eph": "deleted", "plain": "kept"}
	if got := actions(d); !d.Finished || !maps.Equal(got, want) {
		t.Fatalf("resumed drain: finished %v, %v; want finished, %v", d.Finished, got, want)
	}
	if got := f.names(t, "src"); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("src runs %v; want only plain", got)
	}
	if d, _ := f.st.GetDrain(ctx, "other"); d.Finished || len(f.names(t, "other")) != 1 {
		t.Fatalf("the drain of an uncordoned node was taken up: %+v", d)
	}
}
