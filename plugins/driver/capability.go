package driver

import (
	"fmt"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// Capability is an optional part of the contract: the RPCs grouped under it
// in proto/driver.proto, which a driver serves only when its
// CapabilitiesResponse claims it. The agent never calls them otherwise.
type Capability string

// The capabilities of contract version 3. ListSnapshots, DeleteSnapshot and
// RestoreVM belong to both snapshot capabilities: either turns them on.
const (
	CapPause           Capability = "pause"            // PauseVM, ResumeVM
	CapScreenshot      Capability = "screenshot"       // Screenshot
	CapInput           Capability = "input"            // SendInput
	CapExec            Capability = "exec"             // Exec
	CapDiskSnapshots   Capability = "disk_snapshots"   // SnapshotVM (disk only), ListSnapshots, DeleteSnapshot, RestoreVM
	CapMemorySnapshots Capability = "memory_snapshots" // SnapshotVM (memory), ListSnapshots, DeleteSnapshot, RestoreVM
	CapClones          Capability = "clones"           // CloneVM
	CapPortForward     Capability = "port_forward"     // ForwardPort
	CapVolumes         Capability = "volumes"          // VMSpec.volumes in CreateVM
)

// Capabilities returns every capability of the contract, sorted by name.
func Capabilities() []Capability {
	return []Capability{CapClones, CapDiskSnapshots, CapExec, CapInput, CapMemorySnapshots, CapPause, CapPortForward, CapScreenshot, CapVolumes}
}

// ClaimedBy reports whether caps claims c.
func (c Capability) ClaimedBy(caps *pb.CapabilitiesResponse) bool {
	switch c {
	case CapPause:
		return caps.GetPause()
	case CapScreenshot:
		return caps.GetScreenshot()
	case CapInput:
		return caps.GetInput()
	case CapExec:
		return caps.GetExec()
	case CapDiskSnapshots:
		return caps.GetDiskSnapshots()
	case CapMemorySnapshots:
		return caps.GetMemorySnapshots()
	case CapClones:
		return caps.GetClones()
	case CapPortForward:
		return caps.GetPortForward()
	case CapVolumes:
		return caps.GetVolumes()
	}
	return false
}

// Unsupported is the error for calling c's RPCs on a driver that lacks c,
// naming the driver ("" for "this driver").
func (c Capability) Unsupported(driverName string) error {
	who := "this driver"
	if driverName != "" {
		who = "driver " + driverName
	}
	return Errorf(ErrUnsupported, "%s lacks capability %q: it %s", who, string(c), c.cannot())
}

func (c Capability) cannot() string {
	switch c {
	case CapPause:
		return "cannot pause VMs"
	case CapScreenshot:
		return "cannot take screenshots"
	case CapInput:
		return "cannot send keyboard or pointer input"
	case CapExec:
		return "cannot run commands in guests"
	case CapDiskSnapshots:
		return "cannot take disk snapshots"
	case CapMemorySnapshots:
		return "cannot save or restore a VM's memory"
	case CapClones:
		return "cannot clone VMs"
	case CapPortForward:
		return "cannot forward guest ports"
	case CapVolumes:
		return "cannot attach volumes"
	}
	return fmt.Sprintf("does not know capability %q", string(c))
}
