//go:build linux

package netns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/plugins/network"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/vishvananda/netlink"
)

// An overlay joins a network's parts on several nodes. On each node the
// network's bridge holds the node's part (a subnet inside the overlay's);
// a WireGuard device (fxwg- and ten hex digits of the network id) routes the
// rest of the overlay's subnet to the peers, each peer's part to its key.
// Its record (network, subnet, port) is the device's alias, like a bridge's;
// its keys live in the WireGuard process only.

var _ network.Overlays = (*Plugin)(nil)

// overlayRecord is a WireGuard device's alias.
type overlayRecord struct {
	Network string `json:"n"`
	Subnet  string `json:"s"`
	Port    uint32 `json:"p"`
}

func wgName(network string) string { return hashName(wgPrefix, network) }

// wantedPeer is a peer as EnsureOverlay must configure it.
type wantedPeer struct {
	pub, next key
	endpoint  netip.AddrPort
	subnet    netip.Prefix
}

// checkOverlay refuses an overlay request the plugin cannot make.
func checkOverlay(o *pb.Overlay) (subnet, part netip.Prefix, peers []wantedPeer, err error) {
	subnet, peers, err = checkOverlayPeers(o)
	if err != nil {
		return subnet, part, nil, err
	}
	if part, err = parseSubnet(o.GetLocalSubnet()); err != nil {
		return subnet, part, nil, err
	}
	if !subnet.Contains(part.Addr()) || part.Bits() < subnet.Bits() {
		return subnet, part, nil, network.Errorf(network.ErrInvalid, "overlay of %s: the node's part %s is not inside the overlay's subnet %s", o.Network, part, subnet)
	}
	for _, w := range peers {
		if w.subnet.Overlaps(part) {
			return subnet, part, nil, network.Errorf(network.ErrInvalid, "overlay of %s: a peer's part %s overlaps this node's %s", o.Network, w.subnet, part)
		}
	}
	return subnet, part, peers, nil
}

func checkOverlayPeers(o *pb.Overlay) (netip.Prefix, []wantedPeer, error) {
	if err := checkID("network", o.GetNetwork()); err != nil {
		return netip.Prefix{}, nil, err
	}
	subnet, err := parseOverlaySubnet(o.GetSubnet())
	if err != nil {
		return netip.Prefix{}, nil, err
	}
	if o.ListenPort < 1024 || o.ListenPort > 65535 {
		return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: listen port %d is not from 1024 to 65535", o.Network, o.ListenPort)
	}
	var peers []wantedPeer
	seen := map[key]bool{}
	for i, p := range o.Peers {
		pub, ok := parseKey(p.GetPublicKey())
		if !ok || pub.isZero() {
			return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: peer %d: public key is not 32 bytes in base64", o.Network, i+1)
		}
		w := wantedPeer{pub: pub}
		if p.NextPublicKey != "" {
			if w.next, ok = parseKey(p.NextPublicKey); !ok || w.next.isZero() {
				return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: peer %d: next public key is not 32 bytes in base64", o.Network, i+1)
			}
		}
		if w.endpoint, err = netip.ParseAddrPort(p.GetEndpoint()); err != nil || w.endpoint.Port() == 0 {
			return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: peer %d: endpoint %q is not ADDRESS:PORT", o.Network, i+1, p.GetEndpoint())
		}
		if w.subnet, err = netip.ParsePrefix(p.GetSubnet()); err != nil || w.subnet.Masked() != w.subnet || !subnet.Contains(w.subnet.Addr()) || w.subnet.Bits() < subnet.Bits() {
			return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: peer %d: part %q is not a subnet inside %s", o.Network, i+1, p.GetSubnet(), subnet)
		}
		for _, q := range peers {
			if q.subnet.Overlaps(w.subnet) {
				return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: peers' parts %s and %s overlap", o.Network, q.subnet, w.subnet)
			}
		}
		for _, k := range []key{w.pub, w.next} {
			if !k.isZero() && seen[k] {
				return netip.Prefix{}, nil, network.Errorf(network.ErrInvalid, "overlay of %s: peer %d: a public key appears twice", o.Network, i+1)
			}
			seen[k] = true
		}
		peers = append(peers, w)
	}
	return subnet, peers, nil
}

// parseOverlaySubnet accepts an IPv4 network address from /8 to /28.
func parseOverlaySubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Masked() != p || p.Bits() < 8 || p.Bits() > 28 {
		return netip.Prefix{}, network.Errorf(network.ErrInvalid, "overlay subnet %q is not an IPv4 network address from /8 to /28", s)
	}
	return p, nil
}

func (p *Plugin) EnsureOverlay(_ context.Context, o *pb.Overlay) (*pb.OverlayDetails, error) {
	subnet, part, peers, err := checkOverlay(o)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	what := "ensure overlay of network " + o.Network
	if _, _, err := p.ensureNetwork(&pb.TenantNetwork{Tenant: o.Network, Subnet: part.String()}); err != nil {
		return nil, err
	}
	name := wgName(o.Network)
	link, err := netlink.LinkByName(name)
	var rec overlayRecord
	if err == nil && decodeAlias(link.Attrs().Alias, &rec) && rec.Network != o.Network {
		return nil, network.Errorf(network.ErrState, "%s: device %s belongs to network %s, whose name hashes alike", what, name, rec.Network)
	}
	if err == nil {
		if _, uerr := uapi(name, "get=1\n"); uerr != nil {
			// A device whose process does not answer is of no use: start again.
			_ = netlink.LinkDel(link)
			err = uerr
		}
	}
	if err != nil {
		if err := startWireGuard(name, p.stateDir); err != nil {
			return nil, unavailable(what, err)
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return nil, unavailable(what, err)
		}
	}
	if err := netlink.LinkSetAlias(link, encodeAlias(overlayRecord{Network: o.Network, Subnet: subnet.String(), Port: o.ListenPort})); err != nil {
		return nil, unavailable(what, err)
	}
	noIPv6(name)

	cur, err := readDevice(name)
	if err != nil {
		return nil, unavailable(what, err)
	}
	cfg := "set=1\n"
	if cur.private.isZero() {
		k, err := newPrivateKey()
		if err != nil {
			return nil, unavailable(what, err)
		}
		cfg += "private_key=" + k.hex() + "\n"
	}
	cfg += "listen_port=" + strconv.Itoa(int(o.ListenPort)) + "\n"
	// Peers are changed in place, never replaced as a whole: a peer that
	// stays keeps its session, so an update does not interrupt traffic.
	wanted := map[key]bool{}
	for _, w := range peers {
		wanted[w.pub] = true
		cfg += fmt.Sprintf("public_key=%s\nendpoint=%s\npersistent_keepalive_interval=5\nreplace_allowed_ips=true\nallowed_ip=%s\n", w.pub.hex(), w.endpoint, w.subnet)
		if !w.next.isZero() {
			wanted[w.next] = true
			// The peer's next key: its handshakes are answered, no route yet.
			cfg += fmt.Sprintf("public_key=%s\nendpoint=%s\nreplace_allowed_ips=true\n", w.next.hex(), w.endpoint)
		}
	}
	for _, c := range cur.peers {
		if !wanted[c.pub] {
			cfg += "public_key=" + c.pub.hex() + "\nremove=true\n"
		}
	}
	if _, err := uapi(name, cfg); err != nil {
		return nil, unavailable(what, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, unavailable(what, err)
	}
	dst := &net.IPNet{IP: subnet.Addr().AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: link.Attrs().Index, Dst: dst, Scope: netlink.SCOPE_LINK}); err != nil {
		return nil, unavailable(what+": route "+subnet.String(), err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return nil, unavailable(what+": turn on IPv4 forwarding", err)
	}
	if err := ensureOverlayRules(o.Network, bridgeName(o.Network), name); err != nil {
		return nil, unavailable(what, err)
	}
	return p.overlayDetails(found[overlayRecord]{name: name, rec: overlayRecord{Network: o.Network, Subnet: subnet.String(), Port: o.ListenPort}})
}

func (p *Plugin) DeleteOverlay(_ context.Context, netw string) error {
	if err := checkID("network", netw); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.deleteOverlay(netw)
}

// deleteOverlay removes the network's overlay: its rules, then its device
// (its route goes with it, and its process ends when the device goes).
func (p *Plugin) deleteOverlay(netw string) error {
	what := "delete overlay of network " + netw
	if err := deleteOverlayRules(netw); err != nil {
		return unavailable(what, err)
	}
	delete(p.nextKeys, netw)
	if err := deleteLink(wgName(netw)); err != nil {
		return unavailable(what, err)
	}
	// The process notices the device is gone; wait for it so that a new
	// overlay of the same network right after gets a fresh socket.
	for i := 0; i < 50; i++ {
		if _, err := uapi(wgName(netw), "get=1\n"); err != nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

func (p *Plugin) RotateOverlayKey(_ context.Context, netw string, commit bool) (*pb.RotateOverlayKeyResponse, error) {
	if err := checkID("network", netw); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	what := "rotate the overlay key of network " + netw
	name := wgName(netw)
	cur, err := readDevice(name)
	if err != nil {
		if _, lerr := netlink.LinkByName(name); lerr != nil {
			return nil, network.Errorf(network.ErrNotFound, "%s: the network has no overlay on this node", what)
		}
		return nil, unavailable(what, err)
	}
	if !commit {
		k, err := newPrivateKey()
		if err != nil {
			return nil, unavailable(what, err)
		}
		p.nextKeys[netw] = k
		return &pb.RotateOverlayKeyResponse{PublicKey: cur.private.public().String(), NextPublicKey: k.public().String()}, nil
	}
	next, ok := p.nextKeys[netw]
	if !ok {
		return nil, network.Errorf(network.ErrState, "%s: no next key to commit (none made, or made by an earlier plugin process): make one first", what)
	}
	if _, err := uapi(name, "set=1\nprivate_key="+next.hex()+"\n"); err != nil {
		return nil, unavailable(what, err)
	}
	delete(p.nextKeys, netw)
	return &pb.RotateOverlayKeyResponse{PublicKey: next.public().String()}, nil
}

func (p *Plugin) ListOverlays(context.Context) ([]*pb.OverlayDetails, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	devs, err := listLinks[overlayRecord](wgPrefix)
	if err != nil {
		return nil, err
	}
	var out []*pb.OverlayDetails
	for _, d := range devs {
		od, err := p.overlayDetails(d)
		if err != nil {
			return nil, err
		}
		out = append(out, od)
	}
	return out, nil
}

// wgState is what a WireGuard process says of itself.
type wgState struct {
	private key
	peers   []devicePeer
}

type devicePeer struct {
	pub       key
	endpoint  string
	allowed   []string
	handshake int64
	rx, tx    uint64
}

func readDevice(name string) (wgState, error) {
	kv, err := uapi(name, "get=1\n")
	if err != nil {
		return wgState{}, err
	}
	var d wgState
	var peer *devicePeer
	for _, e := range kv {
		switch e[0] {
		case "private_key":
			d.private = parseHexKey(e[1])
		case "public_key":
			d.peers = append(d.peers, devicePeer{pub: parseHexKey(e[1])})
			peer = &d.peers[len(d.peers)-1]
		case "endpoint":
			if peer != nil {
				peer.endpoint = e[1]
			}
		case "allowed_ip":
			if peer != nil {
				peer.allowed = append(peer.allowed, e[1])
			}
		case "last_handshake_time_sec":
			if peer != nil {
				peer.handshake, _ = strconv.ParseInt(e[1], 10, 64)
			}
		case "rx_bytes":
			if peer != nil {
				peer.rx, _ = strconv.ParseUint(e[1], 10, 64)
			}
		case "tx_bytes":
			if peer != nil {
				peer.tx, _ = strconv.ParseUint(e[1], 10, 64)
			}
		}
	}
	return d, nil
}

func (p *Plugin) overlayDetails(f found[overlayRecord]) (*pb.OverlayDetails, error) {
	d, err := readDevice(f.name)
	if err != nil {
		return nil, unavailable("overlay of network "+f.rec.Network, err)
	}
	od := &pb.OverlayDetails{Network: f.rec.Network, Subnet: f.rec.Subnet, ListenPort: f.rec.Port, Device: f.name, PublicKey: d.private.public().String()}
	if next, ok := p.nextKeys[f.rec.Network]; ok {
		od.NextPublicKey = next.public().String()
	}
	if p.cfg.OverlayAddress != "" {
		od.Endpoint = netip.AddrPortFrom(netip.MustParseAddr(p.cfg.OverlayAddress), uint16(f.rec.Port)).String()
	}
	for _, peer := range d.peers {
		s := &pb.OverlayPeerStatus{PublicKey: peer.pub.String(), Endpoint: peer.endpoint, LastHandshakeUnix: peer.handshake, RxBytes: peer.rx, TxBytes: peer.tx}
		if len(peer.allowed) > 0 {
			s.Subnet = peer.allowed[0]
		}
		od.Peers = append(od.Peers, s)
	}
	sort.Slice(od.Peers, func(i, j int) bool { return od.Peers[i].Subnet < od.Peers[j].Subnet })
	return od, nil
}
