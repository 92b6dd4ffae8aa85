package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
)

func TestExampleRunsAgainstARealNode(t *testing.T) {
	n := nodetest.Start(t)
	node, err := sdk.NewNodeClient(n.URL, sdk.WithToken(n.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(t.TempDir()) // the screenshot lands in the working directory
	if err := run(t.Context(), node, "example-1", n.Image); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(".", "example-1.png")); err != nil {
		t.Fatalf("no screenshot saved: %v", err)
	}
	if vms, err := node.ListVMs(t.Context()); err != nil || len(vms) != 0 {
		t.Fatalf("the example left VMs behind: %v, %v", vms, err)
	}
}
