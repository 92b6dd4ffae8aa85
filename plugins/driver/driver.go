// Package driver is the contract between the FluxVM node agent and hypervisor
// plugins. A plugin implements Driver and calls Serve; the agent calls Launch
// and gets a Driver back that speaks to the plugin process over gRPC.
//
// The contract itself, RPC by RPC, is documented in proto/driver.proto (the
// Driver service) and ../base/proto/base.proto (the base service every FluxVM
// plugin serves: info, config schema, set config); the methods below mirror
// those RPCs one to one and use their message types, so a plugin author reads
// two short documents. Plugin authors import this package, its proto package
// and the base proto package, and nothing else from FluxVM.
package driver

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"google.golang.org/protobuf/proto"
)

// APIVersion is the driver contract version this package speaks: the
// go-plugin protocol version of the handshake. Version 1 plugins are refused
// at the handshake (see proto/driver.proto for what changed); version 2
// plugins still work, without the capabilities version 3 added.
const APIVersion = 3

// MinAPIVersion is the oldest contract version the agent still speaks.
const MinAPIVersion = 2

// Driver is a hypervisor. Each method is the RPC of the same name in
// proto/driver.proto or ../base/proto/base.proto, which say what it must do
// and how it fails. Errors should wrap one of the sentinel errors of this
// package (ErrNotFound, ErrInvalid, ...) so they cross the process boundary
// with the right code.
type Driver interface {
	// PluginInfo, ConfigSchema and SetConfig: the base service. PluginInfo's
	// type is PLUGIN_TYPE_DRIVER and its api_versions hold APIVersion.
	base.Plugin

	// Capabilities lists the optional features the driver implements.
	Capabilities(ctx context.Context) (*pb.CapabilitiesResponse, error)
	// Fingerprint sends the driver's health at once and then on every change,
	// until ctx ends; the channel is closed then.
	Fingerprint(ctx context.Context) (<-chan *pb.FingerprintResponse, error)

	// CreateVM prepares a VM without starting it.
	CreateVM(ctx context.Context, spec *pb.VMSpec) (*pb.VMStatus, error)
	// StartVM boots a created or stopped VM and returns the handle to persist.
	StartVM(ctx context.Context, id string) (*pb.Handle, *pb.VMStatus, error)
	// RecoverVM takes back a VM from a handle an earlier plugin process wrote.
	RecoverVM(ctx context.Context, h *pb.Handle) (*pb.VMStatus, error)
	// WaitVM blocks until the VM stops running.
	WaitVM(ctx context.Context, id string) (*pb.ExitResult, error)
	// WaitReady blocks until the guest agent answers.
	WaitReady(ctx context.Context, id string) (map[string]string, error)
	// StopVM shuts the VM down, gracefully until timeout, then by force.
	StopVM(ctx context.Context, id string, timeout time.Duration) (*pb.ExitResult, error)
	// DestroyVM removes the VM's process (with force) and workspace.
	DestroyVM(ctx context.Context, id string, force bool) error
	// InspectVM reports a VM's status.
	InspectVM(ctx context.Context, id string) (*pb.VMStatus, error)
	// ListVMs lists the VMs this plugin process knows.
	ListVMs(ctx context.Context) ([]*pb.VMStatus, error)
	// Events sends VM state changes until ctx ends; the channel is closed then.
	Events(ctx context.Context) (<-chan *pb.Event, error)
	// ConsoleLog returns the tail of the serial console (all of it for 0).
	ConsoleLog(ctx context.Context, id string, maxBytes int64) ([]byte, error)

	// PauseVM freezes the VM (capability "pause").
	PauseVM(ctx context.Context, id string) error
	// ResumeVM unfreezes a paused VM (capability "pause").
	ResumeVM(ctx context.Context, id string) error
	// Screenshot returns the display as PNG (capability "screenshot").
	Screenshot(ctx context.Context, id string) (*pb.ScreenshotResponse, error)
	// SendInput plays keyboard and pointer actions (capability "input").
	SendInput(ctx context.Context, id string, actions []*pb.InputAction) error
	// Exec runs a command through the guest agent, streaming its output to
	// stdout and stderr, and returns its exit code (capability "exec").
	Exec(ctx context.Context, req *pb.ExecRequest, stdout, stderr io.Writer) (int, error)

	// SnapshotVM takes a disk snapshot (capability "disk_snapshots") or, with
	// memory, a memory snapshot (capability "memory_snapshots") under tag.
	SnapshotVM(ctx context.Context, id, tag string, memory bool) (*pb.Snapshot, error)
	// ListSnapshots lists a VM's snapshots, oldest first (either snapshot capability).
	ListSnapshots(ctx context.Context, id string) ([]*pb.Snapshot, error)
	// DeleteSnapshot removes one snapshot (either snapshot capability).
	DeleteSnapshot(ctx context.Context, id, tag string) error
	// RestoreVM puts a VM back to a snapshot (either snapshot capability).
	RestoreVM(ctx context.Context, id, tag string) (*pb.VMStatus, error)
	// CloneVM creates a new VM from a snapshot or a VM that does not run
	// (capability "clones").
	CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error)

	// ForwardPort makes the guest's TCP port reachable from the node agent
	// and returns the host address ("ip:port") to connect to (capability
	// "port_forward").
	ForwardPort(ctx context.Context, id string, guestPort int) (string, error)
}

// Unsupported answers every optional RPC with ErrUnsupported. Embed it in a
// driver that does not claim some capabilities and implement the rest.
type Unsupported struct{}

// PauseVM reports that the driver cannot pause.
func (Unsupported) PauseVM(context.Context, string) error {
	return CapPause.Unsupported("")
}

// ResumeVM reports that the driver cannot pause.
func (Unsupported) ResumeVM(context.Context, string) error {
	return CapPause.Unsupported("")
}

// Screenshot reports that the driver has no screens.
func (Unsupported) Screenshot(context.Context, string) (*pb.ScreenshotResponse, error) {
	return nil, CapScreenshot.Unsupported("")
}

// SendInput reports that the driver takes no input.
func (Unsupported) SendInput(context.Context, string, []*pb.InputAction) error {
	return CapInput.Unsupported("")
}

// Exec reports that the driver has no guest agent.
func (Unsupported) Exec(context.Context, *pb.ExecRequest, io.Writer, io.Writer) (int, error) {
	return 0, CapExec.Unsupported("")
}

// SnapshotVM reports that the driver takes no snapshots.
func (Unsupported) SnapshotVM(_ context.Context, _, _ string, memory bool) (*pb.Snapshot, error) {
	if memory {
		return nil, CapMemorySnapshots.Unsupported("")
	}
	return nil, CapDiskSnapshots.Unsupported("")
}

// ListSnapshots reports that the driver takes no snapshots.
func (Unsupported) ListSnapshots(context.Context, string) ([]*pb.Snapshot, error) {
	return nil, CapDiskSnapshots.Unsupported("")
}

// DeleteSnapshot reports that the driver takes no snapshots.
func (Unsupported) DeleteSnapshot(context.Context, string, string) error {
	return CapDiskSnapshots.Unsupported("")
}

// RestoreVM reports that the driver takes no snapshots.
func (Unsupported) RestoreVM(context.Context, string, string) (*pb.VMStatus, error) {
	return nil, CapDiskSnapshots.Unsupported("")
}

// CloneVM reports that the driver cannot clone.
func (Unsupported) CloneVM(context.Context, *pb.CloneVMRequest) (*pb.VMStatus, error) {
	return nil, CapClones.Unsupported("")
}

// ForwardPort reports that the driver cannot forward guest ports.
func (Unsupported) ForwardPort(context.Context, string, int) (string, error) {
	return "", CapPortForward.Unsupported("")
}

// CheckGuestPort is nil for a TCP port (1-65535) and otherwise an
// ErrInvalid error that says what a port is.
func CheckGuestPort(port int) error {
	if port < 1 || port > 65535 {
		return Errorf(ErrInvalid, "guest port %d is not a TCP port: give 1 to 65535", port)
	}
	return nil
}

// snapshotTag is what a snapshot tag looks like.
var snapshotTag = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// CheckSnapshotTag is nil for a well-formed snapshot tag and otherwise an
// ErrInvalid error that says what a tag looks like.
func CheckSnapshotTag(tag string) error {
	if !snapshotTag.MatchString(tag) {
		return Errorf(ErrInvalid, "snapshot tag %q is not valid: it is 1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit", tag)
	}
	return nil
}

// CloneSpec is the spec of a clone of the VM with spec src, as CloneVM asks
// for it: the source's, under the request's id, with the request's name,
// labels and network where it sets them, and never the source's MAC (empty,
// so that the driver picks one for the clone, unless the request names one),
// and never the source's volumes (a volume is attached to one VM at a time).
func CloneSpec(src *pb.VMSpec, req *pb.CloneVMRequest) *pb.VMSpec {
	spec := proto.Clone(src).(*pb.VMSpec)
	spec.Id = req.GetId()
	if req.GetName() != "" {
		spec.Name = req.GetName()
	}
	if req.GetLabels() != nil {
		spec.Labels = req.GetLabels()
	}
	if req.GetNetwork() != nil {
		spec.Network = proto.Clone(req.GetNetwork()).(*pb.Network)
	} else if spec.Network != nil {
		spec.Network.Mac = ""
	}
	spec.Volumes = nil
	return spec
}

// MaxVolumes is the most volumes one VM may have (VMSpec.volumes).
const MaxVolumes = 2

// volumeID is a volume id a disk serial can carry: virtio-blk keeps 20 bytes.
var volumeID = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,19}$`)

// CheckVolumes checks a spec's volumes against the contract: at most
// MaxVolumes, each with a valid id and an absolute path to an existing
// regular file, no id or path twice. A driver calls it in CreateVM when it
// claims the volumes capability.
func CheckVolumes(spec *pb.VMSpec) error {
	vols := spec.GetVolumes()
	if len(vols) > MaxVolumes {
		return Errorf(ErrInvalid, "vm %s: %d volumes, more than the %d a VM may have", spec.GetId(), len(vols), MaxVolumes)
	}
	seen := map[string]bool{}
	for _, v := range vols {
		if !volumeID.MatchString(v.GetId()) {
			return Errorf(ErrInvalid, "vm %s: volume id %q is not 1-20 of [a-z0-9-] (it is the disk serial)", spec.GetId(), v.GetId())
		}
		if !filepath.IsAbs(v.GetPath()) {
			return Errorf(ErrInvalid, "vm %s: volume %s: path %q is not absolute", spec.GetId(), v.GetId(), v.GetPath())
		}
		if seen["id:"+v.GetId()] || seen["path:"+filepath.Clean(v.GetPath())] {
			return Errorf(ErrInvalid, "vm %s: volume %s is named twice", spec.GetId(), v.GetId())
		}
		seen["id:"+v.GetId()], seen["path:"+filepath.Clean(v.GetPath())] = true, true
		fi, err := os.Stat(v.GetPath())
		if err != nil {
			return Errorf(ErrNotFound, "vm %s: volume %s: %v", spec.GetId(), v.GetId(), err)
		}
		if !fi.Mode().IsRegular() {
			return Errorf(ErrInvalid, "vm %s: volume %s: %s is not a regular file", spec.GetId(), v.GetId(), v.GetPath())
		}
	}
	return nil
}
