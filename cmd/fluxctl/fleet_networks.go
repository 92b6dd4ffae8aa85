package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// Private networks across nodes: central's overlays (docs/networks.md).

const hintNetworks = "fluxctl fleet networks lists your private networks"

// completeNetworks completes the caller's overlay names.
func (f *fleet) completeNetworks() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		list, err := fc.ListOverlays(ctx, "")
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, o := range list.Overlays {
			out = append(out, cobra.CompletionWithDesc(o.Name, fmt.Sprintf("%s, %d nodes", o.Subnet, len(o.Members))))
		}
		return out, nil
	})
}

func networkColumns() []column[sdk.Overlay] {
	return []column[sdk.Overlay]{
		{"name", "NAME", false, func(o *sdk.Overlay) string { return o.Name }},
		{"subnet", "SUBNET", false, func(o *sdk.Overlay) string { return o.Subnet }},
		{"nodes", "NODES", false, func(o *sdk.Overlay) string {
			var n []string
			for _, m := range o.Members {
				n = append(n, m.Node)
			}
			if len(n) == 0 {
				return "-"
			}
			return strings.Join(n, ",")
		}},
		{"egress", "EGRESS", false, func(o *sdk.Overlay) string {
			e := o.Egress.Mode
			if len(o.EgressRefused) > 0 {
				e += fmt.Sprintf(" (%d refused)", len(o.EgressRefused))
			}
			return e
		}},
		{"port", "PORT", true, func(o *sdk.Overlay) string { return fmt.Sprint(o.ListenPort) }},
		{"rotated", "ROTATED", true, func(o *sdk.Overlay) string {
			if o.RotatedAt == nil {
				return "-"
			}
			return o.RotatedAt.UTC().Format(time.DateTime) + " UTC"
		}},
		{"tenant", "TENANT", true, func(o *sdk.Overlay) string { return o.Tenant }},
	}
}

func networkMemberColumns() []column[sdk.OverlayMember] {
	return []column[sdk.OverlayMember]{
		{"node", "NODE", false, func(m *sdk.OverlayMember) string { return m.Node }},
		{"subnet", "SUBNET", false, func(m *sdk.OverlayMember) string { return m.Subnet }},
		{"endpoint", "ENDPOINT", false, func(m *sdk.OverlayMember) string { return m.Endpoint }},
		{"public-key", "PUBLIC KEY", false, func(m *sdk.OverlayMember) string { return m.PublicKey }},
	}
}

func (f *fleet) networksCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:   "networks",
		Short: "Private networks across nodes: list, show, create, delete, rotate, add-node, remove-node",
		Long: `List your private networks (the operator's call lists every tenant's, or one's
with --tenant). A private network joins your VMs on several nodes in one
/24: each member node holds a /28 of it, and the nodes are joined by
WireGuard tunnels whose keys are made on the nodes. Launch a VM into one
with fluxctl fleet launch --network NAME --node MEMBER.`,
		Example: `  fluxctl fleet networks
  fluxctl fleet networks create backend --node node-1 --node node-2
  fluxctl fleet launch --image debian --network backend --node node-1`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			list, err := fc.ListOverlays(c.Context(), tenant)
			if err != nil {
				return err
			}
			empty := "no private networks\nnext: fluxctl fleet networks create NAME --node NODE --node NODE\n"
			return show(f.a, c, table[sdk.Overlay]{raw: list, rows: list.Overlays, cols: networkColumns(), empty: empty})
		}),
	}
	c.PersistentFlags().StringVar(&tenant, "tenant", "", "operator: the owner (id or name)")
	columnsFlag(c, networkColumns())
	c.AddCommand(f.networkShowCmd(&tenant), f.networkCreateCmd(&tenant), f.networkDeleteCmd(&tenant), f.networkRotateCmd(&tenant),
		f.networkAddNodeCmd(&tenant), f.networkRemoveNodeCmd(&tenant))
	return c
}

// showNetwork prints one network: its members as a table, the rest as a
// header (or the whole record with -o json).
func (f *fleet) showNetwork(c *cobra.Command, o *sdk.Overlay) error {
	if f.a.human() {
		fmt.Fprintf(f.a.stdout, "%s  %s  port %d  egress %s\n", o.Name, o.Subnet, o.ListenPort, egressText(&o.Egress))
		for _, r := range o.EgressRefused {
			fmt.Fprintf(f.a.stdout, "refused: %s\n", r)
		}
	}
	return show(f.a, c, table[sdk.OverlayMember]{raw: o, rows: o.Members, cols: networkMemberColumns(),
		empty: "no member nodes\nnext: fluxctl fleet networks add-node " + o.Name + " NODE\n"})
}

func (f *fleet) networkShowCmd(tenant *string) *cobra.Command {
	return &cobra.Command{
		Use:               "show NAME",
		Short:             "Show a private network: its subnet, egress policy and member nodes",
		Args:              oneName("network"),
		ValidArgsFunction: f.completeNetworks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			o, err := fc.GetOverlay(c.Context(), *tenant, args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintNetworks})
			}
			return f.showNetwork(c, o)
		}),
	}
}

func (f *fleet) networkCreateCmd(tenant *string) *cobra.Command {
	var req sdk.CreateOverlayRequest
	var mode string
	var allow, block []string
	c := &cobra.Command{
		Use:   "create NAME [--node NODE]... [--egress open|allowlist --allow CIDR... --block CIDR...]",
		Short: "Make a private network across nodes",
		Long: `Make a private network on its first nodes (add more with add-node). Names are
1-40 lowercase letters, digits and '-'. An egress policy may tighten the
operator's floor, never loosen it: what would loosen it is refused, the
floor applies instead, and show lists each refusal with its reason.`,
		Example: `  fluxctl fleet networks create backend --node node-1 --node node-2
  fluxctl fleet networks create locked --node node-1 --egress allowlist --allow 192.0.2.0/24`,
		Args: oneName("network name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			req.Name = args[0]
			if mode != "" || len(allow) > 0 || len(block) > 0 {
				if mode == "" {
					mode = "open"
				}
				req.Egress = &sdk.EgressPolicy{Mode: mode, Allow: allow, Block: block}
			}
			o, err := fc.CreateOverlay(c.Context(), *tenant, req)
			if err != nil {
				return withHints(err, map[int]string{409: "names are unique among your networks (" + hintNetworks + "), and a node needs a network plugin that is up"})
			}
			if !f.a.human() {
				return f.a.printRaw(o)
			}
			f.a.done("fluxctl fleet launch --image IMAGE --network "+o.Name+" --node NODE", "Created private network %s (%s, %d nodes)", o.Name, o.Subnet, len(o.Members))
			for _, r := range o.EgressRefused {
				fmt.Fprintf(f.a.stdout, "refused: %s\n", r)
			}
			return nil
		}),
	}
	c.Flags().StringArrayVar(&req.Nodes, "node", nil, "a first member node (repeatable, at most 16)")
	c.Flags().StringVar(&mode, "egress", "", "egress mode: open or allowlist (default: the operator's floor)")
	c.Flags().StringArrayVar(&allow, "allow", nil, "with --egress allowlist: an IPv4 address or subnet the VMs may reach (repeatable)")
	c.Flags().StringArrayVar(&block, "block", nil, "an IPv4 address or subnet the VMs may not reach (repeatable)")
	return c
}

func (f *fleet) networkDeleteCmd(tenant *string) *cobra.Command {
	return &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a private network from all its nodes (refused while VMs are in it)",
		Args:              oneName("network"),
		ValidArgsFunction: f.completeNetworks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if err := fc.DeleteOverlay(c.Context(), *tenant, args[0]); err != nil {
				return withHints(err, map[int]string{404: hintNetworks, 409: "delete the network's VMs first"})
			}
			f.a.done("", "Deleted private network %s", args[0])
			return nil
		}),
	}
}

func (f *fleet) networkRotateCmd(tenant *string) *cobra.Command {
	return &cobra.Command{
		Use:   "rotate NAME",
		Short: "Change the keys of every node of a private network, with traffic going on",
		Long: `Change every member node's WireGuard key, one node at a time: the node makes
its next key, the others learn it, the node switches, the others drop the
old key. Traffic goes on (the measured loss is in docs/networks.md).`,
		Args:              oneName("network"),
		ValidArgsFunction: f.completeNetworks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			o, err := fc.RotateOverlay(c.Context(), *tenant, args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintNetworks})
			}
			if !f.a.human() {
				return f.a.printRaw(o)
			}
			f.a.done("", "Rotated the keys of private network %s (%d nodes)", o.Name, len(o.Members))
			return nil
		}),
	}
}

func (f *fleet) networkAddNodeCmd(tenant *string) *cobra.Command {
	return &cobra.Command{
		Use:               "add-node NAME NODE",
		Short:             "Make a node a member of a private network",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: f.completeNetworks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			o, err := fc.AddOverlayNode(c.Context(), *tenant, args[0], args[1])
			if err != nil {
				return withHints(err, map[int]string{404: hintNetworks + "; fluxctl fleet nodes lists the nodes",
					409: "the node needs a network plugin that is up and an overlay_address in its netns block"})
			}
			if !f.a.human() {
				return f.a.printRaw(o)
			}
			f.a.done("fluxctl fleet launch --image IMAGE --network "+o.Name+" --node "+args[1], "Node %s is a member of %s", args[1], o.Name)
			return nil
		}),
	}
}

func (f *fleet) networkRemoveNodeCmd(tenant *string) *cobra.Command {
	return &cobra.Command{
		Use:               "remove-node NAME NODE",
		Short:             "Take a node out of a private network (refused while the network's VMs run on it)",
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: f.completeNetworks(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			o, err := fc.RemoveOverlayNode(c.Context(), *tenant, args[0], args[1])
			if err != nil {
				return withHints(err, map[int]string{404: hintNetworks, 409: "delete the network's VMs on that node first"})
			}
			if !f.a.human() {
				return f.a.printRaw(o)
			}
			f.a.done("", "Node %s left %s", args[1], o.Name)
			return nil
		}),
	}
}
