package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// These examples run in `go test` against a live central that TestMain
// starts (with one simulated node), as tenant "example", whose quota is one
// VM, with the catalog image "debian-minimal".

// A tenant launches a VM from the catalog and waits for its guest agent;
// central says where the VM landed.
func ExampleFleetClient_LaunchAndWait() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fleet, err := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	resp, err := fleet.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{
		Name: "ci-42", Image: "debian-minimal", TTLSeconds: 3600,
	}, time.Second)
	if resp != nil {
		// Whether or not the wait worked, the VM is there: delete it after.
		defer fleet.DeleteVM(context.WithoutCancel(ctx), resp.Node, resp.VM.ID)
	}
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s runs on %s (%d vCPU, %d MiB), guest agent ready: %v\n",
		resp.VM.Name, resp.Node, resp.VM.VCPUs, resp.VM.MemoryMiB, resp.VM.AgentReady)
	// Output:
	// ci-42 runs on node-1 (1 vCPU, 256 MiB), guest agent ready: true
}

// FindVM takes what people type: a name, an ID prefix or NODE/NAME. Exec
// returns what the command printed and its exit code; a guest that cannot
// run commands (here: the simulator's) is an *APIError with central's
// message and hint.
func ExampleFleetClient_FindVM() {
	ctx := context.Background()
	fleet, _ := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")))
	created, err := fleet.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: "web-1", Image: "debian-minimal"}, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.DeleteVM(ctx, created.Node, created.VM.ID)

	vm, err := fleet.FindVM(ctx, "web-1")
	if err != nil {
		log.Fatal(err)
	}
	res, err := fleet.Exec(ctx, vm.Node, vm.ID, sdk.ExecRequest{Command: sdk.Command{Argv: []string{"uname", "-a"}}})
	var apiErr *sdk.APIError
	switch {
	case errors.As(err, &apiErr):
		fmt.Println("refused:", apiErr.Status)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
	}
	// Output:
	// refused: 501
}

// A launch over the tenant's quota is a 429, which IsQuota reports; the
// message says which quota.
func ExampleIsQuota() {
	ctx := context.Background()
	fleet, _ := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")))
	first, err := fleet.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "one", Image: "debian-minimal"})
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.DeleteVM(ctx, first.Node, first.VM.ID)

	_, err = fleet.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "two", Image: "debian-minimal"})
	fmt.Println("quota:", sdk.IsQuota(err))
	var apiErr *sdk.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Message)
	}
	// Output:
	// quota: true
	// quota max_vms exceeded: 1 in use of 1, asked for 1 more
}

// The operator (with central's fleet token) adds a tenant and hands over its
// token, which central shows this once.
func ExampleFleetClient_CreateTenant() {
	ctx := context.Background()
	op, _ := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_FLEET_TOKEN")))
	tw, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "acme", Quota: sdk.Quotas{MaxVMs: 20, MaxMemoryMiB: 96 << 10}})
	if err != nil {
		log.Fatal(err)
	}
	defer op.DeleteTenant(ctx, tw.Tenant.ID)
	fmt.Println(tw.Tenant.Name, tw.Tenant.Quota.MaxVMs, len(tw.Token) > 40)
	// Output:
	// acme 20 true
}
