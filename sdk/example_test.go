package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// A program that runs a throw-away VM: create it, wait for its guest agent,
// run a command, delete it.
func ExampleNodeClient() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node, err := sdk.NewNodeClient("http://127.0.0.1:7777", sdk.WithToken(os.Getenv("FLUXVM_NODE_TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	vm, err := node.CreateVM(ctx, sdk.CreateVMRequest{
		Name: "ci-42", Image: "/var/cache/fluxvm/images/debian.img",
		VCPUs: 2, MemoryMiB: 2048, TTLSeconds: 3600,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer node.DeleteVM(context.WithoutCancel(ctx), vm.ID)
	if _, err := node.WaitReady(ctx, vm.ID, time.Second); err != nil {
		log.Fatal(err)
	}
	res, err := node.Exec(ctx, vm.ID, sdk.ExecRequest{Command: sdk.Command{Argv: []string{"uname", "-r"}}, TimeoutSeconds: 60})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("exit %d: %s", res.ExitCode, res.Stdout)
}

// Errors from the node carry its message and a hint; the Is* helpers branch
// on the kind.
func ExampleAPIError() {
	// A stand-in for a node that has no VM named "web-9".
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error": "no VM \"web-9\" on node n1", "hint": "GET /v1/vms lists the VMs on this node"}`)
	}))
	defer srv.Close()

	node, _ := sdk.NewNodeClient(srv.URL)
	_, err := node.GetVM(context.Background(), "web-9")
	var apiErr *sdk.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Message)
		fmt.Println("hint:", apiErr.Hint)
	}
	fmt.Println("not found:", sdk.IsNotFound(err))
	// Output:
	// 404 no VM "web-9" on node n1
	// hint: GET /v1/vms lists the VMs on this node
	// not found: true
}

// A node that is down is a *ConnectError, which IsUnavailable also reports,
// so a caller can retry.
func ExampleConnectError() {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more

	node, _ := sdk.NewNodeClient(url)
	_, err := node.Health(context.Background())
	var ce *sdk.ConnectError
	fmt.Println(errors.As(err, &ce), sdk.IsUnavailable(err))
	// Output:
	// true true
}

// Logs and screenshots come back as bytes: text and PNG.
func ExampleNodeClient_Screenshot() {
	ctx := context.Background()
	node, _ := sdk.NewNodeClient("http://127.0.0.1:7777", sdk.WithToken(os.Getenv("FLUXVM_NODE_TOKEN")))
	png, err := node.Screenshot(ctx, "web-1", 1024)
	if sdk.IsConflict(err) {
		log.Fatal("web-1 has no display: create it with Display: true")
	}
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile("web-1.png", png, 0o644); err != nil {
		log.Fatal(err)
	}
}

// Input types into a VM's display: text, then Enter.
func ExampleNodeClient_Input() {
	ctx := context.Background()
	node, _ := sdk.NewNodeClient("http://127.0.0.1:7777", sdk.WithToken(os.Getenv("FLUXVM_NODE_TOKEN")))
	err := node.Input(ctx, "web-1", []sdk.InputAction{
		{Kind: "text", Text: "root"},
		{Kind: "key", Keys: []string{"enter"}},
	})
	if err != nil {
		log.Fatal(err)
	}
}
