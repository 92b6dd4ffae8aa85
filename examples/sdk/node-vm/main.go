// Command node-vm shows the Go SDK's node client end to end: it creates a
// throw-away VM on one node, waits for its guest agent, runs a command in it
// (or, on a driver without exec such as sim, saves a screenshot), prints the
// end of its console log and deletes it.
//
//	export FLUXVM_NODE=http://127.0.0.1:7777 FLUXVM_NODE_TOKEN=...
//	go run ./examples/sdk/node-vm -image /var/cache/fluxvm/images/debian.img
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

func main() {
	image := flag.String("image", "", "disk image on the node (required)")
	name := flag.String("name", fmt.Sprintf("sdk-example-%d", time.Now().Unix()%100000), "VM name")
	flag.Parse()
	if *image == "" {
		log.Fatal("-image is required: a disk image path on the node, inside its allowed image dirs")
	}
	nodeURL := os.Getenv("FLUXVM_NODE")
	if nodeURL == "" {
		nodeURL = sdk.DefaultNodeURL
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()

	node, err := sdk.NewNodeClient(nodeURL,
		sdk.WithToken(os.Getenv("FLUXVM_NODE_TOKEN")),
		sdk.WithUserAgent("node-vm-example"),
		sdk.WithHTTPClient(&http.Client{Timeout: 10 * time.Minute}))
	if err != nil {
		log.Fatal(err)
	}
	if err := run(ctx, node, *name, *image); err != nil {
		var apiErr *sdk.APIError
		if errors.As(err, &apiErr) && apiErr.Hint != "" {
			log.Fatalf("%v (hint: %s)", err, apiErr.Hint)
		}
		log.Fatal(err)
	}
}

func run(ctx context.Context, node *sdk.NodeClient, name, image string) error {
	health, err := node.Health(ctx)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	fmt.Printf("node %s (%s), %d VMs, %d vCPUs free\n", health.Node, health.Version, health.VMs, health.Capacity.Free.VCPUs)

	vm, err := node.CreateVM(ctx, sdk.CreateVMRequest{
		Name: name, Image: image, VCPUs: 1, MemoryMiB: 512, Display: true,
		TTLSeconds: 3600, // the node deletes it even if this program dies
		Labels:     map[string]string{"created-by": "node-vm-example"},
	})
	if err != nil {
		return fmt.Errorf("create: %w", err)
	}
	fmt.Printf("created %s (%s) with driver %s\n", vm.Name, vm.ID, vm.Driver)
	defer func() {
		if err := node.DeleteVM(context.WithoutCancel(ctx), vm.ID); err != nil && !sdk.IsNotFound(err) {
			log.Printf("delete %s: %v", vm.Name, err)
			return
		}
		fmt.Printf("deleted %s\n", vm.Name)
	}()

	if vm, err = node.WaitReady(ctx, vm.ID, 500*time.Millisecond); err != nil {
		return err
	}
	fmt.Printf("guest agent ready (%s)\n", vm.State)

	res, err := node.Exec(ctx, vm.ID, sdk.ExecRequest{Command: sdk.Command{Argv: []string{"uname", "-a"}}, TimeoutSeconds: 30})
	var apiErr *sdk.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status == http.StatusNotImplemented:
		// This driver cannot run commands (sim): look at the screen instead.
		png, err := node.Screenshot(ctx, vm.ID, 800)
		if err != nil {
			return fmt.Errorf("screenshot: %w", err)
		}
		file := vm.Name + ".png"
		if err := os.WriteFile(file, png, 0o644); err != nil {
			return err
		}
		fmt.Printf("driver %s has no exec; saved the screen to %s\n", vm.Driver, file)
	case err != nil:
		return fmt.Errorf("exec: %w", err)
	default:
		fmt.Printf("uname -a exited %d in %d ms: %s", res.ExitCode, res.DurationMS, res.Stdout)
	}

	logs, err := node.Logs(ctx, vm.ID, 5)
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	fmt.Printf("console log, last lines:\n%s", logs)
	return nil
}
