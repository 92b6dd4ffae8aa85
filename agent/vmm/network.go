package vmm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"regexp"

	"github.com/fluxvm/fluxvm/agent/pluginhost"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/plugins/network"
	netpb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

// Networks is what the manager needs of the plugin host for tenant
// networks.
type Networks interface {
	// Network returns a running network plugin (ErrUnavailable while down).
	Network(name string) (network.Network, error)
}

// networkTenant is the CreateVMRequest.Network mode of a VM in its
// tenant's network.
const networkTenant = "tenant"

// networkIDPattern is a network id as network plugins take it.
var networkIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// egress is a request's egress policy as the network contract has it: nil
// keeps the network's own (open for a new network).
func egress(p *sdk.EgressPolicy) *netpb.Egress {
	if p == nil {
		return nil
	}
	return &netpb.Egress{Mode: p.Mode, Allow: p.Allow, Block: p.Block}
}

// netID is the node network a tenant VM is in: an overlay's, or its tenant's.
func netID(req sdk.CreateVMRequest) string {
	if req.NetworkID != "" {
		return req.NetworkID
	}
	return req.Tenant
}

// checkNetwork validates a request's network fields, in the one place
// they are checked: "user" (the default), "none", or "tenant" with a tenant
// and an IPv4 subnet, on a node with a network plugin.
func (m *Manager) checkNetwork(req *sdk.CreateVMRequest) error {
	if req.Network == "" {
		req.Network = "user"
	}
	switch req.Network {
	case "user", "none":
		if req.NetworkID != "" || req.Egress != nil {
			return fail(driver.ErrInvalid, `leave network_id out, or ask for "network": "tenant"`, "network_id and egress are only for network \"tenant\", not %q", req.Network)
		}
		if req.Subnet != "" {
			return fail(driver.ErrInvalid, `leave subnet out, or ask for "network": "tenant"`, "subnet is only for network \"tenant\", not %q", req.Network)
		}
		return nil
	case networkTenant:
	default:
		return fail(driver.ErrInvalid, `use "user" (NAT), "none", or "tenant" (the tenant's own network)`, "network %q is not known", jsonapi.Echo(req.Network))
	}
	if m.opts.NetworkPlugin == "" {
		return fail(driver.ErrInvalid, `add a network plugin to the node's agent.hcl, e.g. plugin "netns" {}`,
			"node %s has no network plugin, so it has no tenant networks", m.opts.NodeName)
	}
	if req.Tenant == "" {
		return fail(driver.ErrInvalid, "set tenant: the network is the tenant's", "network \"tenant\" needs a tenant")
	}
	if err := sdk.CheckEgressPolicy(req.Egress); err != nil {
		return fail(driver.ErrInvalid, `"egress": {"mode": "open" or "allowlist", "allow": [...], "block": [...]}, IPv4 addresses or subnets`, "%s", jsonapi.Echo(err.Error()))
	}
	if req.NetworkID != "" && !networkIDPattern.MatchString(req.NetworkID) {
		return fail(driver.ErrInvalid, "an overlay's network id is 1 to 64 characters from [A-Za-z0-9_-]", "network_id %q is not a network id", jsonapi.Echo(req.NetworkID))
	}
	p, err := netip.ParsePrefix(req.Subnet)
	if err != nil || !p.Addr().Is4() || p != p.Masked() || p.Bits() < 16 || p.Bits() > 29 {
		return fail(driver.ErrInvalid, `give the tenant's IPv4 subnet, /16 to /29, e.g. "subnet": "10.230.7.0/24"`,
			"subnet %q is not an IPv4 network address with a /16 to /29 prefix", jsonapi.Echo(req.Subnet))
	}
	return nil
}

// network returns the node's network plugin: ErrUnavailable while it is
// restarting, ErrInvalid when the node has none (any more).
func (m *Manager) network() (network.Network, error) {
	if m.opts.Networks == nil || m.opts.NetworkPlugin == "" {
		return nil, network.Errorf(network.ErrInvalid, "node %s has no network plugin", m.opts.NodeName)
	}
	return m.opts.Networks.Network(m.opts.NetworkPlugin)
}

// attach makes the VM's interface in its tenant's network (the network
// too, if it is not there yet) and returns the driver's Network for it.
func (m *Manager) attach(ctx context.Context, id string, req sdk.CreateVMRequest) (*pb.Network, error) {
	n, err := m.network()
	if err != nil {
		return nil, networkErr(err, "create vm %s: tenant network", req.Name)
	}
	ifc, err := n.CreateInterface(ctx, &netpb.CreateInterfaceRequest{
		Network: &netpb.TenantNetwork{Tenant: netID(req), Subnet: req.Subnet, Egress: egress(req.Egress)}, VmId: id,
	})
	if err != nil {
		return nil, networkErr(err, "create vm %s: tenant network", req.Name)
	}
	net := &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP, Tap: ifc.GetDevice(), Mac: ifc.GetMac(), Gateway: ifc.GetGateway()}
	if a := ifc.GetAddress(); a != "" {
		net.Addresses = []string{a}
	}
	return net, nil
}

// detach removes a tenant VM's interface, and the tenant's network on the
// node when no interface is left in it, so that a node without the
// tenant's VMs keeps nothing of the tenant's in its kernel.
func (m *Manager) detach(ctx context.Context, id string, req sdk.CreateVMRequest) error {
	n, err := m.network()
	if err != nil {
		return networkErr(err, "delete vm %s: tenant network", req.Name)
	}
	if err := n.DeleteInterface(ctx, &netpb.InterfaceRef{Tenant: netID(req), VmId: id}); err != nil {
		return networkErr(err, "delete vm %s: its interface", req.Name)
	}
	all, err := n.ListInterfaces(ctx)
	if err != nil {
		return networkErr(err, "delete vm %s: list interfaces", req.Name)
	}
	for _, ifc := range all {
		if ifc.GetRef().GetTenant() == netID(req) {
			return nil
		}
	}
	if err := n.DeleteNetwork(ctx, netID(req)); err != nil && !errors.Is(err, network.ErrState) {
		// ErrState: a create for the tenant made an interface meanwhile, or
		// the network is an overlay's, which stays while the node is a member.
		return networkErr(err, "delete vm %s: the tenant's network", req.Name)
	}
	return nil
}

// guestAddress is a tenant VM's address as its network plugin reports it.
func (m *Manager) guestAddress(ctx context.Context, id string, req sdk.CreateVMRequest) (netip.Prefix, error) {
	n, err := m.network()
	if err != nil {
		return netip.Prefix{}, networkErr(err, "vm %s: tenant network", req.Name)
	}
	ifc, err := n.InterfaceDetails(ctx, &netpb.InterfaceRef{Tenant: netID(req), VmId: id})
	if err != nil {
		return netip.Prefix{}, networkErr(err, "vm %s: its interface", req.Name)
	}
	p, err := netip.ParsePrefix(ifc.GetAddress())
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("vm %s: the network plugin gave no usable address (%q)", req.Name, ifc.GetAddress())
	}
	return p, nil
}

// networkErr turns a network plugin's error into the manager's (the error
// kinds are base's, shared with the driver contract).
func networkErr(err error, format string, args ...any) error {
	err = driverErr(err, format, args...)
	var e *Error
	if errors.As(err, &e) && errors.Is(e.Kind, network.ErrUnavailable) {
		e.Hint = "the network plugin is down or restarting; GET /v1/health shows it, its log says why"
	}
	return err
}

// networkHealth reports a network plugin in the node's health.
func networkHealth(s pluginhost.Status) sdk.NetworkHealth {
	nh := sdk.NetworkHealth{Name: s.Name, Health: "down", Description: s.LastError, Restarts: s.Restarts, Capabilities: []string{}}
	if s.Info != nil {
		nh.Version = s.Info.Version
	}
	if s.Up {
		nh.Health = "up"
	}
	c := s.NetworkCapabilities
	for _, claim := range []struct {
		name string
		on   bool
	}{{"tenant_isolation", c.GetTenantIsolation()}, {"egress_nat", c.GetEgressNat()}, {"assigns_addresses", c.GetAssignsAddresses()}, {"overlays", c.GetOverlays()}, {"egress_policy", c.GetEgressPolicy()}} {
		if claim.on {
			nh.Capabilities = append(nh.Capabilities, claim.name)
		}
	}
	return nh
}

// ReconcileInterfaces removes the interfaces of VMs the node has no record
// of (left by a crash between a create's interface and its record's
// removal, or by hand), and the tenant networks that leaves empty. It runs
// each time the network plugin (re)starts. Interfaces are listed before the
// records are read: a create writes its record before it asks for its
// interface, so one in progress is never taken for an orphan.
func (m *Manager) ReconcileInterfaces(ctx context.Context, n network.Network) {
	ifcs, err := n.ListInterfaces(ctx)
	if err != nil {
		m.log.Error("list the network plugin's interfaces", "error", err)
		return
	}
	recs, err := m.opts.Store.ListVMs()
	if err != nil {
		m.log.Error("list vms to reconcile interfaces", "error", err)
		return
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
	}
	emptied := map[string]bool{}
	for _, ifc := range ifcs {
		ref := ifc.GetRef()
		if known[ref.GetVmId()] {
			continue
		}
		if err := n.DeleteInterface(ctx, ref); err != nil {
			m.log.Error("delete the interface of an unknown vm", "tenant", ref.GetTenant(), "vm", ref.GetVmId(), "error", err)
			continue
		}
		m.log.Warn("deleted the interface of a vm this node has no record of", "tenant", ref.GetTenant(), "vm", ref.GetVmId(), "device", ifc.GetDevice())
		emptied[ref.GetTenant()] = true
	}
	if len(emptied) == 0 {
		return
	}
	if ifcs, err = n.ListInterfaces(ctx); err != nil {
		m.log.Error("list the network plugin's interfaces", "error", err)
		return
	}
	for _, ifc := range ifcs {
		delete(emptied, ifc.GetRef().GetTenant())
	}
	for tenant := range emptied {
		if err := n.DeleteNetwork(ctx, tenant); err != nil && !errors.Is(err, network.ErrState) {
			m.log.Error("delete an empty tenant network", "tenant", tenant, "error", err)
		}
	}
}
