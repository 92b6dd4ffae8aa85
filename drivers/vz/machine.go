package vz

import (
	"context"
	"net"
)

// MachineState is a VM's state as the framework reports it, reduced to what
// the driver acts on.
type MachineState string

const (
	MachineStopped  MachineState = "stopped"
	MachineStarting MachineState = "starting"
	MachineRunning  MachineState = "running"
	MachinePaused   MachineState = "paused"
	MachineStopping MachineState = "stopping"
	// MachineError is the framework's error state: the VM stopped because of
	// an internal error, not because it was asked to.
	MachineError MachineState = "error"
)

// Machine is one virtual machine of Apple's Virtualization framework, seen
// through the few calls the host process makes. On a Mac it is backed by
// Code-Hex/vz (machine_darwin.go); on Linux only by the fake VM of this
// package's tests. Everything else of the driver (spec translation, slots,
// handles, the host-process protocol, recovery) is written against it.
type Machine interface {
	// Start boots the VM (from cold, or, with HostConfig.RestoreFrom, by
	// restoring saved memory and resuming).
	Start(ctx context.Context) error
	// Pause freezes the VM's vCPUs; Resume lets them run again.
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
	// RequestStop asks the guest to power off (the virtual power button).
	RequestStop(ctx context.Context) error
	// Stop ends the VM at once, like pulling the power cord.
	Stop(ctx context.Context) error
	// State is the VM's current state.
	State() MachineState
	// StateChanged receives every new state, MachineStopped or MachineError last.
	StateChanged() <-chan MachineState
	// SaveState writes the paused VM's memory and device state to path
	// (macOS 14 or later).
	SaveState(ctx context.Context, path string) error
	// DialVsock connects to a virtio-vsock port of the guest (the guest
	// agent's).
	DialVsock(ctx context.Context, port uint32) (net.Conn, error)
}

// NewMachineFunc builds the Machine a host configuration describes, not yet
// started.
type NewMachineFunc func(cfg *HostConfig) (Machine, error)
