package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for whole-host leases, cordons, drains, scrubs, warm pools
// and the rebalance plan.

const (
	hintLeases   = "fluxctl fleet lease list shows your leases"
	hintNodes    = "fluxctl fleet nodes lists the nodes (as the operator)"
	hintPools    = "fluxctl fleet pools lists the pools you may use"
	hintLeaseFit = "a lease needs a healthy Mac that is not cordoned, draining, leased or waiting for a scrub and runs no VMs; " +
		"fluxctl fleet capacity shows what is free"
)

// when formats a time for a table: local, to the minute ("" when zero).
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Local().Format("2006-01-02 15:04")
}

func leaseState(l *sdk.Lease) string {
	if l.Active {
		return "active"
	}
	return "ended (" + l.EndReason + ")"
}

func (f *fleet) leaseCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "lease",
		Aliases: []string{"leases"},
		Short:   "Whole-host leases: create, list, get, release",
		Long: `A lease gives one tenant sole use of a whole node (a Mac, for macOS guests)
for at least the policy's min_lease_hours (24 or more). Without a subcommand
it lists your leases.`,
		Args: subcommandArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			return f.listLeases(c, fc, sdk.LeaseQuery{})
		}),
	}
	columnsFlag(c, leaseColumns(nil, false))
	c.AddCommand(f.leaseCreateCmd(), f.leaseListCmd(), f.leaseGetCmd(), f.leaseReleaseCmd())
	return c
}

func (f *fleet) leaseCreateCmd() *cobra.Command {
	var (
		req    sdk.CreateLeaseRequest
		dryRun bool
	)
	c := &cobra.Command{
		Use:   "create [--node N] [--hours H]",
		Short: "Lease a whole node for at least the minimum lease",
		Long: `Lease a whole node. Without --node central picks the smallest eligible Mac
that fits --min-vcpus, --min-memory-mib and --nested. Without --hours the lease is
open-ended and lasts until released; with it, it ends on its own (--hours must
be at least the policy's min_lease_hours). The operator leases for a tenant
with --tenant. With --dry-run nothing is leased: fluxctl shows which node the
lease would take and what it would cost an hour and for its minimum term.`,
		Example: `  fluxctl fleet lease create --hours 24
  fluxctl fleet lease create --node mac-3 --nested
  fluxctl fleet lease create --hours 72 --min-vcpus 16
  fluxctl fleet lease create --tenant acme --min-memory-mib 32768   # operator`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if req.Hours < 0 || req.MinMemoryMiB < 0 || req.MinVCPUs < 0 {
				return usageError(c, "--hours, --min-vcpus and --min-memory-mib must not be negative")
			}
			hints := map[int]string{409: hintLeaseFit,
				429: "release a lease you no longer need (" + hintLeases + ") or ask the operator to raise max_leased_hosts"}
			if dryRun {
				d, err := fc.LeaseEstimate(c.Context(), req)
				if err != nil {
					return withHints(err, hints)
				}
				if !f.a.human() {
					return f.a.printRaw(d)
				}
				return f.printLeaseDryRun(d)
			}
			l, err := fc.CreateLease(c.Context(), req)
			if err != nil {
				return withHints(err, hints)
			}
			if !f.a.human() {
				return f.a.printRaw(l)
			}
			ends := "open-ended"
			if !l.EndsAt.IsZero() {
				ends = "ends " + when(l.EndsAt)
			}
			f.a.done("fluxctl fleet launch --node "+l.Node+" --image IMAGE", "Leased node %s (lease %s, %s; release possible from %s)",
				l.Node, l.ID, ends, when(l.MinEnd))
			return nil
		}),
	}
	fl := c.Flags()
	fl.StringVar(&req.Node, "node", "", "the node to lease (default: the smallest eligible Mac)")
	fl.IntVar(&req.Hours, "hours", 0, "end the lease after this many hours (0: open-ended)")
	fl.Int64Var(&req.MinVCPUs, "min-vcpus", 0, "only nodes with at least this many vCPUs")
	fl.Int64Var(&req.MinMemoryMiB, "min-memory-mib", 0, "only nodes with at least this much memory")
	fl.BoolVar(&req.Nested, "nested", false, "only nodes with nested virtualisation")
	fl.StringVar(&req.Tenant, "tenant", "", "the tenant to lease for, by name or ID (operator)")
	fl.BoolVar(&req.AnyNode, "any-node", false, "lease any node, not only Macs (operator)")
	fl.BoolVar(&dryRun, "dry-run", false, "show which node the lease would take and what it costs; lease nothing")
	_ = c.RegisterFlagCompletionFunc("node", f.completeNodes())
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	return c
}

func (f *fleet) leaseListCmd() *cobra.Command {
	var q sdk.LeaseQuery
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List leases, newest first (a tenant sees its own)",
		Args:    cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			return f.listLeases(c, fc, q)
		}),
	}
	c.Flags().BoolVar(&q.Active, "active", false, "only leases that have not ended")
	c.Flags().StringVar(&q.Tenant, "tenant", "", "only this tenant's leases, by name or ID (operator)")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	columnsFlag(c, leaseColumns(nil, false))
	return c
}

// leaseColumns are the columns of fleet lease list. A lease has no name:
// its ID is how commands name it, so the table shows it. The lessee is
// shown to the operator; a tenant knows it.
func leaseColumns(tenants *tenantNames, asTenant bool) []column[sdk.Lease] {
	return []column[sdk.Lease]{
		{"id", "ID", false, func(l *sdk.Lease) string { return l.ID }},
		{"node", "NODE", false, func(l *sdk.Lease) string { return l.Node }},
		{"state", "STATE", false, leaseState},
		{"started", "STARTED", false, func(l *sdk.Lease) string { return when(l.StartedAt) }},
		{"release-from", "RELEASE FROM", false, func(l *sdk.Lease) string { return when(l.MinEnd) }},
		{"ends", "ENDS", false, func(l *sdk.Lease) string {
			switch {
			case !l.Active:
				return when(l.ReleasedAt)
			case l.EndsAt.IsZero():
				return "open-ended"
			}
			return when(l.EndsAt)
		}},
		{"tenant", "TENANT", asTenant, func(l *sdk.Lease) string { return tenants.name(l.Tenant) }},
		{"tenant-id", "TENANT ID", true, func(l *sdk.Lease) string { return l.Tenant }},
	}
}

func (f *fleet) listLeases(c *cobra.Command, fc *sdk.FleetClient, q sdk.LeaseQuery) error {
	ls, err := fc.ListLeases(c.Context(), q)
	if err != nil {
		return err
	}
	return show(f.a, c, table[sdk.Lease]{raw: sdk.LeaseList{Leases: ls}, rows: ls, cols: leaseColumns(f.tenantNames(c.Context(), fc), f.asTenant()),
		empty: "no leases\nnext: fluxctl fleet lease create --hours 24\n"})
}

func (f *fleet) leaseGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "get LEASE",
		Short: "Show one lease",
		Args:  oneName("lease ID"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			l, err := fc.GetLease(c.Context(), args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintLeases})
			}
			if !f.a.human() {
				return f.a.printRaw(l)
			}
			price := ""
			if l.Currency != "" {
				price = fmt.Sprintf("%s %s an hour", l.PricePerHour, l.Currency)
				if l.PriceClass != "" {
					price += " (" + l.PriceClass + ")"
				}
			}
			fmt.Fprint(f.a.stdout, fields([][2]string{{"id", l.ID}, {"node", l.Node}, {"tenant", l.Tenant}, {"state", leaseState(l)},
				{"started", when(l.StartedAt)}, {"release from", when(l.MinEnd)}, {"ends", when(l.EndsAt)},
				{"released", when(l.ReleasedAt)}, {"price", price}}))
			return nil
		}),
	}
}

func (f *fleet) leaseReleaseCmd() *cobra.Command {
	var yes, force bool
	c := &cobra.Command{
		Use:   "release LEASE [--force]",
		Short: "End a lease; your VMs on its node are deleted (asks on a terminal)",
		Long: `End a lease. Central deletes the lessee's VMs on the node and marks it to be
scrubbed before anyone else gets it. A lease cannot be released before its
minimum (release from, in fluxctl fleet lease list); the operator may force an
early release with --force, which is still billed to the minimum.`,
		Args: oneName("lease ID"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			id := args[0]
			if !yes {
				if err := f.confirm(fmt.Sprintf("release lease %s? your VMs on its node are deleted", id), "release a lease",
					"fluxctl fleet lease release "+id+" -y"); err != nil {
					return err
				}
			}
			l, err := fc.ReleaseLease(c.Context(), id, force)
			if err != nil {
				return f.releaseRefusal(c.Context(), fc, id, err)
			}
			if !f.a.human() {
				return f.a.printRaw(l)
			}
			f.a.done("fluxctl fleet lease list", "Released lease %s of node %s (%s)", l.ID, l.Node, l.EndReason)
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "release without asking")
	c.Flags().BoolVar(&force, "force", false, "release before the minimum, still billed to it (operator)")
	return c
}

// releaseRefusal explains a refused release; one before the lease's
// minimum says when it becomes possible.
func (f *fleet) releaseRefusal(ctx context.Context, fc *sdk.FleetClient, id string, err error) error {
	var api *sdk.APIError
	if !errors.As(err, &api) || api.Status != 409 {
		return withHints(err, map[int]string{404: hintLeases,
			403: "a lease can be released once its minimum is over; ask the operator for an early release"})
	}
	l, gerr := fc.GetLease(ctx, id)
	if gerr != nil || !l.Active || !time.Now().Before(l.MinEnd) {
		return &cliError{msg: api.Message, hint: "fluxctl fleet lease list --active lists the leases still running"}
	}
	return &cliError{msg: api.Message, hint: fmt.Sprintf("it can be released from %s (in %s): run fluxctl fleet lease release %s then; "+
		"the operator can release it now with --force, still billed to the minimum", when(l.MinEnd), short(time.Until(l.MinEnd)), id)}
}

// nodeActionCmd makes cordon and uncordon.
func (f *fleet) nodeActionCmd(verb, shortHelp string, call func(*sdk.FleetClient, context.Context, string) (*sdk.FleetNode, error), next string) *cobra.Command {
	return &cobra.Command{
		Use:               verb + " NODE",
		Short:             shortHelp,
		Args:              oneName("node name"),
		ValidArgsFunction: f.completeNodes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			n, err := call(fc, c.Context(), args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintNodes})
			}
			if !f.a.human() {
				return f.a.printRaw(n)
			}
			flags := nodeFlags(n)
			if flags == "" {
				flags = "takes VMs"
			}
			f.a.done(strings.ReplaceAll(next, "NODE", n.Name), "Node %s %sed (%s)", n.Name, verb, flags)
			return nil
		}),
	}
}

func (f *fleet) cordonCmd() *cobra.Command {
	return f.nodeActionCmd("cordon", "Take no new VM or lease on a node; what runs stays (operator)",
		(*sdk.FleetClient).CordonNode, "fluxctl fleet drain NODE to move its VMs off, fluxctl fleet uncordon NODE to undo")
}

func (f *fleet) uncordonCmd() *cobra.Command {
	return f.nodeActionCmd("uncordon", "Let a node take VMs again; ends a cordon and a drain (operator)",
		(*sdk.FleetClient).UncordonNode, "")
}

// drainColumns are the columns of the VMs of a drain.
func drainColumns(tenants *tenantNames) []column[sdk.DrainVM] {
	return []column[sdk.DrainVM]{
		{"vm", "VM", false, func(v *sdk.DrainVM) string { return v.Name }},
		{"tenant", "TENANT", false, func(v *sdk.DrainVM) string { return tenants.name(v.Tenant) }},
		{"ephemeral", "EPHEMERAL", false, func(v *sdk.DrainVM) string { return strconv.FormatBool(v.Ephemeral) }},
		{"action", "ACTION", false, func(v *sdk.DrainVM) string { return v.Action }},
		{"moved-to", "MOVED TO", false, func(v *sdk.DrainVM) string { return v.MovedTo }},
		{"error", "ERROR", false, func(v *sdk.DrainVM) string { return v.Error }},
		{"id", "ID", true, func(v *sdk.DrainVM) string { return v.ID }},
		{"tenant-id", "TENANT ID", true, func(v *sdk.DrainVM) string { return v.Tenant }},
	}
}

// showDrain shows a drain: a summary line and each VM with what happened;
// next, when set, is the command to run after.
func (f *fleet) showDrain(c *cobra.Command, fc *sdk.FleetClient, d *sdk.Drain, next string) error {
	state := "under way"
	if d.Finished {
		state = "finished " + when(d.FinishedAt)
	}
	forced := ""
	if d.Forced {
		forced = ", forced"
	}
	head := fmt.Sprintf("Drain of %s (mode %s%s), started %s: %s\n", d.Node, d.Mode, forced, when(d.StartedAt), state)
	if d.Draining != nil && !*d.Draining {
		head += "The node is no longer draining (uncordoned).\n"
	}
	if len(d.VMs) > 0 {
		head += "\n"
	}
	if next != "" {
		next = "next: " + next + "\n"
	}
	return show(f.a, c, table[sdk.DrainVM]{raw: d, rows: d.VMs, cols: drainColumns(f.tenantNames(c.Context(), fc)),
		before: head, empty: "no VMs were on the node\n", after: next})
}

func (f *fleet) drainCmd() *cobra.Command {
	var (
		yes, force, wait bool
		mode             string
		timeout          time.Duration
	)
	c := &cobra.Command{
		Use:   "drain NODE [--mode cordon|evict-ephemeral|reschedule]",
		Short: "Cordon a node and handle its VMs by mode (operator; asks on a terminal)",
		Long: `Cordon a node, mark it draining and handle each of its VMs by --mode:
cordon keeps every VM; evict-ephemeral deletes VMs with a TTL or the label
fluxvm.dev/ephemeral=true; reschedule also recreates reschedulable VMs on
other nodes. A leased node needs --force. --wait waits until the drain has
finished (fluxctl fleet drain-status NODE shows it at any time).`,
		Example:           `  fluxctl fleet drain node-3 --mode reschedule --wait -y`,
		Args:              oneName("node name"),
		ValidArgsFunction: f.completeNodes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			switch mode {
			case sdk.DrainCordon, sdk.DrainEvictEphemeral, sdk.DrainReschedule:
			default:
				return usageError(c, fmt.Sprintf("--mode %q: want cordon, evict-ephemeral or reschedule", mode))
			}
			node := args[0]
			if !yes && mode != sdk.DrainCordon {
				if err := f.confirm(fmt.Sprintf("drain node %s with mode %s? its VMs may be deleted or moved", node, mode), "drain a node",
					"fluxctl fleet drain "+node+" --mode "+mode+" -y"); err != nil {
					return err
				}
			}
			var stop func()
			if f.a.human() && f.a.stderrTTY {
				stop = spinner(f.a.stderr, "draining "+node+"…")
			}
			d, err := fc.DrainNode(c.Context(), node, sdk.DrainRequest{Mode: mode, Force: force})
			if err == nil && wait && !d.Finished {
				ctx, cancel := context.WithTimeout(c.Context(), timeout)
				d, err = f.waitDrain(ctx, fc, node)
				cancel()
			}
			if stop != nil {
				stop()
			}
			if err != nil {
				return withHints(err, map[int]string{404: hintNodes,
					409: "it is leased: add --force to drain it anyway (it breaks the tenant's sole use), or wait for the lease to end"})
			}
			next := "fluxctl fleet scrub " + node + " once it is empty, or fluxctl fleet uncordon " + node
			if !d.Finished {
				next = "fluxctl fleet drain-status " + node
			}
			return f.showDrain(c, fc, d, next)
		}),
	}
	fl := c.Flags()
	fl.StringVar(&mode, "mode", sdk.DrainCordon, "cordon, evict-ephemeral or reschedule")
	fl.BoolVar(&force, "force", false, "drain a leased node too")
	fl.BoolVar(&wait, "wait", false, "wait until the drain has finished")
	fl.DurationVar(&timeout, "wait-timeout", 10*time.Minute, "how long --wait waits")
	fl.BoolVarP(&yes, "yes", "y", false, "drain without asking")
	_ = c.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions([]string{sdk.DrainCordon, sdk.DrainEvictEphemeral, sdk.DrainReschedule},
		cobra.ShellCompDirectiveNoFileComp))
	columnsFlag(c, drainColumns(nil))
	return c
}

// waitDrain polls a node's drain until it has finished or ctx ends.
func (f *fleet) waitDrain(ctx context.Context, fc *sdk.FleetClient, node string) (*sdk.Drain, error) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		d, err := fc.DrainStatus(ctx, node)
		if err != nil {
			return nil, err
		}
		if d.Finished {
			return d, nil
		}
		select {
		case <-ctx.Done():
			return nil, &cliError{msg: fmt.Sprintf("the drain of %s has not finished: %v", node, ctx.Err()),
				hint: "central goes on with it; fluxctl fleet drain-status " + node + " shows where it is"}
		case <-t.C:
		}
	}
}

func (f *fleet) drainStatusCmd() *cobra.Command {
	c := &cobra.Command{
		Use:               "drain-status NODE",
		Short:             "Show a node's latest drain, each VM with what happened to it (operator)",
		Args:              oneName("node name"),
		ValidArgsFunction: f.completeNodes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			d, err := fc.DrainStatus(c.Context(), args[0])
			if err != nil {
				var api *sdk.APIError
				if errors.As(err, &api) && api.Status == 404 && strings.Contains(api.Message, "has not been drained") {
					return &cliError{msg: api.Message, hint: "fluxctl fleet drain " + args[0] + " starts one"}
				}
				return withHints(err, map[int]string{404: hintNodes})
			}
			return f.showDrain(c, fc, d, "")
		}),
	}
	columnsFlag(c, drainColumns(nil))
	return c
}

func (f *fleet) scrubCmd() *cobra.Command {
	var yes, force bool
	c := &cobra.Command{
		Use:   "scrub NODE [--force]",
		Short: "Check a node runs no VM and clear its scrub-pending flag (operator; asks on a terminal)",
		Long: `A node whose lease ended waits for a scrub before anyone else gets it. Scrub
checks through the node's API that it lists no VM and clears the flag. A node
that still runs VMs is refused; --force deletes them first.`,
		Args:              oneName("node name"),
		ValidArgsFunction: f.completeNodes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			node := args[0]
			if !yes {
				q := fmt.Sprintf("scrub node %s?", node)
				if force {
					q = fmt.Sprintf("scrub node %s, deleting every VM still on it?", node)
				}
				withYes := "fluxctl fleet scrub " + node + " -y"
				if force {
					withYes = "fluxctl fleet scrub " + node + " --force -y"
				}
				if err := f.confirm(q, "scrub a node", withYes); err != nil {
					return err
				}
			}
			res, err := fc.ScrubNode(c.Context(), node, force)
			if err != nil {
				var api *sdk.APIError
				if errors.As(err, &api) && api.Status == 409 && strings.Contains(api.Message, "is leased") {
					return &cliError{msg: api.Message, hint: "a scrub follows a lease's end: release the lease first (fluxctl fleet lease list --active)"}
				}
				return withHints(err, map[int]string{404: hintNodes,
					409: "delete its VMs first, or add --force to delete them (and VM folders no VM owns) with the scrub"})
			}
			if !f.a.human() {
				return f.a.printRaw(res)
			}
			f.a.done("", "Scrubbed node %s (%d VMs and %d leftover workspaces deleted); it takes VMs and leases again",
				res.Node, len(res.Deleted), len(res.WorkspacesRemoved))
			if res.Proof != "" {
				fmt.Fprintf(f.a.stdout, "  %s\n", res.Proof)
			}
			return nil
		}),
	}
	c.Flags().BoolVar(&force, "force", false, "delete the VMs still on the node")
	c.Flags().BoolVarP(&yes, "yes", "y", false, "scrub without asking")
	return c
}

// moveColumns are the columns of fleet rebalance-plan.
func moveColumns(tenants *tenantNames) []column[sdk.RebalanceMove] {
	return []column[sdk.RebalanceMove]{
		{"vm", "VM", false, func(m *sdk.RebalanceMove) string { return m.Name }},
		{"tenant", "TENANT", false, func(m *sdk.RebalanceMove) string { return tenants.name(m.Tenant) }},
		{"from", "FROM", false, func(m *sdk.RebalanceMove) string { return m.From }},
		{"to", "TO", false, func(m *sdk.RebalanceMove) string { return m.To }},
		{"reason", "REASON", false, func(m *sdk.RebalanceMove) string { return m.Reason }},
		{"id", "ID", true, func(m *sdk.RebalanceMove) string { return m.VM }},
		{"tenant-id", "TENANT ID", true, func(m *sdk.RebalanceMove) string { return m.Tenant }},
	}
}

func (f *fleet) rebalancePlanCmd() *cobra.Command {
	var q sdk.RebalanceQuery
	c := &cobra.Command{
		Use:   "rebalance-plan",
		Short: "Which VMs could leave overloaded nodes, and where to (operator; a dry run)",
		Long: `A dry run of a rebalance: for each node whose vCPUs or memory in use pass
--high-water, which reschedulable or ephemeral VMs could move, and where each
would fit. Nothing is changed.`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if q.HighWater <= 0 || q.HighWater > 1 || q.MaxMoves < 1 {
				return usageError(c, "--high-water is a fraction above 0 and at most 1; --max-moves at least 1")
			}
			p, err := fc.RebalancePlan(c.Context(), q)
			if err != nil {
				return err
			}
			skipped := ""
			for _, s := range p.NodesSkipped {
				skipped += fmt.Sprintf("skipped node %s: %s\n", s.Node, s.Reason)
			}
			return show(f.a, c, table[sdk.RebalanceMove]{raw: p, rows: p.Moves, cols: moveColumns(f.tenantNames(c.Context(), fc)), before: skipped,
				empty: fmt.Sprintf("no moves: no node is above %.0f%% with a VM that could move\n", p.HighWater*100)})
		}),
	}
	c.Flags().Float64Var(&q.HighWater, "high-water", 0.85, "a node above this fraction of vCPUs or memory in use is overloaded")
	c.Flags().IntVar(&q.MaxMoves, "max-moves", 10, "the most moves to plan")
	columnsFlag(c, moveColumns(nil))
	return c
}

// poolColumns are the columns of fleet pools.
func poolColumns(tenants *tenantNames) []column[sdk.Pool] {
	return []column[sdk.Pool]{
		{"name", "NAME", false, func(p *sdk.Pool) string { return p.Name }},
		{"image", "IMAGE", false, func(p *sdk.Pool) string { return p.Image }},
		{"vcpus", "VCPUS", false, func(p *sdk.Pool) string { return fmt.Sprint(p.VCPUs) }},
		{"memory", "MEMORY", false, func(p *sdk.Pool) string { return mib(p.MemoryMiB) }},
		{"size", "SIZE", false, func(p *sdk.Pool) string { return strconv.Itoa(p.Size) }},
		{"max", "MAX", false, func(p *sdk.Pool) string { return strconv.Itoa(p.MaxSize) }},
		{"owner", "OWNER", false, func(p *sdk.Pool) string { return poolOwner(tenants, p.Tenant, p.Shared) }},
		{"state", "STATE", false, func(p *sdk.Pool) string {
			switch {
			case p.Deleting:
				return "deleting"
			case p.Blocked != "":
				return "blocked: " + p.Blocked
			}
			return "ok"
		}},
		{"tenant-id", "TENANT ID", true, func(p *sdk.Pool) string { return p.Tenant }},
	}
}

// poolOwner is "shared" or the name of the tenant whose pool it is.
func poolOwner(tenants *tenantNames, tenant string, shared bool) string {
	if shared {
		return "shared"
	}
	return tenants.name(tenant)
}

func (f *fleet) poolsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "pools",
		Aliases: []string{"pool"},
		Short:   "Warm pools: list, create, get, status, resize, delete",
		Long: `A warm pool keeps booted VMs of one image and size ready; a launch from the
pool (fluxctl fleet launch --pool NAME, the API's POST /fleet/vms with "pool",
or the SDK's FleetCreateVMRequest.Pool) gets one at once instead of booting.
Without a subcommand it lists the pools you may use (the operator: every
pool).`,
		Args: subcommandArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ps, err := fc.ListPools(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Pool]{raw: sdk.PoolList{Pools: ps}, rows: ps, cols: poolColumns(f.tenantNames(c.Context(), fc)),
				empty: "no pools\nnext: fluxctl fleet pools create NAME --image IMAGE --size 2\n"})
		}),
	}
	columnsFlag(c, poolColumns(nil))
	c.AddCommand(f.poolCreateCmd(), f.poolGetCmd(), f.poolStatusCmd(), f.poolResizeCmd(), f.poolDeleteCmd())
	return c
}

func (f *fleet) poolCreateCmd() *cobra.Command {
	var (
		req  sdk.CreatePoolRequest
		size int
	)
	c := &cobra.Command{
		Use:   "create NAME --image IMAGE --size N",
		Short: "Make a warm pool of a catalog image; central boots its VMs",
		Long: `Make a warm pool that keeps --size booted VMs of a catalog image, growing
toward --max-size after recent claims. --vcpus and --memory-mib default to the
image's. As the operator, --tenant makes it for a tenant; without it the pool
is shared.`,
		Example: `  fluxctl fleet pools create ci --image debian-minimal --size 2
  fluxctl fleet pools create jobs --image debian-minimal --size 5 --mode snapshot
  fluxctl fleet pools status ci`,
		Args: oneName("pool name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if req.Image == "" {
				return usageError(c, "pools create needs --image, a catalog image ("+hintListImages+")")
			}
			if !c.Flags().Changed("size") || size < 0 {
				return usageError(c, "pools create needs --size N, how many warm VMs the pool keeps")
			}
			req.Name, req.Size = args[0], &size
			p, err := fc.CreatePool(c.Context(), req)
			if err != nil {
				return withHints(err, map[int]string{409: "pick another name; " + hintPools})
			}
			if !f.a.human() {
				return f.a.printRaw(p)
			}
			f.a.done("fluxctl fleet pools status "+p.Name, "Created pool %s (%s, %s, %s; keeps %d warm, up to %d)", p.Name, p.Image,
				plural(p.VCPUs, "vCPU"), mib(p.MemoryMiB), p.Size, p.MaxSize)
			return nil
		}),
	}
	fl := c.Flags()
	fl.StringVar(&req.Image, "image", "", "the catalog image (required)")
	fl.IntVar(&size, "size", 0, "how many warm VMs the pool keeps (required)")
	fl.IntVar(&req.MaxSize, "max-size", 0, "how far it may grow toward recent demand (default: --size)")
	fl.StringVar(&req.Mode, "mode", "", "running (default: idle booted VMs) or snapshot (one saved guest, a resumed copy per claim)")
	fl.Int64Var(&req.VCPUs, "vcpus", 0, "vCPUs of each VM (default: the image's)")
	fl.Int64Var(&req.MemoryMiB, "memory-mib", 0, "memory of each VM (default: the image's)")
	fl.StringVar(&req.Tenant, "tenant", "", "make the pool for this tenant, by name or ID (operator)")
	_ = c.RegisterFlagCompletionFunc("image", f.completeImages())
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	return c
}

// poolTenantFlag adds --tenant, with which the operator names a tenant's
// pool.
func (f *fleet) poolTenantFlag(c *cobra.Command, tenant *string) {
	c.Flags().StringVar(tenant, "tenant", "", "the tenant whose pool it is, by name or ID (operator; default: a shared pool)")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
}

func (f *fleet) poolGetCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a pool",
		Args:  oneName("pool name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			p, err := fc.GetPool(c.Context(), args[0], tenant)
			if err != nil {
				return withHints(err, map[int]string{404: hintPools})
			}
			if !f.a.human() {
				return f.a.printRaw(p)
			}
			fmt.Fprint(f.a.stdout, fields([][2]string{{"name", p.Name}, {"image", p.Image}, {"guest", p.GuestOS},
				{"size", fmt.Sprintf("%s, %s", plural(p.VCPUs, "vCPU"), mib(p.MemoryMiB))},
				{"keeps", fmt.Sprintf("%d warm, up to %d", p.Size, p.MaxSize)}, {"owner", poolOwner(nil, p.Tenant, p.Shared)},
				{"node selector", pairs(p.NodeSelector)}, {"blocked", p.Blocked}, {"created", when(p.CreatedAt)}}))
			return nil
		}),
	}
	f.poolTenantFlag(c, &tenant)
	return c
}

// memberColumns are the columns of the members of fleet pools status.
func memberColumns(now time.Time) []column[sdk.PoolMember] {
	return []column[sdk.PoolMember]{
		{"member", "MEMBER", false, func(m *sdk.PoolMember) string { return m.Name }},
		{"node", "NODE", false, func(m *sdk.PoolMember) string { return m.Node }},
		{"state", "STATE", false, func(m *sdk.PoolMember) string { return m.State }},
		{"age", "AGE", false, func(m *sdk.PoolMember) string { return ago(now, m.CreatedAt) }},
		{"id", "ID", true, func(m *sdk.PoolMember) string { return m.VMID }},
	}
}

func (f *fleet) poolStatusCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a pool's members and what it aims for",
		Args:  oneName("pool name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			st, err := fc.GetPoolStatus(c.Context(), args[0], tenant)
			if err != nil {
				return withHints(err, map[int]string{404: hintPools})
			}
			head := fmt.Sprintf("Pool %s: %d warm, %d booting, %d retiring; target %d (size %d, max %d, %d claims in the last %ds)\n",
				st.Name, st.Warm, st.Booting, st.Retiring, st.Target, st.Size, st.MaxSize, st.RecentClaims, st.DemandWindowS)
			if st.Deleting {
				head += "being deleted\n"
			}
			if st.Blocked != "" {
				head += fmt.Sprintf("blocked: %s\n", st.Blocked)
			}
			if len(st.Members) > 0 {
				head += "\n"
			}
			return show(f.a, c, table[sdk.PoolMember]{raw: st, rows: st.Members, cols: memberColumns(time.Now()), before: head})
		}),
	}
	f.poolTenantFlag(c, &tenant)
	columnsFlag(c, memberColumns(time.Time{}))
	return c
}

func (f *fleet) poolDeleteCmd() *cobra.Command {
	var (
		tenant string
		yes    bool
	)
	c := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a pool and its unclaimed VMs; VMs handed out stay (asks on a terminal)",
		Args:    oneName("pool name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			name := args[0]
			if !yes {
				if err := f.confirm(fmt.Sprintf("delete pool %s and its warm VMs?", name), "delete a pool",
					"fluxctl fleet pools delete "+name+" -y"); err != nil {
					return err
				}
			}
			done, err := fc.DeletePool(c.Context(), name, tenant)
			if err != nil {
				return withHints(err, map[int]string{404: hintPools})
			}
			if f.a.human() {
				if done {
					f.a.done("", "Deleted pool %s", name)
				} else {
					f.a.done("fluxctl fleet pools status "+name, "Deleting pool %s: central finishes it in the background", name)
				}
			}
			return nil
		}),
	}
	f.poolTenantFlag(c, &tenant)
	c.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return c
}
