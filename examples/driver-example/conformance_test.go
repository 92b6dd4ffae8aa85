package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// TestExamplePassesConformanceSuite builds this plugin as its own binary and
// runs FluxVM's conformance suite against it, as the agent would run it. The
// suite skips pause, screenshot, input and exec: this driver claims none.
func TestExamplePassesConformanceSuite(t *testing.T) {
	bin := drivertest.Build(t, ".", "example.com/fluxvm-driver-example")
	image := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(image, []byte("the example driver never reads its image"), 0o600); err != nil {
		t.Fatal(err)
	}
	drivertest.Run(t, drivertest.Harness{
		Launch: drivertest.LaunchCommand(bin),
		Config: []byte(`{"vcpus": 2, "memory_mib": 1024}`),
		Spec: func(id string) *pb.VMSpec {
			return &pb.VMSpec{Id: id, Name: id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: image, Vcpus: 1, MemoryMib: 128}
		},
		ReadyTimeout: 10 * time.Second,
	})
}
