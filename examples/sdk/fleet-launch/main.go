// Command fleet-launch shows the Go SDK's fleet client end to end, as a
// tenant: it shows what the tenant's quota leaves, launches a VM from the
// image catalog through central, waits for its guest agent, says where the
// VM landed and why, runs a command in it (or, on a driver without exec
// such as sim, prints the end of its console log) and deletes it.
//
//	export CENTRAL_URL=http://127.0.0.1:7799 FLUXVM_AGENT_TOKEN=fvt_...
//	go run ./examples/sdk/fleet-launch -image debian-minimal
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

func main() {
	image := flag.String("image", "", "a catalog image's name (required; GET /fleet/images lists them)")
	name := flag.String("name", fmt.Sprintf("sdk-example-%d", time.Now().Unix()%100000), "VM name")
	keep := flag.Bool("keep", false, "leave the VM running")
	flag.Parse()
	if *image == "" {
		log.Fatal("-image is required: a catalog image's name")
	}
	centralURL := os.Getenv("CENTRAL_URL")
	if centralURL == "" {
		centralURL = sdk.DefaultCentralURL
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	fleet, err := sdk.NewFleetClient(centralURL,
		sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")),
		sdk.WithUserAgent("fleet-launch-example"),
		sdk.WithHTTPClient(&http.Client{Timeout: 10 * time.Minute}))
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, fleet, os.Stdout, *name, *image, *keep); err != nil {
		var apiErr *sdk.APIError
		if errors.As(err, &apiErr) && apiErr.Hint != "" {
			log.Fatalf("%v (hint: %s)", err, apiErr.Hint)
		}
		log.Fatal(err)
	}
}

func run(ctx context.Context, fleet *sdk.FleetClient, out io.Writer, name, image string, keep bool) error {
	me, err := fleet.TenantMe(ctx)
	if err != nil {
		return fmt.Errorf("who am I: %w", err)
	}
	used, quota := me.Usage.Total, me.Tenant.Quota
	fmt.Fprintf(out, "tenant %s uses %d VMs (quota %d, 0: no limit)\n", me.Tenant.Name, used.VMs, quota.MaxVMs)

	resp, err := fleet.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: name, Image: image, TTLSeconds: 3600}, time.Second)
	if resp != nil && !keep {
		// Delete it even when the wait failed or ctx ended.
		defer func() {
			if err := fleet.DeleteVM(context.WithoutCancel(ctx), resp.Node, resp.VM.ID); err != nil {
				fmt.Fprintf(out, "delete %s: %v\n", resp.VM.Name, err)
			} else {
				fmt.Fprintf(out, "deleted %s\n", resp.VM.Name)
			}
		}()
	}
	if sdk.IsQuota(err) {
		return fmt.Errorf("launch: over the quota: %w", err)
	}
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	fmt.Fprintf(out, "%s (%s) runs on %s: %s\n", resp.VM.Name, resp.VM.ID, resp.Node, resp.Placement.Reason)

	res, err := fleet.Exec(ctx, resp.Node, resp.VM.ID, sdk.ExecRequest{
		Command: sdk.Command{Argv: []string{"uname", "-a"}}, TimeoutSeconds: 60})
	var apiErr *sdk.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusNotImplemented:
		// The driver cannot run commands (sim): show its console instead.
		logs, err := fleet.Logs(ctx, resp.Node, resp.VM.ID, 5)
		if err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		fmt.Fprintf(out, "its driver cannot run commands; the end of its console:\n%s", logs)
	case err != nil:
		return fmt.Errorf("exec: %w", err)
	default:
		fmt.Fprintf(out, "uname -a (exit %d): %s", res.ExitCode, res.Stdout)
	}
	return nil
}
