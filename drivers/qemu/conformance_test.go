//go:build linux

package qemu_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/reaper"
)

func TestMain(m *testing.M) {
	// The tests kill plugin processes; their QEMUs are re-parented to this
	// process, which must reap them (the sandbox's PID 1 does not).
	if err := reaper.Start(); err != nil {
		panic("cannot become a child subreaper: " + err.Error())
	}
	os.Exit(m.Run())
}

// requireHost fails (never skips) when this host lacks QEMU or the guest image.
func requireHost(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils")
	}
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatal("qemu-img not found: apt-get install qemu-system-x86 qemu-utils")
	}
	dir := image.DefaultDir()
	if _, err := image.Load(dir); errors.Is(err, image.ErrNotBuilt) {
		t.Fatalf("no guest image in %s: run make guest-image (%v)", dir, err)
	} else if err != nil {
		t.Fatalf("guest image in %s is unusable: %v (run make guest-image)", dir, err)
	}
	return dir
}

// TestConformance runs the driver contract's suite against a real plugin
// process booting real guests.
func TestConformance(t *testing.T) {
	img := requireHost(t)
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	drivertest.Run(t, drivertest.Harness{
		Launch: drivertest.LaunchCommand(bin, "plugin", "qemu"),
		Config: []byte(`{"accel": "auto", "machine": "microvm"}`),
		Spec: func(id string) *pb.VMSpec {
			return &pb.VMSpec{
				Id:        id,
				Name:      "conformance " + id,
				GuestOs:   pb.GuestOS_GUEST_OS_LINUX,
				Image:     img,
				Vcpus:     1,
				MemoryMib: 256,
				Display:   true,
				Network:   &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER},
			}
		},
	})
}
