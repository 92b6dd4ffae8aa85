package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// Volumes (docs/volumes.md).

const hintVolumes = "fluxctl fleet volumes lists your volumes"

// completeVolumes completes the caller's volume names.
func (f *fleet) completeVolumes() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		list, err := fc.ListVolumes(ctx, "")
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, v := range list.Volumes {
			out = append(out, cobra.CompletionWithDesc(v.Name, fmt.Sprintf("%d GiB on %s", v.SizeGiB, v.Node)))
		}
		return out, nil
	})
}

func volumeColumns() []column[sdk.FleetVolume] {
	return []column[sdk.FleetVolume]{
		{"name", "NAME", false, func(v *sdk.FleetVolume) string { return v.Name }},
		{"size", "SIZE", false, func(v *sdk.FleetVolume) string { return strconv.FormatInt(v.SizeGiB, 10) + " GiB" }},
		{"node", "NODE", false, func(v *sdk.FleetVolume) string { return v.Node }},
		{"attached-to", "ATTACHED TO", false, func(v *sdk.FleetVolume) string {
			if v.AttachedTo == "" {
				return "-"
			}
			return v.AttachedTo
		}},
		{"id", "ID", true, func(v *sdk.FleetVolume) string { return v.ID }},
		{"created", "CREATED", true, func(v *sdk.FleetVolume) string { return v.CreatedAt.UTC().Format(time.DateTime) + " UTC" }},
		{"tenant", "TENANT", true, func(v *sdk.FleetVolume) string { return v.Tenant }},
		{"path", "PATH", true, func(v *sdk.FleetVolume) string { return v.Path }},
	}
}

func (f *fleet) volumesCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:   "volumes",
		Short: "List your volumes: size, node, and the VM that uses each",
		Long: `List your volumes (the operator's call lists every tenant's, or one's with
--tenant): each one's size, the node it lives on and the VM using it, as its
node says. In a guest a volume is /dev/disk/by-id/virtio-<id> (-o wide shows
ids). The JSON output (-o json) carries your use and max_volume_gib.`,
		Example: `  fluxctl fleet volumes
  fluxctl fleet volumes -o wide`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			list, err := fc.ListVolumes(c.Context(), tenant)
			if err != nil {
				return err
			}
			empty := "no volumes\nnext: fluxctl fleet volume-create NAME --size GiB\n"
			return show(f.a, c, table[sdk.FleetVolume]{raw: list, rows: list.Volumes, cols: volumeColumns(), empty: empty})
		}),
	}
	c.Flags().StringVar(&tenant, "tenant", "", "operator: one tenant's volumes (id or name)")
	columnsFlag(c, volumeColumns())
	return c
}

func (f *fleet) volumeCreateCmd() *cobra.Command {
	var req sdk.FleetCreateVolumeRequest
	c := &cobra.Command{
		Use:   "volume-create NAME --size GiB [--node NODE]",
		Short: "Make a volume: a disk that keeps its data when the VM using it is deleted",
		Long: fmt.Sprintf(`Make a volume: a sparse disk file on one node, which uses space only as the
guest writes. Without --node it goes on a node you lease, else on the one
with the most free memory. Names are 1-40 lowercase letters, digits and '-',
unique among yours; sizes are %d-%d GiB. Your volumes together hold at most
max_volume_gib (no limit unless the operator set one). Attach it with
fluxctl fleet launch --volume NAME.`, sdk.MinVolumeGiB, sdk.MaxVolumeGiB),
		Example: `  fluxctl fleet volume-create pg-data --size 50`,
		Args:    oneName("volume name"),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			req.Name = args[0]
			v, err := fc.CreateVolume(c.Context(), req)
			if err != nil {
				return withHints(err, map[int]string{
					409: "names are unique among your volumes (" + hintVolumes + "); or the node cannot take it: leave --node out",
					429: "delete a volume first (fluxctl fleet volume-rm NAME), ask for less, or ask the operator to raise max_volume_gib",
				})
			}
			if !f.a.human() {
				return f.a.printRaw(v)
			}
			f.a.done("fluxctl fleet launch --image IMAGE --volume "+v.Name, "Created volume %s (%d GiB on %s, /dev/disk/by-id/virtio-%s in a guest)", v.Name, v.SizeGiB, v.Node, v.ID)
			return nil
		}),
	}
	c.Flags().Int64Var(&req.SizeGiB, "size", 0, fmt.Sprintf("size in GiB (%d-%d)", sdk.MinVolumeGiB, sdk.MaxVolumeGiB))
	c.Flags().StringVar(&req.Node, "node", "", "put it on this node (default: one you lease, else the one with the most free memory)")
	_ = c.MarkFlagRequired("size")
	return c
}

func (f *fleet) volumeResizeCmd() *cobra.Command {
	var size int64
	c := &cobra.Command{
		Use:   "volume-resize NAME --size GiB",
		Short: "Grow a volume that no VM uses",
		Long: `Grow a volume to --size GiB; volumes only grow, and only while no VM uses
them. Grow the file system inside the guest afterwards (resize2fs, xfs_growfs).`,
		Example:           `  fluxctl fleet volume-resize pg-data --size 100`,
		Args:              oneName("volume"),
		ValidArgsFunction: f.completeVolumes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			v, err := fc.ResizeVolume(c.Context(), args[0], size)
			if err != nil {
				return withHints(err, map[int]string{
					404: hintVolumes,
					409: "delete the VM that uses it first (" + hintVolumes + " and which VM has each)",
					429: "delete a volume first (fluxctl fleet volume-rm NAME), or ask the operator to raise max_volume_gib",
				})
			}
			if !f.a.human() {
				return f.a.printRaw(v)
			}
			f.a.done("", "Volume %s is %d GiB now", v.Name, v.SizeGiB)
			return nil
		}),
	}
	c.Flags().Int64Var(&size, "size", 0, fmt.Sprintf("the new size in GiB, at least the current (%d-%d)", sdk.MinVolumeGiB, sdk.MaxVolumeGiB))
	_ = c.MarkFlagRequired("size")
	return c
}

func (f *fleet) volumeRmCmd() *cobra.Command {
	var yes bool
	c := &cobra.Command{
		Use:               "volume-rm NAME",
		Short:             "Delete a volume and its data (asks on a terminal; -y to skip)",
		Long:              `Delete a volume and everything on it; refused while a VM uses it. Billing for it stops. On a terminal it asks first; otherwise it needs -y.`,
		Example:           `  fluxctl fleet volume-rm pg-data`,
		Args:              oneName("volume"),
		ValidArgsFunction: f.completeVolumes(),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			v, err := fc.GetVolume(c.Context(), args[0])
			if err != nil {
				return withHints(err, map[int]string{404: hintVolumes})
			}
			if !yes {
				q := fmt.Sprintf("delete volume %s (%d GiB on %s) and all its data?", v.Name, v.SizeGiB, v.Node)
				if err := f.confirm(q, "delete a volume", "fluxctl fleet volume-rm "+args[0]+" -y"); err != nil {
					return err
				}
			}
			if err := fc.DeleteVolume(c.Context(), v.ID); err != nil {
				return withHints(err, map[int]string{404: hintVolumes, 409: "delete the VM that uses it first (" + hintVolumes + " and which VM has each)"})
			}
			if f.a.human() {
				f.a.done("", "Deleted volume %s", v.Name)
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&yes, "yes", "y", false, "delete without asking")
	return c
}
