//go:build linux

package netns

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/network"
	"github.com/fluxvm/fluxvm/plugins/network/networktest"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// node is one node of an overlay test: a network namespace of its own, its
// netns plugin, and its address on the "underlay" the nodes share.
type node struct {
	ns   netns.NsHandle
	h    networktest.Harness
	p    *network.Plugin
	addr string
}

// twoNodes makes two node namespaces joined by a veth pair (192.0.2.1 and
// 192.0.2.2, the documentation subnet), each running the plugin.
func twoNodes(t *testing.T) (*node, *node) {
	t.Helper()
	n1, n2 := &node{ns: newNetns(t), addr: "192.0.2.1"}, &node{ns: newNetns(t), addr: "192.0.2.2"}
	h1 := handleAt(t, n1.ns)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "under0"
	if err := h1.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "under0", PeerNamespace: netlink.NsFd(int(n2.ns))}); err != nil {
		t.Fatalf("veth between the nodes: %v", err)
	}
	for _, n := range []*node{n1, n2} {
		h := handleAt(t, n.ns)
		l, err := h.LinkByName("under0")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(n.addr), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		n.h = harness(t, n.ns)
		n.p = n.launch(t)
	}
	return n1, n2
}

func (n *node) launch(t *testing.T) *network.Plugin {
	t.Helper()
	p := n.h.Launch(t)
	cfg := fmt.Sprintf(`{"overlay_address": %q}`, n.addr)
	if err := p.SetConfig(t.Context(), &basepb.SetConfigRequest{ConfigJson: []byte(cfg), Agent: &basepb.AgentContext{StateDir: n.h.StateDir}}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return p
}

// member is a node's part of the overlay as a caller (central) keeps it.
type member struct {
	n         *node
	part      string
	pub, next string
	endpoint  string
}

const ovSubnet, ovPort = "10.231.0.0/24", 51900

// ensure configures m's overlay with every other member as a peer.
func ensure(t *testing.T, m *member, all []*member) *pb.OverlayDetails {
	t.Helper()
	o := &pb.Overlay{Network: "ov-acme", Subnet: ovSubnet, ListenPort: ovPort, LocalSubnet: m.part}
	for _, q := range all {
		if q != m && q.pub != "" { // a member without a key yet is no peer yet
			o.Peers = append(o.Peers, &pb.OverlayPeer{PublicKey: q.pub, NextPublicKey: q.next, Endpoint: q.endpoint, Subnet: q.part})
		}
	}
	d, err := m.n.p.EnsureOverlay(t.Context(), o)
	if err != nil {
		t.Fatalf("EnsureOverlay on %s: %v", m.n.addr, err)
	}
	m.pub, m.endpoint = d.PublicKey, d.Endpoint
	return d
}

// rotate changes m's key the way the contract says a caller must: next key,
// peers learn it, commit, peers move to it.
func rotate(t *testing.T, m *member, all []*member) {
	t.Helper()
	r, err := m.n.p.RotateOverlayKey(t.Context(), "ov-acme", false)
	if err != nil {
		t.Fatal(err)
	}
	m.next = r.NextPublicKey
	for _, q := range all {
		if q != m {
			ensure(t, q, all)
		}
	}
	if r, err = m.n.p.RotateOverlayKey(t.Context(), "ov-acme", true); err != nil {
		t.Fatal(err)
	}
	if r.PublicKey != m.next {
		t.Fatalf("commit put %s in use, not the next key %s", r.PublicKey, m.next)
	}
	m.pub, m.next = r.PublicKey, ""
	for _, q := range all {
		if q != m {
			ensure(t, q, all)
		}
	}
}

// overlayDropped is the sum of the packet counters of the overlay's rules.
func overlayDropped(t *testing.T, ns netns.NsHandle, netw string) uint64 {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tb := table()
	fwd, _ := chains(tb)
	rules, err := c.GetRules(tb, fwd)
	if err != nil {
		t.Fatal(err)
	}
	var sum uint64
	for _, r := range rules {
		if comment, _ := userdata.GetString(r.UserData, userdata.TypeComment); comment == overlayTag+netw {
			for _, e := range r.Exprs {
				if c, ok := e.(*expr.Counter); ok {
					sum += c.Packets
				}
			}
		}
	}
	return sum
}

// TestOverlayJoinsANetworkAcrossNodesAndKeepsOthersOut: a network's parts on
// two nodes talk through a WireGuard overlay (user space, one process per
// device); another tenant's VM cannot send into the tunnel; a key rotation of
// each node under continuous traffic loses at most a few packets; a new
// plugin process answers for the overlay; deletes leave nothing behind.
func TestOverlayJoinsANetworkAcrossNodesAndKeepsOthersOut(t *testing.T) {
	requireRoot(t)
	n1, n2 := twoNodes(t)
	ctx := t.Context()
	part1 := &pb.TenantNetwork{Tenant: "ov-acme", Subnet: "10.231.0.0/28"}
	part2 := &pb.TenantNetwork{Tenant: "ov-acme", Subnet: "10.231.0.16/28"}
	a1, a2 := createVM(t, n1.ns, n1.p, part1, "a1"), createVM(t, n2.ns, n2.p, part2, "a2")
	netB := &pb.TenantNetwork{Tenant: "tenant-b", Subnet: "10.230.2.0/24"}
	b1 := createVM(t, n1.ns, n1.p, netB, "b1")

	m1, m2 := &member{n: n1, part: part1.Subnet}, &member{n: n2, part: part2.Subnet}
	all := []*member{m1, m2}
	// First each node makes its key, then each learns the other's.
	ensure(t, m1, all)
	ensure(t, m2, all)
	d1 := ensure(t, m1, all)
	if d1.Endpoint != "192.0.2.1:51900" || len(d1.Peers) != 1 || d1.Peers[0].Subnet != part2.Subnet {
		t.Fatalf("overlay on node 1: %v", d1)
	}
	addNeighbor(t, n2.ns, "ov-acme", a2)
	addNeighbor(t, n1.ns, "ov-acme", a1)
	gw1, gw2 := gatewayMAC(t, n1.ns, "ov-acme"), gatewayMAC(t, n2.ns, "ov-acme")
	if !send(t, a1, a2, udpFrame(a1.mac, gw1, a1.ip, a2.ip, "a1 to a2"), "a1 to a2", 10*time.Second) {
		t.Fatal("a1's packet did not reach a2 on the other node through the overlay")
	}
	if !send(t, a2, a1, udpFrame(a2.mac, gw2, a2.ip, a1.ip, "a2 to a1"), "a2 to a1", 10*time.Second) {
		t.Fatal("a2's answer did not reach a1 through the overlay")
	}
	var hs int64
	for _, d := range mustList(t, n1.p) {
		for _, p := range d.Peers {
			hs = p.LastHandshakeUnix
		}
	}
	if hs == 0 {
		t.Error("node 1's peer shows no handshake after traffic")
	}

	// b1 (another tenant, node 1) sends to a2's overlay address through its
	// own gateway: the overlay's rule drops it before the tunnel.
	gwB := gatewayMAC(t, n1.ns, netB.Tenant)
	before := overlayDropped(t, n1.ns, "ov-acme")
	if send(t, b1, a2, udpFrame(b1.mac, gwB, b1.ip, a2.ip, "from b"), "from b", time.Second) {
		t.Fatal("tenant B's VM reached A's VM on the other node through A's overlay")
	}
	if overlayDropped(t, n1.ns, "ov-acme") == before {
		t.Error("the overlay's rules counted none of tenant B's packets")
	}

	// Rotation under traffic: a1 sends a numbered packet every 10 ms while
	// each node changes its key in turn. What a loaded machine drops without
	// any rotation is counted first over a window as long, so the bound is
	// on what the rotation itself costs.
	var mu sync.Mutex
	got := map[uint32]bool{}
	stopSend, stopRead := make(chan struct{}), make(chan struct{})
	var sent atomic.Uint32
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			select {
			case <-stopRead:
				return
			default:
			}
			_ = a2.tap.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := a2.tap.Read(buf)
			if err != nil || n < 42+8 || binary.BigEndian.Uint16(buf[12:]) != 0x0800 || string(buf[42:46]) != "seq " {
				continue
			}
			mu.Lock()
			got[binary.BigEndian.Uint32(buf[46:50])] = true
			mu.Unlock()
		}
	}()
	senderDone := make(chan struct{})
	go func() {
		defer close(senderDone)
		for {
			select {
			case <-stopSend:
				return
			case <-time.After(10 * time.Millisecond):
			}
			seq := make([]byte, 4)
			binary.BigEndian.PutUint32(seq, sent.Load())
			_, _ = a1.tap.Write(udpFrame(a1.mac, gw1, a1.ip, a2.ip, "seq "+string(seq)))
			sent.Add(1)
		}
	}()
	time.Sleep(time.Second) // warm-up, counted in neither window
	baseFrom := sent.Load()
	time.Sleep(1500 * time.Millisecond)
	rotFrom := sent.Load()
	old1, old2 := m1.pub, m2.pub
	rotate(t, m1, all)
	time.Sleep(500 * time.Millisecond)
	rotate(t, m2, all)
	time.Sleep(time.Second)
	close(stopSend)
	<-senderDone
	rotTo := sent.Load()
	time.Sleep(200 * time.Millisecond) // the last packets still on their way
	close(stopRead)
	<-done
	if m1.pub == old1 || m2.pub == old2 {
		t.Fatal("a rotation kept the old key")
	}
	lostIn := func(from, to uint32) int {
		mu.Lock()
		defer mu.Unlock()
		lost := 0
		for i := from; i < to; i++ {
			if !got[i] {
				lost++
			}
		}
		return lost
	}
	baseLost, rotLost := lostIn(baseFrom, rotFrom), lostIn(rotFrom, rotTo)
	t.Logf("key rotation of both nodes under traffic: %d of %d packets (one each 10 ms) lost; %d of %d in as long a window before, without a rotation",
		rotLost, rotTo-rotFrom, baseLost, rotFrom-baseFrom)
	if rotTo-rotFrom < 50 || rotLost > baseLost+10 {
		t.Errorf("rotation lost %d of %d packets, %d more than as long a window without one: more than a few", rotLost, rotTo-rotFrom, rotLost-baseLost)
	}
	for _, d := range mustList(t, n2.p) {
		if d.PublicKey != m2.pub || len(d.Peers) != 1 || d.Peers[0].PublicKey != m1.pub {
			t.Errorf("after the rotations node 2 has key %s and peers %v, want %s and %s", d.PublicKey, d.Peers, m2.pub, m1.pub)
		}
	}
	if _, err := n1.p.RotateOverlayKey(ctx, "ov-acme", true); err == nil {
		t.Error("a commit without a next key was accepted")
	}

	// A new plugin process answers for the overlay; traffic never needed it.
	networktest.KillPlugin(t, n1.p)
	if !send(t, a1, a2, udpFrame(a1.mac, gw1, a1.ip, a2.ip, "no plugin"), "no plugin", 5*time.Second) {
		t.Fatal("overlay traffic stopped with the plugin process")
	}
	n1.p = n1.launch(t)
	if l := mustList(t, n1.p); len(l) != 1 || l[0].PublicKey != m1.pub {
		t.Fatalf("the new plugin process lists %v", l)
	}

	// Removing node 2 from node 1's peers cuts the path.
	if _, err := n1.p.EnsureOverlay(ctx, &pb.Overlay{Network: "ov-acme", Subnet: ovSubnet, ListenPort: ovPort, LocalSubnet: part1.Subnet}); err != nil {
		t.Fatal(err)
	}
	if send(t, a1, a2, udpFrame(a1.mac, gw1, a1.ip, a2.ip, "removed"), "removed", time.Second) {
		t.Error("a1 still reaches a2 after node 2 left node 1's peers")
	}

	if err := n1.p.DeleteNetwork(ctx, "ov-acme"); err == nil {
		t.Error("a network with an overlay was deleted")
	}
	for _, n := range []*node{n1, n2} {
		if err := n.p.DeleteOverlay(ctx, "ov-acme"); err != nil {
			t.Fatal(err)
		}
	}
	deleteAll(t, n1.ns, n1.p, []string{"ov-acme", netB.Tenant}, a1.iface.Ref, b1.iface.Ref)
	deleteAll(t, n2.ns, n2.p, []string{"ov-acme"}, a2.iface.Ref)
}

func mustList(t *testing.T, p *network.Plugin) []*pb.OverlayDetails {
	t.Helper()
	l, err := p.ListOverlays(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestOverlayRefusesBadRequests: what EnsureOverlay refuses, before it
// touches anything.
func TestOverlayRefusesBadRequests(t *testing.T) {
	good := "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI="
	other := "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	peer := func(k, ep, s string) *pb.OverlayPeer { return &pb.OverlayPeer{PublicKey: k, Endpoint: ep, Subnet: s} }
	for _, c := range []struct {
		name string
		o    *pb.Overlay
	}{
		{"bad network id", &pb.Overlay{Network: "a b", Subnet: ovSubnet, ListenPort: ovPort}},
		{"subnet not a network address", &pb.Overlay{Network: "n", Subnet: "10.231.0.1/24", ListenPort: ovPort}},
		{"IPv6 subnet", &pb.Overlay{Network: "n", Subnet: "fd00::/64", ListenPort: ovPort}},
		{"local part outside the overlay", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, LocalSubnet: "10.232.0.0/28"}},
		{"port below 1024", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: 80}},
		{"port above 65535", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: 70000}},
		{"short key", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, Peers: []*pb.OverlayPeer{peer("AAAA", "192.0.2.2:51900", "10.231.0.16/28")}}},
		{"zero key", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, Peers: []*pb.OverlayPeer{peer("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", "192.0.2.2:51900", "10.231.0.16/28")}}},
		{"endpoint without port", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, Peers: []*pb.OverlayPeer{peer(good, "192.0.2.2", "10.231.0.16/28")}}},
		{"part outside the overlay", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, Peers: []*pb.OverlayPeer{peer(good, "192.0.2.2:1", "10.232.0.16/28")}}},
		{"parts overlap", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, Peers: []*pb.OverlayPeer{peer(good, "192.0.2.2:1", "10.231.0.16/28"), peer(other, "192.0.2.3:1", "10.231.0.16/29")}}},
		{"key twice", &pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, Peers: []*pb.OverlayPeer{peer(good, "192.0.2.2:1", "10.231.0.16/28"), peer(good, "192.0.2.3:1", "10.231.0.32/28")}}},
	} {
		c.o.LocalSubnet = cmp.Or(c.o.LocalSubnet, "10.231.0.0/28")
		if _, _, _, err := checkOverlay(c.o); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
	if _, _, _, err := checkOverlay(&pb.Overlay{Network: "n", Subnet: ovSubnet, ListenPort: ovPort, LocalSubnet: "10.231.0.0/28", Peers: []*pb.OverlayPeer{peer(good, "192.0.2.2:51900", "10.231.0.16/28")}}); err != nil {
		t.Errorf("a good overlay is refused: %v", err)
	}
}

// FuzzCheckOverlay: any overlay request is either refused or has a local
// part and peers' parts inside its subnet that do not overlap.
func FuzzCheckOverlay(f *testing.F) {
	f.Add("10.231.0.0/24", "10.231.0.0/28", "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=", "192.0.2.2:51900", "10.231.0.16/28", uint32(51900))
	f.Add("10.231.0.0/24", "10.231.0.0/28", "", "", "", uint32(0))
	f.Fuzz(func(t *testing.T, subnet, local, key, endpoint, part string, port uint32) {
		o := &pb.Overlay{Network: "n", Subnet: subnet, LocalSubnet: local, ListenPort: port,
			Peers: []*pb.OverlayPeer{{PublicKey: key, Endpoint: endpoint, Subnet: part}}}
		s, l, peers, err := checkOverlay(o)
		if err != nil {
			return
		}
		if !s.Contains(l.Addr()) || l.Bits() < s.Bits() {
			t.Fatalf("local part %s outside %s accepted", l, s)
		}
		for _, p := range peers {
			if !s.Contains(p.subnet.Addr()) || p.subnet.Overlaps(l) {
				t.Fatalf("peer part %s accepted with %s in %s", p.subnet, l, s)
			}
		}
	})
}

// FuzzParseEgress: any policy is refused or gives IPv4 network addresses.
func FuzzParseEgress(f *testing.F) {
	f.Add("allowlist", "192.0.2.0/24", "192.0.2.66")
	f.Add("open", "", "10.0.0.1/8")
	f.Fuzz(func(t *testing.T, mode, allow, block string) {
		a, b, err := parseEgress(&pb.Egress{Mode: mode, Allow: []string{allow}, Block: []string{block}})
		if err != nil {
			return
		}
		for _, p := range append(a, b...) {
			if !p.Addr().Is4() || p.Masked() != p {
				t.Fatalf("entry %s accepted", p)
			}
		}
	})
}
