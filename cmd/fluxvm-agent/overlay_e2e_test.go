package main_test

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/overlays"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// veth joins two namespaces with a veth pair named name on both sides and
// gives each side its addresses.
func veth(t testing.TB, a, b netns.NsHandle, name string, addrsA, addrsB []string) {
	t.Helper()
	ha, err := netlink.NewHandleAt(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	hb, err := netlink.NewHandleAt(b)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: name, PeerNamespace: netlink.NsFd(b)}); err != nil {
		t.Fatalf("veth %s: %v", name, err)
	}
	for _, side := range []struct {
		h     *netlink.Handle
		addrs []string
	}{{ha, addrsA}, {hb, addrsB}} {
		l, err := side.h.LinkByName(name)
		for _, a := range side.addrs {
			if err == nil {
				addr, _ := netlink.ParseAddr(a)
				err = side.h.AddrAdd(l, addr)
			}
		}
		if err == nil {
			err = side.h.LinkSetUp(l)
		}
		if err != nil {
			t.Fatalf("set up %s: %v", name, err)
		}
	}
}

// overlayCentral is central's overlay service on a real store (embedded
// etcd) that knows nodes ov-1 and ov-2 at their unix sockets.
func overlayCentral(t testing.TB, n1, n2 *netNode) (*store.Store, *overlays.Service) {
	t.Helper()
	st := storetest.Open(t)
	for _, n := range []struct{ name, url string }{{"ov-1", n1.url}, {"ov-2", n2.url}} {
		if err := st.PutNode(t.Context(), &store.Node{FleetNode: sdk.FleetNode{Name: n.name, URL: n.url, Networks: []string{"netns"}}}); err != nil {
			t.Fatal(err)
		}
	}
	return st, overlays.New(st, nodecall.New("admin-token-0123456789abcdef"), time.Now, hclog.NewNullLogger())
}

var pingSummary = regexp.MustCompile(`(\d+) packets transmitted, (\d+) (?:packets )?received`)

// TestOverlayJoinsTenantVMsAcrossNodesUnderTheEgressFloor is a tenant's
// private network end to end, with central's overlay service (a real etcd)
// driving two real node agents, each in a network namespace of its own and
// joined by a veth pair, with the qemu driver and the netns plugin: A's VMs
// on the two nodes ping each other and exchange TCP over A's overlay
// (WireGuard in user space); B's VM reaches neither and neither reaches it;
// a key rotation of both nodes during a continuous ping loses at most a
// few packets; under the operator's allowlist floor the overlay's open
// policy is refused with its reason, and the guests reach the allowed
// server (in a namespace of its own) and not the other; a node with VMs of
// the overlay cannot leave it; the deletes leave no tunnel behind.
func TestOverlayJoinsTenantVMsAcrossNodesUnderTheEgressFloor(t *testing.T) {
	n1 := startNetNodeNamed(t, "ov-1", `overlay_address = "192.0.2.1"`)
	n2 := startNetNodeNamed(t, "ov-2", `overlay_address = "192.0.2.2"`)
	veth(t, n1.ns, n2.ns, "under0", []string{"192.0.2.1/24"}, []string{"192.0.2.2/24"})
	srv := func() netns.NsHandle {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer orig.Close()
		ns, err := netns.New() // New also enters it
		if err != nil {
			t.Fatalf("new network namespace: %v", err)
		}
		if err := netns.Set(orig); err != nil {
			panic(err) // the locked thread must not go back to Go in the wrong namespace
		}
		return ns
	}()
	t.Cleanup(func() { srv.Close() })
	veth(t, n1.ns, srv, "up0", []string{"198.51.100.1/24"}, []string{"198.51.100.2/24", "198.51.100.3/24"})
	for _, a := range []string{"198.51.100.2", "198.51.100.3"} {
		var l net.Listener
		inNetns(t, srv, func() {
			var err error
			if l, err = net.Listen("tcp4", a+":7000"); err != nil {
				t.Fatal(err)
			}
		})
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				fmt.Fprintf(c, "hello-from-%s\n", a)
				c.Close()
			}
		}()
	}

	// Central's side: a real store, the two nodes' records, the floor.
	ctx := t.Context()
	st, svc := overlayCentral(t, n1, n2)
	acme, globex := storetest.Tenant(t, st, "acme"), storetest.Tenant(t, st, "globex")
	pol, err := st.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	floor := &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.2"}}
	pol.Egress = floor
	if _, err := st.PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	o, err := svc.Create(ctx, acme.ID, sdk.CreateOverlayRequest{Name: "backend", Nodes: []string{"ov-1", "ov-2"}, Egress: &sdk.EgressPolicy{Mode: "open"}})
	if err != nil {
		t.Fatalf("create the overlay: %v", err)
	}
	if o.Egress.Mode != "allowlist" || len(o.EgressRefused) != 1 || !strings.Contains(o.EgressRefused[0], "would loosen the floor") {
		t.Fatalf("an open policy under an allowlist floor: egress %+v, refused %q", o.Egress, o.EgressRefused)
	}
	t.Logf("refused on the overlay's record: %q", o.EgressRefused)
	join := func(n *netNode, node, name string) *sdk.VM {
		id, subnet, egress, err := svc.Launch(ctx, acme.ID, node, []string{"backend"})
		if err != nil {
			t.Fatal(err)
		}
		return n.createWith(sdk.CreateVMRequest{Name: name, Network: "tenant", Tenant: acme.ID, NetworkID: id, Subnet: subnet, Egress: &egress})
	}
	a1, a2 := join(n1, "ov-1", "a1"), join(n2, "ov-2", "a2")
	b1 := n1.createWith(sdk.CreateVMRequest{Name: "b1", Network: "tenant", Tenant: globex.ID, Subnet: "10.230.2.0/24", Egress: floor})
	t.Logf("a1 %s on ov-1, a2 %s on ov-2, b1 %s on ov-1", a1.Address, a2.Address, b1.Address)
	for _, v := range []struct {
		n  *netNode
		vm *sdk.VM
	}{{n1, a1}, {n2, a2}, {n1, b1}} {
		v.n.serve(v.vm)
	}

	if !n1.pings(a1, a2) || !n2.pings(a2, a1) {
		t.Fatal("A's VMs on two nodes do not ping each other over the overlay")
	}
	if !n1.tcp(a1, a2) || !n2.tcp(a2, a1) {
		t.Fatal("A's VMs on two nodes do not exchange TCP over the overlay")
	}
	for _, c := range []struct {
		what     string
		n        *netNode
		from, to *sdk.VM
	}{{"b1 -> a1", n1, b1, a1}, {"b1 -> a2", n1, b1, a2}, {"a1 -> b1", n1, a1, b1}, {"a2 -> b1", n2, a2, b1}} {
		if c.n.pings(c.from, c.to) || c.n.tcp(c.from, c.to) {
			t.Errorf("%s: tenant B and tenant A's overlay reach each other", c.what)
		}
	}

	// Egress under the floor: the allowed server answers, the other does not.
	for _, v := range []struct {
		n  *netNode
		vm *sdk.VM
	}{{n1, a1}, {n1, b1}} {
		if code, out := v.n.sh(v.vm, "nc -w 3 198.51.100.2 7000 </dev/null"); code != 0 || !strings.Contains(out, "hello-from-198.51.100.2") {
			t.Errorf("%s does not reach the allowed server 198.51.100.2: %d %s", v.vm.Name, code, out)
		}
		if _, out := v.n.sh(v.vm, "nc -w 3 198.51.100.3 7000 </dev/null"); strings.Contains(out, "hello-from") {
			t.Errorf("%s reaches 198.51.100.3, which the floor's allowlist does not name", v.vm.Name)
		}
	}

	// Rotation of both nodes' keys during a continuous ping, 5 a second.
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	go func() { c, out := n1.sh(a1, "ping -c 60 -i 0.2 -W 1 "+ip(a2)); done <- result{c, out} }()
	time.Sleep(3 * time.Second)
	before := o.Members
	started := time.Now()
	if o, err = svc.Rotate(ctx, acme.ID, "backend", false); err != nil {
		t.Fatalf("rotate: %v", err)
	}
	took := time.Since(started)
	r := <-done
	m := pingSummary.FindStringSubmatch(r.out)
	if m == nil {
		t.Fatalf("ping during the rotation printed no summary: %s", r.out)
	}
	sent, got := atoi(t, m[1]), atoi(t, m[2])
	t.Logf("key rotation of both nodes (%v) during a ping of 5 a second: %d of %d echo requests lost", took.Round(time.Millisecond), sent-got, sent)
	if sent-got > 5 {
		t.Errorf("the rotation lost %d of %d pings: more than a few", sent-got, sent)
	}
	for i, m := range o.Members {
		if m.PublicKey == before[i].PublicKey || m.NextPublicKey != "" {
			t.Errorf("member %s kept its key through the rotation", m.Node)
		}
	}
	if !n2.tcp(a2, a1) {
		t.Error("no TCP over the overlay after the rotation")
	}

	// A node with the overlay's VMs cannot leave it; once they are gone it can.
	var ne *nodecall.NodeError
	if _, err := svc.RemoveNode(ctx, acme.ID, "backend", "ov-2", false); !errors.As(err, &ne) || !strings.Contains(err.Error(), "still in it") {
		t.Fatalf("remove a node with a VM of the overlay: %v, want the node's refusal", err)
	}
	for _, v := range []struct {
		n  *netNode
		vm *sdk.VM
	}{{n1, a1}, {n2, a2}, {n1, b1}} {
		if err := v.n.client.DeleteVM(ctx, v.vm.ID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := svc.RemoveNode(ctx, acme.ID, "backend", "ov-2", false); err != nil {
		t.Fatal(err)
	}
	if err := svc.Delete(ctx, acme.ID, "backend"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*netNode{n1, n2} {
		if n.hasLink(func(l netlink.Link) bool { return strings.HasPrefix(l.Attrs().Name, "fxwg-") }) {
			t.Error("a WireGuard device is left after the overlay's delete")
		}
		checkNothingLeftIn(t, n.ns)
	}
}

func atoi(t *testing.T, s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
