package api

import (
	"net/http"
	"slices"

	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

// tenantNetwork decides a launch's network under the policy
// (vms.ChooseNetwork) and, for a VM in its tenant's network, asks the
// scheduler for a node with a network plugin and names the tenant's subnet
// in the node's request (assigned at the first need; a dry run assigns
// none). It answers a refusal itself and returns false then.
func (s *Server) tenantNetwork(w http.ResponseWriter, r *http.Request, body *sdk.FleetCreateVMRequest, spec *sdk.CreateVMRequest,
	place *scheduler.Request, pol sdk.Policy, dryRun bool) bool {
	if len(body.Networks) > 0 {
		return s.overlayNetwork(w, r, body, spec, place)
	}
	mode, err := vms.ChooseNetwork(pol, spec.Tenant, spec.Network)
	if err != nil {
		s.refused(w, r, "check the request", err)
		return false
	}
	spec.Network = mode
	if mode != vms.NetworkTenant {
		return true
	}
	if body.Pool != "" {
		jsonapi.WriteError(w, http.StatusBadRequest, "warm pools' VMs are not in tenant networks (not built yet), and this VM would be in its tenant's network",
			`leave out pool to boot a new VM in your tenant's network, or ask for network "none"`)
		return false
	}
	place.TenantNetwork = true
	if dryRun {
		return true
	}
	subnet, err := vms.TenantSubnet(r.Context(), s.opts.Store, pol, spec.Tenant)
	if err != nil {
		s.refused(w, r, "check the request", err)
		return false
	}
	spec.Subnet = subnet
	// The floor (on a member central, the fleet owner's tightened by the
	// operator's: overlays.Floor), enforced by the node's network plugin;
	// sent even when open, so a floor taken away is taken away on the node too.
	floor, _, err := s.overlays.Floor(r.Context(), pol)
	if err != nil {
		s.storeError(w, "read the egress floor", err)
		return false
	}
	spec.Egress = &floor
	return true
}

// overlayNetwork puts a launch that names networks in the tenant's overlay:
// the node's create request names the overlay's network on the node and
// the node's part, with the overlay's egress policy (central/overlays
// checks the rest).
func (s *Server) overlayNetwork(w http.ResponseWriter, r *http.Request, body *sdk.FleetCreateVMRequest, spec *sdk.CreateVMRequest,
	place *scheduler.Request) bool {
	if spec.Network != "" && spec.Network != vms.NetworkTenant {
		jsonapi.WriteError(w, http.StatusBadRequest, "a VM in an overlay has network \"tenant\", not "+jsonapi.Echo(spec.Network), "leave network out")
		return false
	}
	if body.Pool != "" {
		jsonapi.WriteError(w, http.StatusBadRequest, "warm pools' VMs are not in overlays (not built yet)", "leave out pool")
		return false
	}
	id, subnet, egress, err := s.overlays.Launch(r.Context(), spec.Tenant, body.Node, body.Networks)
	if err != nil {
		s.refused(w, r, "join the overlay", err)
		return false
	}
	spec.Network, spec.NetworkID, spec.Subnet, spec.Egress = vms.NetworkTenant, id, subnet, &egress
	place.TenantNetwork = true
	return true
}

// noPlacementHint is the hint of a launch no node takes: where a node
// without a network plugin is among the refusals, it says what a tenant
// network needs.
func noPlacementHint(np *scheduler.NoPlacementError) string {
	const hint = "GET /fleet/capacity shows what fits now; ask for less, or relax node, node_selector or nested"
	for _, v := range np.Verdicts {
		if slices.Contains(v.Reasons, scheduler.NoNetworkPlugin) {
			return hint + `; a VM in its tenant's network needs a node whose network plugin is up (fluxctl fleet nodes -o wide, NETWORKS), or ask for network "none"`
		}
	}
	return hint
}
