package vms

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/plugins/network"
	"github.com/fluxvm/fluxvm/sdk"
)

// A VM's network, as the node's create request names it.
const (
	NetworkUser   = "user"   // QEMU's user-mode NAT (the node's default)
	NetworkNone   = "none"   // no interface
	NetworkTenant = "tenant" // a tap in the tenant's network, from the node's network plugin
)

// SubnetStore is what a tenant network needs of central's store.
type SubnetStore interface {
	// TenantSubnetIndex returns the tenant's subnet index, assigning one
	// at the first call (store.ErrNoSubnet when all are held).
	TenantSubnetIndex(ctx context.Context, tenant string) (int, error)
}

// ChooseNetwork decides the network of a create by tenant ("" is the
// operator) that asked for asked ("" when it named none), under the fleet
// policy (docs/networks.md, "In central: a launch's network"):
//
//   - a tenant's VM goes in its tenant network when isolate_tenant_networks
//     is on; it may ask for "none" then, never for "user" (QEMU's NAT
//     reaches the node's own services, the path isolation closes);
//   - with isolation off a tenant's VM has user networking unless it asks
//     for "tenant" or "none";
//   - the operator's VMs belong to no tenant and have no tenant network:
//     "user" (the default) or "none", whatever the policy.
//
// It returns the mode for the node ("" leaves the node's default, "user"),
// or a *jsonapi.Error.
func ChooseNetwork(pol sdk.Policy, tenant, asked string) (string, error) {
	switch asked {
	case "", NetworkUser, NetworkNone, NetworkTenant:
	default:
		return "", &jsonapi.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("network %q is not known", jsonapi.Echo(asked)),
			Hint: `use "tenant" (your tenant's own network), "user" (NAT) or "none"`}
	}
	if tenant == "" {
		if asked == NetworkTenant {
			return "", &jsonapi.Error{Status: http.StatusBadRequest, Msg: "the operator's VMs belong to no tenant, so they have no tenant network",
				Hint: `use "user" (NAT, the default) or "none"; a tenant's VMs get their tenant's network`}
		}
		return asked, nil
	}
	if !pol.IsolateTenantNetworks {
		return asked, nil
	}
	switch asked {
	case "":
		return NetworkTenant, nil
	case NetworkUser:
		return "", &jsonapi.Error{Status: http.StatusForbidden, Msg: "user-mode networking is not allowed for tenants while the fleet policy isolates tenant networks",
			Hint: `leave network out (or "tenant") for your tenant's own network, or ask for "none"; the operator sets isolate_tenant_networks`}
	}
	return asked, nil
}

// TenantSubnet is the tenant's subnet, <tenant_subnet_prefix>.<n>.0/24, with
// n its index in the store (assigned at the first need and kept). It returns
// a *jsonapi.Error when there is none to give.
func TenantSubnet(ctx context.Context, st SubnetStore, pol sdk.Policy, tenant string) (string, error) {
	n, err := st.TenantSubnetIndex(ctx, tenant)
	switch {
	case errors.Is(err, store.ErrNoSubnet):
		return "", &jsonapi.Error{Status: http.StatusServiceUnavailable, Msg: fmt.Sprintf("every one of the %d tenant subnets is held by a tenant", store.MaxTenantSubnets),
			Hint: "the operator frees one by deleting a tenant that no longer needs it, or turns isolate_tenant_networks off"}
	case errors.Is(err, store.ErrNotFound):
		return "", &jsonapi.Error{Status: http.StatusForbidden, Msg: "tenant " + tenant + " no longer exists", Hint: "sign in again"}
	case err != nil:
		return "", &jsonapi.Error{Status: http.StatusServiceUnavailable, Msg: "cannot read the tenant's subnet", Hint: "retry in a moment"}
	}
	subnet, err := network.TenantSubnet(pol.TenantSubnetPrefix, n)
	if err != nil {
		return "", &jsonapi.Error{Status: http.StatusServiceUnavailable, Msg: "the policy's tenant_subnet_prefix does not make a subnet: " + err.Error(),
			Hint: `the operator sets tenant_subnet_prefix to two octets, like "10.230" (PUT /fleet/policy)`}
	}
	return subnet, nil
}
