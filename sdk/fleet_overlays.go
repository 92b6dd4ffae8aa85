package sdk

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"time"
)

// Overlay is a tenant's private network across nodes (GET /fleet/overlays/
// {name}): its VMs on every member node are in one subnet, joined by
// encrypted tunnels (WireGuard) between the nodes. Each member node holds a
// /28 part of the overlay's /24.
type Overlay struct {
	Name string `json:"name"`
	// Tenant is the owner's id; only the operator sees it.
	Tenant string `json:"tenant,omitempty"`
	// Subnet is the overlay's /24 ("10.231.4.0/24").
	Subnet string `json:"subnet"`
	// ListenPort is the UDP port the members' tunnels use.
	ListenPort int64           `json:"listen_port"`
	Members    []OverlayMember `json:"members"`
	// Egress is the policy the overlay's VMs get: the tenant's, clamped to
	// the operator's floor (never looser). EgressRefused says, entry by
	// entry, what of the tenant's policy was refused because it would have
	// loosened the floor.
	Egress        EgressPolicy `json:"egress"`
	EgressRefused []string     `json:"egress_refused,omitempty"`
	CreatedAt     time.Time    `json:"created_at"`
	// RotatedAt is the last completed key rotation.
	RotatedAt *time.Time `json:"rotated_at,omitempty"`
}

// OverlayMember is one node of an overlay.
type OverlayMember struct {
	Node string `json:"node"`
	// Subnet is the node's part of the overlay (a /28).
	Subnet string `json:"subnet"`
	// PublicKey is the node's WireGuard public key for the overlay (the
	// private key never leaves the node).
	PublicKey string `json:"public_key"`
	// NextPublicKey is set while the node's key rotates.
	NextPublicKey string `json:"next_public_key,omitempty"`
	// Endpoint is where the other members reach the node's tunnel.
	Endpoint string `json:"endpoint"`
}

// OverlayList is GET /fleet/overlays.
type OverlayList struct {
	Overlays []Overlay `json:"overlays"`
}

// CreateOverlayRequest is POST /fleet/overlays.
type CreateOverlayRequest struct {
	// Name is 1-40 lowercase letters, digits and '-', unique per tenant.
	Name string `json:"name"`
	// Nodes are the first members (more with AddOverlayNode).
	Nodes []string `json:"nodes,omitempty"`
	// Egress is the tenant's policy for the overlay's VMs; it may tighten
	// the operator's floor, never loosen it. Absent: the floor.
	Egress *EgressPolicy `json:"egress,omitempty"`
}

// AddOverlayNodeRequest is POST /fleet/overlays/{name}/members.
type AddOverlayNodeRequest struct {
	Node string `json:"node"`
}

// EgressPolicy is an egress policy: the operator's fleet-wide floor
// (Policy.Egress) or a tenant network's. Mode "open" lets everything out
// but Block; "allowlist" lets out only Allow, less Block. Entries are IPv4
// addresses or CIDR subnets.
type EgressPolicy struct {
	Mode  string   `json:"mode"`
	Allow []string `json:"allow,omitempty"`
	Block []string `json:"block,omitempty"`
}

// MaxEgressEntries bounds each of an egress policy's lists.
const MaxEgressEntries = 64

func fleetOverlayPath(name string, rest ...string) string {
	p := "/fleet/overlays/" + url.PathEscape(name)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

func tenantQuery(tenant string) url.Values {
	if tenant == "" {
		return nil
	}
	return url.Values{"tenant": {tenant}}
}

// ListOverlays lists the caller's overlays (the operator's: every tenant's,
// or tenant's when set).
func (f *FleetClient) ListOverlays(ctx context.Context, tenant string) (*OverlayList, error) {
	var out OverlayList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/overlays", tenantQuery(tenant), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateOverlay makes an overlay on its first nodes. tenant is for the
// operator (the owner's id or name); a tenant leaves it empty.
func (f *FleetClient) CreateOverlay(ctx context.Context, tenant string, req CreateOverlayRequest) (*Overlay, error) {
	var out Overlay
	if err := f.c.call(ctx, http.MethodPost, "/fleet/overlays", tenantQuery(tenant), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetOverlay returns one overlay.
func (f *FleetClient) GetOverlay(ctx context.Context, tenant, name string) (*Overlay, error) {
	var out Overlay
	if err := f.c.call(ctx, http.MethodGet, fleetOverlayPath(name), tenantQuery(tenant), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteOverlay removes an overlay from all its nodes. Refusal: IsConflict
// while VMs are in it.
func (f *FleetClient) DeleteOverlay(ctx context.Context, tenant, name string) error {
	return f.c.call(ctx, http.MethodDelete, fleetOverlayPath(name), tenantQuery(tenant), nil, nil)
}

// AddOverlayNode makes node a member of the overlay.
func (f *FleetClient) AddOverlayNode(ctx context.Context, tenant, name, node string) (*Overlay, error) {
	var out Overlay
	if err := f.c.call(ctx, http.MethodPost, fleetOverlayPath(name, "members"), tenantQuery(tenant), AddOverlayNodeRequest{Node: node}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RemoveOverlayNode takes node out of the overlay.
func (f *FleetClient) RemoveOverlayNode(ctx context.Context, tenant, name, node string) (*Overlay, error) {
	var out Overlay
	if err := f.c.call(ctx, http.MethodDelete, fleetOverlayPath(name, "members", node), tenantQuery(tenant), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RotateOverlay changes every member's key, one node at a time, with
// traffic going on.
func (f *FleetClient) RotateOverlay(ctx context.Context, tenant, name string) (*Overlay, error) {
	var out Overlay
	if err := f.c.call(ctx, http.MethodPost, fleetOverlayPath(name, "rotate"), tenantQuery(tenant), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CheckEgressPolicy refuses a malformed policy: a mode other than open or
// allowlist, an entry that is not an IPv4 address or subnet, too many.
func CheckEgressPolicy(p *EgressPolicy) error {
	if p == nil {
		return nil
	}
	if p.Mode != "open" && p.Mode != "allowlist" {
		return fmt.Errorf("egress mode %q is neither open nor allowlist", p.Mode)
	}
	for _, l := range []struct {
		name string
		list []string
	}{{"allow", p.Allow}, {"block", p.Block}} {
		if len(l.list) > MaxEgressEntries {
			return fmt.Errorf("egress %s has %d entries, more than %d", l.name, len(l.list), MaxEgressEntries)
		}
		for _, e := range l.list {
			if _, ok := EgressEntry(e); !ok {
				return fmt.Errorf("egress %s entry %q is not an IPv4 address or subnet (host names are not taken)", l.name, e)
			}
		}
	}
	return nil
}

// EgressEntry reads an egress entry: an IPv4 address (a /32) or a subnet's
// network address in CIDR notation.
func EgressEntry(s string) (netip.Prefix, bool) {
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return netip.PrefixFrom(a, 32), true
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return netip.Prefix{}, false
	}
	return p, true
}
