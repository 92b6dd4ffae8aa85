// Command fluxvm-driver-example is a FluxVM driver plugin written the way a
// hosting provider would write one: in its own Go module, importing nothing
// from FluxVM but the plugin contract (plugins/driver, plugins/base and their
// proto types).
//
// It is a "process" driver: each VM is a plain host process
// (`/bin/sh -c 'echo booted; exec sleep ...'`) started in a session of its
// own, so it outlives this plugin exactly as a real hypervisor process must.
// Replace startProcess with your hypervisor's launch and keep the rest: the
// workspace on disk, the identity check on recover, the honest stop and a
// destroy that works when the process is gone.
//
// It claims no optional capability (no pause, screen, input or exec): it
// embeds driver.Unsupported, the agent never calls those RPCs on it, and the
// conformance suite tests only what a driver claims.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
)

const (
	name          = "example"
	version       = "0.1.0"
	handleVersion = 1
	// The "guest": prints a line to its console, then idles. exec keeps one
	// process, so the pid we record is the VM.
	guestScript = "echo booted; exec sleep 2147483647"
)

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func main() {
	logger := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: os.Stderr, JSONFormat: true})
	driver.Serve(newDriver(logger), logger)
}

// config is the plugin's HCL block: `plugin "example" { config { ... } }`.
type config struct {
	VCPUs     int64 `json:"vcpus"`      // what the host offers, for placement
	MemoryMiB int64 `json:"memory_mib"` // (this example does not enforce it)
}

// record is <state_dir>/vms/<id>/vm.json, the VM's state on disk. A new
// plugin process reads it; nothing important lives only in memory.
type record struct {
	Spec      json.RawMessage `json:"spec"` // pb.VMSpec (driver.MarshalSpecJSON)
	State     string          `json:"state"`
	Pid       int             `json:"pid,omitempty"`
	StartTime uint64          `json:"start_time,omitempty"` // /proc/<pid>/stat field 22
	StartedAt int64           `json:"started_at_unix_nano,omitempty"`
	StoppedAt int64           `json:"stopped_at_unix_nano,omitempty"`
	Exit      *exitRecord     `json:"exit,omitempty"`
}

// exitRecord is how the VM ended, with the reason by name ("crashed"), so
// the file reads well and does not depend on enum numbers.
type exitRecord struct {
	Reason   string `json:"reason,omitempty"`
	ExitCode int32  `json:"exit_code,omitempty"`
	Message  string `json:"message,omitempty"`
}

func newExit(reason pb.ExitReason, code int32, msg string) *exitRecord {
	return &exitRecord{Reason: base.EnumName(reason), ExitCode: code, Message: msg}
}

func (e *exitRecord) pb() *pb.ExitResult {
	if e == nil {
		return nil
	}
	reason, _ := base.ParseEnum[pb.ExitReason](e.Reason)
	return &pb.ExitResult{Reason: reason, ExitCode: e.ExitCode, Message: e.Message}
}

// handleState is the opaque part of the handle: which process is the VM.
type handleState struct {
	Pid       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

type exampleDriver struct {
	driver.Unsupported // pause, screenshot, input, exec: not claimed

	log      hclog.Logger
	mu       sync.Mutex
	cfg      config
	stateDir string
	known    map[string]bool // VMs this process created, started or recovered
	stopping map[string]bool // VMs StopVM/DestroyVM is ending (not crashes)
	subs     map[chan *pb.Event]bool
}

func newDriver(log hclog.Logger) *exampleDriver {
	return &exampleDriver{log: log, known: map[string]bool{}, stopping: map[string]bool{}, subs: map[chan *pb.Event]bool{}}
}

// ---- Base RPCs ----

func (d *exampleDriver) PluginInfo(context.Context) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{Name: name, Type: basepb.PluginType_PLUGIN_TYPE_DRIVER, Version: version,
		ApiVersions: []uint32{driver.APIVersion}, Description: "example process driver: each VM is a host process"}, nil
}

func (d *exampleDriver) ConfigSchema(context.Context) (*basepb.ConfigSchemaResponse, error) {
	const number = basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER
	return &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{
		{Name: "vcpus", Type: number, DefaultJson: strconv.Itoa(runtime.NumCPU()), Description: "vCPUs this host offers to VMs"},
		{Name: "memory_mib", Type: number, DefaultJson: "4096", Description: "memory (MiB) this host offers to VMs"},
	}}, nil
}

func (d *exampleDriver) SetConfig(_ context.Context, req *basepb.SetConfigRequest) error {
	c := config{VCPUs: int64(runtime.NumCPU()), MemoryMiB: 4096}
	dec := json.NewDecoder(bytes.NewReader(req.ConfigJson))
	dec.DisallowUnknownFields() // names the unknown field in its message
	if err := dec.Decode(&c); err != nil {
		return driver.Errorf(driver.ErrInvalid, "example config: %v", err)
	}
	if c.VCPUs < 1 || c.MemoryMiB < 64 {
		return driver.Errorf(driver.ErrInvalid, "example config: vcpus must be ≥ 1 and memory_mib ≥ 64")
	}
	dir := req.GetAgent().GetStateDir()
	if !filepath.IsAbs(dir) {
		return driver.Errorf(driver.ErrInvalid, "example config: state_dir %q is not an absolute path", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "vms"), 0o700); err != nil {
		return fmt.Errorf("example: create state dir: %w", err)
	}
	d.mu.Lock()
	d.cfg, d.stateDir = c, dir
	d.mu.Unlock()
	return nil
}

func (d *exampleDriver) Capabilities(context.Context) (*pb.CapabilitiesResponse, error) {
	return &pb.CapabilitiesResponse{GuestOs: []pb.GuestOS{pb.GuestOS_GUEST_OS_LINUX}, Headless: true}, nil
}

// Fingerprint sends one message and keeps the stream open: nothing about
// this host changes. A real driver re-probes its hypervisor here.
func (d *exampleDriver) Fingerprint(ctx context.Context) (<-chan *pb.FingerprintResponse, error) {
	d.mu.Lock()
	fp := &pb.FingerprintResponse{Health: pb.Health_HEALTH_HEALTHY, Description: "host processes via /bin/sh",
		Attributes: map[string]string{"example.version": version},
		Resources:  &pb.Resources{Vcpus: d.cfg.VCPUs, MemoryMib: d.cfg.MemoryMiB}}
	d.mu.Unlock()
	if _, err := os.Stat("/bin/sh"); err != nil {
		fp.Health, fp.Description = pb.Health_HEALTH_UNDETECTED, "no /bin/sh on this host"
	}
	ch := make(chan *pb.FingerprintResponse, 1)
	ch <- fp
	go func() { <-ctx.Done(); close(ch) }()
	return ch, nil
}

// ---- Workspace and process identity ----

func (d *exampleDriver) dir(id string) string { return filepath.Join(d.stateDir, "vms", id) }

func (d *exampleDriver) load(id string) (*record, *pb.VMSpec, error) {
	if !idPattern.MatchString(id) {
		return nil, nil, driver.Errorf(driver.ErrInvalid, "example: vm id %q is not [a-z0-9][a-z0-9-]{0,62}", id)
	}
	if d.stateDir == "" {
		return nil, nil, driver.Errorf(driver.ErrState, "example: SetConfig has not been called")
	}
	data, err := os.ReadFile(filepath.Join(d.dir(id), "vm.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, driver.Errorf(driver.ErrNotFound, "example: no vm %s", id)
	}
	if err != nil {
		return nil, nil, err
	}
	rec := &record{}
	if err := json.Unmarshal(data, rec); err != nil {
		return nil, nil, fmt.Errorf("example: vm %s: decode vm.json: %w", id, err)
	}
	spec, err := driver.UnmarshalSpecJSON(rec.Spec)
	if err != nil {
		return nil, nil, fmt.Errorf("example: vm %s: decode spec: %w", id, err)
	}
	// A VM recorded as running whose process is gone (or is another process
	// that reused the pid) has ended without us: report it, don't hide it.
	if rec.State == "running" && !sameProcess(rec.Pid, rec.StartTime) {
		rec.State, rec.StoppedAt = "stopped", time.Now().UnixNano()
		rec.Exit = newExit(pb.ExitReason_EXIT_REASON_CRASHED, -1, "the VM process ended on its own")
		if err := d.save(id, rec); err != nil {
			return nil, nil, err
		}
	}
	return rec, spec, nil
}

// save writes vm.json atomically: a plugin killed mid-write leaves the old
// file or the new one.
func (d *exampleDriver) save(id string, rec *record) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp := filepath.Join(d.dir(id), ".vm.json.tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("example: vm %s: write vm.json: %w", id, err)
	}
	return os.Rename(tmp, filepath.Join(d.dir(id), "vm.json"))
}

// procStartTime reads a live process's start time (clock ticks since boot,
// field 22 of /proc/<pid>/stat). A pid alone can be reused; pid plus start
// time cannot. Zombies count as gone.
func procStartTime(pid int) (uint64, bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // comm may hold spaces
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return 0, false
	}
	t, err := strconv.ParseUint(f[19], 10, 64)
	return t, err == nil
}

func sameProcess(pid int, startTime uint64) bool {
	t, ok := procStartTime(pid)
	return ok && t == startTime
}

// ---- Lifecycle ----

func (d *exampleDriver) CreateVM(_ context.Context, spec *pb.VMSpec) (*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !idPattern.MatchString(spec.Id):
		return nil, driver.Errorf(driver.ErrInvalid, "example: vm id %q is not [a-z0-9][a-z0-9-]{0,62}", spec.Id)
	case spec.Vcpus < 1 || spec.MemoryMib < 64:
		return nil, driver.Errorf(driver.ErrInvalid, "example: vm %s needs vcpus ≥ 1 and memory_mib ≥ 64", spec.Id)
	case spec.GuestOs != pb.GuestOS_GUEST_OS_LINUX:
		return nil, driver.Errorf(driver.ErrInvalid, "example: guest_os %v is not supported (only GUEST_OS_LINUX)", spec.GuestOs)
	case !filepath.IsAbs(spec.Image):
		return nil, driver.Errorf(driver.ErrInvalid, "example: image %q is not an absolute path", spec.Image)
	case d.stateDir == "":
		return nil, driver.Errorf(driver.ErrState, "example: SetConfig has not been called")
	}
	// A host process has the host's network whatever the mode says; a real
	// driver sets the mode's network up here, and refuses what it cannot do.
	switch mode := spec.GetNetwork().GetMode(); mode {
	case pb.NetworkMode_NETWORK_MODE_UNSPECIFIED, pb.NetworkMode_NETWORK_MODE_NONE, pb.NetworkMode_NETWORK_MODE_USER:
	default:
		return nil, driver.Errorf(driver.ErrInvalid, "example: network mode %v is not supported (NONE or USER)", mode)
	}
	if _, err := os.Stat(spec.Image); err != nil {
		return nil, driver.Errorf(driver.ErrNotFound, "example: image %s: %v", spec.Image, err)
	}
	// This driver has no driver-specific fields: refuse any.
	if len(spec.DriverConfigJson) > 0 {
		var fields map[string]any
		if err := json.Unmarshal(spec.DriverConfigJson, &fields); err != nil {
			return nil, driver.Errorf(driver.ErrInvalid, "example: driver_config_json: %v", err)
		}
		for f := range fields {
			return nil, driver.Errorf(driver.ErrInvalid, "example: driver_config_json: unknown field %q", f)
		}
	}
	if err := os.Mkdir(d.dir(spec.Id), 0o700); errors.Is(err, fs.ErrExist) {
		return nil, driver.Errorf(driver.ErrExists, "example: vm %s exists", spec.Id)
	} else if err != nil {
		return nil, err
	}
	specJSON, err := driver.MarshalSpecJSON(spec)
	if err != nil {
		return nil, fmt.Errorf("example: vm %s: encode spec: %w", spec.Id, err)
	}
	rec := &record{Spec: specJSON, State: "created"}
	if err := d.save(spec.Id, rec); err != nil {
		os.RemoveAll(d.dir(spec.Id)) // a failed create leaves nothing behind
		return nil, err
	}
	d.known[spec.Id] = true
	return d.status(spec, rec), nil
}

func (d *exampleDriver) StartVM(_ context.Context, id string) (*pb.Handle, *pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, spec, err := d.load(id)
	if err != nil {
		return nil, nil, err
	}
	if rec.State == "running" {
		return nil, nil, driver.Errorf(driver.ErrState, "example: vm %s runs already", id)
	}
	console, err := os.OpenFile(filepath.Join(d.dir(id), "console.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	defer console.Close() // the child has its own copy
	cmd := exec.Command("/bin/sh", "-c", guestScript)
	cmd.Dir, cmd.Stdout, cmd.Stderr = d.dir(id), console, console
	// Setsid: a session of its own, so killing the plugin (or its process
	// group) never takes the VM along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("example: start vm %s: %w", id, err)
	}
	startTime, ok := procStartTime(cmd.Process.Pid)
	if !ok {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, nil, fmt.Errorf("example: start vm %s: the process ended at once", id)
	}
	go func() { _ = cmd.Wait() }() // we are its parent while we live: reap it
	*rec = record{Spec: rec.Spec, State: "running", Pid: cmd.Process.Pid, StartTime: startTime, StartedAt: time.Now().UnixNano()}
	if err := d.save(id, rec); err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return nil, nil, err
	}
	d.known[id] = true
	d.watch(id, rec.Pid, rec.StartTime)
	d.publish(id, pb.EventType_EVENT_TYPE_STARTED, "pid "+strconv.Itoa(rec.Pid))
	hs, _ := json.Marshal(handleState{Pid: rec.Pid, StartTime: rec.StartTime})
	return &pb.Handle{Version: handleVersion, Driver: name, VmId: id, State: hs}, d.status(spec, rec), nil
}

// RecoverVM checks that the handle's process is still the VM (pid and start
// time), and reports a VM whose process is gone as stopped.
func (d *exampleDriver) RecoverVM(_ context.Context, h *pb.Handle) (*pb.VMStatus, error) {
	if h.Driver != name {
		return nil, driver.Errorf(driver.ErrState, "example: handle is from driver %q", h.Driver)
	}
	if h.Version > handleVersion {
		return nil, driver.Errorf(driver.ErrState, "example: handle version %d is newer than this plugin reads (1)", h.Version)
	}
	var hs handleState
	if err := json.Unmarshal(h.State, &hs); err != nil || hs.Pid <= 0 {
		return nil, driver.Errorf(driver.ErrInvalid, "example: corrupt handle state")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, spec, err := d.load(h.VmId)
	if err != nil {
		return nil, err
	}
	if rec.State == "running" && (rec.Pid != hs.Pid || rec.StartTime != hs.StartTime) {
		return nil, driver.Errorf(driver.ErrState, "example: vm %s runs as another process than the handle names (started again since?)", h.VmId)
	}
	d.known[h.VmId] = true
	if rec.State == "running" {
		d.watch(h.VmId, rec.Pid, rec.StartTime)
	}
	return d.status(spec, rec), nil
}

// watch notices when a VM process ends without StopVM or DestroyVM. After a
// plugin restart the process is not our child, so we poll its identity.
func (d *exampleDriver) watch(id string, pid int, startTime uint64) {
	go func() {
		for sameProcess(pid, startTime) {
			time.Sleep(200 * time.Millisecond)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.stopping[id] {
			return
		}
		if rec, _, err := d.load(id); err == nil && rec.Exit.pb().GetReason() == pb.ExitReason_EXIT_REASON_CRASHED {
			d.publish(id, pb.EventType_EVENT_TYPE_CRASHED, rec.Exit.Message)
		}
	}()
}

// WaitVM polls: the VM may not be our child, so there is nothing to wait on.
func (d *exampleDriver) WaitVM(ctx context.Context, id string) (*pb.ExitResult, error) {
	for {
		d.mu.Lock()
		rec, _, err := d.load(id)
		d.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if rec.State != "running" {
			return rec.Exit.pb(), nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitReady: this driver has no guest agent; the guest is "ready" once its
// console says "booted".
func (d *exampleDriver) WaitReady(ctx context.Context, id string) (map[string]string, error) {
	for {
		d.mu.Lock()
		rec, spec, err := d.load(id)
		var ready bool
		if err == nil {
			ready = d.status(spec, rec).AgentReady
		}
		d.mu.Unlock()
		switch {
		case err != nil:
			return nil, err
		case rec.State != "running":
			return nil, driver.Errorf(driver.ErrState, "example: vm %s is %s", id, rec.State)
		case ready:
			return map[string]string{"agent_version": "none (example process driver)"}, nil
		}
		select {
		case <-ctx.Done():
			return nil, driver.Errorf(driver.ErrTimeout, "example: vm %s did not print \"booted\" in time", id)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StopVM sends SIGTERM, waits up to timeout, then SIGKILL.
func (d *exampleDriver) StopVM(ctx context.Context, id string, timeout time.Duration) (*pb.ExitResult, error) {
	d.mu.Lock()
	rec, _, err := d.load(id)
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if rec.State != "running" { // stopping a stopped VM succeeds
		d.mu.Unlock()
		if rec.Exit == nil {
			return &pb.ExitResult{Reason: pb.ExitReason_EXIT_REASON_STOPPED, Message: "never started"}, nil
		}
		return rec.Exit.pb(), nil
	}
	d.stopping[id] = true
	d.mu.Unlock()
	defer func() { d.mu.Lock(); delete(d.stopping, id); d.mu.Unlock() }()

	exit := newExit(pb.ExitReason_EXIT_REASON_STOPPED, 143, "SIGTERM")
	if timeout > 0 {
		_ = syscall.Kill(-rec.Pid, syscall.SIGTERM) // the whole session's group
	}
	deadline := time.Now().Add(timeout)
	for sameProcess(rec.Pid, rec.StartTime) {
		if !time.Now().Before(deadline) {
			exit = newExit(pb.ExitReason_EXIT_REASON_KILLED, 137, "SIGKILL after the stop timeout")
			_ = syscall.Kill(-rec.Pid, syscall.SIGKILL)
			deadline = time.Now().Add(time.Hour) // kill once, then wait
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	rec.State, rec.StoppedAt, rec.Exit = "stopped", time.Now().UnixNano(), exit
	if err := d.save(id, rec); err != nil {
		return nil, err
	}
	d.publish(id, pb.EventType_EVENT_TYPE_STOPPED, exit.Message)
	return exit.pb(), nil
}

// DestroyVM kills the process if it is still the VM, then removes the
// workspace. It needs only vm.json, so it works from a fresh plugin.
func (d *exampleDriver) DestroyVM(_ context.Context, id string, force bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, _, err := d.load(id)
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	// A bad id or no state dir stops here; an unreadable vm.json must not
	// make a VM indestructible, so that goes on to remove the workspace.
	if err != nil && (!idPattern.MatchString(id) || d.stateDir == "") {
		return err
	}
	if rec != nil && rec.State == "running" {
		if !force {
			return driver.Errorf(driver.ErrState, "example: vm %s runs; stop it or destroy with force", id)
		}
		d.stopping[id] = true
		if sameProcess(rec.Pid, rec.StartTime) { // never signal a reused pid
			_ = syscall.Kill(-rec.Pid, syscall.SIGKILL)
		}
		d.publish(id, pb.EventType_EVENT_TYPE_STOPPED, "killed by DestroyVM")
	}
	if err := os.RemoveAll(d.dir(id)); err != nil {
		return fmt.Errorf("example: destroy vm %s: %w", id, err)
	}
	delete(d.known, id)
	delete(d.stopping, id)
	return nil
}

func (d *exampleDriver) InspectVM(_ context.Context, id string) (*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	rec, spec, err := d.load(id)
	if err != nil {
		return nil, err
	}
	return d.status(spec, rec), nil
}

func (d *exampleDriver) ListVMs(context.Context) ([]*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*pb.VMStatus
	for id := range d.known {
		if rec, spec, err := d.load(id); err == nil {
			out = append(out, d.status(spec, rec))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out, nil
}

func (d *exampleDriver) status(spec *pb.VMSpec, rec *record) *pb.VMStatus {
	st := &pb.VMStatus{Id: spec.Id, Spec: spec, StartedAtUnixNano: rec.StartedAt, StoppedAtUnixNano: rec.StoppedAt,
		Attributes: map[string]string{"workspace": d.dir(spec.Id)}}
	switch rec.State {
	case "created":
		st.State = pb.VMState_VM_STATE_CREATED
	case "running":
		st.State = pb.VMState_VM_STATE_RUNNING
		st.Attributes["pid"] = strconv.Itoa(rec.Pid)
		console, _ := os.ReadFile(filepath.Join(d.dir(spec.Id), "console.log"))
		st.AgentReady = bytes.Contains(console, []byte("booted"))
	default:
		st.State, st.Exit = pb.VMState_VM_STATE_STOPPED, rec.Exit.pb()
	}
	return st
}

// ---- Events and console ----

// publish sends an event to every listener; a listener 64 events behind
// misses events rather than stalling the driver.
func (d *exampleDriver) publish(id string, typ pb.EventType, msg string) {
	ev := &pb.Event{VmId: id, Type: typ, Message: msg, TimeUnixNano: time.Now().UnixNano()}
	for ch := range d.subs {
		select {
		case ch <- ev:
		default:
			d.log.Warn("event listener is behind; dropping an event", "vm", id, "type", typ)
		}
	}
}

func (d *exampleDriver) Events(ctx context.Context) (<-chan *pb.Event, error) {
	ch := make(chan *pb.Event, 64)
	d.mu.Lock()
	d.subs[ch] = true
	d.mu.Unlock()
	go func() {
		<-ctx.Done()
		d.mu.Lock()
		delete(d.subs, ch)
		close(ch)
		d.mu.Unlock()
	}()
	return ch, nil
}

func (d *exampleDriver) ConsoleLog(_ context.Context, id string, maxBytes int64) ([]byte, error) {
	d.mu.Lock()
	_, _, err := d.load(id)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(d.dir(id), "console.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return []byte{}, nil
	} else if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && maxBytes > 0 && fi.Size() > maxBytes {
		_, _ = f.Seek(fi.Size()-maxBytes, io.SeekStart)
	}
	return io.ReadAll(f)
}
