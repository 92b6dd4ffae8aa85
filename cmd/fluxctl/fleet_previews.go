package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The preview commands: fleet preview VM PORT opens an HTTP preview of a
// guest port, served by central at /fleet/previews/ID/; fleet previews
// lists them; fleet preview-rm closes them.

const hintPreviews = "fluxctl fleet previews lists your open previews"

// portArg reads a TCP port argument (1-65535).
func portArg(c *cobra.Command, s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, usageError(c, fmt.Sprintf("port %q is not a TCP port (1-65535)", s))
	}
	return p, nil
}

func (f *fleet) previewCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "preview VM PORT",
		Short: "Open an HTTP preview of a port of a running VM, served by central",
		Long: `Open a preview of a web server listening on PORT inside VM: central serves it
at /fleet/previews/ID/ and passes each request (GET, POST, PUT, PATCH,
DELETE, and WebSocket upgrades) to the guest port through the VM's node.
Every credential of the caller (the Authorization header, cookies, X-FluxVM-*
headers, anything carrying the token) is removed before the request reaches
the guest. A request needs your token or an API key; a console session in a
browser is not served a preview (not built yet: a separate origin for them).

The preview ends when the VM stops, restarts or is deleted; opening the same
port again prints the preview already open. The port must be among the
policy's tunnel ports; a VM may have 4 previews, a tenant 20.`,
		Example: `  fluxctl fleet preview web-1 5173
  curl -H "Authorization: Bearer $FLUXVM_TOKEN" https://central.example.com/fleet/previews/prv_0123456789abcdef/`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError(c, fmt.Sprintf("fleet preview takes a VM and a PORT, got %d arguments", len(args)))
			}
			_, err := portArg(c, args[1])
			return err
		},
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			port, _ := portArg(c, args[1])
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			p, err := fc.OpenPreview(c.Context(), vm.Node, vm.ID, port)
			if err != nil {
				return withHints(err, map[int]string{
					404: hintListVMs,
					403: "the fleet's policy decides which ports previews may reach (tunnels.ports); a read-only API key cannot open one",
					409: "is " + vm.Name + " running? fluxctl fleet vms shows its state",
					429: "too many previews: " + hintPreviews + ", and fluxctl fleet preview-rm VM [PORT] closes some",
				})
			}
			if !f.a.human() {
				return f.a.printRaw(p)
			}
			f.a.done("curl -H \"Authorization: Bearer $"+envFleetToken+"\" "+f.centralURL()+p.Path,
				"Preview of %s port %d: %s%s", vm.Name, port, f.centralURL(), p.Path)
			return nil
		},
	}
}

func (f *fleet) previewRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:               "preview-rm VM [PORT]",
		Short:             "Close a VM's preview of PORT, or all of its previews",
		Example:           "  fluxctl fleet preview-rm web-1 5173\n  fluxctl fleet preview-rm web-1",
		ValidArgsFunction: f.completeVMs(),
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageError(c, fmt.Sprintf("fleet preview-rm takes a VM and optionally a PORT, got %d arguments", len(args)))
			}
			if len(args) == 2 {
				_, err := portArg(c, args[1])
				return err
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			port := 0
			if len(args) == 2 {
				port, _ = portArg(c, args[1])
			}
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			if err := fc.ClosePreview(c.Context(), vm.Node, vm.ID, port); err != nil {
				return withHints(err, map[int]string{404: "it may have ended already (a preview ends with its VM's boot): " + hintPreviews})
			}
			if f.a.human() {
				if port == 0 {
					f.a.done("", "Closed the previews of %s", vm.Name)
				} else {
					f.a.done("", "Closed the preview of %s port %d", vm.Name, port)
				}
			}
			return nil
		},
	}
}

func previewColumns(now time.Time, central string) []column[sdk.Preview] {
	return []column[sdk.Preview]{
		{"id", "ID", false, func(p *sdk.Preview) string { return p.ID }},
		{"vm", "VM", false, func(p *sdk.Preview) string { return p.VMName }},
		{"port", "PORT", false, func(p *sdk.Preview) string { return strconv.Itoa(p.Port) }},
		{"url", "URL", false, func(p *sdk.Preview) string { return central + p.Path }},
		{"age", "AGE", true, func(p *sdk.Preview) string { return short(now.Sub(p.OpenedAt)) }},
		{"node", "NODE", true, func(p *sdk.Preview) string { return p.Node }},
		{"vm-id", "VM ID", true, func(p *sdk.Preview) string { return p.VM }},
		{"opened-by", "OPENED BY", true, func(p *sdk.Preview) string { return p.OpenedBy }},
		{"tenant", "TENANT", true, func(p *sdk.Preview) string {
			if p.TenantName != "" {
				return p.TenantName
			}
			return p.Tenant
		}},
	}
}

func (f *fleet) previewsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "previews",
		Short: "Your open previews of VMs' ports",
		Long: `List the open previews: the VM and port each serves and its URL (-o wide adds
its age, node, VM ID, who opened it and, for the operator, the tenant). A
preview whose VM stopped is dropped when it is next used.`,
		Example: "  fluxctl fleet previews",
		Args:    cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			list, err := fc.ListPreviews(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Preview]{raw: list, rows: list.Previews, cols: previewColumns(time.Now(), f.centralURL()),
				empty: "no open previews\nnext: fluxctl fleet preview VM PORT\n"})
		}),
	}
	columnsFlag(c, previewColumns(time.Time{}, ""))
	return c
}
