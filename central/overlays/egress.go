package overlays

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"

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
