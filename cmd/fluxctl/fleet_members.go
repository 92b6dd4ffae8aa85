package main

import (
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for a tenant's team: fleet members, member-add, member-role
// and member-rm. A tenant manages its own with its primary token; the
// operator names the tenant with --tenant.

const hintMembers = "fluxctl fleet members lists the team by email"

// teamColumns are the columns of fleet members.
func teamColumns(now time.Time) []column[sdk.Member] {
	return []column[sdk.Member]{
		{"email", "EMAIL", false, func(m *sdk.Member) string { return m.Email }},
		{"role", "ROLE", false, func(m *sdk.Member) string { return string(m.Role) }},
		{"last-sign-in", "LAST SIGN IN", false, func(m *sdk.Member) string {
			if m.LastSignInAt.IsZero() {
				return "never"
			}
			return ago(now, m.LastSignInAt) + " ago"
		}},
		{"added-by", "ADDED BY", false, func(m *sdk.Member) string { return m.AddedBy }},
		{"added", "ADDED", true, func(m *sdk.Member) string { return when(m.AddedAt) }},
	}
}

// membersTenant is ownTenant for the team.
func (f *fleet) membersTenant(tenant string) error { return f.ownTenant(tenant, "team") }

// membersRefusal gives central's refusals of the members' routes fluxctl's
// hints (a 409 keeps central's: the last owner, or someone already there).
func (f *fleet) membersRefusal(err error, tenant string) error {
	return f.primaryTokenRefusal(err, tenant, "team", "change the team",
		map[int]string{404: hintMembers, 429: "remove members who no longer need access, then add this one"})
}

// roleArg checks a role before anything is sent.
func roleArg(role string) (sdk.Role, error) {
	if r := sdk.Role(role); r.Rank() > 0 {
		return r, nil
	}
	return "", &cliError{msg: fmt.Sprintf("no role %q", role), hint: "roles are viewer, member, admin and owner"}
}

func (f *fleet) membersCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:     "members [--tenant T]",
		Aliases: []string{"team"},
		Short:   "A tenant's team: who may sign in to the console, and with which role",
		Long: `The people of a tenant's team, by email, with their role: viewer (looks),
member (also runs VMs), admin (also leases, pools, keys, members and the
budget) or owner (also owners). They sign in to the console with the
company's identity provider; adding someone sends nothing. A tenant has at
most 500 members.

The list shows each email, role, last sign-in and who added them (-o wide
adds when). Any credential of the tenant lists the team; the primary token
(or the operator, with --tenant) changes it, API keys do not.`,
		Example: `  fluxctl fleet members
  fluxctl fleet members --tenant acme   # operator`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if err := f.membersTenant(tenant); err != nil {
				return err
			}
			ms, err := fc.ListMembers(c.Context(), tenant)
			if err != nil {
				return f.membersRefusal(err, tenant)
			}
			return show(f.a, c, table[sdk.Member]{raw: sdk.MemberList{Members: ms}, rows: ms, cols: teamColumns(time.Now()),
				empty: "no members\nnext: fluxctl fleet member-add EMAIL --role owner\n"})
		}),
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant whose team, by name or ID (operator)")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	columnsFlag(c, teamColumns(time.Time{}))
	return c
}

func (f *fleet) memberAddCmd() *cobra.Command {
	var tenant, role string
	c := &cobra.Command{
		Use:   "member-add EMAIL --role ROLE [--tenant T]",
		Short: "Add a person to a tenant's team with a role",
		Long: `Add a person to the team by email (matched lowercase). Only an owner (the
primary token and the operator act as owners) adds an owner.`,
		Example: `  fluxctl fleet member-add alex@example.com --role admin
  fluxctl fleet member-add olga@example.com --role owner --tenant acme   # operator`,
		Args: oneName("email"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			r, err := roleArg(role)
			if err != nil {
				return err
			}
			if err := f.membersTenant(tenant); err != nil {
				return err
			}
			m, err := fc.AddMember(c.Context(), tenant, sdk.AddMemberRequest{Email: args[0], Role: r})
			if err != nil {
				return f.membersRefusal(err, tenant)
			}
			if !f.a.human() {
				return f.a.printRaw(m)
			}
			f.a.done("tell them the console's address: adding someone sends nothing", "Added %s as %s", m.Email, m.Role)
			return nil
		}),
	}
	c.Flags().StringVar(&role, "role", "", "viewer, member, admin or owner")
	_ = c.MarkFlagRequired("role")
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant, by name or ID (operator)")
	return c
}

func (f *fleet) memberRoleCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:   "member-role EMAIL ROLE [--tenant T]",
		Short: "Change a member's role; the last owner keeps theirs",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError(c, fmt.Sprintf("%s takes an email and a role, got %d arguments", c.CommandPath(), len(args)))
			}
			return nil
		},
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			r, err := roleArg(args[1])
			if err != nil {
				return err
			}
			if err := f.membersTenant(tenant); err != nil {
				return err
			}
			m, err := fc.SetMemberRole(c.Context(), tenant, args[0], r)
			if err != nil {
				return f.membersRefusal(err, tenant)
			}
			if !f.a.human() {
				return f.a.printRaw(m)
			}
			f.a.done("", "%s is now %s", m.Email, m.Role)
			return nil
		}),
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant, by name or ID (operator)")
	return c
}

func (f *fleet) memberRmCmd() *cobra.Command {
	var (
		tenant string
		yes    bool
	)
	c := &cobra.Command{
		Use:   "member-rm EMAIL [--tenant T]",
		Short: "Take a person out of a tenant's team (asks on a terminal)",
		Args:  oneName("email"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if err := f.membersTenant(tenant); err != nil {
				return err
			}
			email := args[0]
			if !yes {
				again := "fluxctl fleet member-rm " + email + " -y"
				if tenant != "" {
					again += " --tenant " + tenant
				}
				if err := f.confirm(fmt.Sprintf("remove %s from the team? their console sessions end", email), "remove a member", again); err != nil {
					return err
				}
			}
			if err := fc.RemoveMember(c.Context(), tenant, email); err != nil {
				return f.membersRefusal(err, tenant)
			}
			if f.a.human() {
				f.a.done("", "Removed %s from the team", email)
			}
			return nil
		}),
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant, by name or ID (operator)")
	c.Flags().BoolVarP(&yes, "yes", "y", false, "remove without asking")
	return c
}
