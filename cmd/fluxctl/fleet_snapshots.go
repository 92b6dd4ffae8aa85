package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// Snapshots and clones (docs/snapshots.md).

const hintSnapshots = "fluxctl fleet snapshots VM lists a VM's snapshots"

// vmAndSnapshot accepts a VM reference and a snapshot name.
func vmAndSnapshot(c *cobra.Command, args []string) error {
	if len(args) != 2 {
		return usageError(c, fmt.Sprintf("%s takes a VM and a snapshot name, got %d arguments", c.CommandPath(), len(args)))
	}
	return nil
}

// completeSnapshotsOf completes the snapshot names of the VM ref names.
func (f *fleet) completeSnapshotsOf(ref string) cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		vm, err := fc.FindVM(ctx, ref)
		if err != nil {
			return nil, err
		}
		list, err := fc.ListSnapshots(ctx, vm.Node, vm.ID)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, s := range list.Snapshots {
			kind := "disk"
			if s.Memory {
				kind = "disk+memory"
			}
			out = append(out, cobra.CompletionWithDesc(s.Name, kind+", "+s.TakenAt.UTC().Format(time.DateTime)+" UTC"))
		}
		return out, nil
	})
}

// completeVMThenSnapshot completes a VM, then one of its snapshots.
func (f *fleet) completeVMThenSnapshot() cobra.CompletionFunc {
	vms := f.completeVMs()
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) != 1 {
			return vms(c, args, toComplete)
		}
		return f.completeSnapshotsOf(args[0])(c, nil, toComplete)
	}
}

func (f *fleet) snapshotCmd() *cobra.Command {
	var (
		name   string
		memory bool
	)
	c := &cobra.Command{
		Use:   "snapshot VM",
		Short: "Take a snapshot of a VM (disk only; --memory saves memory too)",
		Long: `Take a snapshot of a VM on its node. Disk only by default, in any state (a
running VM is paused for the moment it takes); with --memory the guest's
memory and device state too, and a restore resumes it where it was: the VM
must be running or paused. Names are 1-64 letters, digits, '.', '_' and '-'
(default snap-<UTC time>), unique per VM. A VM keeps at most
max_snapshots_per_vm snapshots (20 unless the operator set another).`,
		Example: `  fluxctl fleet snapshot ios-build-1 --name before-upgrade
  fluxctl fleet snapshot ios-build-1 --name warm --memory`,
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			snap, err := fc.TakeSnapshot(c.Context(), vm.Node, vm.ID, sdk.FleetSnapshotRequest{Name: name, IncludeMemory: memory})
			if err != nil {
				return withHints(err, map[int]string{
					409: fmt.Sprintf("vm %s is %s: a snapshot with --memory needs it running or paused; names are unique per VM (%s)", vm.Name, vm.State, hintSnapshots),
					429: "delete one first (fluxctl fleet snapshot-rm " + vm.Name + " SNAPSHOT), or ask the operator to raise max_snapshots_per_vm",
				})
			}
			if !f.a.human() {
				return f.a.printRaw(snap)
			}
			kind := "disk"
			if snap.Memory {
				kind = "disk and memory"
			}
			f.a.done("fluxctl fleet restore "+vm.Name+" "+snap.Name, "Took snapshot %s of vm %s (%s)", snap.Name, vm.Name, kind)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "the snapshot's name (default snap-<UTC time>)")
	c.Flags().BoolVar(&memory, "memory", false, "save memory and device state too (the VM must be running or paused)")
	return c
}

func snapshotColumns() []column[sdk.FleetSnapshot] {
	return []column[sdk.FleetSnapshot]{
		{"name", "NAME", false, func(s *sdk.FleetSnapshot) string { return s.Name }},
		{"kind", "KIND", false, func(s *sdk.FleetSnapshot) string {
			if s.Memory {
				return "disk+memory"
			}
			return "disk"
		}},
		{"size", "SIZE", false, func(s *sdk.FleetSnapshot) string {
			if s.SizeGiB == 0 {
				return "-"
			}
			return strconv.FormatInt(s.SizeGiB, 10) + " GiB"
		}},
		{"taken", "TAKEN", false, func(s *sdk.FleetSnapshot) string {
			if s.TakenAt.IsZero() {
				return "being taken"
			}
			return s.TakenAt.UTC().Format(time.DateTime) + " UTC"
		}},
		{"vm-state", "VM STATE", true, func(s *sdk.FleetSnapshot) string { return s.VMState }},
		{"vm", "VM", true, func(s *sdk.FleetSnapshot) string { return s.VM }},
		{"node", "NODE", true, func(s *sdk.FleetSnapshot) string { return s.Node }},
	}
}

func (f *fleet) snapshotsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshots VM",
		Short: "List a VM's snapshots: when, how big, disk only or disk and memory",
		Long: `List a VM's snapshots as its node has them, oldest first (listing also brings
central's records, which billing reads, in line with the node). The JSON
output (-o json) carries the VM's limit, max_snapshots_per_vm.`,
		Example:           `  fluxctl fleet snapshots ios-build-1`,
		Args:              oneFleetVM,
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			list, err := fc.ListSnapshots(c.Context(), vm.Node, vm.ID)
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.FleetSnapshot]{raw: list, rows: list.Snapshots, cols: snapshotColumns(),
				empty: fmt.Sprintf("vm %s has no snapshots (it may keep %d)\nnext: fluxctl fleet snapshot %s --name NAME\n", vm.Name, list.Limit, vm.Name)})
		},
	}
	columnsFlag(c, snapshotColumns())
	return c
}

func (f *fleet) restoreCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:   "restore VM SNAPSHOT",
		Short: "Put a VM back to a snapshot (asks on a terminal; -y to skip)",
		Long: `Put a VM back to one of its snapshots: the VM is stopped, its disk put back,
and started again; a snapshot with memory resumes the guest where it was.
Everything written since the snapshot is lost; the snapshot stays and can be
restored again. On a terminal it asks first; otherwise it needs -y.`,
		Example:           `  fluxctl fleet restore ios-build-1 before-upgrade`,
		Args:              vmAndSnapshot,
		ValidArgsFunction: f.completeVMThenSnapshot(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findAndAsk(c.Context(), args[0], yes, func(vm *sdk.FleetVM) string {
				return fmt.Sprintf("restore vm %s (%s on %s, %s) to snapshot %s? everything written since is lost", vm.Name, vm.ID, vm.Node, vm.State, args[1])
			}, "restore a vm", "fluxctl fleet restore "+args[0]+" "+args[1]+" -y")
			if err != nil {
				return err
			}
			out, err := fc.RestoreSnapshot(c.Context(), vm.Node, vm.ID, args[1])
			if err != nil {
				return withHints(err, map[int]string{404: hintSnapshots})
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.a.done("", "Restored vm %s to snapshot %s (%s)", out.Name, args[1], out.State)
			return nil
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "restore without asking")
	return c
}

func (f *fleet) snapshotRmCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:               "snapshot-rm VM SNAPSHOT",
		Short:             "Delete one of a VM's snapshots (asks on a terminal; -y to skip)",
		Long:              `Delete one of a VM's snapshots; billing for it stops. On a terminal it asks first; otherwise it needs -y.`,
		Example:           `  fluxctl fleet snapshot-rm ios-build-1 warm`,
		Args:              vmAndSnapshot,
		ValidArgsFunction: f.completeVMThenSnapshot(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findAndAsk(c.Context(), args[0], yes, func(vm *sdk.FleetVM) string {
				return fmt.Sprintf("delete snapshot %s of vm %s (%s on %s)?", args[1], vm.Name, vm.ID, vm.Node)
			}, "delete a snapshot", "fluxctl fleet snapshot-rm "+args[0]+" "+args[1]+" -y")
			if err != nil {
				return err
			}
			if err := fc.DeleteSnapshot(c.Context(), vm.Node, vm.ID, args[1]); err != nil {
				return withHints(err, map[int]string{404: hintSnapshots})
			}
			if f.a.human() {
				f.a.done("", "Deleted snapshot %s of vm %s", args[1], vm.Name)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return c
}

func (f *fleet) cloneCmd() *cobra.Command {
	var snapshot string
	c := &cobra.Command{
		Use:   "clone VM NEW-NAME",
		Short: "Make a new VM on the same node, from a snapshot or the stopped VM",
		Long: `Make a new VM on the source's node with its settings and size, from one of
its snapshots (--snapshot; the source may run) or from its disk (the source
must be stopped). The clone has its own MAC and machine id, belongs to the
source's tenant and counts against its quota like a launch; a cordoned or
draining node takes no clone.`,
		Example: `  fluxctl fleet clone ios-build-1 ios-build-2 --snapshot warm`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError(c, fmt.Sprintf("%s takes a VM and the new VM's name, got %d arguments", c.CommandPath(), len(args)))
			}
			return nil
		},
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			out, err := fc.CloneVM(c.Context(), vm.Node, vm.ID, sdk.FleetCloneRequest{Name: args[1], Snapshot: snapshot})
			if err != nil {
				return withHints(err, map[int]string{404: hintSnapshots})
			}
			if !f.a.human() {
				return f.a.printRaw(out)
			}
			f.a.done("fluxctl fleet vms", "Cloned vm %s as %s (%s on %s)", vm.Name, out.VM.Name, out.VM.ID, out.Node)
			return nil
		},
	}
	c.Flags().StringVar(&snapshot, "snapshot", "", "the source's snapshot to clone (default: its disk, which needs it stopped)")
	_ = c.RegisterFlagCompletionFunc("snapshot", func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f.completeSnapshotsOf(args[0])(c, nil, toComplete)
	})
	return c
}
