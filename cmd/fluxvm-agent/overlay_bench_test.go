package main_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/vishvananda/netlink"
)

// blastMiB is what one transfer carries: enough to dwarf the exec's own
// cost, little enough for TCG guests.
const blastMiB = 16

// blaster serves blastMiB of zeros on port 7001 of the VM to each
// connection (busybox nc; the connection ends when dd does).
func (n *netNode) blaster(vm *sdk.VM) {
	n.t.Helper()
	script := fmt.Sprintf("printf '#!/bin/sh\\ndd if=/dev/zero bs=65536 count=%d 2>/dev/null\\n' > /tmp/blast && chmod +x /tmp/blast && "+
		"(setsid sh -c 'while true; do nc -l -p 7001 -e /tmp/blast; done' </dev/null >/dev/null 2>&1 &)", blastMiB*16)
	if code, out := n.sh(vm, script); code != 0 {
		n.t.Fatalf("start the blaster in %s: %d %s", vm.Name, code, out)
	}
}

// pull has from read to's blast and returns MiB/s (wall time around the
// guest's command, as the host sees it).
func (n *netNode) pull(from, to *sdk.VM) float64 {
	n.t.Helper()
	start := time.Now()
	code, out := n.sh(from, "nc -w 10 "+ip(to)+" 7001 </dev/null | wc -c")
	took := time.Since(start)
	if code != 0 || strings.TrimSpace(out) != fmt.Sprint(blastMiB<<20) {
		n.t.Fatalf("%s pulled from %s: %d %q, want %d bytes", from.Name, to.Name, code, out, blastMiB<<20)
	}
	return blastMiB / took.Seconds()
}

// BenchmarkOverlayThroughput: TCP throughput between two QEMU guests (TCG)
// on two nodes (each in its own namespace, joined by a veth pair) over a
// tenant's WireGuard overlay, and over the same path without encryption:
// two tenant networks routed between the nodes through the same veth pair.
// Each round measures both, alternating which goes first; it reports MiB/s
// of each and their ratio (overlay ÷ plain) round by round, each as a median
// with its p10–p90. The central's etcd fsyncs (storetest.Open in a benchmark).
func BenchmarkOverlayThroughput(b *testing.B) {
	n1 := startNetNodeNamed(b, "ov-1", `overlay_address = "192.0.2.1"`)
	n2 := startNetNodeNamed(b, "ov-2", `overlay_address = "192.0.2.2"`)
	veth(b, n1.ns, n2.ns, "under0", []string{"192.0.2.1/24"}, []string{"192.0.2.2/24"})
	ctx := b.Context()
	st, svc := overlayCentral(b, n1, n2)
	acme := storetest.Tenant(b, st, "acme")
	if _, err := svc.Create(ctx, acme.ID, sdk.CreateOverlayRequest{Name: "bench", Nodes: []string{"ov-1", "ov-2"}}); err != nil {
		b.Fatal(err)
	}
	join := func(n *netNode, node, name string) *sdk.VM {
		id, subnet, egress, err := svc.Launch(ctx, acme.ID, node, []string{"bench"})
		if err != nil {
			b.Fatal(err)
		}
		return n.createWith(sdk.CreateVMRequest{Name: name, Network: "tenant", Tenant: acme.ID, NetworkID: id, Subnet: subnet, Egress: &egress})
	}
	o1, o2 := join(n1, "ov-1", "o1"), join(n2, "ov-2", "o2")
	// The plain path: one subnet per node, routed through the veth pair.
	p1 := n1.createWith(sdk.CreateVMRequest{Name: "p1", Network: "tenant", Tenant: "plain", Subnet: "10.232.1.0/24"})
	p2 := n2.createWith(sdk.CreateVMRequest{Name: "p2", Network: "tenant", Tenant: "plain", Subnet: "10.232.2.0/24"})
	for _, r := range []struct {
		n       *netNode
		dst, gw string
	}{{n1, "10.232.2.0/24", "192.0.2.2"}, {n2, "10.232.1.0/24", "192.0.2.1"}} {
		h, err := netlink.NewHandleAt(r.n.ns)
		if err != nil {
			b.Fatal(err)
		}
		dst, _ := netlink.ParseIPNet(r.dst)
		gw, _ := netlink.ParseAddr(r.gw + "/32")
		err = h.RouteAdd(&netlink.Route{Dst: dst, Gw: gw.IP})
		h.Close()
		if err != nil {
			b.Fatalf("route %s via %s: %v", r.dst, r.gw, err)
		}
	}
	n2.blaster(o2)
	n2.blaster(p2)
	var overlay, plain []float64 // MiB/s of each round
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		benchstat.Interleave(i,
			func() { overlay = append(overlay, n1.pull(o1, o2)) },
			func() { plain = append(plain, n1.pull(p1, p2)) })
	}
	b.StopTimer()
	ovs, ps, ratio := benchstat.Of(overlay), benchstat.Of(plain), benchstat.Ratios(overlay, plain)
	benchstat.Report(b, ovs, "overlay-MiB/s")
	benchstat.Report(b, ps, "plain-MiB/s")
	benchstat.Report(b, ratio, "overlay/plain")
	b.Logf("%d MiB a transfer: overlay, MiB/s: %v; plain, MiB/s: %v; overlay/plain round by round %v", blastMiB, ovs, ps, ratio)
}
