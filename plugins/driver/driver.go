// Package driver is the contract between the FluxVM node agent and hypervisor
// plugins. A plugin implements Driver and calls Serve; the agent calls Launch
// and gets a Driver back that speaks to the plugin process over gRPC.
//
// The contract itself, RPC by RPC, is documented in proto/driver.proto; the
// methods below mirror those RPCs one to one and use its message types, so a
// plugin author reads one document. Plugin authors import this package and
// nothing else from FluxVM.
package driver

import (
	"context"
	"io"
	"time"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// APIVersion is the contract version this package speaks.
const APIVersion = 1

// Driver is a hypervisor. Each method is the RPC of the same name in
// proto/driver.proto, which says what it must do and how it fails. Errors
// should wrap one of the sentinel errors of this package (ErrNotFound,
// ErrInvalid, ...) so they cross the process boundary with the right code.
type Driver interface {
	// PluginInfo names the driver and the contract versions it speaks.
	PluginInfo(ctx context.Context) (*pb.PluginInfoResponse, error)
	// ConfigSchema describes the driver's HCL configuration block.
	ConfigSchema(ctx context.Context) (*pb.ConfigSchemaResponse, error)
	// SetConfig hands the driver its configuration and state directory.
	SetConfig(ctx context.Context, req *pb.SetConfigRequest) error
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
}

// Unsupported answers every optional RPC with ErrUnsupported. Embed it in a
// driver that does not claim some capabilities and implement the rest.
type Unsupported struct{}

// PauseVM reports that the driver cannot pause.
func (Unsupported) PauseVM(context.Context, string) error {
	return Errorf(ErrUnsupported, "this driver cannot pause VMs")
}

// ResumeVM reports that the driver cannot pause.
func (Unsupported) ResumeVM(context.Context, string) error {
	return Errorf(ErrUnsupported, "this driver cannot pause VMs")
}

// Screenshot reports that the driver has no screens.
func (Unsupported) Screenshot(context.Context, string) (*pb.ScreenshotResponse, error) {
	return nil, Errorf(ErrUnsupported, "this driver cannot take screenshots")
}

// SendInput reports that the driver takes no input.
func (Unsupported) SendInput(context.Context, string, []*pb.InputAction) error {
	return Errorf(ErrUnsupported, "this driver cannot send keyboard or pointer input")
}

// Exec reports that the driver has no guest agent.
func (Unsupported) Exec(context.Context, *pb.ExecRequest, io.Writer, io.Writer) (int, error) {
	return 0, Errorf(ErrUnsupported, "this driver cannot run commands in guests")
}
