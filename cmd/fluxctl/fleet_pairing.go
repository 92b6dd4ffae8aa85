package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// Fleets (docs/fleets.md): pairing centrals, enrolling nodes, and the
// fleet view. `fleet members` is a tenant's team; a fleet's members are
// `fleet peers`.

func (f *fleet) inviteCmd() *cobra.Command {
	var node bool
	c := &cobra.Command{
		Use:   "invite [--node]",
		Short: "Mint a single-use invite for a central to join this one's fleet, or a node to enroll (operator)",
		Long: `Mint an invite that works once, for 15 minutes. It is printed this once:
central keeps only its SHA-256. Give it, with this central's URL, to the
operator of the joining central (fluxctl fleet join) or of the node
(fluxvm-agent node enroll) over a channel you already trust. Then compare
codes: fluxctl fleet requests, and fluxctl fleet approve.`,
		Example: `  fluxctl fleet invite
  fluxctl fleet invite --node`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			kind := sdk.PairCentral
			if node {
				kind = sdk.PairNode
			}
			inv, err := fc.CreateFleetInvite(c.Context(), kind)
			if err != nil {
				return err
			}
			if !f.a.human() {
				return f.a.printRaw(inv)
			}
			a := f.a
			fmt.Fprintf(a.stdout, "✓ Invite for a %s, until %s\n\n  invite   %s\n  central  %s\n\n", kind, when(inv.ExpiresAt), inv.Invite, f.centralURL())
			fmt.Fprintln(a.stdout, "! Shown only this once; it works once, for 15 minutes.")
			if node {
				fmt.Fprintf(a.stdout, "next: on the node: fluxvm-agent node enroll -config agent.hcl -invite %s\n", inv.Invite)
			} else {
				fmt.Fprintf(a.stdout, "next: on the joining central: fluxctl fleet join %s %s --name NAME\n", f.centralURL(), inv.Invite)
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&node, "node", false, "an invite for a node to enroll (default: for a central to join)")
	return c
}

func (f *fleet) joinCmd() *cobra.Command {
	var req sdk.FleetJoinRequest
	c := &cobra.Command{
		Use:   "join OWNER_URL INVITE [--name NAME] [--url URL]",
		Short: "Have this central join another central's fleet with its invite (operator)",
		Long: `Redeem the owner central's invite from this central. Both screens then show
the same six-digit code: read this one to the owner's operator, who approves
it (fluxctl fleet approve), and confirm with the code their screen shows
(fluxctl fleet confirm CODE). Nothing is joined before both. --name is how the
owner lists this central (default: this machine's host name); --url is where
the owner reaches this central, if it may.`,
		Example: `  fluxctl fleet join http://10.0.0.2:7799 ABCD-EFGH-IJKL-MNOP --name site-b`,
		Args:    cobra.ExactArgs(2),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			req.OwnerURL, req.Invite = args[0], args[1]
			if req.Name == "" {
				h, err := os.Hostname()
				if err != nil {
					return usageError(c, "give this central a --name")
				}
				req.Name = h
			}
			m, err := fc.JoinFleet(c.Context(), req)
			if err != nil {
				return err
			}
			if !f.a.human() {
				return f.a.printRaw(m)
			}
			fmt.Fprintf(f.a.stdout, "Confirmation code: %s\n\nRead it to the owner's operator: they approve only if their request for %s shows the same.\n", sdk.ShowPairingCode(m.Code), m.Name)
			fmt.Fprintln(f.a.stdout, "next: fluxctl fleet confirm CODE   (the code the owner's screen shows)")
			return nil
		}),
	}
	c.Flags().StringVar(&req.Name, "name", "", "how the owner lists this central (default: the host name)")
	c.Flags().StringVar(&req.URL, "url", "", "where the owner reaches this central (optional)")
	return c
}

func (f *fleet) confirmJoinCmd() *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "confirm CODE [--wait DURATION]",
		Short: "Confirm the owner's code: this central joins once the owner approved (operator)",
		Long: `Confirm, with the six digits the owner's screen shows, that both screens show
the same code. Until the owner approves, the answer is pending; --wait keeps
asking every two seconds for that long.`,
		Example: `  fluxctl fleet confirm 123456
  fluxctl fleet confirm "123 456" --wait 5m`,
		Args: cobra.ExactArgs(1),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			deadline := time.Now().Add(wait)
			for {
				m, err := fc.ConfirmJoin(c.Context(), args[0])
				if err != nil {
					return err
				}
				if m.State == sdk.PairingJoined {
					if !f.a.human() {
						return f.a.printRaw(m)
					}
					fmt.Fprintf(f.a.stdout, "✓ Joined the fleet of %s as %s (member %s)\n", m.OwnerURL, m.Name, m.MemberID)
					return nil
				}
				if time.Now().After(deadline) {
					if !f.a.human() {
						return f.a.printRaw(m)
					}
					fmt.Fprintln(f.a.stdout, "pending: the owner has not approved yet; confirm again when they have (or pass --wait 5m)")
					return nil
				}
				select {
				case <-c.Context().Done():
					return c.Context().Err()
				case <-time.After(2 * time.Second):
				}
			}
		}),
	}
	c.Flags().DurationVar(&wait, "wait", 0, "keep asking this long while the owner has not approved")
	return c
}

func requestColumns() []column[sdk.FleetPairingRequest] {
	return []column[sdk.FleetPairingRequest]{
		{"id", "ID", false, func(r *sdk.FleetPairingRequest) string { return r.ID }},
		{"kind", "KIND", false, func(r *sdk.FleetPairingRequest) string { return r.Kind }},
		{"name", "NAME", false, func(r *sdk.FleetPairingRequest) string { return r.Name }},
		{"code", "CODE", false, func(r *sdk.FleetPairingRequest) string { return sdk.ShowPairingCode(r.Code) }},
		{"state", "STATE", false, func(r *sdk.FleetPairingRequest) string { return r.State }},
		{"expires", "EXPIRES", false, func(r *sdk.FleetPairingRequest) string { return when(r.ExpiresAt) }},
		{"url", "URL", true, func(r *sdk.FleetPairingRequest) string { return r.URL }},
	}
}

func (f *fleet) requestsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "requests",
		Short: "List pairing requests with their codes, to compare with the joiner's screen (operator)",
		Args:  cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			list, err := fc.ListPairingRequests(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.FleetPairingRequest]{raw: list, rows: list.Requests, cols: requestColumns(),
				empty: "no pairing requests\nnext: fluxctl fleet invite [--node]\n",
				after: "approve only when the joiner's screen shows the same code: fluxctl fleet approve ID --code CODE; else fluxctl fleet reject ID\n"})
		}),
	}
	columnsFlag(c, requestColumns())
	return c
}

func (f *fleet) approveCmd() *cobra.Command {
	var code string
	c := &cobra.Command{
		Use:   "approve REQUEST --code CODE",
		Short: "Approve a pairing request with the code the joiner's screen shows (operator)",
		Long: `Approve a pairing request. --code is the six digits the joining machine's
screen shows, as its operator reads them out: a code that differs from the
request's is refused, and that request is someone else's: reject it. The
joiner is admitted when it confirms too.`,
		Example: `  fluxctl fleet approve pr-0123456789abcdef --code "123 456"`,
		Args:    cobra.ExactArgs(1),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if code == "" {
				return usageError(c, "--code is required: the six digits the joining machine shows")
			}
			q, err := fc.ApprovePairing(c.Context(), args[0], code)
			if err != nil {
				return err
			}
			if !f.a.human() {
				return f.a.printRaw(q)
			}
			fmt.Fprintf(f.a.stdout, "✓ Approved %s %s; it joins when its operator confirms\n", q.Kind, q.Name)
			return nil
		}),
	}
	c.Flags().StringVar(&code, "code", "", "the code the joining machine's screen shows")
	return c
}

func (f *fleet) rejectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reject REQUEST",
		Short: "Reject a pairing request (operator)",
		Args:  cobra.ExactArgs(1),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if err := fc.RejectPairing(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(f.a.stderr, "✓ Rejected %s\n", args[0])
			return nil
		}),
	}
}

func peerColumns() []column[sdk.FleetMember] {
	return []column[sdk.FleetMember]{
		{"name", "NAME", false, func(m *sdk.FleetMember) string { return m.Name }},
		{"kind", "KIND", false, func(m *sdk.FleetMember) string { return m.Kind }},
		{"health", "HEALTH", false, func(m *sdk.FleetMember) string {
			if m.Health.Reason == "" {
				return m.Health.Badge
			}
			return m.Health.Badge + ": " + m.Health.Reason
		}},
		{"do", "TO DO", false, func(m *sdk.FleetMember) string { return m.Health.Action }},
		{"id", "ID", true, func(m *sdk.FleetMember) string { return m.ID }},
		{"joined", "JOINED", true, func(m *sdk.FleetMember) string { return when(m.JoinedAt) }},
		{"url", "URL", true, func(m *sdk.FleetMember) string { return m.URL }},
	}
}

func (f *fleet) peersCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "peers",
		Short: "This central's fleet: its members with their health, and every site's nodes and VMs (operator)",
		Long: `Show this central's role in a fleet: as an owner, its member centrals and
enrolled nodes, each with one health badge (ok, not checked yet, degraded or
stopped), the reason and the one thing to do; as a member, its own badge.
Below, every site of the fleet with its nodes and VM counts. (fluxctl fleet
members is a tenant's team, not this.)`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			fed, err := fc.Federation(c.Context())
			if err != nil {
				return err
			}
			before := "role: " + fed.Role + "\n"
			if m := fed.Membership; m != nil {
				before += fmt.Sprintf("owner: %s (this central is %s, %s", m.OwnerURL, m.Name, m.Health.Badge)
				if m.Health.Reason != "" {
					before += ": " + m.Health.Reason + "; " + m.Health.Action
				}
				before += ")\n"
			}
			after := ""
			for _, s := range fed.Sites {
				up := 0
				for _, n := range s.Nodes {
					if n.State == "up" {
						up++
					}
				}
				after += fmt.Sprintf("site %s: %d node(s), %d up, %s VM(s)\n", s.Member, len(s.Nodes), up, strconv.FormatInt(s.VMs, 10))
			}
			return show(f.a, c, table[sdk.FleetMember]{raw: fed, rows: fed.Members, cols: peerColumns(), before: before, after: after,
				empty: "no members\nnext: fluxctl fleet invite [--node]\n"})
		}),
	}
	columnsFlag(c, peerColumns())
	return c
}

func (f *fleet) removePeerCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "remove MEMBER [-y]",
		Short: "Remove a member central or an enrolled node from this central's fleet (asks first on a terminal; operator)",
		Long: `Remove a member, by name or id: its credential stops working at once, and its
next call reads 403 removed from the fleet. A removed node must enroll again.`,
		Args: cobra.ExactArgs(1),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if !yes && f.a.stdinTTY {
				if err := f.confirm("remove "+args[0]+" from the fleet?", "remove", ""); err != nil {
					return err
				}
			}
			if err := fc.RemoveFleetMember(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(f.a.stderr, "✓ Removed %s from the fleet\n", args[0])
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask")
	return c
}

func (f *fleet) leaveCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "leave [-y]",
		Short: "Leave the fleet this central is in, or abandon a join (asks first; operator)",
		Long: `Leave the fleet: the owner revokes this central's fleet token, and the fleet
view is gone. This central keeps its own nodes, VMs and settings. Joining
again takes a new invite, so it asks first on a terminal; without one it
needs -y.`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if !yes {
				if err := f.confirm("leave the fleet? joining again takes a new invite", "leave the fleet", "fluxctl fleet leave -y"); err != nil {
					return err
				}
			}
			if err := fc.LeaveFleet(c.Context()); err != nil {
				return err
			}
			fmt.Fprintln(f.a.stderr, "✓ Left the fleet")
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask")
	return c
}
