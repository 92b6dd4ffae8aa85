package main

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for nodes, capacity, the catalog, tenants, the activity log
// and reconciling: mostly the operator's.

// nodeColumns are the columns of fleet nodes.
func nodeColumns(now time.Time) []column[sdk.FleetNode] {
	return []column[sdk.FleetNode]{
		{"name", "NAME", false, func(n *sdk.FleetNode) string { return n.Name }},
		{"state", "STATE", false, func(n *sdk.FleetNode) string { return n.State }},
		{"vms", "VMS", false, func(n *sdk.FleetNode) string { return fmt.Sprint(len(n.VMs)) }},
		{"free-vcpus", "FREE VCPUS", false, func(n *sdk.FleetNode) string {
			return fmt.Sprintf("%d of %d", n.Capacity.Free.VCPUs, n.Capacity.Total.VCPUs)
		}},
		{"free-memory", "FREE MEMORY", false, func(n *sdk.FleetNode) string {
			return fmt.Sprintf("%s of %s", mib(n.Capacity.Free.MemoryMiB), mib(n.Capacity.Total.MemoryMiB))
		}},
		{"guests", "GUESTS", false, func(n *sdk.FleetNode) string { return strings.Join(n.GuestOS, ",") }},
		{"drivers", "DRIVERS", false, func(n *sdk.FleetNode) string { return drivers(n.Drivers) }},
		{"seen", "SEEN", false, func(n *sdk.FleetNode) string { return ago(now, n.LastHeartbeat) + " ago" }},
		{"url", "URL", true, func(n *sdk.FleetNode) string { return n.URL }},
		{"labels", "LABELS", true, func(n *sdk.FleetNode) string { return pairs(n.Labels) }},
		{"flags", "FLAGS", true, nodeFlags},
		{"networks", "NETWORKS", true, func(n *sdk.FleetNode) string { return strings.Join(n.Networks, ",") }},
	}
}

func (f *fleet) nodesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "nodes",
		Short: "List the nodes: state, capacity, drivers (operator)",
		Args:  cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			nodes, err := fc.ListNodes(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.FleetNode]{raw: sdk.FleetNodeList{Nodes: nodes}, rows: nodes, cols: nodeColumns(time.Now()),
				empty: "no nodes have reported to central yet\nnext: start fluxvm-agent node with a central { url, token } block pointing at " + fc.URL() + "\n"})
		}),
	}
	columnsFlag(c, nodeColumns(time.Time{}))
	return c
}

// drivers formats a node's drivers as name(health), with "sim" marked.
func drivers(ds []sdk.FleetNodeDriver) string {
	var out []string
	for _, d := range ds {
		s := d.Name
		if d.Health != "healthy" {
			s += "(" + d.Health + ")"
		}
		if d.Simulated {
			s += "*"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

// nodeFlags lists what central has set on a node.
func nodeFlags(n *sdk.FleetNode) string {
	var out []string
	for _, fl := range []struct {
		on   bool
		name string
	}{{n.Cordoned, "cordoned"}, {n.Draining, "draining"}, {n.ScrubPending, "scrub-pending"}, {n.Nested, "nested"}} {
		if fl.on {
			out = append(out, fl.name)
		}
	}
	return strings.Join(out, ",")
}

// nodeVMColumns are the columns of the VMs of fleet node NAME.
func nodeVMColumns(tenants *tenantNames) []column[sdk.HeartbeatVM] {
	return []column[sdk.HeartbeatVM]{
		{"name", "NAME", false, func(v *sdk.HeartbeatVM) string { return v.Name }},
		{"state", "STATE", false, func(v *sdk.HeartbeatVM) string { return v.State }},
		{"vcpus", "VCPUS", false, func(v *sdk.HeartbeatVM) string { return fmt.Sprint(v.VCPUs) }},
		{"memory", "MEMORY", false, func(v *sdk.HeartbeatVM) string { return mib(v.MemoryMiB) }},
		{"guest", "GUEST", false, func(v *sdk.HeartbeatVM) string { return v.GuestOS }},
		{"tenant", "TENANT", false, func(v *sdk.HeartbeatVM) string { return tenants.name(v.Tenant) }},
		{"tenant-id", "TENANT ID", true, func(v *sdk.HeartbeatVM) string { return v.Tenant }},
		{"id", "ID", true, func(v *sdk.HeartbeatVM) string { return v.ID }},
	}
}

func (f *fleet) nodeCmd() *cobra.Command {
	c := &cobra.Command{
		Use:               "node NAME",
		Short:             "Show one node with its VMs (operator)",
		Args:              oneName("node name"),
		ValidArgsFunction: f.completeNodes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			n, err := fc.GetNode(c.Context(), args[0])
			if err != nil {
				return withHints(err, map[int]string{404: "fluxctl fleet nodes lists the nodes (as the operator)"})
			}
			now := time.Now()
			head := fields([][2]string{
				{"name", n.Name}, {"state", n.State}, {"url", n.URL},
				{"last heartbeat", fmt.Sprintf("%s (%s ago)", n.LastHeartbeat.Local().Format(time.DateTime), short(now.Sub(n.LastHeartbeat)))},
				{"vcpus", fmt.Sprintf("%d free of %d", n.Capacity.Free.VCPUs, n.Capacity.Total.VCPUs)},
				{"memory", fmt.Sprintf("%s free of %s", mib(n.Capacity.Free.MemoryMiB), mib(n.Capacity.Total.MemoryMiB))},
				{"macos slots", fmt.Sprintf("%d free of %d", n.Capacity.Free.MacOSSlots, n.Capacity.Total.MacOSSlots)},
				{"guests", strings.Join(n.GuestOS, ", ")}, {"drivers", drivers(n.Drivers)},
				{"labels", pairs(n.Labels)}, {"flags", nodeFlags(n)},
			})
			return show(f.a, c, table[sdk.HeartbeatVM]{raw: n, rows: n.VMs, cols: nodeVMColumns(f.tenantNames(c.Context(), fc)),
				before: head + "\n", empty: "no VMs\n"})
		}),
	}
	columnsFlag(c, nodeVMColumns(nil))
	return c
}

// capacityColumns are the columns of fleet capacity.
func capacityColumns() []column[sdk.NodeCapacity] {
	return []column[sdk.NodeCapacity]{
		{"node", "NODE", false, func(n *sdk.NodeCapacity) string { return n.Node }},
		{"guests", "GUESTS", false, func(n *sdk.NodeCapacity) string {
			var guests []string
			if n.Linux {
				guests = append(guests, "linux")
			}
			if n.MacOS {
				guests = append(guests, "macos")
			}
			return strings.Join(guests, ",")
		}},
		{"free-vcpus", "FREE VCPUS", false, func(n *sdk.NodeCapacity) string { return fmt.Sprint(n.Free.VCPUs) }},
		{"free-memory", "FREE MEMORY", false, func(n *sdk.NodeCapacity) string { return mib(n.Free.MemoryMiB) }},
		{"macos-slots", "MACOS SLOTS", false, func(n *sdk.NodeCapacity) string { return fmt.Sprint(n.Free.MacOSSlots) }},
	}
}

func (f *fleet) capacityCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "capacity",
		Short: "What you could launch now, and where",
		Args:  cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			rep, err := fc.Capacity(c.Context())
			if err != nil {
				return err
			}
			largest := ""
			if l := rep.LargestLinux; l.Node != "" && len(rep.Nodes) > 0 {
				largest += fmt.Sprintf("\nlargest Linux VM now: %s, %s on %s\n", plural(l.VCPUs, "vCPU"), mib(l.MemoryMiB), l.Node)
			}
			if m := rep.LargestMacOS; m.Node != "" && len(rep.Nodes) > 0 {
				largest += fmt.Sprintf("largest macOS VM now: %s, %s on %s (%d slots free)\n", plural(m.VCPUs, "vCPU"), mib(m.MemoryMiB), m.Node, rep.MacOSSlotsFree)
			}
			return show(f.a, c, table[sdk.NodeCapacity]{raw: rep, rows: rep.Nodes, cols: capacityColumns(), after: largest,
				empty: "no node takes VMs now (none up and healthy, or all cordoned, draining or leased)\n"})
		}),
	}
	columnsFlag(c, capacityColumns())
	return c
}

// imageColumns are the columns of fleet images.
func imageColumns() []column[sdk.Image] {
	return []column[sdk.Image]{
		{"name", "NAME", false, func(im *sdk.Image) string { return im.Name }},
		{"guest", "GUEST", false, func(im *sdk.Image) string { return im.GuestOS }},
		{"vcpus", "VCPUS", false, func(im *sdk.Image) string { return fmt.Sprint(im.VCPUs) }},
		{"memory", "MEMORY", false, func(im *sdk.Image) string { return mib(im.MemoryMiB) }},
		{"ssh-user", "SSH USER", false, func(im *sdk.Image) string { return im.SSHUser }},
		{"description", "DESCRIPTION", false, func(im *sdk.Image) string { return im.DisplayName }},
		{"path", "PATH", true, func(im *sdk.Image) string { return im.Image }},
		{"source", "SOURCE", true, func(im *sdk.Image) string { return im.Source }},
	}
}

func (f *fleet) imagesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "images",
		Aliases: []string{"image"},
		Short:   "The image catalog: list, add, remove",
		Args:    subcommandArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ims, err := fc.ListImages(c.Context())
			if err != nil {
				return err
			}
			next := ""
			if len(ims) > 0 {
				next = "next: fluxctl fleet launch --image " + ims[0].Name + "\n"
			}
			return show(f.a, c, table[sdk.Image]{raw: sdk.ImageList{Images: ims}, rows: ims, cols: imageColumns(), after: next,
				empty: "the catalog is empty\nnext: fluxctl fleet images add NAME --image PATH --guest-os linux (as the operator)\n"})
		}),
	}
	columnsFlag(c, imageColumns())
	c.AddCommand(f.imagesAddCmd(), f.imagesRemoveCmd())
	return c
}

func (f *fleet) imagesAddCmd() *cobra.Command {
	var im sdk.Image
	c := &cobra.Command{
		Use:   "add NAME --image PATH --guest-os linux",
		Short: "Add an image to the catalog, or replace the one of that name (operator)",
		Long: `Add an image to the catalog under NAME, or replace the entry of that name.
--image is the disk's path on the nodes: central does not copy it, so put it
on every node first. --vcpus and --memory-mib are the size a launch gets
unless it asks for another (central's defaults: 4 and 8192).`,
		Example: `  fluxctl fleet images add debian-minimal --image /var/cache/fluxvm/images/debian-minimal --guest-os linux --vcpus 1 --memory-mib 512`,
		Args:    oneName("image name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if im.Image == "" {
				return usageError(c, "images add needs --image PATH, the disk's path on the nodes")
			}
			im.Name = args[0]
			out, err := fc.PutImage(c.Context(), im)
			if err != nil {
				return err
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.a.done("fluxctl fleet launch --image "+out.Name, "Image %s in the catalog (%s, %s, %s, %s)",
				out.Name, out.GuestOS, plural(out.VCPUs, "vCPU"), mib(out.MemoryMiB), out.Image)
			return nil
		}),
	}
	fl := c.Flags()
	fl.StringVar(&im.Image, "image", "", "the disk's path on the nodes (required)")
	fl.StringVar(&im.GuestOS, "guest-os", "linux", "linux or macos")
	fl.Int64Var(&im.VCPUs, "vcpus", 0, "vCPUs a launch gets by default (0: central's default, 4)")
	fl.Int64Var(&im.MemoryMiB, "memory-mib", 0, "memory a launch gets by default (0: central's default, 8192)")
	fl.StringVar(&im.DisplayName, "display-name", "", "what people see, e.g. \"Debian 12 minimal\"")
	fl.StringVar(&im.SSHUser, "ssh-user", "", "the image's login name (default admin)")
	fl.StringVar(&im.Source, "source", "", "where the image came from (an OCI reference, a URL)")
	_ = c.RegisterFlagCompletionFunc("guest-os", cobra.FixedCompletions([]string{"linux", "macos"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func (f *fleet) imagesRemoveCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:               "remove NAME",
		Aliases:           []string{"rm"},
		Short:             "Remove an image from the catalog; its VMs keep running (operator)",
		Args:              oneName("image name"),
		ValidArgsFunction: f.completeImages(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if !yes {
				if err := f.confirm(fmt.Sprintf("remove image %s from the catalog?", args[0]), "remove an image",
					"fluxctl fleet images remove "+args[0]+" -y"); err != nil {
					return err
				}
			}
			if err := fc.DeleteImage(c.Context(), args[0]); err != nil {
				return withHints(err, map[int]string{404: hintListImages})
			}
			if f.a.human() {
				f.a.done("", "Removed image %s from the catalog", args[0])
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "remove without asking")
	return c
}

func (f *fleet) tenantCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "tenant",
		Aliases: []string{"tenants"},
		Short:   "Tenants: create, list, get, me, update, rotate-token, delete",
		Long: `Tenants are the fleet's customers. The operator creates them; each gets an
fvt_ token, printed once. A tenant sees its own record with
"fluxctl fleet tenant me", and makes named API keys for its people and tools
with "fluxctl fleet keys".`,
		Args: subcommandArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(f.tenantCreateCmd(), f.tenantListCmd(), f.tenantGetCmd(), f.tenantMeCmd(),
		f.tenantUpdateCmd(), f.tenantRotateCmd(), f.tenantDeleteCmd())
	return c
}

// quotaFlags are the quota flags of tenant create and update, as given:
// a number, or "none" for no limit.
type quotaFlags struct {
	vms, vcpus, memoryGiB, memoryMiB, leasedHosts, volumeGiB, snapshots string
}

func (q *quotaFlags) add(c *cobra.Command, update bool) {
	none := ""
	if update {
		none = `; "none" removes it`
	}
	fl := c.Flags()
	fl.StringVar(&q.vms, "max-vms", "", "most VMs at once (0: no limit"+none+")")
	fl.StringVar(&q.vcpus, "max-vcpus", "", "most vCPUs at once (0: no limit"+none+")")
	fl.StringVar(&q.memoryGiB, "max-memory-gib", "", "most memory at once, in GiB (0: no limit"+none+")")
	fl.StringVar(&q.memoryMiB, "max-memory-mib", "", "most memory at once, in MiB, instead of --max-memory-gib (0: no limit"+none+")")
	fl.StringVar(&q.leasedHosts, "max-leased-hosts", "", "most whole nodes leased at once (0: no limit"+none+")")
	fl.StringVar(&q.volumeGiB, "max-volume-gib", "", "most GiB of volumes held (0: no limit"+none+")")
	fl.StringVar(&q.snapshots, "max-snapshots-per-vm", "", "most snapshots per VM (0: none allowed"+none+": the policy's)")
}

// patch turns the flags that were given into a quota patch.
func (q *quotaFlags) patch(c *cobra.Command) (sdk.QuotaPatch, error) {
	if c.Flags().Changed("max-memory-gib") && c.Flags().Changed("max-memory-mib") {
		return nil, usageError(c, "--max-memory-gib and --max-memory-mib set the same quota: give one of them")
	}
	p := sdk.QuotaPatch{}
	for _, fl := range []struct {
		flag, value, key string
		scale            float64
	}{
		{"max-vms", q.vms, sdk.QuotaMaxVMs, 1}, {"max-vcpus", q.vcpus, sdk.QuotaMaxVCPUs, 1},
		{"max-memory-gib", q.memoryGiB, sdk.QuotaMaxMemoryMiB, 1024}, {"max-memory-mib", q.memoryMiB, sdk.QuotaMaxMemoryMiB, 1},
		{"max-leased-hosts", q.leasedHosts, sdk.QuotaMaxLeasedHosts, 1}, {"max-volume-gib", q.volumeGiB, sdk.QuotaMaxVolumeGiB, 1},
		{"max-snapshots-per-vm", q.snapshots, sdk.QuotaMaxSnapshotsPerVM, 1},
	} {
		if !c.Flags().Changed(fl.flag) {
			continue
		}
		if fl.value == "none" {
			p[fl.key] = nil
			continue
		}
		v, err := strconv.ParseFloat(fl.value, 64)
		if err != nil || v < 0 || (fl.scale == 1 && v != math.Trunc(v)) {
			return nil, usageError(c, fmt.Sprintf("--%s %q: want a whole number, 0 or more, or none", fl.flag, fl.value))
		}
		n := int64(math.Round(v * fl.scale))
		p[fl.key] = &n
	}
	return p, nil
}

// quotaText says a tenant's quotas in one line.
func quotaText(q sdk.Quotas) string {
	var out []string
	if q.MaxVMs > 0 {
		out = append(out, fmt.Sprintf("%d VMs", q.MaxVMs))
	}
	if q.MaxVCPUs > 0 {
		out = append(out, fmt.Sprintf("%d vCPUs", q.MaxVCPUs))
	}
	if q.MaxMemoryMiB > 0 {
		out = append(out, mib(q.MaxMemoryMiB))
	}
	if q.MaxLeasedHosts > 0 {
		out = append(out, plural(q.MaxLeasedHosts, "leased host"))
	}
	if q.MaxVolumeGiB > 0 {
		out = append(out, fmt.Sprintf("%d GiB of volumes", q.MaxVolumeGiB))
	}
	if q.MaxSnapshotsPerVM != nil {
		out = append(out, fmt.Sprintf("%d snapshots/VM", *q.MaxSnapshotsPerVM))
	}
	if len(out) == 0 {
		return "no limits"
	}
	return strings.Join(out, ", ")
}

// printToken shows a tenant's new token, once, with the warning to keep it.
func (f *fleet) printToken(verb string, tw *sdk.TenantWithToken) {
	a := f.a
	fmt.Fprintf(a.stdout, "✓ %s tenant %s (%s), quota: %s\n\n  token  %s\n\n", verb, tw.Tenant.Name, tw.Tenant.ID, quotaText(tw.Tenant.Quota), tw.Token)
	fmt.Fprintln(a.stdout, "! Store this token now: it is shown only this once (central keeps only its SHA-256).")
	fmt.Fprintf(a.stdout, "next: give it to the tenant, who runs: %s=%s fluxctl fleet status\n", envFleetToken, tw.Token)
}

func (f *fleet) tenantCreateCmd() *cobra.Command {
	var q quotaFlags
	c := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a tenant; its token is printed once (operator)",
		Example: `  fluxctl fleet tenant create acme --max-vms 20 --max-vcpus 64 --max-memory-gib 128
  fluxctl fleet tenant create acme --max-leased-hosts 2 --max-vms 20 --max-memory-mib 98304`,
		Args: oneName("tenant name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			p, err := q.patch(c)
			if err != nil {
				return err
			}
			req := sdk.CreateTenantRequest{Name: args[0]}
			for key, v := range p {
				if v == nil {
					continue // "none" is what an absent quota is anyway
				}
				switch key {
				case sdk.QuotaMaxVMs:
					req.Quota.MaxVMs = *v
				case sdk.QuotaMaxVCPUs:
					req.Quota.MaxVCPUs = *v
				case sdk.QuotaMaxMemoryMiB:
					req.Quota.MaxMemoryMiB = *v
				case sdk.QuotaMaxLeasedHosts:
					req.Quota.MaxLeasedHosts = *v
				case sdk.QuotaMaxVolumeGiB:
					req.Quota.MaxVolumeGiB = *v
				case sdk.QuotaMaxSnapshotsPerVM:
					req.Quota.MaxSnapshotsPerVM = v
				}
			}
			out, err := fc.CreateTenant(c.Context(), req)
			if err != nil {
				return withHints(err, map[int]string{409: "pick another name; " + hintTenants})
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.printToken("Created", out)
			return nil
		}),
	}
	q.add(c, false)
	return c
}

// tenantColumns are the columns of fleet tenant list.
func tenantColumns(now time.Time) []column[sdk.Tenant] {
	return []column[sdk.Tenant]{
		{"name", "NAME", false, func(t *sdk.Tenant) string { return t.Name }},
		{"state", "STATE", false, tenantState},
		{"quota", "QUOTA", false, func(t *sdk.Tenant) string { return quotaText(t.Quota) }},
		{"age", "AGE", false, func(t *sdk.Tenant) string { return ago(now, t.CreatedAt) }},
		{"id", "ID", true, func(t *sdk.Tenant) string { return t.ID }},
	}
}

func tenantState(t *sdk.Tenant) string {
	if t.Disabled {
		return "disabled"
	}
	return "enabled"
}

func (f *fleet) tenantListCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the tenants (operator)",
		Args:    cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ts, err := fc.ListTenants(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Tenant]{raw: sdk.TenantList{Tenants: ts}, rows: ts, cols: tenantColumns(time.Now()),
				empty: "no tenants\nnext: fluxctl fleet tenant create NAME --max-vms 10\n"})
		}),
	}
	columnsFlag(c, tenantColumns(time.Time{}))
	return c
}

// printTenant shows one tenant as a list of fields.
func (f *fleet) printTenant(t *sdk.Tenant) {
	fmt.Fprint(f.a.stdout, fields([][2]string{{"name", t.Name}, {"id", t.ID}, {"state", tenantState(t)}, {"quota", quotaText(t.Quota)},
		{"created", t.CreatedAt.Local().Format(time.DateTime)}}))
}

func (f *fleet) tenantGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "get TENANT",
		Aliases:           []string{"show"},
		Short:             "Show a tenant, by name or ID (operator)",
		Args:              oneName("tenant name or ID"),
		ValidArgsFunction: f.completeTenants(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if args[0] == "me" {
				return usageError(c, `"me" is the calling tenant: use fluxctl fleet tenant me`)
			}
			t, err := fc.GetTenant(c.Context(), args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintTenants})
			}
			if !f.a.human() {
				return f.a.printRaw(t)
			}
			f.printTenant(t)
			return nil
		}),
	}
}

func (f *fleet) tenantMeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "me",
		Short: "Show your tenant: quota and what counts against it",
		Args:  cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			me, err := fc.TenantMe(c.Context())
			if err != nil {
				return withHints(err, map[int]string{400: "pass a tenant's fvt_ token with --token or " + envFleetToken +
					"; as the operator, fluxctl fleet tenant get NAME shows a tenant"})
			}
			a := f.a
			if !a.human() {
				return a.printRaw(me)
			}
			f.printTenant(&me.Tenant)
			fmt.Fprintln(a.stdout)
			q, u := me.Tenant.Quota, me.Usage
			limit := func(n int64, unit func(int64) string) string {
				if n <= 0 {
					return "no limit"
				}
				return unit(n)
			}
			count := func(n int64) string { return fmt.Sprint(n) }
			tw := newTable(a.stdout)
			row(tw, "QUOTA", "IN USE", "BEING CREATED", "LIMIT")
			row(tw, "VMs", count(u.Running.VMs), count(u.Reserved.VMs), limit(q.MaxVMs, count))
			row(tw, "vCPUs", count(u.Running.VCPUs), count(u.Reserved.VCPUs), limit(q.MaxVCPUs, count))
			row(tw, "Memory", mib(u.Running.MemoryMiB), mib(u.Reserved.MemoryMiB), limit(q.MaxMemoryMiB, mib))
			row(tw, "Snapshots per VM", "", "", count(me.MaxSnapshotsPerVM))
			return tw.Flush()
		}),
	}
}

func (f *fleet) tenantUpdateCmd() *cobra.Command {
	var (
		q               quotaFlags
		name            string
		disable, enable bool
	)
	c := &cobra.Command{
		Use:   "update TENANT [--name N] [--disable|--enable] [--max-vms N|none]...",
		Short: "Rename, disable, enable a tenant or change its quotas (operator)",
		Example: `  fluxctl fleet tenant update acme --max-vms 40 --max-vcpus none
  fluxctl fleet tenant update acme --max-volume-gib 500
  fluxctl fleet tenant update acme --disable`,
		Args:              oneName("tenant name or ID"),
		ValidArgsFunction: f.completeTenants(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if disable && enable {
				return usageError(c, "give --disable or --enable, not both")
			}
			p, err := q.patch(c)
			if err != nil {
				return err
			}
			var req sdk.UpdateTenantRequest
			if len(p) > 0 {
				req.Quota = p
			}
			if c.Flags().Changed("name") {
				req.Name = &name
			}
			if disable || enable {
				req.Disabled = &disable
			}
			if req.Name == nil && req.Disabled == nil && req.Quota == nil {
				return usageError(c, "nothing to change: give --name, --disable, --enable or a --max-… quota")
			}
			t, err := fc.UpdateTenant(c.Context(), args[0], req)
			if err != nil {
				return withHints(err, map[int]string{404: hintTenants, 409: "another tenant has that name; " + hintTenants})
			}
			if !f.a.human() {
				return f.a.printRaw(t)
			}
			f.a.done("", "Updated tenant %s (%s, %s), quota: %s", t.Name, t.ID, tenantState(t), quotaText(t.Quota))
			return nil
		}),
	}
	q.add(c, true)
	c.Flags().StringVar(&name, "name", "", "a new name")
	c.Flags().BoolVar(&disable, "disable", false, "refuse the tenant's token (its VMs keep running)")
	c.Flags().BoolVar(&enable, "enable", false, "accept the tenant's token again")
	return c
}

func (f *fleet) tenantRotateCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:               "rotate-token TENANT",
		Short:             "Give a tenant a new token; the old one stops working at once (operator)",
		Args:              oneName("tenant name or ID"),
		ValidArgsFunction: f.completeTenants(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if !yes {
				if err := f.confirm(fmt.Sprintf("rotate the token of tenant %s? its current token stops working at once", args[0]),
					"rotate a token", "fluxctl fleet tenant rotate-token "+args[0]+" -y"); err != nil {
					return err
				}
			}
			out, err := fc.RotateTenantToken(c.Context(), args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintTenants})
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.printToken("New token for", out)
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "rotate without asking")
	return c
}

func (f *fleet) tenantDeleteCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:               "delete TENANT",
		Aliases:           []string{"rm"},
		Short:             "Delete a tenant that has no VMs (operator)",
		Args:              oneName("tenant name or ID"),
		ValidArgsFunction: f.completeTenants(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if !yes {
				if err := f.confirm(fmt.Sprintf("delete tenant %s? its token stops working", args[0]),
					"delete a tenant", "fluxctl fleet tenant delete "+args[0]+" -y"); err != nil {
					return err
				}
			}
			if err := fc.DeleteTenant(c.Context(), args[0]); err != nil {
				return withHints(err, map[int]string{404: hintTenants,
					409: "delete its VMs first (fluxctl fleet vms lists them; fluxctl fleet tenant update " + args[0] + " --disable stops new ones)"})
			}
			if f.a.human() {
				f.a.done("", "Deleted tenant %s", args[0])
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return c
}

// eventColumns are the columns of fleet activity. The default ones fit a
// row in 80 columns: who and the action are cut (with …) where a name is
// long; -o json shows them whole. A tenant's request made with one of its
// API keys is the tenant's, as TENANT/KEY; one made by a person signed in
// to the console is theirs, by email.
func eventColumns(tenants *tenantNames) []column[sdk.Event] {
	who := func(e *sdk.Event) string {
		name := e.Who
		if e.Actor != "" {
			name = e.Actor
		} else if id, ok := strings.CutPrefix(e.Who, "tenant:"); ok { // an event recorded before actors were
			name = tenants.name(id)
		}
		if e.Key != "" {
			name += "/" + e.Key
		}
		if e.User != "" {
			name = e.User
		}
		return name
	}
	action := func(e *sdk.Event) string {
		if e.Suppressed > 0 { // a summary of requests over the caller's budget
			return fmt.Sprintf("%d more until %s", e.Suppressed, e.Until.Local().Format(time.TimeOnly))
		}
		return cmp.Or(e.Action, e.Method+" "+e.Path)
	}
	return []column[sdk.Event]{
		{"time", "TIME", false, func(e *sdk.Event) string { return e.Time.Local().Format(time.Stamp) }},
		{"who", "WHO", false, func(e *sdk.Event) string { return cut(who(e), 14) }},
		{"action", "ACTION", false, func(e *sdk.Event) string { return cut(action(e), 33) }},
		{"result", "RESULT", false, func(e *sdk.Event) string { return eventResult(e.Status) }},
		{"target", "TARGET", true, func(e *sdk.Event) string { return e.Target }},
		{"method", "METHOD", true, func(e *sdk.Event) string { return e.Method }},
		{"path", "PATH", true, func(e *sdk.Event) string { return e.Path }},
		{"status", "STATUS", true, func(e *sdk.Event) string { return strconv.Itoa(e.Status) }},
		{"tenant-id", "TENANT ID", true, func(e *sdk.Event) string { return e.Tenant }},
		{"key", "KEY", true, func(e *sdk.Event) string { return e.Key }},
		{"user", "USER", true, func(e *sdk.Event) string { return e.User }},
	}
}

// eventResult words an HTTP status for the activity log: ok, refused (a 4xx:
// nothing changed) or failed.
func eventResult(status int) string {
	switch {
	case status < 400:
		return "ok"
	case status < 500:
		return "refused " + strconv.Itoa(status)
	default:
		return "failed " + strconv.Itoa(status)
	}
}

// cut shortens s to at most n characters, ending a cut one with "…".
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func (f *fleet) eventsCmd() *cobra.Command {
	var q sdk.EventQuery
	c := &cobra.Command{
		Use:     "activity",
		Aliases: []string{"events"},
		Short:   "The activity log: who changed what, newest first (a tenant sees its own)",
		Long: `The activity log: every change made through central, and every refused
one, newest first: when, who (the operator or a tenant, by name, as
TENANT/KEY when one of its API keys was used), what was asked in words
("launch vm web-1", "run in web-1") and how it ended (ok, refused with its
status, or failed). Reads are not in it, nor are bodies, commands or tokens.
-o wide adds the HTTP method, path and status, the tenant's id and the key.`,
		Example: `  fluxctl fleet activity
  fluxctl fleet activity -n 20 --tenant acme -o wide`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if q.Limit < 0 {
				return usageError(c, "--limit must not be negative")
			}
			evs, err := fc.ListEvents(c.Context(), q)
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Event]{raw: sdk.EventList{Events: evs}, rows: evs,
				cols: eventColumns(f.tenantNames(c.Context(), fc)), empty: "no activity\n"})
		}),
	}
	c.Flags().IntVarP(&q.Limit, "limit", "n", 0, "how many of the newest events (0: central's default, 100)")
	c.Flags().StringVar(&q.Tenant, "tenant", "", "only this tenant's events, by name or ID (operator)")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	columnsFlag(c, eventColumns(nil))
	return c
}

func (f *fleet) reconcileCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reconcile",
		Short: "Make the ledger agree with the nodes now (operator)",
		Long: `Run one reconcile pass now: close ledger entries of VMs their node no
longer lists, adopt VMs a node runs for a tenant that the ledger lacks, drop
old entries and recount usage. The leader also runs it on its own.`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			rep, err := fc.Reconcile(c.Context())
			if err != nil {
				return err
			}
			a := f.a
			if !a.human() {
				return a.printRaw(rep)
			}
			a.done("", "Reconciled in %d ms: %d nodes checked, %d skipped, %d entries ended, %d adopted, %d dropped, %d counters fixed",
				rep.DurationMS, len(rep.NodesChecked), len(rep.NodesSkipped), len(rep.Ended), len(rep.Adopted), rep.Dropped, len(rep.CountersFixed))
			for _, s := range rep.NodesSkipped {
				fmt.Fprintf(a.stdout, "  skipped node %s: %s\n", s.Node, s.Reason)
			}
			for _, e := range rep.Ended {
				fmt.Fprintf(a.stdout, "  ended   %s (%s on %s): gone from its node\n", e.Name, e.VMID, e.Node)
			}
			tenants := f.tenantNames(c.Context(), fc)
			for _, e := range rep.Adopted {
				fmt.Fprintf(a.stdout, "  adopted %s (%s on %s) for tenant %s\n", e.Name, e.VMID, e.Node, tenants.name(e.Tenant))
			}
			for _, cf := range rep.CountersFixed {
				fmt.Fprintf(a.stdout, "  fixed   %s %s: %d VMs, %d vCPUs, %s (was %d, %d, %s)\n", cf.Scope, cf.Name,
					cf.Now.VMs, cf.Now.VCPUs, mib(cf.Now.MemoryMiB), cf.Was.VMs, cf.Was.VCPUs, mib(cf.Was.MemoryMiB))
			}
			return nil
		}),
	}
}
