package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// egressText is an egress policy on one line: its mode, then what it
// allows and blocks ("allowlist allow 192.0.2.0/24 block 192.0.2.66").
func egressText(p *sdk.EgressPolicy) string {
	if p == nil {
		return "open"
	}
	s := p.Mode
	if len(p.Allow) > 0 {
		s += " allow " + strings.Join(p.Allow, ",")
	}
	if len(p.Block) > 0 {
		s += " block " + strings.Join(p.Block, ",")
	}
	return s
}

func (f *fleet) policyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "policy",
		Short: "Show the fleet policy, with the egress floor and, on a member central, its owner's (operator)",
		Long: `Show the operator's fleet policy: leases, tenant networks, snapshots, tunnels
and the egress floor tenant networks are held to. On a central that is a
member of another's fleet it shows the owner's egress floor too: when it was
last fetched, the last error fetching it, and the floor tenant networks here
get (the owner's, tightened by this central's own egress). Change the policy
with PUT /fleet/policy (docs/operator.md).`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			p, err := fc.GetPolicy(c.Context())
			if err != nil {
				return withHints(err, map[int]string{403: "the policy is the operator's: use the fleet token"})
			}
			if !f.a.human() {
				return f.a.printRaw(p)
			}
			fs := [][2]string{
				{"min lease hours", fmt.Sprint(p.MinLeaseHours)},
				{"macOS needs a lease", fmt.Sprint(p.RequireLeaseForMacOS)},
				{"isolate tenant networks", fmt.Sprint(p.IsolateTenantNetworks)},
				{"tenant subnets", p.TenantSubnetPrefix + ".N.0/24"},
				{"snapshots per VM", fmt.Sprint(p.MaxSnapshotsPerVM)},
				{"tunnels", fmt.Sprintf("%v, ports %s", p.Tunnels.Enabled, strings.Join(p.Tunnels.Ports, ","))},
				{"egress floor", egressText(p.Egress)},
			}
			if fe := p.FleetEgress; fe != nil {
				fetched := "not yet"
				if fe.FetchedAt != nil {
					fetched = fmt.Sprintf("%s (%s ago)", fe.FetchedAt.Local().Format(time.DateTime), short(time.Duration(fe.AgeSeconds)*time.Second))
				}
				owner := "not fetched yet"
				if fe.Floor != nil {
					owner = egressText(fe.Floor)
				}
				fs = append(fs, [2]string{"fleet owner", fe.OwnerURL}, [2]string{"owner's floor", owner}, [2]string{"fetched", fetched})
				if fe.LastError != "" {
					fs = append(fs, [2]string{"last fetch failed", fe.LastError + " (the floor fetched before stays in force)"})
				}
				fs = append(fs, [2]string{"tenant networks get", egressText(&fe.Effective)})
				for _, o := range fe.Overridden {
					fs = append(fs, [2]string{"overridden", o})
				}
			}
			fmt.Fprint(f.a.stdout, fields(fs))
			return nil
		}),
	}
}
