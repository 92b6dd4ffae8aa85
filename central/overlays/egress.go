package overlays

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Egress policies: the operator's fleet-wide floor (the policy's egress) and
// a tenant network's own. A tenant may tighten the floor (an allowlist under
// an open floor, a narrower allowlist, more blocks) but never loosen it:
// Clamp keeps what tightens and refuses the rest, entry by entry, with the
// reason. Entries are IPv4 addresses or CIDR subnets.

// CheckEgress refuses a malformed policy (400), in sdk.CheckEgressPolicy's
// words.
func CheckEgress(p *sdk.EgressPolicy, what string) error {
	if err := sdk.CheckEgressPolicy(p); err != nil {
		return &jsonapi.Error{Status: http.StatusBadRequest, Msg: what + ": " + jsonapi.Echo(err.Error()),
			Hint: `"mode": "open" or "allowlist"; addresses (192.0.2.7) or subnets in CIDR notation (192.0.2.0/24), at most 64 of each`}
	}
	return nil
}

// covers says whether some entry of list holds all of p.
func covers(list []string, p netip.Prefix) bool {
	for _, e := range list {
		if q, ok := sdk.EgressEntry(e); ok && q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// Clamp returns the policy a tenant network gets: local (nil: the floor's)
// held to floor (nil: open, nothing blocked), and what of local was refused
// because it would loosen the floor. Both must pass CheckEgress first; a
// malformed local is refused (400), as Clamp's error.
func Clamp(floor, local *sdk.EgressPolicy) (sdk.EgressPolicy, []string, error) {
	f := sdk.EgressPolicy{Mode: "open"}
	if floor != nil {
		f = *floor
	}
	if err := CheckEgress(local, "egress"); err != nil {
		return sdk.EgressPolicy{}, nil, err
	}
	if local == nil {
		return f, nil, nil
	}
	eff := sdk.EgressPolicy{Mode: local.Mode, Block: slices.Clone(f.Block)}
	var refused []string
	for _, b := range local.Block {
		if !slices.Contains(eff.Block, b) {
			eff.Block = append(eff.Block, b)
		}
	}
	switch {
	case f.Mode == "allowlist" && local.Mode == "open":
		refused = append(refused, "mode open would loosen the floor's allowlist: the floor's allowlist applies")
		eff.Mode, eff.Allow = "allowlist", slices.Clone(f.Allow)
	case f.Mode == "allowlist":
		for _, a := range local.Allow {
			p, _ := sdk.EgressEntry(a)
			if covers(f.Allow, p) {
				eff.Allow = append(eff.Allow, a)
			} else {
				refused = append(refused, fmt.Sprintf("allow %s is outside the floor's allowlist", a))
			}
		}
	default:
		eff.Allow = slices.Clone(local.Allow)
	}
	if eff.Mode == "open" {
		eff.Allow = nil
	}
	return eff, refused, nil
}

// Floor is the egress floor of tenant networks on this central: the
// operator's (pol.Egress; open when absent), and on a member central the
// fleet owner's floor with the operator's clamped to it, so the operator
// may tighten the owner's floor and never loosen it. overridden says what
// of the operator's egress the owner's floor overrides.
func (s *Service) Floor(ctx context.Context, pol sdk.Policy) (floor sdk.EgressPolicy, overridden []string, err error) {
	var fleet *sdk.EgressPolicy
	if s.FleetFloor != nil {
		if fleet, err = s.FleetFloor(ctx); err != nil {
			return floor, nil, fmt.Errorf("read the fleet's egress floor: %w", err)
		}
	}
	if fleet == nil {
		if pol.Egress == nil {
			return sdk.EgressPolicy{Mode: "open"}, nil, nil
		}
		return *pol.Egress, nil, nil
	}
	return Clamp(fleet, pol.Egress)
}

// CheckOwnEgress refuses (409) an operator's egress that would loosen the
// fleet owner's floor on this member central, with every reason; nil when
// it only tightens it, or there is no fleet floor here. A malformed one is
// left to the policy's own check (400).
func (s *Service) CheckOwnEgress(ctx context.Context, egress *sdk.EgressPolicy) error {
	if sdk.CheckEgressPolicy(egress) != nil || s.FleetFloor == nil {
		return nil
	}
	fleet, err := s.FleetFloor(ctx)
	if err != nil || fleet == nil {
		return err
	}
	if _, refused, err := Clamp(fleet, egress); err != nil {
		return err
	} else if len(refused) > 0 {
		return &jsonapi.Error{Status: http.StatusConflict,
			Msg: "egress would loosen the fleet owner's floor: " + strings.Join(refused, "; "),
			Hint: "this central is a member of a fleet, and its owner's egress floor applies here (GET /fleet/policy shows it as fleet_egress): " +
				"this central's egress may tighten it (an allowlist within the owner's, more blocks) but not loosen it; leave egress out to take the owner's"}
	}
	return nil
}
