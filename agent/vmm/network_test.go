package vmm

import (
	"errors"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestCheckNetworkIsTheOnePlaceNetworkModesAreChecked: "user" is the
// default, "tenant" needs a tenant, an IPv4 network address from /16 to
// /29 and a node with a network plugin, and a subnet goes with "tenant"
// only. Each refusal is ErrInvalid with a hint.
func TestCheckNetworkIsTheOnePlaceNetworkModesAreChecked(t *testing.T) {
	withPlugin := New(Options{NodeName: "n1", NetworkPlugin: "netns"})
	without := New(Options{NodeName: "n1"})
	cases := []struct {
		name    string
		m       *Manager
		req     sdk.CreateVMRequest
		mention string // "" when accepted
	}{
		{"default is user", withPlugin, sdk.CreateVMRequest{}, ""},
		{"none", withPlugin, sdk.CreateVMRequest{Network: "none"}, ""},
		{"tenant", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.0/24"}, ""},
		{"tenant /29", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.8/29"}, ""},
		{"unknown mode", withPlugin, sdk.CreateVMRequest{Network: "bridge"}, `"bridge" is not known`},
		{"tenant on a node without a network plugin", without, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.0/24"}, "no network plugin"},
		{"tenant without tenant", withPlugin, sdk.CreateVMRequest{Network: "tenant", Subnet: "10.230.7.0/24"}, "needs a tenant"},
		{"tenant without subnet", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme"}, "subnet"},
		{"host address, not network", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.5/24"}, "10.230.7.5/24"},
		{"too small", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.0/30"}, "/30"},
		{"too large", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.0.0.0/8"}, "/8"},
		{"IPv6", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "fd00::/64"}, "IPv4"},
		{"subnet with user", withPlugin, sdk.CreateVMRequest{Network: "user", Subnet: "10.230.7.0/24"}, "only for network"},
		{"overlay network", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", NetworkID: "ov-0123456789ab", Subnet: "10.231.0.16/28",
			Egress: &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}}}, ""},
		{"bad network id", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", NetworkID: "ov/../x", Subnet: "10.231.0.16/28"}, "network_id"},
		{"network id with user", withPlugin, sdk.CreateVMRequest{Network: "user", NetworkID: "ov-0123456789ab"}, "only for network"},
		{"egress with user", withPlugin, sdk.CreateVMRequest{Network: "user", Egress: &sdk.EgressPolicy{Mode: "open"}}, "only for network"},
		{"egress mode unknown", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.0/24", Egress: &sdk.EgressPolicy{Mode: "closed"}}, "closed"},
		{"egress host name", withPlugin, sdk.CreateVMRequest{Network: "tenant", Tenant: "acme", Subnet: "10.230.7.0/24",
			Egress: &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"example.com"}}}, "example.com"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := c.req
			err := c.m.checkNetwork(&req)
			if c.mention == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if req.Network == "" {
					t.Fatal("the default mode was not filled in")
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || !errors.Is(e.Kind, driver.ErrInvalid) || e.Hint == "" {
				t.Fatalf("err = %#v, want ErrInvalid with a hint", err)
			}
			if !strings.Contains(e.Msg, c.mention) && !strings.Contains(e.Hint, c.mention) {
				t.Errorf("%q / %q does not mention %q", e.Msg, e.Hint, c.mention)
			}
		})
	}
}
