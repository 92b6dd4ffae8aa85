package sdk_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"

	"github.com/fluxvm/fluxvm/sdk"
)

// These two examples are compiled but not run (they have no Output): they
// need a VM with an SSH server, which the simulated node of the other
// examples does not boot.

// A tunnel is a byte stream to a guest port through central: here the
// first line the guest's SSH server sends.
func ExampleFleetClient_DialTunnel() {
	ctx := context.Background()
	fleet, err := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	vm, err := fleet.FindVM(ctx, "web-1")
	if err != nil {
		log.Fatal(err)
	}
	conn, err := fleet.DialTunnel(ctx, vm.Node, vm.ID, 22)
	if sdk.IsQuota(err) {
		log.Fatalf("every tunnel of the tenant is in use: %v", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	banner, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(banner) // SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u10
}

// PortForward serves a local port as `ssh -L` would, each connection
// through a tunnel of its own, until interrupted.
func ExampleFleetClient_PortForward() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	fleet, err := sdk.NewFleetClient(os.Getenv("CENTRAL_URL"), sdk.WithToken(os.Getenv("FLUXVM_AGENT_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	vm, err := fleet.FindVM(ctx, "web-1")
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("http://127.0.0.1:8080 reaches port 80 of web-1")
	err = fleet.PortForwardNotify(ctx, vm.Node, vm.ID, 80, ln, func(err error) { log.Print(err) })
	if err != nil && ctx.Err() == nil {
		log.Fatal(err)
	}
}
