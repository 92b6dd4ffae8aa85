//go:build linux

package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/network"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/vishvananda/netlink"
)

// Plugin is the netns network plugin. Its methods hold one lock: changes to
// the host's links and rules happen one at a time.
type Plugin struct {
	log      hclog.Logger
	mu       sync.Mutex
	cfg      config
	stateDir string
	// nextKeys are the overlays' next private keys while they rotate. They
	// are in memory only: a key never touches a disk, and a rotation whose
	// plugin process died is started again.
	nextKeys map[string]key
}

// config is the plugin's configuration block.
type config struct {
	// EgressNAT masquerades traffic from tenant subnets that leaves through
	// any device but the tenant's bridge, and turns on IPv4 forwarding.
	EgressNAT bool `json:"egress_nat"`
	// OverlayAddress is the node's address that other nodes reach its
	// overlay tunnels at; it makes OverlayDetails.endpoint.
	OverlayAddress string `json:"overlay_address"`
}

// New returns the plugin; fluxvm-agent serves it as `plugin netns`.
func New(log hclog.Logger) network.Network {
	return &Plugin{log: log, cfg: config{EgressNAT: true}, nextKeys: map[string]key{}}
}

var _ network.Network = (*Plugin)(nil)

func (p *Plugin) PluginInfo(context.Context) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Name:        "netns",
		Type:        basepb.PluginType_PLUGIN_TYPE_NETWORK,
		Version:     "0.1.0",
		ApiVersions: []uint32{network.APIVersion},
		Description: "Linux bridges and taps per tenant, isolated with nftables",
	}, nil
}

func (p *Plugin) ConfigSchema(context.Context) (*basepb.ConfigSchemaResponse, error) {
	return &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{{
		Name:        "egress_nat",
		Type:        basepb.AttributeType_ATTRIBUTE_TYPE_BOOL,
		DefaultJson: "true",
		Description: "masquerade traffic from tenant subnets leaving the node, and turn on IPv4 forwarding in the plugin's network namespace",
	}, {
		Name:        "overlay_address",
		Type:        basepb.AttributeType_ATTRIBUTE_TYPE_STRING,
		DefaultJson: `""`,
		Description: "the node's IP address that other nodes reach its overlay tunnels at (WireGuard over UDP)",
	}}}, nil
}

func (p *Plugin) SetConfig(_ context.Context, req *basepb.SetConfigRequest) error {
	cfg := config{EgressNAT: true}
	dec := json.NewDecoder(bytes.NewReader(req.ConfigJson))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return network.Errorf(network.ErrInvalid, "netns config: %v", err)
	}
	if cfg.OverlayAddress != "" {
		if a, err := netip.ParseAddr(cfg.OverlayAddress); err != nil || !a.Is4() || a.IsUnspecified() || a.IsMulticast() {
			return network.Errorf(network.ErrInvalid, "netns config: overlay_address %q is not an IPv4 unicast address", cfg.OverlayAddress)
		}
	}
	p.mu.Lock()
	p.cfg = cfg
	p.stateDir = req.GetAgent().GetStateDir()
	p.mu.Unlock()
	return nil
}

func (p *Plugin) Capabilities(context.Context) (*pb.CapabilitiesResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &pb.CapabilitiesResponse{
		TenantIsolation:  true,
		EgressNat:        p.cfg.EgressNAT,
		AssignsAddresses: true,
		InterfaceKinds:   []pb.InterfaceKind{pb.InterfaceKind_INTERFACE_KIND_TAP},
		Overlays:         true,
		EgressPolicy:     true,
	}, nil
}

func (p *Plugin) EnsureNetwork(_ context.Context, n *pb.TenantNetwork) (*pb.NetworkDetails, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, d, err := p.ensureNetwork(n)
	return d, err
}

// ensureNetwork makes or checks the tenant's bridge, its gateway address and
// its rules, and returns the bridge.
func (p *Plugin) ensureNetwork(n *pb.TenantNetwork) (netlink.Link, *pb.NetworkDetails, error) {
	if err := checkID("tenant", n.GetTenant()); err != nil {
		return nil, nil, err
	}
	subnet, err := parseSubnet(n.GetSubnet())
	if err != nil {
		return nil, nil, err
	}
	var allow, block []netip.Prefix
	if n.Egress != nil {
		if allow, block, err = parseEgress(n.Egress); err != nil {
			return nil, nil, err
		}
	}
	bridges, err := listBridges()
	if err != nil {
		return nil, nil, err
	}
	for _, b := range bridges {
		s, _ := netip.ParsePrefix(b.rec.Subnet)
		switch {
		case b.rec.Tenant == n.Tenant && s != subnet:
			return nil, nil, network.Errorf(network.ErrState, "tenant %s has network %s on this node, not %s", n.Tenant, s, subnet)
		case b.rec.Tenant != n.Tenant && s.Overlaps(subnet):
			return nil, nil, network.Errorf(network.ErrState, "subnet %s overlaps %s, another tenant's network on this node", subnet, s)
		}
	}
	what := fmt.Sprintf("ensure network of tenant %s", n.Tenant)
	name := bridgeName(n.Tenant)
	gw := gateway(subnet)
	details := &pb.NetworkDetails{Tenant: n.Tenant, Subnet: subnet.String(), Gateway: gw.String(), Device: name}

	br, err := netlink.LinkByName(name)
	var rec bridgeRecord
	if err == nil && decodeAlias(br.Attrs().Alias, &rec) && rec.Tenant != n.Tenant {
		// Two tenant ids whose names hash alike: never take over the other's.
		return nil, nil, network.Errorf(network.ErrState, "bridge %s belongs to tenant %s, whose name hashes like %s's", name, rec.Tenant, n.Tenant)
	}
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if !errors.As(err, &notFound) {
			return nil, nil, unavailable(what, err)
		}
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		// A MAC of its own: a bridge without one takes its lowest port's,
		// and the guests' gateway would change MAC as VMs come and go.
		attrs.HardwareAddr = bridgeMAC(n.Tenant)
		if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
			return nil, nil, unavailable(what+": add bridge "+name, err)
		}
		if br, err = netlink.LinkByName(name); err != nil {
			return nil, nil, unavailable(what, err)
		}
	}
	// Each step below is harmless to repeat, so a create that failed half
	// way is finished by the next call, and DeleteNetwork removes it all.
	if err := netlink.LinkSetAlias(br, encodeAlias(bridgeRecord{Tenant: n.Tenant, Subnet: subnet.String()})); err != nil {
		return nil, nil, unavailable(what, err)
	}
	noIPv6(name)
	gwNet := &net.IPNet{IP: gw.AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)}
	if err := netlink.AddrReplace(br, &netlink.Addr{IPNet: gwNet}); err != nil {
		return nil, nil, unavailable(what+": gateway address", err)
	}
	if err := netlink.LinkSetUp(br); err != nil {
		return nil, nil, unavailable(what, err)
	}
	if p.cfg.EgressNAT {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return nil, nil, unavailable(what+": turn on IPv4 forwarding", err)
		}
	}
	if err := ensureRules(n.Tenant, name, subnet, p.cfg.EgressNAT); err != nil {
		return nil, nil, unavailable(what, err)
	}
	if n.Egress != nil {
		if err := ensureEgressRules(n.Tenant, name, n.Egress.Mode, allow, block); err != nil {
			return nil, nil, unavailable(what, err)
		}
	}
	return br, details, nil
}

func (p *Plugin) DeleteNetwork(_ context.Context, tenant string) error {
	if err := checkID("tenant", tenant); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	taps, err := listTaps()
	if err != nil {
		return err
	}
	var left []string
	for _, t := range taps {
		if t.rec.Tenant == tenant {
			left = append(left, t.rec.VM)
		}
	}
	if len(left) > 0 {
		return network.Errorf(network.ErrState, "network of tenant %s still has interfaces (vm %s): delete them first", tenant, strings.Join(left, ", "))
	}
	if _, err := netlink.LinkByName(wgName(tenant)); err == nil {
		return network.Errorf(network.ErrState, "network of tenant %s has an overlay: delete it first", tenant)
	}
	what := "delete network of tenant " + tenant
	if err := deleteEgressRules(tenant); err != nil {
		return unavailable(what, err)
	}
	if err := deleteRules(tenant); err != nil {
		return unavailable(what, err)
	}
	if err := deleteUnfinishedTaps(bridgeName(tenant)); err != nil {
		return unavailable(what, err)
	}
	if err := deleteLink(bridgeName(tenant)); err != nil {
		return unavailable(what, err)
	}
	return nil
}

func (p *Plugin) CreateInterface(_ context.Context, req *pb.CreateInterfaceRequest) (*pb.Interface, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tenant, vm := req.GetNetwork().GetTenant(), req.GetVmId()
	if err := checkID("vm", vm); err != nil {
		return nil, err
	}
	br, nd, err := p.ensureNetwork(req.Network)
	if err != nil {
		return nil, err
	}
	subnet := netip.MustParsePrefix(nd.Subnet)
	taps, err := listTaps()
	if err != nil {
		return nil, err
	}
	used := map[netip.Addr]string{}
	for _, t := range taps {
		if t.rec.Tenant != tenant {
			continue
		}
		if t.rec.VM == vm {
			return nil, network.Errorf(network.ErrExists, "vm %s of tenant %s has an interface already (%s)", vm, tenant, t.name)
		}
		a, _ := netip.ParseAddr(t.rec.Address)
		used[a] = t.rec.VM
	}
	var addr netip.Addr
	if req.Address != "" {
		if addr, err = checkGuestAddress(subnet, req.Address); err != nil {
			return nil, err
		}
		if other, ok := used[addr]; ok {
			return nil, network.Errorf(network.ErrExists, "address %s is taken by vm %s of tenant %s", addr, other, tenant)
		}
	} else {
		for a := gateway(subnet).Next(); a != broadcast(subnet); a = a.Next() {
			if _, ok := used[a]; !ok {
				addr = a
				break
			}
		}
		if !addr.IsValid() {
			return nil, network.Errorf(network.ErrNoCapacity, "subnet %s of tenant %s has no free address", subnet, tenant)
		}
	}

	name := tapName(tenant, vm)
	mac := guestMAC(tenant, vm)
	what := fmt.Sprintf("create interface for vm %s of tenant %s", vm, tenant)
	// A tap of this name is either another VM's whose ids hash alike (it has
	// a record: leave it) or one a crashed create left without its record
	// (remove it and start again).
	if l, err := netlink.LinkByName(name); err == nil {
		var other tapRecord
		if decodeAlias(l.Attrs().Alias, &other) {
			return nil, network.Errorf(network.ErrExists, "tap %s belongs to vm %s of tenant %s, whose ids hash like these", name, other.VM, other.Tenant)
		}
		if err := netlink.LinkDel(l); err != nil {
			return nil, unavailable(what+": remove the unfinished tap "+name, err)
		}
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	attrs.MasterIndex = br.Attrs().Index
	tap := &netlink.Tuntap{
		LinkAttrs: attrs,
		Mode:      netlink.TUNTAP_MODE_TAP,
		// TUN_EXCL: fail rather than take over a tap of the same name.
		Flags: netlink.TUNTAP_TUN_EXCL | netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE,
	}
	if err := netlink.LinkAdd(tap); err != nil {
		return nil, unavailable(what+": add tap "+name, err)
	}
	for _, f := range tap.Fds {
		f.Close()
	}
	rec := tapRecord{Tenant: tenant, VM: vm, Address: addr.String(), MAC: mac.String()}
	link, err := netlink.LinkByName(name)
	if err == nil {
		noIPv6(name)
		err = netlink.LinkSetAlias(link, encodeAlias(rec))
	}
	if err == nil {
		err = netlink.LinkSetUp(link)
	}
	if err != nil {
		_ = deleteLink(name) // a failed create leaves nothing behind
		return nil, unavailable(what, err)
	}
	return rec.toProto(name, subnet), nil
}

func (p *Plugin) DeleteInterface(_ context.Context, ref *pb.InterfaceRef) error {
	if err := checkRef(ref); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := deleteLink(tapName(ref.Tenant, ref.VmId)); err != nil {
		return unavailable(fmt.Sprintf("delete interface of vm %s of tenant %s", ref.VmId, ref.Tenant), err)
	}
	return nil
}

func (p *Plugin) InterfaceExists(ctx context.Context, ref *pb.InterfaceRef) (bool, error) {
	_, err := p.InterfaceDetails(ctx, ref)
	if errors.Is(err, network.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (p *Plugin) InterfaceDetails(_ context.Context, ref *pb.InterfaceRef) (*pb.Interface, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	taps, err := listTaps()
	if err != nil {
		return nil, err
	}
	for _, t := range taps {
		if t.rec.Tenant == ref.Tenant && t.rec.VM == ref.VmId {
			return tapDetails(t)
		}
	}
	return nil, network.Errorf(network.ErrNotFound, "vm %s of tenant %s has no interface on this node", ref.VmId, ref.Tenant)
}

func (p *Plugin) ListInterfaces(context.Context) ([]*pb.Interface, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	taps, err := listTaps()
	if err != nil {
		return nil, err
	}
	var out []*pb.Interface
	for _, t := range taps {
		i, err := tapDetails(t)
		if err != nil {
			return nil, err
		}
		out = append(out, i)
	}
	return out, nil
}

func checkRef(ref *pb.InterfaceRef) error {
	if err := checkID("tenant", ref.GetTenant()); err != nil {
		return err
	}
	return checkID("vm", ref.GetVmId())
}

// found is a link of ours with the record in its alias.
type found[R any] struct {
	name string
	rec  R
}

// listLinks finds the links whose name starts with prefix and whose alias
// holds a record; others (not ours, or half made) are skipped.
func listLinks[R any](prefix string) ([]found[R], error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, unavailable("list links", err)
	}
	var out []found[R]
	for _, l := range links {
		var rec R
		if strings.HasPrefix(l.Attrs().Name, prefix) && decodeAlias(l.Attrs().Alias, &rec) {
			out = append(out, found[R]{name: l.Attrs().Name, rec: rec})
		}
	}
	return out, nil
}

func listBridges() ([]found[bridgeRecord], error) { return listLinks[bridgeRecord](bridgePrefix) }
func listTaps() ([]found[tapRecord], error)       { return listLinks[tapRecord](tapPrefix) }

// tapDetails describes a tap of ours.
func tapDetails(t found[tapRecord]) (*pb.Interface, error) {
	rec := t.rec
	// The subnet is the tenant bridge's; the tap's record holds the address.
	br, err := netlink.LinkByName(bridgeName(rec.Tenant))
	if err != nil {
		return nil, unavailable("find the bridge of tenant "+rec.Tenant, err)
	}
	var b bridgeRecord
	if !decodeAlias(br.Attrs().Alias, &b) {
		return nil, network.Errorf(network.ErrUnavailable, "bridge %s of tenant %s has lost its record", br.Attrs().Name, rec.Tenant)
	}
	return rec.toProto(t.name, netip.MustParsePrefix(b.Subnet)), nil
}

func (r tapRecord) toProto(device string, subnet netip.Prefix) *pb.Interface {
	return &pb.Interface{
		Ref:     &pb.InterfaceRef{Tenant: r.Tenant, VmId: r.VM},
		Kind:    pb.InterfaceKind_INTERFACE_KIND_TAP,
		Device:  device,
		Mac:     r.MAC,
		Address: fmt.Sprintf("%s/%d", r.Address, subnet.Bits()),
		Gateway: gateway(subnet).String(),
		Subnet:  subnet.String(),
	}
}

// deleteUnfinishedTaps removes the taps on the bridge that have no record:
// creates that crashed half way. Deleting the bridge alone would leave them.
func deleteUnfinishedTaps(bridge string) error {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil // no bridge, no ports
		}
		return err
	}
	links, err := netlink.LinkList()
	if err != nil {
		return err
	}
	for _, l := range links {
		var rec tapRecord
		a := l.Attrs()
		if a.MasterIndex == br.Attrs().Index && strings.HasPrefix(a.Name, tapPrefix) && !decodeAlias(a.Alias, &rec) {
			if err := netlink.LinkDel(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteLink removes a link by name; a missing link is no error.
func deleteLink(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return err
	}
	return netlink.LinkDel(l)
}

// noIPv6 turns IPv6 off on a link of ours, so the host has no link-local
// address in a tenant's network. Hosts without IPv6 have nothing to turn off.
func noIPv6(link string) {
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+link+"/disable_ipv6", []byte("1"), 0o644)
}

func unavailable(what string, err error) error {
	if errors.Is(err, network.ErrInvalid) || errors.Is(err, network.ErrUnavailable) {
		return err
	}
	return network.Errorf(network.ErrUnavailable, "%s: %v", what, err)
}
