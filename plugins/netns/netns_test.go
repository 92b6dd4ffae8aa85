//go:build linux

package netns

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base/basetest"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/network"
	"github.com/fluxvm/fluxvm/plugins/network/networktest"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Every test here runs the plugin as a real process (`fluxvm-agent plugin
// netns`) inside a network namespace the test makes, and reads the kernel's
// own tables there. Nothing touches the host's namespace.

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces, bridges, taps and nftables rules")
	}
}

// newNetns makes an empty network namespace that lives until the test ends.
func newNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	var ns netns.NsHandle
	inNetns(t, 0, func() {
		var err error
		if ns, err = netns.New(); err != nil { // New also enters it
			t.Fatalf("new network namespace: %v", err)
		}
	})
	t.Cleanup(func() { ns.Close() })
	return ns
}

// inNetns runs f on a thread in ns (0: a new namespace made by f itself),
// then puts the thread back. The thread is never handed back to Go in the
// wrong namespace: if it cannot return, it ends with the goroutine.
func inNetns(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current network namespace: %v", err)
	}
	defer orig.Close()
	if ns != 0 {
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			t.Fatalf("enter network namespace: %v", err)
		}
	}
	f()
	if err := netns.Set(orig); err != nil {
		t.Fatalf("return to the original network namespace: %v", err) // the thread stays locked and dies
	}
	runtime.UnlockOSThread()
}

func harness(t *testing.T, ns netns.NsHandle) networktest.Harness {
	bin := basetest.Build(t, "../..", "./cmd/fluxvm-agent")
	launch := networktest.LaunchCommand(bin, "plugin", "netns")
	return networktest.Harness{
		// The plugin process starts in the namespace of the thread that
		// starts it, and makes its links and rules there.
		Launch: func(t testing.TB) *network.Plugin {
			var p *network.Plugin
			inNetns(t, ns, func() { p = launch(t) })
			return p
		},
		StateDir: t.TempDir(),
		Subnet: func(n int) string {
			s, err := network.TenantSubnet("10.230", n)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

func launch(t *testing.T, h networktest.Harness) *network.Plugin {
	t.Helper()
	p := h.Launch(t)
	if err := p.SetConfig(t.Context(), &basepb.SetConfigRequest{ConfigJson: []byte(`{}`), Agent: &basepb.AgentContext{StateDir: h.StateDir}}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return p
}

// handleAt is a netlink handle for ns, closed when the test ends.
func handleAt(t *testing.T, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink handle: %v", err)
	}
	t.Cleanup(h.Close)
	return h
}

// deleteAll deletes the interfaces, then the tenants' networks, and checks
// that nothing of the plugin's is left in ns.
func deleteAll(t *testing.T, ns netns.NsHandle, p *network.Plugin, tenants []string, refs ...*pb.InterfaceRef) {
	t.Helper()
	for _, ref := range refs {
		if err := p.DeleteInterface(t.Context(), ref); err != nil {
			t.Fatalf("DeleteInterface(%v): %v", ref, err)
		}
	}
	for _, tenant := range tenants {
		if err := p.DeleteNetwork(t.Context(), tenant); err != nil {
			t.Fatalf("DeleteNetwork(%s): %v", tenant, err)
		}
	}
	checkNothingLeft(t, ns)
}

// checkNothingLeft fails unless the namespace holds no link, address or
// nftables table of the plugin's.
func checkNothingLeft(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	h := handleAt(t, ns)
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "fx") || strings.HasPrefix(l.Attrs().Alias, aliasPrefix) {
			t.Errorf("link %s (%s) is left behind", l.Attrs().Name, l.Attrs().Alias)
		}
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP[0] == 10 && a.IP[1] == 230 {
			t.Errorf("address %s is left behind", a.IPNet)
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == tableName {
			t.Errorf("nftables table %s is left behind", tb.Name)
		}
	}
}

func TestNetnsPassesConformanceSuite(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	networktest.Run(t, harness(t, ns))
	checkNothingLeft(t, ns)
}

// vm is a stand-in for a guest: the test holds its tap open, as QEMU would,
// and writes and reads Ethernet frames on it.
type vm struct {
	iface *pb.Interface
	tap   *os.File
	mac   net.HardwareAddr
	ip    netip.Addr
}

// openTap attaches to a tap by name, in ns, the way QEMU does.
func openTap(t *testing.T, ns netns.NsHandle, name string) *os.File {
	t.Helper()
	var f *os.File
	inNetns(t, ns, func() {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("open /dev/net/tun: %v", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err == nil {
			ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
			t.Fatalf("attach to tap %s: %v", name, err)
		}
		f = os.NewFile(uintptr(fd), name) // non-blocking: read deadlines work
	})
	t.Cleanup(func() { f.Close() })
	return f
}

func createVM(t *testing.T, ns netns.NsHandle, p *network.Plugin, n *pb.TenantNetwork, id string) *vm {
	t.Helper()
	i, err := p.CreateInterface(t.Context(), &pb.CreateInterfaceRequest{Network: n, VmId: id})
	if err != nil {
		t.Fatalf("CreateInterface %s: %v", id, err)
	}
	mac, _ := net.ParseMAC(i.Mac)
	return &vm{iface: i, tap: openTap(t, ns, i.Device), mac: mac, ip: netip.MustParsePrefix(i.Address).Addr()}
}

// udpFrame is an Ethernet frame holding an IPv4 UDP datagram.
func udpFrame(srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, payload string) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 40001)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...) // checksum 0: none, which IPv4 allows
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, unix.IPPROTO_UDP
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	frame := append(append([]byte{}, dstMAC...), srcMAC...)
	frame = append(frame, 0x08, 0x00)
	return append(append(frame, ip...), udp...)
}

// carries reports whether frame is the UDP datagram with payload, or an ARP
// request for addr (what the host sends before it would forward to addr).
func carries(frame []byte, payload string, addr netip.Addr) bool {
	if len(frame) < 42 {
		return false
	}
	switch binary.BigEndian.Uint16(frame[12:]) {
	case 0x0800:
		return frame[23] == unix.IPPROTO_UDP && bytes.Contains(frame[42:], []byte(payload))
	case 0x0806:
		a := addr.As4()
		return binary.BigEndian.Uint16(frame[20:]) == 1 && bytes.Equal(frame[38:42], a[:])
	}
	return false
}

// send writes frame to from's tap every 50 ms until to's tap shows what
// carries looks for, or the time is up; it reports whether it arrived.
func send(t *testing.T, from, to *vm, frame []byte, payload string, within time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(within)
	buf := make([]byte, 2048)
	for time.Now().Before(deadline) {
		if _, err := from.tap.Write(frame); err != nil {
			t.Fatalf("write to tap %s: %v", from.iface.Device, err)
		}
		_ = to.tap.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		for {
			n, err := to.tap.Read(buf)
			if err != nil {
				break // the deadline: send again
			}
			if carries(buf[:n], payload, to.ip) {
				return true
			}
		}
	}
	return false
}

// gatewayMAC is the MAC of the tenant bridge in ns.
func gatewayMAC(t *testing.T, ns netns.NsHandle, tenant string) net.HardwareAddr {
	t.Helper()
	h := handleAt(t, ns)
	l, err := h.LinkByName(bridgeName(tenant))
	if err != nil {
		t.Fatalf("bridge of tenant %s: %v", tenant, err)
	}
	return l.Attrs().HardwareAddr
}

// addNeighbor tells the host in ns the MAC of v, a VM of tenant.
func addNeighbor(t *testing.T, ns netns.NsHandle, tenant string, v *vm) {
	t.Helper()
	h := handleAt(t, ns)
	br, err := h.LinkByName(bridgeName(tenant))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.NeighAdd(&netlink.Neigh{LinkIndex: br.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: v.ip.AsSlice(), HardwareAddr: v.mac}); err != nil {
		t.Fatalf("add neighbor %s: %v", v.ip, err)
	}
}

// dropped is the packet count of tenant's forward drop rule in ns.
func dropped(t *testing.T, ns netns.NsHandle, tenant string) uint64 {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := listTenantRules(c, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Chain.Name != "forward" {
			continue
		}
		for _, e := range r.Exprs {
			if c, ok := e.(*expr.Counter); ok {
				return c.Packets
			}
		}
	}
	t.Fatalf("tenant %s has no forward rule with a counter", tenant)
	return 0
}

// TestTenantsAreIsolatedAndDeleteLeavesNothing: two VMs of tenant A talk
// through A's bridge; a VM of tenant B cannot reach one of A's (B's drop
// rule counts the packets), though the same packet arrives once that rule is
// gone; and after every delete the namespace holds nothing of the plugin's.
func TestTenantsAreIsolatedAndDeleteLeavesNothing(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	p := launch(t, harness(t, ns))
	ctx := t.Context()
	netA := &pb.TenantNetwork{Tenant: "tenant-a", Subnet: "10.230.1.0/24"}
	netB := &pb.TenantNetwork{Tenant: "tenant-b", Subnet: "10.230.2.0/24"}
	a1, a2 := createVM(t, ns, p, netA, "a1"), createVM(t, ns, p, netA, "a2")
	b1 := createVM(t, ns, p, netB, "b1")

	if !send(t, a1, a2, udpFrame(a1.mac, a2.mac, a1.ip, a2.ip, "a1 to a2"), "a1 to a2", 5*time.Second) {
		t.Fatal("a1's frame did not reach a2 through tenant A's bridge")
	}
	if !send(t, a2, a1, udpFrame(a2.mac, a1.mac, a2.ip, a1.ip, "a2 to a1"), "a2 to a1", 5*time.Second) {
		t.Fatal("a2's answer did not reach a1")
	}

	// b1 sends to a1 through its gateway, as a guest routes off its subnet.
	// The host knows a1's MAC (as it would once a1 had answered an ARP), so
	// a packet that crosses arrives as it is; one that does not leaves no
	// ARP request behind to confuse the next check.
	addNeighbor(t, ns, netA.Tenant, a1)
	gw := gatewayMAC(t, ns, netB.Tenant)
	before := dropped(t, ns, netB.Tenant)
	if send(t, b1, a1, udpFrame(b1.mac, gw, b1.ip, a1.ip, "isolated"), "isolated", time.Second) {
		t.Fatal("b1's packet (or the host's ARP for it) reached tenant A's VM")
	}
	if d := dropped(t, ns, netB.Tenant) - before; d == 0 {
		t.Error("tenant B's drop rule counted no packet")
	} else {
		t.Logf("tenant B's drop rule counted %d packets", d)
	}
	// The control: without B's rules the same packet crosses, so the check
	// above can fail. EnsureNetwork puts the rules back.
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	if err := delTenantRules(c, netB.Tenant); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if !send(t, b1, a1, udpFrame(b1.mac, gw, b1.ip, a1.ip, "no rules"), "no rules", 5*time.Second) {
		t.Fatal("without tenant B's rules, b1's packet still did not reach tenant A: the isolation check proves nothing")
	}
	if _, err := p.EnsureNetwork(ctx, netB); err != nil {
		t.Fatal(err)
	}
	if send(t, b1, a1, udpFrame(b1.mac, gw, b1.ip, a1.ip, "restored"), "restored", time.Second) {
		t.Fatal("after EnsureNetwork restored tenant B's rules, b1's packet still reaches tenant A")
	}

	deleteAll(t, ns, p, []string{netA.Tenant, netB.Tenant}, a1.iface.Ref, a2.iface.Ref, b1.iface.Ref)
}

// TestPluginKillLeavesTrafficRunning: with the plugin process killed, two
// VMs of a tenant still talk; a new process answers for their interfaces
// and deletes them.
func TestPluginKillLeavesTrafficRunning(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	h := harness(t, ns)
	p := launch(t, h)
	n := &pb.TenantNetwork{Tenant: "tenant-k", Subnet: "10.230.9.0/24"}
	a1, a2 := createVM(t, ns, p, n, "k1"), createVM(t, ns, p, n, "k2")
	if !send(t, a1, a2, udpFrame(a1.mac, a2.mac, a1.ip, a2.ip, "before"), "before", 5*time.Second) {
		t.Fatal("no traffic between the tenant's VMs to begin with")
	}
	networktest.KillPlugin(t, p)
	if !send(t, a1, a2, udpFrame(a1.mac, a2.mac, a1.ip, a2.ip, "no plugin"), "no plugin", 5*time.Second) {
		t.Fatal("traffic stopped with the plugin process")
	}
	p = launch(t, h)
	for _, v := range []*vm{a1, a2} {
		got, err := p.InterfaceDetails(t.Context(), v.iface.Ref)
		if err != nil || got.Device != v.iface.Device || got.Mac != v.iface.Mac || got.Address != v.iface.Address || got.Gateway != v.iface.Gateway {
			t.Errorf("a new plugin's InterfaceDetails(%v) = %v, %v; want %v", v.iface.Ref, got, err, v.iface)
		}
	}
	deleteAll(t, ns, p, []string{n.Tenant}, a1.iface.Ref, a2.iface.Ref)
}

// TestEgressIsMasqueraded: a VM's packet to an address beyond the node
// leaves with the node's address. "Beyond the node" is a second namespace
// the test makes, joined to the node's by a veth pair on a documentation
// subnet (198.51.100.0/24).
// outside makes a namespace joined to node by a veth pair (node 198.51.100.1,
// the outside 198.51.100.2 and .3, the documentation subnet), with a UDP
// server on port 40001 of each outside address.
func outside(t *testing.T, node netns.NsHandle) (servers []*net.UDPConn) {
	t.Helper()
	outside := newNetns(t)
	h := handleAt(t, node)
	attrs := netlink.NewLinkAttrs()
	attrs.Name = "up0"
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "out0", PeerNamespace: netlink.NsFd(outside)}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	ho := handleAt(t, outside)
	for _, side := range []struct {
		h     *netlink.Handle
		name  string
		addrs []string
	}{{h, "up0", []string{"198.51.100.1/24"}}, {ho, "out0", []string{"198.51.100.2/24", "198.51.100.3/24"}}} {
		l, err := side.h.LinkByName(side.name)
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
			t.Fatalf("set up %s: %v", side.name, err)
		}
	}
	inNetns(t, outside, func() {
		for _, ip := range []net.IP{net.IPv4(198, 51, 100, 2), net.IPv4(198, 51, 100, 3)} {
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: ip, Port: 40001})
			if err != nil {
				t.Fatalf("listen outside: %v", err)
			}
			t.Cleanup(func() { conn.Close() })
			servers = append(servers, conn)
		}
	})
	return servers
}

// reaches sends v's UDP datagram to the server's address until it arrives
// (within the time) and returns the source the server saw, or nil.
func reaches(t *testing.T, node netns.NsHandle, v *vm, tenant string, server *net.UDPConn, payload string, within time.Duration) *net.UDPAddr {
	t.Helper()
	dst := netip.MustParseAddrPort(server.LocalAddr().String()).Addr()
	frame := udpFrame(v.mac, gatewayMAC(t, node, tenant), v.ip, dst, payload)
	buf := make([]byte, 64)
	for deadline := time.Now().Add(within); time.Now().Before(deadline); {
		if _, err := v.tap.Write(frame); err != nil {
			t.Fatal(err)
		}
		_ = server.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if k, addr, err := server.ReadFromUDP(buf); err == nil && string(buf[:k]) == payload {
			return addr
		}
	}
	return nil
}

func TestEgressIsMasqueraded(t *testing.T) {
	requireRoot(t)
	node := newNetns(t)
	conn := outside(t, node)[0]
	p := launch(t, harness(t, node))
	n := &pb.TenantNetwork{Tenant: "tenant-e", Subnet: "10.230.5.0/24"}
	v := createVM(t, node, p, n, "e1")
	from := reaches(t, node, v, n.Tenant, conn, "egress", 5*time.Second)
	if from == nil {
		t.Fatal("the VM's packet never reached the outside namespace")
	}
	if !from.IP.Equal(net.IPv4(198, 51, 100, 1)) {
		t.Errorf("the outside saw the packet from %s, want the node's 198.51.100.1 (masqueraded)", from)
	}
	deleteAll(t, node, p, []string{n.Tenant}, v.iface.Ref)
}

// TestUnfinishedTapsAreCleanedUp: a tap of the VM's name without its record
// (a create that crashed half way) does not block the VM: the next create
// replaces it; and one left on a tenant's bridge goes with the network.
func TestUnfinishedTapsAreCleanedUp(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	p := launch(t, harness(t, ns))
	n := &pb.TenantNetwork{Tenant: "tenant-u", Subnet: "10.230.3.0/24"}
	unfinished := func(vm string, master int) {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = tapName(n.Tenant, vm)
		attrs.MasterIndex = master
		inNetns(t, ns, func() { // taps are made in the calling thread's namespace
			tap := &netlink.Tuntap{LinkAttrs: attrs, Mode: netlink.TUNTAP_MODE_TAP}
			if err := netlink.LinkAdd(tap); err != nil {
				t.Fatalf("add a tap without record: %v", err)
			}
			for _, f := range tap.Fds {
				f.Close()
			}
		})
	}
	unfinished("u1", 0)
	i, err := p.CreateInterface(t.Context(), &pb.CreateInterfaceRequest{Network: n, VmId: "u1"})
	if err != nil {
		t.Fatalf("CreateInterface over an unfinished tap: %v", err)
	}
	if got, err := p.InterfaceDetails(t.Context(), i.Ref); err != nil || got.Device != tapName(n.Tenant, "u1") {
		t.Fatalf("InterfaceDetails = %v, %v; want device %s", got, err, tapName(n.Tenant, "u1"))
	}
	if err := p.DeleteInterface(t.Context(), i.Ref); err != nil {
		t.Fatal(err)
	}
	br, err := handleAt(t, ns).LinkByName(bridgeName(n.Tenant))
	if err != nil {
		t.Fatal(err)
	}
	unfinished("u2", br.Attrs().Index)
	deleteAll(t, ns, p, []string{n.Tenant})
}

// TestFullSubnetIsNoCapacity: a /29 holds five guests (its network,
// gateway and broadcast addresses are not theirs); the sixth is refused.
func TestFullSubnetIsNoCapacity(t *testing.T) {
	requireRoot(t)
	ns := newNetns(t)
	p := launch(t, harness(t, ns))
	n := &pb.TenantNetwork{Tenant: "tenant-f", Subnet: "10.230.8.0/29"}
	var refs []*pb.InterfaceRef
	for k := range 5 {
		i, err := p.CreateInterface(t.Context(), &pb.CreateInterfaceRequest{Network: n, VmId: fmt.Sprintf("f%d", k)})
		if err != nil {
			t.Fatalf("CreateInterface f%d: %v", k, err)
		}
		if want := fmt.Sprintf("10.230.8.%d/29", k+2); i.Address != want {
			t.Errorf("f%d got %s, want %s", k, i.Address, want)
		}
		refs = append(refs, i.Ref)
	}
	if _, err := p.CreateInterface(t.Context(), &pb.CreateInterfaceRequest{Network: n, VmId: "f5"}); !errors.Is(err, network.ErrNoCapacity) {
		t.Errorf("a sixth guest in a /29: %v, want ErrNoCapacity", err)
	}
	deleteAll(t, ns, p, []string{n.Tenant}, refs...)
}
