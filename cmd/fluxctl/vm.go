package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// maxStdin is the most `vm exec --stdin` sends: the node takes request
// bodies of at most 1 MiB, and the command and JSON quoting need some room.
const maxStdin = 768 << 10

func (a *app) vmCommand() *cobra.Command {
	vm := &cobra.Command{
		Use:   "vm",
		Short: "Manage the VMs of one node",
		Long: `Manage the VMs of one node through its node API.

The node is --node (or $FLUXVM_NODE, default ` + sdk.DefaultNodeURL + `) and the
token --token (or $FLUXVM_NODE_TOKEN). VMs are named by name or by ID.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			hint := "run fluxctl vm --help to see the commands"
			if s := c.SuggestionsFor(args[0]); len(s) > 0 {
				hint = "did you mean fluxctl vm " + strings.Join(s, " or ") + "? " + hint
			}
			return &cliError{msg: fmt.Sprintf("unknown command %q for fluxctl vm", args[0]), hint: hint}
		},
		RunE:                       func(c *cobra.Command, _ []string) error { return c.Help() },
		SuggestionsMinimumDistance: 2,
	}
	vm.AddCommand(
		a.vmList(), a.vmCreate(), a.vmGet(), a.vmRm(),
		a.vmPower("start", "Start a stopped VM", "started", (*sdk.NodeClient).StartVM),
		a.vmStop(),
		a.vmPower("restart", "Stop a VM and start it again", "restarted", (*sdk.NodeClient).RestartVM),
		a.vmPower("pause", "Freeze a running VM's vCPUs", "paused", (*sdk.NodeClient).PauseVM),
		a.vmPower("resume", "Continue a paused VM", "resumed", (*sdk.NodeClient).ResumeVM),
		a.vmExec(), a.vmLogs(), a.vmScreenshot(),
	)
	return vm
}

// oneVM accepts exactly one VM name.
func oneVM(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError(c, fmt.Sprintf("%s takes one VM name or ID, got %d arguments", c.CommandPath(), len(args)))
	}
	return nil
}

// completeVMs completes VM names from the node's list; many says whether
// the command takes more than one.
func (a *app) completeVMs(many bool) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		nc, err := a.nodeClient()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(c.Context(), 3*time.Second)
		defer cancel()
		vms, err := nc.ListVMs(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, v := range vms {
			if strings.HasPrefix(v.Name, toComplete) && !slices.Contains(args, v.Name) {
				out = append(out, cobra.CompletionWithDesc(v.Name, v.State))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// vmColumns are the columns of vm list.
func vmColumns(now time.Time) []column[sdk.VM] {
	return []column[sdk.VM]{
		{"name", "NAME", false, func(v *sdk.VM) string { return v.Name }},
		{"state", "STATE", false, func(v *sdk.VM) string { return v.State }},
		{"agent", "AGENT", false, agentState},
		{"guest", "GUEST", false, func(v *sdk.VM) string { return v.GuestOS }},
		{"vcpus", "VCPUS", false, func(v *sdk.VM) string { return fmt.Sprint(v.VCPUs) }},
		{"memory", "MEMORY", false, func(v *sdk.VM) string { return mib(v.MemoryMiB) }},
		{"age", "AGE", false, func(v *sdk.VM) string { return ago(now, v.CreatedAt) }},
		{"id", "ID", true, func(v *sdk.VM) string { return v.ID }},
		{"driver", "DRIVER", true, func(v *sdk.VM) string { return v.Driver }},
		{"image", "IMAGE", true, func(v *sdk.VM) string { return v.Image }},
		{"network", "NETWORK", true, func(v *sdk.VM) string { return v.Network }},
		{"expires", "EXPIRES", true, func(v *sdk.VM) string { return expires(now, v.ExpiresAt) }},
		{"labels", "LABELS", true, func(v *sdk.VM) string { return pairs(v.Labels) }},
		{"attributes", "ATTRIBUTES", true, func(v *sdk.VM) string { return pairs(v.Attributes) }},
	}
}

// expires says when a VM with a TTL goes: "in 3h".
func expires(now time.Time, at *time.Time) string {
	if at == nil {
		return ""
	}
	return "in " + short(at.Sub(now))
}

func (a *app) vmList() *cobra.Command {
	c := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the node's VMs",
		Args:    cobra.NoArgs,
		RunE: a.withNode(func(c *cobra.Command, _ []string, nc *sdk.NodeClient) error {
			vms, err := nc.ListVMs(c.Context())
			if err != nil {
				return err
			}
			return show(a, c, table[sdk.VM]{raw: sdk.VMList{VMs: vms}, rows: vms, cols: vmColumns(time.Now()),
				empty: fmt.Sprintf("no VMs on node %s\nnext: fluxctl vm create NAME --image PATH\n", nc.URL())})
		}),
	}
	columnsFlag(c, vmColumns(time.Time{}))
	return c
}

func agentState(v *sdk.VM) string {
	switch {
	case v.AgentReady:
		return "ready"
	case v.State == sdk.StateRunning:
		return "waiting"
	}
	return ""
}

func (a *app) vmCreate() *cobra.Command {
	var (
		req          sdk.CreateVMRequest
		ttl          time.Duration
		labels       []string
		driverConfig string
		wait         bool
		waitTimeout  time.Duration
	)
	c := &cobra.Command{
		Use:   "create NAME --image PATH",
		Short: "Create a VM and start it",
		Long: `Create a VM and start it. --image is a path on the node, inside its
allowed image directories. With --wait, fluxctl returns once the guest agent
answers.`,
		Example: `  fluxctl vm create web-1 --image /var/cache/fluxvm/images/debian.img --wait
  fluxctl vm create ci-7 --image /var/cache/fluxvm/images/debian.img --vcpus 2 --memory-mib 2048 --ttl 8h --label job=7`,
		Args: oneVM,
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			req.Name = args[0]
			if req.Image == "" {
				return usageError(c, "vm create needs --image PATH, a disk image on the node")
			}
			if ttl < 0 {
				return usageError(c, "--ttl must not be negative")
			}
			if req.Network == "tenant" && (req.Tenant == "" || req.Subnet == "") {
				return usageError(c, "--network tenant needs --tenant ID and --subnet CIDR (the tenant's network on the node, e.g. 10.230.7.0/24); central sets both for the VMs it launches")
			}
			req.TTLSeconds = int64((ttl + time.Second - 1) / time.Second)
			var err error
			if req.Labels, err = parseLabels(c, labels); err != nil {
				return err
			}
			if driverConfig != "" {
				if !json.Valid([]byte(driverConfig)) {
					return usageError(c, "--driver-config is not valid JSON")
				}
				req.DriverConfig = json.RawMessage(driverConfig)
			}
			vm, err := nc.CreateVM(c.Context(), req)
			if err != nil {
				return err
			}
			if wait {
				ctx, cancel := context.WithTimeout(c.Context(), waitTimeout)
				defer cancel()
				stop := func() {}
				if a.human() && a.stderrTTY {
					stop = spinner(a.stderr, fmt.Sprintf("waiting for the guest agent of %s…", vm.Name))
				}
				ready, err := nc.WaitReady(ctx, vm.ID, 250*time.Millisecond)
				stop()
				if err != nil {
					return &cliError{msg: fmt.Sprintf("created vm %s (%s), but: %v", vm.Name, vm.ID, err),
						hint: fmt.Sprintf("its console log may say why: fluxctl vm logs %s", vm.Name)}
				}
				vm = ready
			}
			if !a.human() {
				return a.printRaw(vm)
			}
			node, next := nc.URL(), fmt.Sprintf("fluxctl vm exec %s -- uname -a", vm.Name)
			if h, err := nc.Health(c.Context()); err == nil {
				node = h.Node
				for _, d := range h.Drivers {
					if d.Name == vm.Driver && !slices.Contains(d.Capabilities, "exec") {
						// Its driver cannot run commands: suggest what it can do.
						next = fmt.Sprintf("fluxctl vm logs %s", vm.Name)
						if vm.Display && slices.Contains(d.Capabilities, "screenshot") {
							next = fmt.Sprintf("fluxctl vm screenshot %s -f %s.png", vm.Name, vm.Name)
						}
					}
				}
			}
			ready := ""
			if vm.AgentReady {
				ready = ", guest agent ready"
			}
			a.done(next, "created vm %s (%s) on node %s%s", vm.Name, vm.ID, node, ready)
			return nil
		}),
	}
	f := c.Flags()
	f.StringVar(&req.Image, "image", "", "disk image: a path on the node, inside its allowed image dirs (required)")
	f.Int64Var(&req.VCPUs, "vcpus", 1, "virtual CPUs")
	f.Int64Var(&req.MemoryMiB, "memory-mib", 512, "memory in MiB")
	f.StringVar(&req.GuestOS, "guest-os", "linux", "linux or macos")
	f.BoolVar(&req.Display, "display", false, "give the VM a display (for screenshot and input)")
	f.StringVar(&req.Network, "network", "user", "user, none or tenant (a tap in the tenant's network, from the node's network plugin)")
	f.StringVar(&req.Tenant, "tenant", "", "the tenant stamp; with --network tenant, the tenant whose network the VM joins")
	f.StringVar(&req.Subnet, "subnet", "", "with --network tenant: the tenant's IPv4 subnet on the node, e.g. 10.230.7.0/24")
	f.DurationVar(&ttl, "ttl", 0, "delete the VM after this long, e.g. 8h (0: keep it)")
	f.StringArrayVar(&labels, "label", nil, "a KEY=VALUE label (repeatable)")
	f.StringVar(&req.Driver, "driver", "", "hypervisor plugin (default: the node's first healthy driver for the guest OS)")
	f.StringVar(&driverConfig, "driver-config", "", "driver-specific settings as a JSON object")
	f.BoolVar(&wait, "wait", false, "wait until the guest agent is ready")
	f.DurationVar(&waitTimeout, "wait-timeout", 10*time.Minute, "how long --wait waits")
	_ = c.RegisterFlagCompletionFunc("guest-os", cobra.FixedCompletions([]string{"linux", "macos"}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.RegisterFlagCompletionFunc("network", cobra.FixedCompletions([]string{"user", "none", "tenant"}, cobra.ShellCompDirectiveNoFileComp))
	return c
}

func (a *app) vmGet() *cobra.Command {
	return &cobra.Command{
		Use:               "get NAME",
		Aliases:           []string{"show"},
		Short:             "Show one VM",
		Args:              oneVM,
		ValidArgsFunction: a.completeVMs(false),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			vm, err := nc.GetVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			if !a.human() {
				return a.printRaw(vm)
			}
			a.printVM(vm)
			return nil
		}),
	}
}

// printVM shows one VM as a list of fields.
func (a *app) printVM(v *sdk.VM) {
	now := time.Now()
	when := func(t *time.Time) string {
		if t == nil || t.IsZero() {
			return ""
		}
		if t.After(now) {
			return fmt.Sprintf("%s (in %s)", t.Local().Format(time.DateTime), short(t.Sub(now)))
		}
		return fmt.Sprintf("%s (%s ago)", t.Local().Format(time.DateTime), short(now.Sub(*t)))
	}
	display := "no"
	if v.Display {
		display = "yes"
	}
	tw := newTable(a.stdout)
	for _, f := range [][2]string{
		{"name", v.Name}, {"id", v.ID}, {"state", v.State}, {"guest agent", agentState(v)},
		{"driver", v.Driver}, {"guest os", v.GuestOS}, {"image", v.Image},
		{"vcpus", fmt.Sprint(v.VCPUs)}, {"memory", mib(v.MemoryMiB)}, {"network", v.Network}, {"address", v.Address}, {"display", display},
		{"labels", pairs(v.Labels)}, {"tenant", v.Tenant},
		{"created", when(&v.CreatedAt)}, {"started", when(v.StartedAt)}, {"expires", when(v.ExpiresAt)},
		{"last error", v.LastError},
	} {
		if f[1] == "" && (f[0] == "tenant" || f[0] == "last error" || f[0] == "expires" || f[0] == "address") {
			continue
		}
		row(tw, f[0], f[1])
	}
	for i, k := range slices.Sorted(maps.Keys(v.Attributes)) {
		label := ""
		if i == 0 {
			label = "attributes"
		}
		fmt.Fprintf(tw, "%s\t%s=%s\n", label, k, v.Attributes[k])
	}
	_ = tw.Flush()
}

func (a *app) vmRm() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"delete"},
		Short:   "Delete VMs with their disks",
		Long: `Delete VMs, stopping them first, with their workspaces and disks.
On a terminal it asks first; otherwise it needs -y.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(c, "vm rm takes the names of the VMs to delete")
			}
			return nil
		},
		ValidArgsFunction: a.completeVMs(true),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			if !yes {
				if !a.stdinTTY {
					return &cliError{msg: "refusing to delete without confirmation: stdin is not a terminal",
						hint: "pass -y to delete without asking: fluxctl vm rm " + strings.Join(args, " ") + " -y"}
				}
				var what []string
				for _, name := range args {
					vm, err := nc.GetVM(c.Context(), name)
					if err != nil {
						return err
					}
					what = append(what, fmt.Sprintf("%s (%s, %s)", vm.Name, vm.ID, vm.State))
				}
				fmt.Fprintf(a.stderr, "delete vm %s and its disks? [y/N] ", strings.Join(what, ", "))
				answer, _ := bufio.NewReader(a.stdin).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return &cliError{msg: "nothing deleted", hint: "answer y to delete, or pass -y"}
				}
			}
			for _, name := range args {
				if err := nc.DeleteVM(c.Context(), name); err != nil {
					return err
				}
				if a.human() {
					a.done("", "deleted vm %s", name)
				}
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return c
}

// vmPower makes start, restart, pause and resume, which differ only in the
// call they make.
func (a *app) vmPower(verb, short, past string, call func(*sdk.NodeClient, context.Context, string) (*sdk.VM, error)) *cobra.Command {
	return &cobra.Command{
		Use:               verb + " NAME",
		Short:             short,
		Args:              oneVM,
		ValidArgsFunction: a.completeVMs(false),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			vm, err := call(nc, c.Context(), args[0])
			if err != nil {
				return err
			}
			return a.powered(vm, past)
		}),
	}
}

// powered prints the VM a power call returned.
func (a *app) powered(vm *sdk.VM, past string) error {
	if !a.human() {
		return a.printRaw(vm)
	}
	next := ""
	switch vm.State {
	case sdk.StatePaused:
		next = "fluxctl vm resume " + vm.Name
	case sdk.StateStopped:
		next = "fluxctl vm start " + vm.Name
	}
	a.done(next, "%s vm %s (%s)", past, vm.Name, vm.State)
	return nil
}

func (a *app) vmStop() *cobra.Command {
	var timeout time.Duration
	c := &cobra.Command{
		Use:               "stop NAME",
		Short:             "Shut a VM down",
		Long:              "Ask the guest to shut down; after --timeout the node stops the VM hard.",
		Args:              oneVM,
		ValidArgsFunction: a.completeVMs(false),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			vm, err := nc.StopVM(c.Context(), args[0], timeout)
			if err != nil {
				return err
			}
			return a.powered(vm, "stopped")
		}),
	}
	c.Flags().DurationVar(&timeout, "timeout", 0, "how long the guest gets to shut down (0: the node's default)")
	return c
}

func (a *app) vmExec() *cobra.Command {
	var (
		timeout   time.Duration
		withStdin bool
		env       []string
	)
	c := &cobra.Command{
		Use:   "exec NAME -- CMD [ARG...]",
		Short: "Run a command in a VM",
		Long: `Run a command in a VM through its guest agent. Its stdout and stderr
are printed to fluxctl's, and fluxctl exits with the command's exit code.
With -o json, the whole result is printed as JSON instead.`,
		Example: `  fluxctl vm exec web-1 -- uname -a
  echo hello | fluxctl vm exec web-1 --stdin -- cat`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 || c.ArgsLenAtDash() > 1 {
				return usageError(c, "vm exec takes a VM name, then -- and the command to run")
			}
			return nil
		},
		ValidArgsFunction: a.completeVMs(false),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			req := sdk.ExecRequest{Command: sdk.Command{Argv: args[1:]}, Env: env}
			if timeout < 0 {
				return usageError(c, "--timeout must not be negative")
			}
			req.TimeoutSeconds = int64((timeout + time.Second - 1) / time.Second)
			if withStdin {
				in, err := a.readStdin()
				if err != nil {
					return err
				}
				req.Stdin = in
			}
			res, err := nc.Exec(c.Context(), args[0], req)
			if err != nil {
				return err
			}
			return a.execResult(res)
		}),
	}
	f := c.Flags()
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long, e.g. 5m (0: the node's default)")
	f.BoolVar(&withStdin, "stdin", false, "send fluxctl's stdin to the command")
	f.StringArrayVarP(&env, "env", "e", nil, "a KEY=VALUE environment variable (repeatable)")
	return c
}

// readStdin reads what --stdin sends to a command, refusing more than the
// APIs take.
func (a *app) readStdin() (string, error) {
	in, err := io.ReadAll(io.LimitReader(a.stdin, maxStdin+1))
	if err != nil {
		return "", fmt.Errorf("read stdin: %w", err)
	}
	if len(in) > maxStdin {
		return "", &cliError{msg: fmt.Sprintf("stdin is larger than %d KiB, more than the API takes", maxStdin>>10),
			hint: "copy large inputs into the VM's image or fetch them from inside the guest"}
	}
	return string(in), nil
}

// execResult prints what a command printed (with -o json or -o yaml, the
// whole result) and ends fluxctl with the command's exit code.
func (a *app) execResult(res *sdk.ExecResult) error {
	if a.output == formatJSON || a.output == formatYAML {
		if err := a.printRaw(res); err != nil {
			return err
		}
	} else {
		_, _ = io.WriteString(a.stdout, res.Stdout)
		_, _ = io.WriteString(a.stderr, res.Stderr)
	}
	if res.ExitCode != 0 {
		if res.ExitCode < 0 || res.ExitCode > 255 {
			return exitCode(1)
		}
		return exitCode(res.ExitCode)
	}
	return nil
}

func (a *app) vmLogs() *cobra.Command {
	var lines int
	c := &cobra.Command{
		Use:               "logs NAME",
		Short:             "Print the end of a VM's console log",
		Args:              oneVM,
		ValidArgsFunction: a.completeVMs(false),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			if lines < 0 {
				return usageError(c, "--lines must not be negative")
			}
			out, err := nc.Logs(c.Context(), args[0], lines)
			if err != nil {
				return err
			}
			_, err = a.stdout.Write(out)
			return err
		}),
	}
	c.Flags().IntVarP(&lines, "lines", "n", 0, "how many lines from the end (0: the node's default, 100)")
	return c
}

func (a *app) vmScreenshot() *cobra.Command {
	var (
		file     string
		maxWidth int
	)
	c := &cobra.Command{
		Use:     "screenshot NAME -f FILE.png",
		Aliases: []string{"screen"},
		Short:   "Save a picture of a VM's display",
		Long: `Save a PNG of a VM's display to -f FILE. With -f - (or no -f when stdout is
not a terminal) the PNG goes to stdout.`,
		Args:              oneVM,
		ValidArgsFunction: a.completeVMs(false),
		RunE: a.withNode(func(c *cobra.Command, args []string, nc *sdk.NodeClient) error {
			toStdout := file == "-" || (file == "" && !a.stdoutTTY)
			if file == "" && !toStdout {
				return &cliError{msg: "not writing a PNG to the terminal",
					hint: fmt.Sprintf("pass a file: fluxctl vm screenshot %s -f %s.png", args[0], args[0])}
			}
			if maxWidth < 0 {
				return usageError(c, "--max-width must not be negative")
			}
			img, err := nc.Screenshot(c.Context(), args[0], maxWidth)
			if err != nil {
				return err
			}
			if toStdout {
				_, err := a.stdout.Write(img)
				return err
			}
			if err := os.WriteFile(file, img, 0o644); err != nil {
				return &cliError{msg: fmt.Sprintf("save screenshot: %v", err), hint: "pass -f with a path you can write"}
			}
			if a.human() {
				size := ""
				if cfg, err := png.DecodeConfig(bytes.NewReader(img)); err == nil {
					size = fmt.Sprintf(", %d×%d", cfg.Width, cfg.Height)
				}
				a.done("", "saved the screen of vm %s to %s (%d KiB%s)", args[0], file, (len(img)+1023)/1024, size)
			}
			return nil
		}),
	}
	c.Flags().StringVarP(&file, "file", "f", "", "where to write the PNG (- for stdout)")
	c.Flags().IntVar(&maxWidth, "max-width", 0, "scale the picture down to at most this many pixels wide")
	_ = c.MarkFlagFilename("file", "png")
	return c
}
