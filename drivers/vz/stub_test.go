//go:build !(darwin && arm64 && cgo)

package vz

import (
	"errors"
	"strings"
	"testing"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// Off a Mac the driver is a stub: it says it cannot run here and why, in
// its fingerprint and in every VM call, and claims no capability it lacks.
func TestStubReportsDriverUnusableAndWhy(t *testing.T) {
	ctx := t.Context()
	d := New(nil)
	if err := d.SetConfig(ctx, &basepb.SetConfigRequest{Agent: &basepb.AgentContext{StateDir: t.TempDir()}}); err != nil {
		t.Fatal(err)
	}
	fp, err := d.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := <-fp
	if first.Health != pb.Health_HEALTH_UNDETECTED || !strings.Contains(first.Description, "darwin/arm64") || first.Resources.GetMacosSlots() != 0 {
		t.Errorf("stub fingerprint = %v, want UNDETECTED, saying it needs darwin/arm64, no macOS slots", first)
	}
	_, err = d.CreateVM(ctx, &pb.VMSpec{Id: "v1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: "/img", Vcpus: 1, MemoryMib: 256})
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), "darwin/arm64") {
		t.Errorf("stub CreateVM = %v, want ErrUnavailable saying why", err)
	}
	caps, _ := d.Capabilities(ctx)
	if caps.Pause || caps.Exec || caps.DiskSnapshots || caps.MemorySnapshots || caps.Clones || caps.Screenshot || caps.Input {
		t.Errorf("stub claims capabilities it cannot serve: %v", caps)
	}
	if _, err := newMachine(&HostConfig{}); err == nil || !strings.Contains(err.Error(), "darwin/arm64") {
		t.Errorf("stub newMachine = %v, want an error saying why", err)
	}
}
