package leases

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/hashicorp/go-hclog"
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// putMac registers a healthy, idle macOS node of the given size at url.
func putMac(t *testing.T, st *store.Store, name, url string, vcpus, memMiB int64, edit func(*store.Node)) {
	t.Helper()
	n := &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: url, State: store.NodeUp, GuestOS: []string{store.GuestMacOS},
		Drivers:       []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}},
		Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: vcpus, MemoryMiB: memMiB, MacOSSlots: 2}},
		LastHeartbeat: time.Now().UTC()}}
	if edit != nil {
		edit(n)
	}
	if err := st.PutNode(context.Background(), n); err != nil {
		t.Fatal(err)
	}
}

func newTenant(t *testing.T, st *store.Store, name string) *store.Tenant {
	t.Helper()
	tn := &store.Tenant{Tenant: sdk.Tenant{Name: name}, TokenSHA256: store.HashToken("fvt_" + name)}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn
}

// TestCreateRefusesLeasedAndBusyNodesAndTakesTheSmallestMac: of a leased
// Mac, a Mac running VMs, a Linux node and two idle Macs, the smaller idle
// Mac is leased; asked by name, the busy one is refused with its reason;
// once both idle Macs are leased, the refusal counts the reasons.
func TestCreateRefusesLeasedAndBusyNodesAndTakesTheSmallestMac(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	acme, other := newTenant(t, st, "acme"), newTenant(t, st, "other")
	putMac(t, st, "tiny-busy", "http://tiny-busy:7777", 2, 4096, func(n *store.Node) {
		n.VMs = []sdk.HeartbeatVM{{ID: "vm-1", Name: "x", State: "running", VCPUs: 1, MemoryMiB: 512}}
	})
	putMac(t, st, "tiny-leased", "http://tiny-leased:7777", 2, 4096, nil)
	putMac(t, st, "tiny-linux", "http://tiny-linux:7777", 2, 4096, func(n *store.Node) { n.GuestOS = []string{store.GuestLinux} })
	putMac(t, st, "big", "http://big:7777", 16, 65536, nil)
	putMac(t, st, "small", "http://small:7777", 8, 16384, nil)
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	svc := New(st, vms.New(st, nodecall.New(""), clk.now, hclog.NewNullLogger()), clk.now, hclog.NewNullLogger())
	if _, err := svc.Create(ctx, Request{Tenant: other, Node: "tiny-leased"}); err != nil {
		t.Fatalf("lease tiny-leased to other: %v", err)
	}

	l, err := svc.Create(ctx, Request{Tenant: acme})
	if err != nil || l.Node != "small" || l.Tenant != acme.ID {
		t.Fatalf("lease = %+v, %v; want small, the smallest idle Mac, for acme", l, err)
	}
	est, err := svc.Estimate(ctx, Request{Tenant: acme})
	if err != nil || est.Node != "big" {
		t.Fatalf("estimate = %+v, %v; want big, the one idle Mac left", est, err)
	}

	for _, tc := range []struct {
		node, reason string
	}{
		{"tiny-busy", "running VMs"},
		{"tiny-leased", "leased"},
		{"tiny-linux", "not a Mac"},
		{"small", "leased"},
	} {
		_, err := svc.Create(ctx, Request{Tenant: acme, Node: tc.node})
		var refused *RefusedError
		if !errors.As(err, &refused) || refused.Reason != tc.reason {
			t.Errorf("lease %s = %v; want refused as %q", tc.node, err, tc.reason)
		}
	}
	if _, err := svc.Create(ctx, Request{Tenant: acme, Node: "nowhere"}); !errors.Is(err, ErrNoNode) {
		t.Errorf("lease an unknown node = %v; want ErrNoNode", err)
	}
	if _, err := svc.Create(ctx, Request{Tenant: acme, Hours: 3}); !errors.As(err, new(*ShortError)) {
		t.Errorf("a 3-hour lease = %v; want *ShortError", err)
	}

	if _, err := svc.Create(ctx, Request{Tenant: acme}); err != nil {
		t.Fatalf("lease big: %v", err)
	}
	_, err = svc.Create(ctx, Request{Tenant: acme})
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Node != "" ||
		refused.Reason != "of 5 nodes, 3 leased, 1 not a Mac, 1 running VMs" {
		t.Fatalf("lease with every Mac taken = %v; want the reasons counted", err)
	}
}

// TestEndExpiredEndsALeasePastItsEndAndDeletesTheLesseesVMs runs a real
// node agent: a lease with hours ends once its end passed (not before), the
// node waits for a scrub, and the lessee's VMs there are deleted while
// another tenant's stay.
func TestEndExpiredEndsALeasePastItsEndAndDeletesTheLesseesVMs(t *testing.T) {
	ctx := context.Background()
	node := nodetest.Start(t)
	st := storetest.Open(t)
	acme := newTenant(t, st, "acme")
	putMac(t, st, "mac1", node.URL, 8, 16384, nil)
	clk := &clock{t: time.Now().UTC()}
	svc := New(st, vms.New(st, nodecall.New(node.AdminToken), clk.now, hclog.NewNullLogger()), clk.now, hclog.NewNullLogger())
	l, err := svc.Create(ctx, Request{Tenant: acme, Hours: 24})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(node.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range []struct{ name, tenant string }{{"a", acme.ID}, {"b", acme.ID}, {"keep", "t-someone-else"}} {
		if _, err := nc.CreateVM(ctx, sdk.CreateVMRequest{Name: vm.name, Image: node.Image, VCPUs: 1, MemoryMiB: 64, Tenant: vm.tenant}); err != nil {
			t.Fatal(err)
		}
	}

	clk.add(23 * time.Hour)
	if ended, err := svc.EndExpired(ctx); err != nil || len(ended) != 0 {
		t.Fatalf("EndExpired an hour before the end = %v, %v; want nothing ended", ended, err)
	}
	clk.add(2 * time.Hour)
	ended, err := svc.EndExpired(ctx)
	if err != nil || !slices.Equal(ended, []string{l.ID}) {
		t.Fatalf("EndExpired past the end = %v, %v; want [%s]", ended, err, l.ID)
	}
	got, err := st.GetLease(ctx, l.ID)
	if err != nil || got.Active() || got.EndReason != "expired" || !got.VMsRemoved {
		t.Fatalf("lease after expiry = %+v, %v; want ended as expired with its VMs removed", got, err)
	}
	if n, err := st.GetNode(ctx, "mac1"); err != nil || !n.ScrubPending || n.LeasedBy != "" {
		t.Fatalf("node after expiry = %+v, %v; want scrub pending and not leased", n, err)
	}
	left, err := nc.ListVMs(ctx)
	var names []string
	for _, vm := range left {
		names = append(names, vm.Name)
	}
	if err != nil || strings.Join(names, ",") != "keep" {
		t.Fatalf("VMs left on the node = %v, %v; want only the other tenant's keep", names, err)
	}
	if again, err := svc.EndExpired(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a second EndExpired = %v, %v; want nothing", again, err)
	}
}
