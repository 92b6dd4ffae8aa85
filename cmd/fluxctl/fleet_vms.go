package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// tenantStatus is `fleet status -o json` for a tenant: the API's answers
// to GET /fleet/tenants/me and GET /fleet/vms, unchanged.
type tenantStatus struct {
	Me  *sdk.TenantMe    `json:"me"`
	VMs *sdk.FleetVMList `json:"vms"`
}

// operatorStatus is `fleet status -o json` for the operator: GET /healthz,
// the nodes of GET /fleet/nodes and GET /fleet/vms, unchanged.
type operatorStatus struct {
	Health *sdk.FleetHealth `json:"health"`
	Nodes  []sdk.FleetNode  `json:"nodes"`
	VMs    *sdk.FleetVMList `json:"vms"`
}

func (f *fleet) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "A tenant's quota and VMs; for the operator, fleet health and what needs attention",
		Long: `For a tenant (an fvt_ token): its quota use as bars, its VMs and the next
step. For the operator: nodes up and down, VMs, and what needs attention
first (nodes not reporting, unhealthy drivers, nodes draining or cordoned).

With -o json it prints the API's answers it is made of: for a tenant
{"me": GET /fleet/tenants/me, "vms": GET /fleet/vms}; for the operator
{"health": GET /healthz, "nodes": [GET /fleet/nodes], "vms": GET /fleet/vms}.`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ctx := c.Context()
			vms, err := fc.ListVMs(ctx)
			if err != nil {
				return err
			}
			if f.asTenant() {
				me, err := fc.TenantMe(ctx)
				if err != nil {
					return err
				}
				if !f.a.human() {
					return f.a.printRaw(tenantStatus{Me: me, VMs: vms})
				}
				return f.tenantStatus(fc, me, vms)
			}
			health, err := fc.Health(ctx)
			if err != nil {
				return err
			}
			nodes, err := fc.ListNodes(ctx)
			if err != nil {
				return err
			}
			if !f.a.human() {
				return f.a.printRaw(operatorStatus{Health: health, Nodes: nodes, VMs: vms})
			}
			return f.operatorStatus(fc, health, nodes, vms)
		}),
	}
}

// tenantStatus shows a tenant its quota use as bars, its VMs and the next
// step.
func (f *fleet) tenantStatus(fc *sdk.FleetClient, me *sdk.TenantMe, vms *sdk.FleetVMList) error {
	a := f.a
	t, q, used, reserved := me.Tenant, me.Tenant.Quota, me.Usage.Total, me.Usage.Reserved
	state := ""
	if t.Disabled {
		state = " (disabled: the operator must enable it before you can launch)"
	}
	fmt.Fprintf(a.stdout, "Tenant %s%s  %s\n\n", t.Name, state, fc.URL())
	tw := newTable(a.stdout)
	quota := func(label string, used, limit, inFlight int64, unit func(int64) string) {
		amount := unit(used) + " (no limit)"
		if limit > 0 {
			amount = fmt.Sprintf("%s of %s", unit(used), unit(limit))
		}
		if inFlight > 0 {
			amount += fmt.Sprintf(", %s being created", unit(inFlight))
		}
		fmt.Fprintf(tw, "%s\t%s  %s\n", label, bar(used, limit, 16), amount)
	}
	count := func(n int64) string { return fmt.Sprint(n) }
	quota("VMs", used.VMs, q.MaxVMs, reserved.VMs, count)
	quota("vCPUs", used.VCPUs, q.MaxVCPUs, reserved.VCPUs, count)
	quota("Memory", used.MemoryMiB, q.MaxMemoryMiB, reserved.MemoryMiB, mib)
	if err := tw.Flush(); err != nil {
		return err
	}
	if b := me.Billing; b != nil {
		line := fmt.Sprintf("This month (%s): %s %s", b.Month, b.MonthToDateDisplay, b.Currency)
		if b.Monthly != nil {
			line += fmt.Sprintf(" of a %s budget", b.Monthly.Cents())
			switch b.State {
			case billing.BudgetNear:
				line += " (past 80 %)"
			case billing.BudgetOver:
				line += " (over budget)"
			}
		}
		fmt.Fprintf(a.stdout, "%s; fluxctl fleet bill has the details\n", line)
	}
	fmt.Fprintln(a.stdout)
	if len(vms.VMs) == 0 {
		fmt.Fprintln(a.stdout, "No VMs yet.")
		fmt.Fprintln(a.stdout, "next: fluxctl fleet images, then fluxctl fleet launch --image IMAGE")
		return nil
	}
	if err := writeTable(a.stdout, narrow(fleetVMColumns(time.Now(), nil)), vms.VMs, nil); err != nil {
		return err
	}
	fmt.Fprint(a.stdout, unreachableLines(vms))
	next := "fluxctl fleet launch --image IMAGE"
	if q.MaxVMs > 0 && used.VMs >= q.MaxVMs {
		next = "fluxctl fleet rm VM (your VM quota is used up)"
	}
	fmt.Fprintf(a.stdout, "\nnext: %s\n", next)
	return nil
}

// operatorStatus shows the operator nodes up and down, VMs, and what needs
// attention first.
func (f *fleet) operatorStatus(fc *sdk.FleetClient, health *sdk.FleetHealth, nodes []sdk.FleetNode, vms *sdk.FleetVMList) error {
	a := f.a
	role := "standby"
	if health.Leader {
		role = "leader"
	}
	fmt.Fprintf(a.stdout, "Fleet  %s (central %s, %s)\n\n", fc.URL(), health.Version, role)

	now := time.Now()
	var up, down int
	var total, free sdk.Resources
	var attention []string
	next := ""
	for _, n := range nodes {
		if n.State != sdk.NodeUp {
			down++
			attention = append(attention, fmt.Sprintf("node %s is down: no heartbeat for %s; its %s out of sight, not lost",
				n.Name, short(now.Sub(n.LastHeartbeat)), pluralVMs(len(n.VMs))))
			next = cmp.Or(next, "fluxctl fleet node "+n.Name)
			continue
		}
		up++
		total.VCPUs += n.Capacity.Total.VCPUs
		total.MemoryMiB += n.Capacity.Total.MemoryMiB
		free.VCPUs += n.Capacity.Free.VCPUs
		free.MemoryMiB += n.Capacity.Free.MemoryMiB
		var sick []string
		for _, d := range n.Drivers {
			if d.Health != "healthy" {
				sick = append(sick, d.Name+" is "+d.Health)
			}
		}
		switch {
		case len(n.Drivers) > 0 && len(sick) == len(n.Drivers):
			attention = append(attention, fmt.Sprintf("node %s takes no VMs: driver %s", n.Name, strings.Join(sick, ", ")))
		case len(sick) > 0:
			attention = append(attention, fmt.Sprintf("node %s: driver %s", n.Name, strings.Join(sick, ", ")))
		}
		if n.ScrubPending {
			attention = append(attention, fmt.Sprintf("node %s needs a scrub before it takes VMs again", n.Name))
		}
		if n.Draining {
			attention = append(attention, fmt.Sprintf("node %s is draining (%s left)", n.Name, pluralVMs(len(n.VMs))))
		}
		if n.Cordoned {
			attention = append(attention, fmt.Sprintf("node %s is cordoned: it takes no new VMs", n.Name))
		}
		if len(sick) > 0 || n.ScrubPending || n.Draining || n.Cordoned {
			next = cmp.Or(next, "fluxctl fleet node "+n.Name)
		}
	}
	running, unseen := 0, 0
	for _, v := range vms.VMs {
		switch {
		case v.Unreachable:
			unseen++
		case v.State == sdk.StateRunning:
			running++
		}
	}
	tw := newTable(a.stdout)
	nodesLine := fmt.Sprintf("%d up", up)
	if down > 0 {
		nodesLine += fmt.Sprintf(", %d down", down)
	}
	fmt.Fprintf(tw, "Nodes\t%s\n", nodesLine)
	vmLine := fmt.Sprintf("%d (%d running", len(vms.VMs), running)
	if unseen > 0 {
		vmLine += fmt.Sprintf(", %d out of sight", unseen)
	}
	fmt.Fprintf(tw, "VMs\t%s)\n", vmLine)
	if up > 0 {
		fmt.Fprintf(tw, "vCPUs\t%s  %d of %d in use\n", bar(total.VCPUs-free.VCPUs, total.VCPUs, 16), total.VCPUs-free.VCPUs, total.VCPUs)
		fmt.Fprintf(tw, "Memory\t%s  %s of %s in use\n", bar(total.MemoryMiB-free.MemoryMiB, total.MemoryMiB, 16),
			mib(total.MemoryMiB-free.MemoryMiB), mib(total.MemoryMiB))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	switch {
	case len(nodes) == 0:
		fmt.Fprintln(a.stdout, "No node has reported yet: start fluxvm-agent node with a central { url, token } block pointing here.")
		next = "fluxctl fleet nodes"
	case len(attention) == 0:
		fmt.Fprintln(a.stdout, "Nothing needs attention.")
		next = "fluxctl fleet vms"
	default:
		fmt.Fprintln(a.stdout, "Needs attention:")
		for _, s := range attention {
			fmt.Fprintf(a.stdout, "  ! %s\n", s)
		}
	}
	fmt.Fprintf(a.stdout, "\nnext: %s\n", next)
	return nil
}

func pluralVMs(n int) string {
	if n == 1 {
		return "1 VM is"
	}
	return fmt.Sprintf("%d VMs are", n)
}

// fleetVMColumns are the columns of fleet vms; tenants names the VMs'
// tenants.
func fleetVMColumns(now time.Time, tenants *tenantNames) []column[sdk.FleetVM] {
	return []column[sdk.FleetVM]{
		{"name", "NAME", false, func(v *sdk.FleetVM) string { return v.Name }},
		{"state", "STATE", false, func(v *sdk.FleetVM) string {
			if v.Unreachable {
				return v.State + "?" // as last reported
			}
			return v.State
		}},
		{"agent", "AGENT", false, func(v *sdk.FleetVM) string { return agentState(&v.VM) }},
		{"node", "NODE", false, func(v *sdk.FleetVM) string { return v.Node }},
		{"vcpus", "VCPUS", false, func(v *sdk.FleetVM) string { return fmt.Sprint(v.VCPUs) }},
		{"memory", "MEMORY", false, func(v *sdk.FleetVM) string { return mib(v.MemoryMiB) }},
		{"age", "AGE", false, func(v *sdk.FleetVM) string { return ago(now, v.CreatedAt) }},
		{"id", "ID", true, func(v *sdk.FleetVM) string { return v.ID }},
		{"image", "IMAGE", true, func(v *sdk.FleetVM) string {
			if v.ImageName != "" || v.Image == "" {
				return v.ImageName
			}
			return filepath.Base(v.Image) // not launched from the catalog: the last part of the node's path
		}},
		{"driver", "DRIVER", true, func(v *sdk.FleetVM) string { return v.Driver }},
		{"tenant", "TENANT", true, func(v *sdk.FleetVM) string { return tenants.name(v.Tenant) }},
		{"tenant-id", "TENANT ID", true, func(v *sdk.FleetVM) string { return v.Tenant }},
		{"expires", "EXPIRES", true, func(v *sdk.FleetVM) string { return expires(now, v.ExpiresAt) }},
		{"labels", "LABELS", true, func(v *sdk.FleetVM) string { return pairs(v.Labels) }},
	}
}

// unreachableLines say which nodes did not answer GET /fleet/vms.
func unreachableLines(list *sdk.FleetVMList) string {
	var b strings.Builder
	for _, u := range list.UnreachableNodes {
		why := ""
		if u.Error != "" {
			why = " (" + u.Error + ")"
		}
		fmt.Fprintf(&b, "! node %s did not answer%s: its VMs (state?) are shown as it last reported them\n", u.Node, why)
	}
	return b.String()
}

func (f *fleet) vmsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "vms",
		Aliases: []string{"list", "ls"},
		Short:   "List your VMs on every node (the operator's: all)",
		Args:    cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			list, err := fc.ListVMs(c.Context())
			if err != nil {
				return err
			}
			t := table[sdk.FleetVM]{raw: list, rows: list.VMs, cols: fleetVMColumns(time.Now(), f.tenantNames(c.Context(), fc)),
				after: unreachableLines(list), emptyHeader: true}
			if len(list.UnreachableNodes) == 0 {
				t.emptyHeader = false
				t.empty = "no VMs\nnext: fluxctl fleet launch --image IMAGE (fluxctl fleet images lists them)\n"
			}
			return show(f.a, c, t)
		}),
	}
	columnsFlag(c, fleetVMColumns(time.Time{}, nil))
	return c
}

// vmNameRE is central's rule for VM names.
var vmNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// launchRefused gives a refused launch the hint of its cause: a 409 is a
// name in use or no room, each with its own remedy.
func launchRefused(err error, hints map[int]string) error {
	var api *sdk.APIError
	if errors.As(err, &api) && api.Status == 409 && strings.Contains(api.Message, "already exists") {
		return &cliError{msg: api.Message, hint: "pick another name, or leave NAME out and fluxctl picks a free one (fluxctl fleet vms lists yours)"}
	}
	if api != nil && api.Status == 400 && strings.Contains(api.Message, "ssh_authorized_keys") {
		// Central's hint says what a key looks like; --ssh-key is where they came from.
		return &cliError{msg: api.Message, hint: api.Hint + " (--ssh-key FILE reads every line of FILE)"}
	}
	return withHints(err, hints)
}

// suggestName is IMAGE-N with the smallest N from 1 that no VM in taken
// uses, cut to fit a VM name.
func suggestName(image string, taken map[string]bool) string {
	base := strings.TrimRight(image, ".-_")
	if base == "" || !vmNameRE.MatchString(base) {
		base = "vm"
	}
	for n := 1; ; n++ {
		suffix := fmt.Sprintf("-%d", n)
		b := base
		if len(b)+len(suffix) > 63 {
			b = strings.TrimRight(b[:63-len(suffix)], ".-_")
		}
		if name := b + suffix; !taken[name] {
			return name
		}
	}
}

func (f *fleet) launchCmd() *cobra.Command {
	var (
		req         sdk.FleetCreateVMRequest
		memoryGiB   float64
		ttl         time.Duration
		labels      []string
		wait        bool
		waitTimeout time.Duration
		dryRun      bool
		spec        string
		sshKeys     []string
	)
	c := &cobra.Command{
		Use:     "launch [NAME] (--image IMAGE | --pool POOL | --spec FILE)",
		Aliases: []string{"create"},
		Short:   "Launch a VM from the image catalog on a node central picks",
		Long: `Launch a VM from the image catalog. Central's scheduler picks the node
(or --node pins one) within your quota; fluxctl says where it landed and why.
Without NAME, fluxctl suggests one from the image (debian-minimal-1, -2, ...)
that none of your VMs uses. With --wait it returns once the guest agent
answers, showing progress on a terminal. With --dry-run nothing is launched:
fluxctl shows where the VM would land and what an hour of it would cost.

With --pool it takes a VM already booted in that warm pool (the image and
size are then the pool's) and says so; such a VM keeps the name its pool
gave it. When none is warm, a new one is booted. A launch of an image and
size that one of your pools keeps may be served from it without --pool.

With --spec FILE (- reads stdin) the request comes from a JSON or YAML file
holding the body of the API's create request (POST /fleet/vms), so it can ask
for what no flag does: node_selector, nested, network, reschedulable, and
image_path for the operator. Flags given as well override the file's fields
(--label adds to its labels, replacing a key it has), and NAME overrides its
name. "fluxctl fleet create" is this command: fleet create --spec FILE.`,
		Example: `  fluxctl fleet launch --image debian-minimal
  fluxctl fleet launch ci-7 --image debian-minimal --vcpus 2 --memory-gib 4 --ttl 8h --label job=7 --wait
  fluxctl fleet launch --pool ci
  fluxctl fleet launch web-1 --image debian-minimal --ssh-key ~/.ssh/id_ed25519.pub --wait
  fluxctl fleet launch db-1 --image debian-minimal --volume pg-data
  fluxctl fleet create --spec macos-ci.yaml --ttl 2h`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(c, fmt.Sprintf("fleet launch takes at most one VM name, got %d arguments", len(args)))
			}
			return nil
		},
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if ttl < 0 || memoryGiB < 0 || req.VCPUs < 0 {
				return usageError(c, "--ttl, --vcpus and --memory-gib must not be negative")
			}
			if dryRun && wait {
				return usageError(c, "--dry-run launches nothing to wait for: drop --wait")
			}
			req.TTLSeconds = int64((ttl + time.Second - 1) / time.Second)
			req.MemoryMiB = int64(math.Round(memoryGiB * 1024))
			var err error
			if req.Labels, err = parseLabels(c, labels); err != nil {
				return err
			}
			if req.SSHAuthorizedKeys, err = f.readSSHKeys(sshKeys); err != nil {
				return err
			}
			if spec != "" {
				fromFile, err := f.readSpec(spec)
				if err != nil {
					return err
				}
				req = withFlags(c, fromFile, req)
			}
			if req.Image == "" && req.Pool == "" && req.ImagePath == "" {
				return usageError(c, "fleet launch needs --image IMAGE, a catalog image (fluxctl fleet images lists them), or --pool POOL")
			}
			if err := checkPoolLaunch(c, &req); err != nil {
				return err
			}
			named := len(args) == 1 || req.Name != "" // by NAME, or in the --spec file
			switch {
			case len(args) == 1:
				req.Name = args[0]
			case req.Name == "":
				list, err := fc.ListVMs(c.Context())
				if err != nil {
					return err
				}
				taken := map[string]bool{}
				for _, v := range list.VMs {
					taken[v.Name] = true
				}
				req.Name = suggestName(cmp.Or(req.Image, req.Pool), taken)
			}
			hints := map[int]string{
				409: "fluxctl fleet capacity shows what fits now: ask for less, or drop --node",
				400: hintListImages + "; fluxctl fleet launch --help shows the flags",
			}
			if req.Pool != "" {
				hints[404] = hintPools
				hints[400] = fmt.Sprintf("fluxctl fleet pools get %s shows the pool's image and size; leave --image, --vcpus and --memory-gib out to take them", req.Pool)
			}
			if dryRun {
				d, err := fc.VMEstimate(c.Context(), req)
				if err != nil {
					return launchRefused(err, hints)
				}
				if !f.a.human() {
					return f.a.printRaw(d)
				}
				return f.printVMDryRun(req.Name, d)
			}
			var resp *sdk.FleetCreateVMResponse
			if !wait {
				resp, err = fc.CreateVM(c.Context(), req)
				if err != nil {
					return launchRefused(err, hints)
				}
			} else {
				ctx, cancel := context.WithTimeout(c.Context(), waitTimeout)
				defer cancel()
				stop := func() {}
				if f.a.human() && f.a.stderrTTY {
					stop = spinner(f.a.stderr, fmt.Sprintf("launching %s and waiting for its guest agent…", req.Name))
				}
				resp, err = fc.LaunchAndWait(ctx, req, 250*time.Millisecond)
				stop()
				if err != nil && resp == nil {
					return launchRefused(err, hints)
				}
				if err != nil {
					return &cliError{msg: fmt.Sprintf("launched vm %s on %s (%s), but: %v", resp.VM.Name, resp.Node, resp.VM.ID, err),
						hint: fmt.Sprintf("its console log may say why: fluxctl fleet logs %s", resp.VM.Name)}
				}
			}
			if !f.a.human() {
				return f.a.printRaw(resp)
			}
			vm := resp.VM
			next := fmt.Sprintf("fluxctl fleet run %s -- uname -a", vm.Name)
			if vm.Attributes["simulated"] == "true" {
				// The simulator runs no guest, so it cannot run commands.
				next = fmt.Sprintf("fluxctl fleet logs %s", vm.Name)
			}
			format, lineArgs := launchedLine(&req, resp, named)
			f.a.done(next, format, lineArgs...)
			return nil
		}),
	}
	fl := c.Flags()
	fl.StringVar(&req.Image, "image", "", "a catalog image's name (required without --pool; fluxctl fleet images lists them)")
	fl.StringVar(&req.Pool, "pool", "", "take a warm VM from this pool (fluxctl fleet pools lists them); image and size are the pool's")
	fl.Int64Var(&req.VCPUs, "vcpus", 0, "virtual CPUs (default: the image's)")
	fl.Float64Var(&memoryGiB, "memory-gib", 0, "memory in GiB, e.g. 4 or 0.5 (default: the image's)")
	fl.DurationVar(&ttl, "ttl", 0, "delete the VM after this long, e.g. 8h (0: keep it)")
	fl.StringVar(&req.Node, "node", "", "pin the VM to this node (placement rules still apply)")
	fl.StringArrayVar(&req.Networks, "network", nil, "join this private network of yours (repeatable; one per VM is built; needs --node, one of its members: fluxctl fleet networks show NAME)")
	fl.StringArrayVar(&req.Volumes, "volume", nil, "attach this volume of yours (repeatable, at most 2; the VM runs on their node; fluxctl fleet volumes lists them)")
	fl.BoolVar(&req.Display, "display", false, "give the VM a display (fluxctl fleet screen shows it; macOS guests always have one)")
	fl.StringArrayVar(&labels, "label", nil, "a KEY=VALUE label (repeatable)")
	fl.BoolVar(&wait, "wait", false, "wait until the guest agent is ready")
	fl.DurationVar(&waitTimeout, "wait-timeout", 10*time.Minute, "how long --wait waits")
	fl.BoolVar(&dryRun, "dry-run", false, "show where the VM would land and what an hour of it costs; launch nothing")
	fl.StringVar(&spec, "spec", "", "take the create request from this JSON or YAML file, - for stdin; flags given override it")
	fl.StringArrayVar(&sshKeys, "ssh-key", nil, "a public key file (e.g. ~/.ssh/id_ed25519.pub) for the image's login, to log in with fluxctl fleet ssh (repeatable)")
	_ = c.MarkFlagFilename("spec", "json", "yaml", "yml")
	_ = c.RegisterFlagCompletionFunc("image", f.completeImages())
	_ = c.RegisterFlagCompletionFunc("node", f.completeNodes())
	return c
}

// readSSHKeys reads the public keys of launch --ssh-key: every line of
// each file but blank ones and comments. A private key is refused before it
// goes anywhere.
func (f *fleet) readSSHKeys(files []string) ([]string, error) {
	var keys []string
	for _, name := range files {
		data, src, err := f.a.readInput(name)
		if err != nil {
			return nil, &cliError{msg: fmt.Sprintf("read the SSH key %s: %v", src, err), hint: "give --ssh-key a public key file, such as ~/.ssh/id_ed25519.pub"}
		}
		if strings.Contains(string(data), "PRIVATE KEY") {
			return nil, &cliError{msg: src + " is a private key; nothing was sent",
				hint: "give --ssh-key the public half, " + src + ".pub (ssh-keygen -y -f " + src + " prints it)"}
		}
		for _, l := range strings.Split(string(data), "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				keys = append(keys, l)
			}
		}
	}
	return keys, nil
}

// readSpec reads the create request of fleet create --spec: JSON or YAML,
// with the API's field names. Unknown fields are refused, so a typo does
// not silently leave a setting out.
func (f *fleet) readSpec(name string) (sdk.FleetCreateVMRequest, error) {
	var req sdk.FleetCreateVMRequest
	data, name, err := f.a.readInput(name)
	switch {
	case errors.Is(err, errTooLarge):
		return req, &cliError{msg: name + " is " + err.Error(), hint: "a create request is a small JSON or YAML object"}
	case err != nil:
		return req, &cliError{msg: fmt.Sprintf("read the create request: %v", err), hint: "give --spec a JSON or YAML file, or - to read stdin"}
	}
	if err := yaml.UnmarshalStrict(data, &req); err != nil {
		return req, &cliError{msg: fmt.Sprintf("%s is not a create request: %v", name, err),
			hint: "write one JSON or YAML object with the fields of POST /fleet/vms; fluxctl fleet create --help names them"}
	}
	return req, nil
}

// withFlags is the create request of a --spec file with the flags that
// were given as well on top of it; labels from --label join the file's.
func withFlags(c *cobra.Command, spec, flags sdk.FleetCreateVMRequest) sdk.FleetCreateVMRequest {
	out := spec
	for _, fl := range []struct {
		name string
		set  func()
	}{
		{"image", func() { out.Image = flags.Image }},
		{"pool", func() { out.Pool = flags.Pool }},
		{"vcpus", func() { out.VCPUs = flags.VCPUs }},
		{"memory-gib", func() { out.MemoryMiB = flags.MemoryMiB }},
		{"ttl", func() { out.TTLSeconds = flags.TTLSeconds }},
		{"node", func() { out.Node = flags.Node }},
		{"display", func() { out.Display = flags.Display }},
		{"ssh-key", func() { out.SSHAuthorizedKeys = flags.SSHAuthorizedKeys }},
		{"volume", func() { out.Volumes = flags.Volumes }},
		{"network", func() { out.Networks = flags.Networks }},
		{"label", func() {
			out.Labels = maps.Clone(spec.Labels)
			if out.Labels == nil {
				out.Labels = map[string]string{}
			}
			maps.Copy(out.Labels, flags.Labels)
		}},
	} {
		if c.Flags().Changed(fl.name) {
			fl.set()
		}
	}
	return out
}

func (f *fleet) runCmd() *cobra.Command {
	var (
		timeout   time.Duration
		withStdin bool
		env       []string
	)
	c := &cobra.Command{
		Use:   "run VM -- CMD [ARG...]",
		Short: "Run a command in a VM found by name or ID prefix",
		Long: `Run a command in a VM through its guest agent. The VM is found in your
VM list by name, ID prefix or NODE/NAME. Its stdout and stderr are printed
to fluxctl's, and fluxctl exits with the command's exit code. With -o json
the whole result is printed as JSON instead.`,
		Example: `  fluxctl fleet run debian-minimal-1 -- uname -a
  echo hello | fluxctl fleet run 0b9c --stdin -- cat`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 || c.ArgsLenAtDash() > 1 {
				return usageError(c, "fleet run takes a VM, then -- and the command to run")
			}
			return nil
		},
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageError(c, "--timeout must not be negative")
			}
			req := sdk.ExecRequest{Command: sdk.Command{Argv: args[1:]}, Env: env,
				TimeoutSeconds: int64((timeout + time.Second - 1) / time.Second)}
			if withStdin {
				in, err := f.a.readStdin()
				if err != nil {
					return err
				}
				req.Stdin = in
			}
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			res, err := fc.Exec(c.Context(), vm.Node, vm.ID, req)
			if err != nil {
				return withHints(err, map[int]string{
					501: fmt.Sprintf("the driver of %s (%s) cannot run commands; fluxctl fleet logs %s shows its console", vm.Name, cmp.Or(vm.Driver, "unknown"), vm.Name),
					409: fmt.Sprintf("is %s running with its guest agent ready? fluxctl fleet vms shows its state", vm.Name),
				})
			}
			return f.a.execResult(res)
		},
	}
	fl := c.Flags()
	fl.DurationVar(&timeout, "timeout", 0, "kill the command after this long, e.g. 5m (0: the node's default)")
	fl.BoolVar(&withStdin, "stdin", false, "send fluxctl's stdin to the command")
	fl.StringArrayVarP(&env, "env", "e", nil, "a KEY=VALUE environment variable (repeatable)")
	return c
}

func (f *fleet) rmCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:     "rm VM",
		Aliases: []string{"delete"},
		Short:   "Delete a VM with its disks (asks on a terminal; -y to skip)",
		Long: `Delete a VM, stopping it first, with its workspace and disks. On a
terminal it asks first; otherwise it needs -y.`,
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findAndAsk(c.Context(), args[0], yes, func(vm *sdk.FleetVM) string {
				return fmt.Sprintf("delete vm %s (%s on %s, %s) and its disks?", vm.Name, vm.ID, vm.Node, vm.State)
			}, "delete", "fluxctl fleet rm "+args[0]+" -y")
			if err != nil {
				return err
			}
			if err := fc.DeleteVM(c.Context(), vm.Node, vm.ID); err != nil {
				return withHints(err, map[int]string{404: "it is gone already; " + hintListVMs})
			}
			if f.a.human() {
				f.a.done("", "Deleted vm %s (%s on %s)", vm.Name, vm.ID, vm.Node)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return c
}

// powerCmd makes start, stop, restart, pause and resume, which differ in
// the call they make and whether they ask first on a terminal.
func (f *fleet) powerCmd(verb, shortHelp, past string, ask bool) *cobra.Command {
	var (
		yes     bool
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:               verb + " VM",
		Short:             shortHelp,
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			if timeout < 0 {
				return usageError(c, "--timeout must not be negative")
			}
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			if ask && !yes && f.a.stdinTTY {
				if err := f.confirm(fmt.Sprintf("%s vm %s (%s on %s)?", verb, vm.Name, vm.ID, vm.Node), verb, ""); err != nil {
					return err
				}
			}
			var out *sdk.FleetVM
			switch verb {
			case "start":
				out, err = fc.StartVM(c.Context(), vm.Node, vm.ID)
			case "stop":
				out, err = fc.StopVM(c.Context(), vm.Node, vm.ID, timeout)
			case "restart":
				out, err = fc.RestartVM(c.Context(), vm.Node, vm.ID)
			case "pause":
				out, err = fc.PauseVM(c.Context(), vm.Node, vm.ID)
			case "resume":
				out, err = fc.ResumeVM(c.Context(), vm.Node, vm.ID)
			}
			if err != nil {
				return withHints(err, map[int]string{409: fmt.Sprintf("vm %s is %s; fluxctl fleet vms shows its state", vm.Name, vm.State)})
			}
			return f.powered(out, past)
		},
	}
	if ask {
		c.Flags().BoolVarP(&yes, "yes", "y", false, "do it without asking")
	}
	if verb == "stop" {
		c.Long = "Ask the guest to shut down; after --timeout the node stops the VM hard. On a terminal it asks first."
		c.Flags().DurationVar(&timeout, "timeout", 0, "how long the guest gets to shut down (0: the node's default)")
	}
	return c
}

// powered prints the VM a power call returned.
func (f *fleet) powered(vm *sdk.FleetVM, past string) error {
	if !f.a.human() {
		return f.a.printRaw(vm)
	}
	next := ""
	switch vm.State {
	case sdk.StatePaused:
		next = "fluxctl fleet resume " + vm.Name
	case sdk.StateStopped:
		next = "fluxctl fleet start " + vm.Name
	}
	f.a.done(next, "%s vm %s on %s (%s)", strings.ToUpper(past[:1])+past[1:], vm.Name, vm.Node, vm.State)
	return nil
}

func (f *fleet) logsCmd() *cobra.Command {
	var lines int
	c := &cobra.Command{
		Use:               "logs VM",
		Short:             "Print the end of a VM's console log",
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			if lines < 0 {
				return usageError(c, "--lines must not be negative")
			}
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			out, err := fc.Logs(c.Context(), vm.Node, vm.ID, lines)
			if err != nil {
				return err
			}
			_, err = f.a.stdout.Write(out)
			return err
		},
	}
	c.Flags().IntVarP(&lines, "lines", "n", 0, "how many lines from the end (0: the node's default, 100)")
	return c
}
