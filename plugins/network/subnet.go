package network

import (
	"fmt"
	"net/netip"
)

// TenantSubnet is the /24 of the tenant numbered n on a node whose tenant
// networks share prefix, two octets such as "10.230": "10.230.<n>.0/24". The
// agent chooses prefix and n; plugins receive the result in TenantNetwork.
func TenantSubnet(prefix string, n int) (string, error) {
	if n < 0 || n > 255 {
		return "", Errorf(ErrInvalid, "tenant network number %d is not from 0 to 255", n)
	}
	s := fmt.Sprintf("%s.%d.0/24", prefix, n)
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Masked() != p {
		return "", Errorf(ErrInvalid, "tenant network prefix %q is not two octets of an IPv4 address, like \"10.230\"", prefix)
	}
	return s, nil
}
