// Package vz is FluxVM's driver for Apple's Virtualization framework (through
// Code-Hex/vz): macOS and Linux guests on Macs with Apple silicon. Each VM
// runs in a host process of its own (`fluxvm-agent vz-host`) that serves the
// plugin over a unix socket in the VM's workspace, so VMs outlive plugin and
// agent, and a new plugin takes them back from their handles.
//
// Only machine_darwin.go touches the framework, and it builds only for
// darwin/arm64 with cgo; everything else (spec translation, macOS slots,
// handles, the host-process protocol, recovery, snapshots) is ordinary Go
// that builds and is tested everywhere, against a fake VM on Linux. Elsewhere
// the driver reports itself unusable and why.
package vz

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/guest/protocol"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
)

const version = "0.1.0"

// Options are what New takes from the real host and a test takes from its
// fake: the platform and how to start a host process.
type Options struct {
	// Platform is what the host offers (hostPlatform() by default).
	Platform Platform
	// HostCommand returns the command that runs the host process of the VM
	// in workspace (by default this executable's `vz-host -workspace WS`).
	HostCommand func(workspace string) *exec.Cmd
	// StartTimeout bounds how long a host process may take to answer on its
	// socket after it was started (30 s by default).
	StartTimeout time.Duration
}

// config is the driver's configuration block.
type config struct {
	// MacOSSlots lowers the number of macOS VMs that may run at once (at
	// most MacOSSlots, Apple's limit).
	MacOSSlots int64 `json:"macos_slots"`
	// VCPUs and MemoryMiB are what the host offers to VMs; 0 for all of it.
	VCPUs     int64 `json:"vcpus"`
	MemoryMiB int64 `json:"memory_mib"`
}

// Driver is the vz driver. What it knows of a VM lives in the VM's workspace
// and in its host process; memory holds only this plugin process's view.
type Driver struct {
	driver.Unsupported // screenshots, input and port forwards: see Capabilities

	log  hclog.Logger
	opts Options

	mu       sync.Mutex
	cfg      config
	stateDir string
	vms      map[string]*vm
	slots    *slots
	subs     map[chan struct{}]struct{}  // fingerprint listeners
	events   map[chan *pb.Event]struct{} // Events listeners
}

var _ driver.Driver = (*Driver)(nil)

// New returns the vz driver of this build: usable on a Mac with Apple
// silicon (built with cgo), reporting why not everywhere else.
func New(logger hclog.Logger) driver.Driver {
	return NewWithOptions(logger, Options{})
}

// NewWithOptions returns the driver with the given platform and host
// command (defaults for zero fields).
func NewWithOptions(logger hclog.Logger, opts Options) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	if opts.Platform == (Platform{}) {
		opts.Platform = hostPlatform()
	}
	if opts.HostCommand == nil {
		opts.HostCommand = func(ws string) *exec.Cmd {
			self, err := os.Executable()
			if err != nil {
				self = os.Args[0]
			}
			return exec.Command(self, "vz-host", "-workspace", ws)
		}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 30 * time.Second
	}
	return &Driver{
		log:    logger,
		opts:   opts,
		cfg:    config{MacOSSlots: MacOSSlots},
		vms:    map[string]*vm{},
		slots:  newSlots(MacOSSlots),
		subs:   map[chan struct{}]struct{}{},
		events: map[chan *pb.Event]struct{}{},
	}
}

// vm is one VM this plugin process knows.
type vm struct {
	id, ws string
	spec   *pb.VMSpec
	cfg    *HostConfig

	mu        sync.Mutex
	state     pb.VMState
	hello     *hostHello    // the running host process, nil when none
	done      chan struct{} // closed when that host process has ended
	exit      *pb.ExitResult
	started   int64
	stopped   int64
	agent     *protocol.Client
	agentUp   bool
	busy      bool // a snapshot, restore or stop is under way
	destroyed bool
}

func (v *vm) host() hostClient { return hostClient{socket: v.cfg.Socket} }

// PluginInfo names the driver.
func (d *Driver) PluginInfo(context.Context) (*basepb.PluginInfoResponse, error) {
	desc := "Apple Virtualization framework (Code-Hex/vz v3): macOS and Linux guests on Apple silicon"
	if !d.opts.Platform.Usable {
		desc += "; unusable here: " + d.opts.Platform.Why
	}
	return &basepb.PluginInfoResponse{
		Name:        driverName,
		Type:        basepb.PluginType_PLUGIN_TYPE_DRIVER,
		Version:     version,
		ApiVersions: []uint32{driver.APIVersion},
		Description: desc,
	}, nil
}

// ConfigSchema describes the vz configuration block.
func (d *Driver) ConfigSchema(context.Context) (*basepb.ConfigSchemaResponse, error) {
	const number = basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER
	return &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{
		{Name: "macos_slots", Type: number, DefaultJson: strconv.Itoa(MacOSSlots), Description: "macOS VMs that may run at once: 0 to 2 (Apple's licence allows 2)"},
		{Name: "vcpus", Type: number, DefaultJson: "0", Description: "vCPUs offered to VMs; 0 for all of the Mac's"},
		{Name: "memory_mib", Type: number, DefaultJson: "0", Description: "memory (MiB) offered to VMs; 0 for all of the Mac's"},
	}}, nil
}

// SetConfig takes the configuration and the state dir, and counts the macOS
// slots held by host processes already running there (VMs of an earlier
// plugin process, recovered or not).
func (d *Driver) SetConfig(ctx context.Context, req *basepb.SetConfigRequest) error {
	c := config{MacOSSlots: MacOSSlots}
	if data := bytes.TrimSpace(req.GetConfigJson()); len(data) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return driver.Errorf(driver.ErrInvalid, "vz config: %v", err)
		}
	}
	if c.MacOSSlots < 0 || c.MacOSSlots > MacOSSlots {
		return driver.Errorf(driver.ErrInvalid, "vz config: macos_slots %d is out of range 0-%d (Apple's licence allows %d)", c.MacOSSlots, MacOSSlots, MacOSSlots)
	}
	if c.VCPUs < 0 || c.MemoryMiB < 0 {
		return driver.Errorf(driver.ErrInvalid, "vz config: vcpus and memory_mib must not be negative")
	}
	dir := req.GetAgent().GetStateDir()
	if dir == "" || !filepath.IsAbs(dir) {
		return driver.Errorf(driver.ErrInvalid, "vz config: the agent's state_dir must be an absolute path (got %q)", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "vms"), 0o700); err != nil {
		return fmt.Errorf("vz: create state dir: %w", err)
	}
	held := map[string]bool{}
	entries, _ := os.ReadDir(filepath.Join(dir, "vms"))
	for _, e := range entries {
		ws := filepath.Join(dir, "vms", e.Name())
		var hc HostConfig
		if !e.IsDir() || readJSON(filepath.Join(ws, hostFile), &hc) != nil || hc.GuestOS != "macos" {
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := hostClient{socket: filepath.Join(ws, socketName)}.hello(hctx)
		cancel()
		if err == nil && h.VMID == e.Name() {
			held[e.Name()] = true
		}
	}
	d.mu.Lock()
	if d.stateDir != "" && d.stateDir != dir && len(d.vms) > 0 {
		d.mu.Unlock()
		return driver.Errorf(driver.ErrInvalid, "vz config: state_dir changed from %s to %s while this plugin holds VMs", d.stateDir, dir)
	}
	d.cfg, d.stateDir = c, dir
	d.slots.reset(int(c.MacOSSlots), held)
	d.notifyLocked()
	d.mu.Unlock()
	return nil
}

// Capabilities: pause, exec (the guest agent over vsock), disk snapshots
// (APFS clones) and clones wherever the driver is usable; volumes (Linux
// guests) where disks can carry serials (macOS 12.3 or later); memory
// snapshots only where the framework can save a VM's state (macOS 14 or
// later). No screenshots or input: the framework draws a VM's
// screen only into a window of the host's GUI session and takes input only
// from it, and a host process runs without one (docs/design/014-vz-driver.md).
// No port forwards yet: not built.
func (d *Driver) Capabilities(context.Context) (*pb.CapabilitiesResponse, error) {
	p := d.opts.Platform
	return &pb.CapabilitiesResponse{
		Pause:           p.Usable,
		Exec:            p.Usable,
		Headless:        true,
		GuestOs:         []pb.GuestOS{pb.GuestOS_GUEST_OS_LINUX, pb.GuestOS_GUEST_OS_MACOS},
		DiskSnapshots:   p.Usable,
		MemorySnapshots: p.Usable && p.SaveRestore,
		Clones:          p.Usable,
		Volumes:         p.Usable && p.Volumes,
	}, nil
}

// fingerprintLocked describes the host as it is now.
func (d *Driver) fingerprintLocked() *pb.FingerprintResponse {
	p := d.opts.Platform
	if !p.Usable {
		return &pb.FingerprintResponse{
			Health:      pb.Health_HEALTH_UNDETECTED,
			Description: "vz: unusable: " + p.Why,
			Attributes:  map[string]string{"vz.usable": "false", "vz.version": version},
			Resources:   &pb.Resources{},
		}
	}
	vcpus, mem := p.CPUs, p.MemoryMiB
	if d.cfg.VCPUs > 0 {
		vcpus = min(vcpus, d.cfg.VCPUs)
	}
	if d.cfg.MemoryMiB > 0 {
		mem = min(mem, d.cfg.MemoryMiB)
	}
	return &pb.FingerprintResponse{
		Health:      pb.Health_HEALTH_HEALTHY,
		Description: "vz: Virtualization framework on macOS " + p.OSVersion,
		Attributes: map[string]string{
			"vz.usable":           "true",
			"vz.version":          version,
			"vz.macos":            p.OSVersion,
			"vz.save_restore":     strconv.FormatBool(p.SaveRestore),
			"vz.macos_slots_free": strconv.Itoa(d.slots.free()),
		},
		Resources: &pb.Resources{Vcpus: vcpus, MemoryMib: mem, MacosSlots: d.cfg.MacOSSlots},
	}
}

func (d *Driver) notifyLocked() {
	for c := range d.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (d *Driver) notify() {
	d.mu.Lock()
	d.notifyLocked()
	d.mu.Unlock()
}

// Fingerprint sends the host's state at once and again when it changes.
func (d *Driver) Fingerprint(ctx context.Context) (<-chan *pb.FingerprintResponse, error) {
	wake := make(chan struct{}, 1)
	d.mu.Lock()
	d.subs[wake] = struct{}{}
	first := d.fingerprintLocked()
	d.mu.Unlock()
	out := make(chan *pb.FingerprintResponse, 1)
	go func() {
		defer close(out)
		defer func() { d.mu.Lock(); delete(d.subs, wake); d.mu.Unlock() }()
		last, msg := first, first
		for {
			if msg != nil {
				select {
				case out <- msg:
					last = msg
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
			d.mu.Lock()
			next := d.fingerprintLocked()
			d.mu.Unlock()
			msg = nil
			if !proto.Equal(next, last) {
				msg = next
			}
		}
	}()
	return out, nil
}

// unusable is the error of every VM call on a host where the driver cannot run.
func (d *Driver) unusable() error {
	if d.opts.Platform.Usable {
		return nil
	}
	return driver.Errorf(driver.ErrUnavailable, "vz driver unusable: %s", d.opts.Platform.Why)
}

func (d *Driver) workspace(id string) string { return filepath.Join(d.stateDir, "vms", id) }

// lookup returns a known VM, or reads one an earlier plugin process created
// from its workspace (a VM that was never started has no handle to recover).
func (d *Driver) lookup(id string) (*vm, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.vms[id]; ok {
		return v, nil
	}
	if d.stateDir == "" || !idPattern.MatchString(id) {
		return nil, driver.Errorf(driver.ErrNotFound, "vm %q not found", id)
	}
	v, err := d.loadLocked(id)
	if err != nil {
		return nil, err
	}
	return v, nil
}

// loadLocked reads a VM's workspace into a stopped (or created) vm.
func (d *Driver) loadLocked(id string) (*vm, error) {
	ws := d.workspace(id)
	data, err := os.ReadFile(filepath.Join(ws, specFile))
	if err != nil {
		return nil, driver.Errorf(driver.ErrNotFound, "vm %q not found", id)
	}
	spec, err := driver.UnmarshalSpecJSON(data)
	if err != nil {
		return nil, fmt.Errorf("vm %s: read spec: %w", id, err)
	}
	var hc HostConfig
	if err := readJSON(filepath.Join(ws, hostFile), &hc); err != nil {
		return nil, fmt.Errorf("vm %s: %w", id, err)
	}
	v := &vm{id: id, ws: ws, spec: spec, cfg: &hc, state: pb.VMState_VM_STATE_CREATED}
	var ex hostExit
	if readJSON(filepath.Join(ws, exitFile), &ex) == nil {
		v.state, v.exit, v.stopped = pb.VMState_VM_STATE_STOPPED, exitResult(&ex), ex.StopTime
	}
	d.vms[id] = v
	return v, nil
}

// exitResult turns a host process's exit record into the contract's.
func exitResult(ex *hostExit) *pb.ExitResult {
	r := &pb.ExitResult{Message: "vz: " + ex.Message}
	switch ex.Reason {
	case "stopped":
		r.Reason = pb.ExitReason_EXIT_REASON_SHUTDOWN
	case "killed":
		r.Reason = pb.ExitReason_EXIT_REASON_KILLED
	case "crashed":
		r.Reason = pb.ExitReason_EXIT_REASON_CRASHED
	}
	return r
}

// CreateVM translates the spec, makes the workspace and clones the image's
// files into it (APFS clones on a Mac: instant, no space until written).
func (d *Driver) CreateVM(ctx context.Context, spec *pb.VMSpec) (*pb.VMStatus, error) {
	if err := d.unusable(); err != nil {
		return nil, err
	}
	if d.stateDir == "" {
		return nil, driver.Errorf(driver.ErrState, "vz: SetConfig has not been called")
	}
	ws := d.workspace(spec.GetId())
	hc, err := translate(spec, ws, spec.GetGuestOs())
	if err != nil {
		return nil, err
	}
	files, err := imageFiles(spec.GetImage(), spec.GetGuestOs())
	if err != nil {
		return nil, err
	}
	return d.create(spec, hc, files)
}

// create makes a workspace from files (source path to workspace name) and
// records the VM; a failure leaves nothing behind.
func (d *Driver) create(spec *pb.VMSpec, hc *HostConfig, files map[string]string) (*pb.VMStatus, error) {
	d.mu.Lock()
	_, known := d.vms[spec.Id]
	d.mu.Unlock()
	ws := d.workspace(spec.Id)
	if known {
		return nil, driver.Errorf(driver.ErrExists, "vm %s already exists", spec.Id)
	}
	if err := os.Mkdir(ws, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, driver.Errorf(driver.ErrExists, "vm %s already exists", spec.Id)
		}
		return nil, fmt.Errorf("vm %s: make workspace: %w", spec.Id, err)
	}
	fail := func(err error) (*pb.VMStatus, error) {
		_ = os.RemoveAll(ws)
		return nil, err
	}
	for src, name := range files {
		if err := cloneFile(src, filepath.Join(ws, name)); err != nil {
			return fail(fmt.Errorf("vm %s: clone %s: %w", spec.Id, src, err))
		}
	}
	data, err := driver.MarshalSpecJSON(spec)
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(ws, specFile), data, 0o600); err != nil {
		return fail(err)
	}
	if err := writeJSON(filepath.Join(ws, hostFile), hc); err != nil {
		return fail(err)
	}
	v := &vm{id: spec.Id, ws: ws, spec: spec, cfg: hc, state: pb.VMState_VM_STATE_CREATED}
	d.mu.Lock()
	d.vms[spec.Id] = v
	d.mu.Unlock()
	d.publish(spec.Id, pb.EventType_EVENT_TYPE_CREATED, "created")
	return v.status(), nil
}

// status reports the VM as this plugin process sees it.
func (v *vm) status() *pb.VMStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := &pb.VMStatus{
		Id: v.id, State: v.state, StartedAtUnixNano: v.started, StoppedAtUnixNano: v.stopped,
		AgentReady: v.agentUp, Spec: v.spec,
		Attributes: map[string]string{"workspace": v.ws, "socket": v.cfg.Socket, "guest_os": v.cfg.GuestOS},
	}
	if v.hello != nil {
		st.Attributes["pid"] = strconv.Itoa(v.hello.PID)
		st.Attributes["instance"] = v.hello.Instance
	}
	if v.state == pb.VMState_VM_STATE_STOPPED {
		st.Exit = v.exit
	}
	return st
}

// StartVM starts the VM's host process, detached from this plugin, and
// returns once it answers on its socket with the VM running.
func (d *Driver) StartVM(ctx context.Context, id string) (*pb.Handle, *pb.VMStatus, error) {
	if err := d.unusable(); err != nil {
		return nil, nil, err
	}
	v, err := d.lookup(id)
	if err != nil {
		return nil, nil, err
	}
	v.mu.Lock()
	if v.state == pb.VMState_VM_STATE_RUNNING || v.state == pb.VMState_VM_STATE_PAUSED || v.busy {
		v.mu.Unlock()
		return nil, nil, driver.Errorf(driver.ErrState, "vm %s is already running", id)
	}
	v.busy = true
	v.mu.Unlock()
	defer func() { v.mu.Lock(); v.busy = false; v.mu.Unlock() }()
	return d.start(ctx, v)
}

// start runs the host process of v (not running) and takes it over.
func (d *Driver) start(ctx context.Context, v *vm) (*pb.Handle, *pb.VMStatus, error) {
	if v.cfg.GuestOS == "macos" {
		if err := d.slots.take(v.id); err != nil {
			return nil, nil, err
		}
		d.notify()
	}
	h, err := d.runHost(ctx, v)
	if err != nil {
		d.slots.release(v.id)
		d.notify()
		return nil, nil, err
	}
	handle, err := d.attach(v, h)
	if err != nil {
		return nil, nil, err
	}
	d.publish(v.id, pb.EventType_EVENT_TYPE_STARTED, fmt.Sprintf("host process %d started", h.PID))
	return handle, v.status(), nil
}

// runHost starts the host process in its own session (so it outlives this
// plugin) and waits for its hello.
func (d *Driver) runHost(ctx context.Context, v *vm) (*hostHello, error) {
	_ = os.Remove(filepath.Join(v.ws, exitFile))
	logf, err := os.OpenFile(filepath.Join(v.ws, hostLog), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vm %s: host log: %w", v.id, err)
	}
	defer logf.Close()
	cmd := d.opts.HostCommand(v.ws)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vm %s: start host process: %w", v.id, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it when it ends while we run
	deadline := time.Now().Add(d.opts.StartTimeout)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		h, err := v.host().hello(hctx)
		cancel()
		if err == nil && h.PID == cmd.Process.Pid && h.VMID == v.id {
			return h, nil
		}
		select {
		case werr := <-exited:
			tail, _ := tailFile(filepath.Join(v.ws, hostLog), 2048)
			return nil, driver.Errorf(driver.ErrUnavailable, "vm %s: host process ended before the VM ran (%v): %s", v.id, werr, bytes.TrimSpace(tail))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return nil, driver.Errorf(driver.ErrTimeout, "vm %s: host process did not answer on %s within %v", v.id, v.cfg.Socket, d.opts.StartTimeout)
		}
	}
}

// attach makes h the VM's running host process and follows it until it ends.
func (d *Driver) attach(v *vm, h *hostHello) (*pb.Handle, error) {
	handle, err := encodeHandle(v.id, handleState{Workspace: v.ws, Socket: v.cfg.Socket, Instance: h.Instance, PID: h.PID, StartedAt: h.StartedAt})
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	v.mu.Lock()
	v.hello, v.done, v.exit = h, done, nil
	v.state = pb.VMState_VM_STATE_RUNNING
	if h.State == MachinePaused {
		v.state = pb.VMState_VM_STATE_PAUSED
	}
	v.started, v.stopped = h.StartedAt, 0
	v.mu.Unlock()
	go d.follow(v, h, done)
	return handle, nil
}

// follow waits for the host process's VM to stop, then records how.
func (d *Driver) follow(v *vm, h *hostHello, done chan struct{}) {
	var exit *pb.ExitResult
	for {
		rep, _, err := v.host().call(context.Background(), hostRequest{Op: opWait})
		if err == nil && rep.Exit != nil {
			exit = exitResult(rep.Exit)
			break
		}
		// The connection broke: the host process ended (exit.json says how,
		// if it could write it) or was killed.
		hctx, cancel := context.WithTimeout(context.Background(), time.Second)
		again, herr := v.host().hello(hctx)
		cancel()
		if herr == nil && again.Instance == h.Instance {
			continue
		}
		var ex hostExit
		if readJSON(filepath.Join(v.ws, exitFile), &ex) == nil {
			exit = exitResult(&ex)
		} else {
			exit = &pb.ExitResult{Reason: pb.ExitReason_EXIT_REASON_CRASHED, Message: fmt.Sprintf("vz: host process %d ended without a word (killed?)", h.PID)}
		}
		break
	}
	v.mu.Lock()
	v.state, v.exit, v.stopped = pb.VMState_VM_STATE_STOPPED, exit, time.Now().UnixNano()
	v.hello, v.agentUp = nil, false
	if v.agent != nil {
		_ = v.agent.Close()
		v.agent = nil
	}
	destroyed := v.destroyed
	close(done)
	v.mu.Unlock()
	d.slots.release(v.id)
	d.notify()
	if destroyed {
		return
	}
	typ := pb.EventType_EVENT_TYPE_STOPPED
	if exit.Reason == pb.ExitReason_EXIT_REASON_CRASHED {
		typ = pb.EventType_EVENT_TYPE_CRASHED
	}
	d.publish(v.id, typ, exit.Message)
}

// RecoverVM takes a VM back from its handle. The VM's host process must
// answer on the recorded socket with the recorded VM id and instance: a
// socket that serves another VM, or another run of this one, is refused,
// whatever its PID. A VM whose host process is gone is reported stopped.
func (d *Driver) RecoverVM(ctx context.Context, h *pb.Handle) (*pb.VMStatus, error) {
	st, err := decodeHandle(h)
	if err != nil {
		return nil, err
	}
	if d.stateDir != "" && st.Workspace != d.workspace(h.VmId) {
		return nil, driver.Errorf(driver.ErrInvalid, "handle of vm %s: workspace %s is not under this plugin's state_dir %s", h.VmId, st.Workspace, d.stateDir)
	}
	v, err := d.lookup(h.VmId)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.hello != nil && v.hello.Instance == st.Instance {
		v.mu.Unlock()
		return v.status(), nil
	}
	v.mu.Unlock()
	hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	hello, err := v.host().hello(hctx)
	cancel()
	if err != nil {
		if errors.Is(err, driver.ErrState) {
			return nil, err
		}
		// Nothing answers: the VM stopped while no plugin watched it.
		v.mu.Lock()
		if v.state != pb.VMState_VM_STATE_STOPPED {
			v.state = pb.VMState_VM_STATE_STOPPED
			v.exit = &pb.ExitResult{Message: "vz: the VM's host process was gone when the plugin came back"}
		}
		v.mu.Unlock()
		return v.status(), nil
	}
	switch {
	case hello.VMID != h.VmId:
		return nil, driver.Errorf(driver.ErrState, "vm %s: socket %s serves vm %s, not the recorded one: refusing it", h.VmId, st.Socket, hello.VMID)
	case hello.Instance != st.Instance:
		return nil, driver.Errorf(driver.ErrState, "vm %s: socket %s serves host-process instance %s (pid %d), not the recorded %s (pid %d): refusing it", h.VmId, st.Socket, hello.Instance, hello.PID, st.Instance, st.PID)
	}
	if v.cfg.GuestOS == "macos" {
		d.slots.hold(v.id) // it runs: the slot is held whatever the count says
		d.notify()
	}
	if _, err := d.attach(v, hello); err != nil {
		return nil, err
	}
	d.publish(v.id, pb.EventType_EVENT_TYPE_RECOVERED, fmt.Sprintf("host process %d (instance %s) taken back", hello.PID, hello.Instance))
	return v.status(), nil
}

// running returns the VM's host process channel, or ErrState when it does
// not run.
func (v *vm) running() (chan struct{}, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.hello == nil {
		return nil, driver.Errorf(driver.ErrState, "vm %s is not running", v.id)
	}
	return v.done, nil
}

// WaitVM blocks until the VM stops.
func (d *Driver) WaitVM(ctx context.Context, id string) (*pb.ExitResult, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	done := v.done
	running := v.hello != nil
	v.mu.Unlock()
	if running {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.exit == nil {
		return &pb.ExitResult{}, nil
	}
	return v.exit, nil
}

// agentClient returns the guest agent connection, dialling it through the
// host process's vsock relay when there is none.
func (v *vm) agentClient(ctx context.Context) (*protocol.Client, error) {
	v.mu.Lock()
	if v.agent != nil {
		c := v.agent
		v.mu.Unlock()
		return c, nil
	}
	v.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, conn, err := v.host().call(dctx, hostRequest{Op: opVsock, Port: v.cfg.AgentPort})
	if err != nil {
		return nil, err
	}
	c := protocol.NewClient(conn)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.agent != nil {
		_ = c.Close()
		return v.agent, nil
	}
	v.agent = c
	return c, nil
}

func (v *vm) dropAgent(c *protocol.Client) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.agent == c {
		_ = c.Close()
		v.agent = nil
	}
}

// WaitReady waits until the guest agent answers over vsock; the guest
// listens only once it has booted, so dialling is retried.
func (d *Driver) WaitReady(ctx context.Context, id string) (map[string]string, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	done, err := v.running()
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-done:
			cancel()
		case <-rctx.Done():
		}
	}()
	for {
		c, err := v.agentClient(rctx)
		if err == nil {
			var info *protocol.Info
			info, err = c.WaitReady(rctx)
			if err == nil {
				v.mu.Lock()
				first := !v.agentUp
				v.agentUp = true
				v.mu.Unlock()
				if first {
					d.publish(id, pb.EventType_EVENT_TYPE_GUEST_READY, info.AgentVersion)
				}
				return map[string]string{
					"agent_version": info.AgentVersion, "kernel": info.Kernel, "hostname": info.Hostname,
					"os": info.OS, "uptime": strconv.FormatFloat(info.Uptime, 'f', 2, 64),
				}, nil
			}
			v.dropAgent(c)
		}
		select {
		case <-done:
			return nil, driver.Errorf(driver.ErrState, "vm %s stopped while waiting for its guest agent", id)
		default:
		}
		switch {
		case ctx.Err() == context.DeadlineExceeded:
			return nil, driver.Errorf(driver.ErrTimeout, "vm %s: the guest agent did not answer in time (last: %v)", id, err)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		select {
		case <-rctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StopVM asks the guest agent to power off, then the framework's power
// button, and pulls the plug when timeout passes.
func (d *Driver) StopVM(ctx context.Context, id string, timeout time.Duration) (*pb.ExitResult, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	done, err := v.running()
	if err != nil {
		return d.WaitVM(ctx, id) // stopping a stopped VM succeeds
	}
	deadline := time.Now().Add(timeout)
	v.mu.Lock()
	c, paused := v.agent, v.state == pb.VMState_VM_STATE_PAUSED
	v.mu.Unlock()
	if c != nil && !paused && timeout > 0 {
		sctx, cancel := context.WithTimeout(ctx, timeout/2)
		if c.Shutdown(sctx) == nil {
			select {
			case <-done:
			case <-sctx.Done():
			}
		}
		cancel()
	}
	select {
	case <-done:
	default:
		rest := max(time.Until(deadline), 0)
		req := hostRequest{Op: opStop, Force: rest == 0 || paused, TimeoutMS: rest.Milliseconds()}
		if _, _, err := v.host().call(ctx, req); err != nil && !errors.Is(err, driver.ErrUnavailable) {
			return nil, fmt.Errorf("stop vm %s: %w", id, err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.exit.Reason == pb.ExitReason_EXIT_REASON_SHUTDOWN {
		// Asked to: StopVM's stop, not the guest's own power-off. A copy,
		// since follow may still read the one it made.
		ex := proto.Clone(v.exit).(*pb.ExitResult)
		ex.Reason = pb.ExitReason_EXIT_REASON_STOPPED
		v.exit = ex
	}
	return v.exit, nil
}

// DestroyVM stops the VM (force) and removes its workspace. It works when
// this plugin never saw the VM and when its host process is gone.
func (d *Driver) DestroyVM(ctx context.Context, id string, force bool) error {
	if !idPattern.MatchString(id) || d.stateDir == "" {
		return nil
	}
	ws := d.workspace(id)
	v, err := d.lookup(id)
	if err == nil {
		v.mu.Lock()
		running := v.hello != nil
		v.mu.Unlock()
		if !running {
			// A host process this plugin does not follow may still run.
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, herr := v.host().hello(hctx)
			cancel()
			if herr == nil && h.VMID == id {
				if !force {
					return driver.Errorf(driver.ErrState, "vm %s runs (host process %d): stop it first or destroy with force", id, h.PID)
				}
				_, _ = d.attach(v, h)
				running = true
			}
		}
		if running {
			if !force {
				return driver.Errorf(driver.ErrState, "vm %s runs: stop it first or destroy with force", id)
			}
			v.mu.Lock()
			v.destroyed = true
			v.mu.Unlock()
			if _, err := d.StopVM(ctx, id, 0); err != nil {
				return fmt.Errorf("destroy vm %s: %w", id, err)
			}
		}
	}
	if err := os.RemoveAll(ws); err != nil {
		return fmt.Errorf("destroy vm %s: remove workspace: %w", id, err)
	}
	d.mu.Lock()
	delete(d.vms, id)
	d.mu.Unlock()
	d.slots.release(id)
	d.notify()
	d.publish(id, pb.EventType_EVENT_TYPE_DESTROYED, "destroyed")
	return nil
}

// InspectVM reports a VM's status.
func (d *Driver) InspectVM(_ context.Context, id string) (*pb.VMStatus, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	return v.status(), nil
}

// ListVMs lists the VMs this plugin process knows, by id.
func (d *Driver) ListVMs(context.Context) ([]*pb.VMStatus, error) {
	d.mu.Lock()
	vms := make([]*vm, 0, len(d.vms))
	for _, v := range d.vms {
		vms = append(vms, v)
	}
	d.mu.Unlock()
	sort.Slice(vms, func(i, j int) bool { return vms[i].id < vms[j].id })
	out := make([]*pb.VMStatus, 0, len(vms))
	for _, v := range vms {
		out = append(out, v.status())
	}
	return out, nil
}

// ConsoleLog returns the tail of the serial console file.
func (d *Driver) ConsoleLog(_ context.Context, id string, maxBytes int64) ([]byte, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	data, err := tailFile(v.cfg.Console, maxBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// tailFile returns the last max bytes of a file (all of it for 0).
func tailFile(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if max > 0 && fi.Size() > max {
		if _, err := f.Seek(fi.Size()-max, io.SeekStart); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

// PauseVM freezes the VM's vCPUs.
func (d *Driver) PauseVM(ctx context.Context, id string) error {
	return d.pauseResume(ctx, id, opPause, pb.VMState_VM_STATE_RUNNING, pb.VMState_VM_STATE_PAUSED, pb.EventType_EVENT_TYPE_PAUSED)
}

// ResumeVM lets a paused VM run again.
func (d *Driver) ResumeVM(ctx context.Context, id string) error {
	return d.pauseResume(ctx, id, opResume, pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, pb.EventType_EVENT_TYPE_RESUMED)
}

func (d *Driver) pauseResume(ctx context.Context, id, op string, from, to pb.VMState, ev pb.EventType) error {
	if err := d.unusable(); err != nil {
		return err
	}
	v, err := d.lookup(id)
	if err != nil {
		return err
	}
	v.mu.Lock()
	state := v.state
	v.mu.Unlock()
	if state != from {
		return driver.Errorf(driver.ErrState, "vm %s is %s, not %s", id, stateName(state), stateName(from))
	}
	if _, _, err := v.host().call(ctx, hostRequest{Op: op}); err != nil {
		return fmt.Errorf("%s vm %s: %w", op, id, err)
	}
	v.mu.Lock()
	v.state = to
	v.mu.Unlock()
	d.publish(id, ev, op+"d")
	return nil
}

func stateName(s pb.VMState) string {
	switch s {
	case pb.VMState_VM_STATE_CREATED:
		return "created"
	case pb.VMState_VM_STATE_RUNNING:
		return "running"
	case pb.VMState_VM_STATE_PAUSED:
		return "paused"
	case pb.VMState_VM_STATE_STOPPED:
		return "stopped"
	}
	return "unknown"
}

// Exec runs a command through the guest agent.
func (d *Driver) Exec(ctx context.Context, req *pb.ExecRequest, stdout, stderr io.Writer) (int, error) {
	if err := d.unusable(); err != nil {
		return -1, err
	}
	v, err := d.lookup(req.GetId())
	if err != nil {
		return -1, err
	}
	preq := &protocol.ExecRequest{Argv: req.GetArgv().GetArgs(), Shell: req.GetShell(), Env: req.Env, Stdin: req.Stdin, TimeoutMS: req.TimeoutMs, Dir: req.Dir}
	if err := preq.Validate(); err != nil {
		return -1, driver.Errorf(driver.ErrInvalid, "exec in vm %s: %v", v.id, err)
	}
	v.mu.Lock()
	state := v.state
	v.mu.Unlock()
	if state != pb.VMState_VM_STATE_RUNNING {
		return -1, driver.Errorf(driver.ErrState, "vm %s is %s; it must run to run commands", v.id, stateName(state))
	}
	c, err := v.agentClient(ctx)
	if err != nil {
		return -1, driver.Errorf(driver.ErrUnavailable, "exec in vm %s: cannot reach the guest agent: %v", v.id, err)
	}
	code, err := c.Exec(ctx, preq, stdout, stderr)
	switch {
	case err == nil:
		return code, nil
	case errors.Is(err, protocol.ErrTimeout):
		return protocol.CodeTimeout, nil
	case ctx.Err() != nil:
		return -1, ctx.Err()
	case errors.Is(err, protocol.ErrClosed):
		v.dropAgent(c)
		return -1, driver.Errorf(driver.ErrUnavailable, "exec in vm %s: the guest agent connection dropped: %v", v.id, err)
	}
	return -1, fmt.Errorf("exec in vm %s: %w", v.id, err)
}
