//go:build linux

package netns

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/fluxvm/fluxvm/plugins/network"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
)

// Names of what the plugin makes. Link names hold at most 15 bytes, so they
// carry a hash of the ids; the full ids live in the link's alias, which is
// what the plugin reads back after a restart.
const (
	bridgePrefix = "fxbr-"           // + 10 hex: a tenant's bridge
	tapPrefix    = "fxtap"           // + 10 hex: a VM's tap
	wgPrefix     = "fxwg-"           // + 10 hex: a network's overlay device
	aliasPrefix  = "fluxvm:"         // + JSON of bridgeRecord or tapRecord
	tableName    = "fluxvm"          // our nftables table (family inet)
	ruleTag      = "fluxvm tenant="  // + tenant: the comment on a tenant's rules
	overlayTag   = "fluxvm overlay=" // + network: the comment on an overlay's rules
	egressTag    = "fluxvm egress="  // + network: the comment on a network's egress rules
)

func hashName(prefix string, parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return prefix + hex.EncodeToString(h[:5])
}

func bridgeName(tenant string) string  { return hashName(bridgePrefix, tenant) }
func tapName(tenant, vm string) string { return hashName(tapPrefix, tenant, vm) }

// guestMAC is the VM's MAC: locally administered, unicast, from its ids, so
// it is the same after every restart.
func guestMAC(tenant, vm string) net.HardwareAddr { return hashMAC("mac", tenant, vm) }

// bridgeMAC is the MAC of the tenant's bridge: the guests' gateway.
func bridgeMAC(tenant string) net.HardwareAddr { return hashMAC("bridge-mac", tenant) }

func hashMAC(parts ...string) net.HardwareAddr {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return net.HardwareAddr{0x02, h[0], h[1], h[2], h[3], h[4]}
}

// bridgeRecord is a bridge's alias: which tenant and subnet it serves.
type bridgeRecord struct {
	Tenant string `json:"t"`
	Subnet string `json:"s"`
}

// tapRecord is a tap's alias: whose interface it is and the guest's address.
type tapRecord struct {
	Tenant  string `json:"t"`
	VM      string `json:"v"`
	Address string `json:"a"`
	MAC     string `json:"m"`
}

func encodeAlias(v any) string {
	b, _ := json.Marshal(v)
	return aliasPrefix + string(b)
}

func decodeAlias(alias string, v any) bool {
	rest, ok := strings.CutPrefix(alias, aliasPrefix)
	return ok && json.Unmarshal([]byte(rest), v) == nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func checkID(what, id string) error {
	if !idPattern.MatchString(id) {
		return network.Errorf(network.ErrInvalid, "%s id %q must be 1 to 64 characters from [A-Za-z0-9_-]", what, id)
	}
	return nil
}

// parseSubnet accepts an IPv4 network address with a prefix from /16 to /29.
func parseSubnet(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, network.Errorf(network.ErrInvalid, "subnet %q is not an IPv4 subnet in CIDR notation", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, network.Errorf(network.ErrInvalid, "subnet %q is not a network address (did you mean %s?)", s, p.Masked())
	}
	if p.Bits() < 16 || p.Bits() > 29 {
		return netip.Prefix{}, network.Errorf(network.ErrInvalid, "subnet %q: the prefix length must be from 16 to 29", s)
	}
	return p, nil
}

// gateway is the subnet's first host address; broadcast its last address.
func gateway(p netip.Prefix) netip.Addr { return p.Addr().Next() }

func broadcast(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// checkGuestAddress refuses an address that a guest cannot have in p.
func checkGuestAddress(p netip.Prefix, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, network.Errorf(network.ErrInvalid, "address %q is not an IPv4 address", s)
	}
	if !p.Contains(a) || a == p.Addr() || a == gateway(p) || a == broadcast(p) {
		return netip.Addr{}, network.Errorf(network.ErrInvalid, "address %s is not a guest address of %s (not the network, gateway %s or broadcast address)", a, p, gateway(p))
	}
	return a, nil
}

// parseEgress checks an egress policy and returns its lists as subnets.
func parseEgress(e *pb.Egress) (allow, block []netip.Prefix, err error) {
	if e.GetMode() != "open" && e.GetMode() != "allowlist" {
		return nil, nil, network.Errorf(network.ErrInvalid, "egress mode %q is neither open nor allowlist", e.GetMode())
	}
	read := func(what string, list []string) ([]netip.Prefix, error) {
		if len(list) > 256 {
			return nil, network.Errorf(network.ErrInvalid, "egress %s has %d entries, at most 256", what, len(list))
		}
		var out []netip.Prefix
		for _, s := range list {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				if a, aerr := netip.ParseAddr(s); aerr == nil {
					p, err = netip.PrefixFrom(a, 32), nil
				}
			}
			if err != nil || !p.Addr().Is4() || p.Masked() != p {
				return nil, network.Errorf(network.ErrInvalid, "egress %s entry %q is not an IPv4 address or subnet", what, s)
			}
			out = append(out, p)
		}
		return out, nil
	}
	if allow, err = read("allow", e.GetAllow()); err != nil {
		return nil, nil, err
	}
	block, err = read("block", e.GetBlock())
	return allow, block, err
}
