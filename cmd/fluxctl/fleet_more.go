package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"image/png"
	"os"
	"strings"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// fleet screen, fleet pools resize, what fleet launch --pool adds to a
// launch, and the operator's macOS pool.

func (f *fleet) screenCmd() *cobra.Command {
	var (
		file     string
		maxWidth int
	)
	c := &cobra.Command{
		Use:   "screen VM [-f FILE.png]",
		Short: "Save a picture of a VM's display",
		Long: `Save a PNG of a VM's display, taken by its node. The VM is found by name,
ID prefix or NODE/NAME; the picture goes to -f FILE, by default VM-NAME.png
in the current directory. With -f - it goes to stdout for a program to read,
never to a terminal. --max-width scales a wider picture down.`,
		Example: `  fluxctl fleet screen macos-27-xcode-1
  fluxctl fleet screen 0b9c -f login.png --max-width 800
  fluxctl fleet screen web-1 -f - | convert png:- screen.jpg`,
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			if maxWidth < 0 {
				return usageError(c, "--max-width must not be negative")
			}
			if file == "-" && f.a.stdoutTTY {
				return &cliError{msg: "not writing a PNG to the terminal",
					hint: fmt.Sprintf("save it to a file: fluxctl fleet screen %s -f FILE.png (without -f: VM-NAME.png); pipe -f - into a program", args[0])}
			}
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			img, err := fc.Screen(c.Context(), vm.Node, vm.ID, maxWidth)
			if err != nil {
				why := fmt.Sprintf("vm %s has no display: only a VM launched with one (the API's \"display\": true) has a screen; fluxctl fleet logs %s shows its console", vm.Name, vm.Name)
				if vm.State != sdk.StateRunning {
					why = fmt.Sprintf("vm %s is %s: start it first (fluxctl fleet start %s)", vm.Name, vm.State, vm.Name)
				}
				return withHints(err, map[int]string{
					409: why,
					501: fmt.Sprintf("the driver of %s (%s) cannot take pictures of its display; fluxctl fleet logs %s shows its console", vm.Name, vm.Driver, vm.Name),
				})
			}
			if file == "-" {
				_, err := f.a.stdout.Write(img)
				return err
			}
			if file == "" {
				file = vm.Name + ".png"
			}
			if err := os.WriteFile(file, img, 0o644); err != nil {
				return &cliError{msg: fmt.Sprintf("save the screen of vm %s: %v", vm.Name, err), hint: "pass -f with a path you can write"}
			}
			if f.a.human() {
				size := ""
				if cfg, err := png.DecodeConfig(bytes.NewReader(img)); err == nil {
					size = fmt.Sprintf("%d×%d, ", cfg.Width, cfg.Height)
				}
				f.a.done("", "Saved the screen of vm %s to %s (%s%d KiB)", vm.Name, file, size, (len(img)+1023)/1024)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&file, "file", "f", "", "where to write the PNG (default VM-NAME.png; - for stdout, not a terminal)")
	c.Flags().IntVar(&maxWidth, "max-width", 0, "scale the picture down to at most this many pixels wide")
	_ = c.MarkFlagFilename("file", "png")
	return c
}

func (f *fleet) poolResizeCmd() *cobra.Command {
	var (
		tenant        string
		size, maxSize int
	)
	c := &cobra.Command{
		Use:   "resize NAME --size N [--max-size M]",
		Short: "Change how many warm VMs a pool keeps",
		Long: `Change how many warm VMs a pool keeps (--size) or how far it may grow toward
recent demand (--max-size); central's pool loop then boots or retires VMs to
match. A pool whose max size equals its size keeps the two equal when only
--size changes. A tenant resizes its own pools; the operator resizes the
shared pools, or a tenant's with --tenant.`,
		Example: `  fluxctl fleet pools resize ci --size 4
  fluxctl fleet pools resize ci --size 2 --max-size 8
  fluxctl fleet pools resize ci --tenant acme --size 0`,
		Args: oneName("pool name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			var patch sdk.PoolPatch
			if c.Flags().Changed("size") {
				patch.Size = &size
			}
			if c.Flags().Changed("max-size") {
				patch.MaxSize = &maxSize
			}
			switch {
			case patch.Size == nil && patch.MaxSize == nil:
				return usageError(c, "pools resize needs --size N (the warm VMs the pool keeps) or --max-size M")
			case size < 0 || maxSize < 0:
				return usageError(c, "--size and --max-size must not be negative")
			}
			name := args[0]
			p, err := fc.ResizePool(c.Context(), name, tenant, patch)
			if err != nil {
				return withHints(err, map[int]string{
					404: hintPools,
					400: "--size and --max-size go from 0 to 100; fluxctl fleet pools get " + name + " shows the pool as it is",
					403: "a tenant launches from shared pools but does not resize them; fluxctl fleet pools create NAME --image IMAGE --size N makes one of your own",
				})
			}
			if !f.a.human() {
				return f.a.printRaw(p)
			}
			next := "fluxctl fleet pools status " + p.Name
			if tenant != "" {
				next += " --tenant " + tenant
			}
			f.a.done(next, "Resized pool %s: keeps %d warm, up to %d", p.Name, p.Size, p.MaxSize)
			return nil
		}),
	}
	fl := c.Flags()
	fl.IntVar(&size, "size", 0, "how many warm VMs the pool keeps")
	fl.IntVar(&maxSize, "max-size", 0, "how far the pool may grow toward recent demand")
	f.poolTenantFlag(c, &tenant)
	return c
}

// checkPoolLaunch refuses, before anything is sent, a launch from a pool
// that asks for what a VM already running cannot be given.
func checkPoolLaunch(c *cobra.Command, req *sdk.FleetCreateVMRequest) error {
	if req.Pool == "" {
		return nil
	}
	var set []string
	for _, name := range []string{"ttl", "label", "node", "display"} {
		if c.Flags().Changed(name) {
			set = append(set, "--"+name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return &cliError{msg: fmt.Sprintf("--pool takes a VM that already runs, so it cannot honour %s", strings.Join(set, ", ")),
		hint: fmt.Sprintf("drop %s, or drop --pool to boot a new VM", strings.Join(set, ", "))}
}

// launchedLine is the ✓ line of a launch and the lines under it: where
// the VM landed and whether it came warm from a pool.
func launchedLine(req *sdk.FleetCreateVMRequest, resp *sdk.FleetCreateVMResponse, named bool) (string, []any) {
	vm := resp.VM
	ready := ""
	if vm.AgentReady {
		ready = ", guest agent ready"
	}
	if resp.FromPool != "" {
		format := "Launched %s on %s warm from pool %s (%s, %s%s)\n  ID      %s\n  placed  %s"
		args := []any{vm.Name, resp.Node, resp.FromPool, plural(vm.VCPUs, "vCPU"), mib(vm.MemoryMiB), ready, vm.ID, resp.Placement.Reason}
		if named && vm.Name != req.Name {
			format += "\n  name    %s was not used: a warm VM keeps the name its pool gave it"
			args = append(args, req.Name)
		}
		return format, args
	}
	format := "Launched %s on %s (%s, %s, %s%s)\n  ID      %s\n  placed  %s"
	what := cmp.Or(req.Image, req.ImagePath)
	if what == "" {
		what = "pool " + req.Pool
	}
	args := []any{vm.Name, resp.Node, what, plural(vm.VCPUs, "vCPU"), mib(vm.MemoryMiB), ready, vm.ID, resp.Placement.Reason}
	if req.Pool != "" {
		format += "\n  pool    no VM of pool %s was warm, so this one was booted"
		args = append(args, req.Pool)
	}
	return format, args
}

func (f *fleet) macOSPoolCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "macos-pool",
		Short: "Check warm macOS guests out of the shared pools for CI, and give them back (operator)",
		Long: `The operator's macOS pool hands booted macOS guests to CI jobs at once. Its
VMs come from the shared warm pools of macOS images (fluxctl fleet pools
create NAME --image MACOS-IMAGE --size N makes one). checkout takes a VM from
the Mac with the most idle ones, so jobs spread over the Macs' macOS slots;
return deletes it, and its pool boots a clean one in its place.`,
		Example: `  fluxctl fleet macos-pool checkout --pool macos-ci
  fluxctl fleet macos-pool return macos-ci-3f2a -y`,
		Args: subcommandArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(f.macOSCheckoutCmd(), f.macOSReturnCmd())
	return c
}

func (f *fleet) macOSCheckoutCmd() *cobra.Command {
	var req sdk.MacOSCheckoutRequest
	c := &cobra.Command{
		Use:   "checkout [--pool POOL] [--image IMAGE]",
		Short: "Take a warm macOS VM from the shared macOS pools (operator)",
		Args:  cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			out, err := fc.CheckoutMacOS(c.Context(), req)
			if err != nil {
				return withHints(err, map[int]string{
					400: hintPools,
					404: hintPools + "; fluxctl fleet pools create macos-ci --image MACOS-IMAGE --size 2 makes a shared pool of macOS guests",
					409: "its pool boots replacements (fluxctl fleet pools status POOL shows them): try again shortly, or raise the pool's size with fluxctl fleet pools resize POOL --size N",
				})
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.a.done("fluxctl fleet macos-pool return "+out.VM.Name+" -y, when the job is done",
				"Checked out vm %s on %s from pool %s\n  ID      %s\n  placed  %s", out.VM.Name, out.Node, out.Pool, out.ID, out.Reason)
			return nil
		}),
	}
	c.Flags().StringVar(&req.Pool, "pool", "", "take only from this shared pool")
	c.Flags().StringVar(&req.Image, "image", "", "take only a VM of this catalog image")
	_ = c.RegisterFlagCompletionFunc("image", f.completeImages())
	return c
}

func (f *fleet) macOSReturnCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "return VM",
		Short: "Give a checked-out macOS VM back: it is deleted, its pool boots a clean one (operator; asks on a terminal)",
		Long: `Give back a VM that fluxctl fleet macos-pool checkout handed out. Central
deletes it with its disks, and its pool boots a clean VM in its place. On a
terminal it asks first; otherwise it needs -y.`,
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findAndAsk(c.Context(), args[0], yes, func(vm *sdk.FleetVM) string {
				return fmt.Sprintf("return vm %s (%s on %s) to its pool? it is deleted with its disks", vm.Name, vm.ID, vm.Node)
			}, "return a VM", "fluxctl fleet macos-pool return "+args[0]+" -y")
			if err != nil {
				return err
			}
			out, err := fc.ReturnMacOS(c.Context(), vm.Node, vm.ID)
			if err != nil {
				var api *sdk.APIError
				if errors.As(err, &api) && api.Status == 409 && strings.Contains(api.Message, "still idle") {
					return &cliError{msg: api.Message, hint: "it was never checked out: fluxctl fleet macos-pool checkout takes one"}
				}
				return withHints(err, map[int]string{404: "it may have been returned already; " + hintListVMs,
					409: "only VMs from fluxctl fleet macos-pool checkout are returned; fluxctl fleet rm deletes any other"})
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.a.done("", "Returned vm %s (%s on %s) to pool %s: %s", vm.Name, out.ID, out.Node, out.Pool, out.Note)
			return nil
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "return without asking")
	return c
}
