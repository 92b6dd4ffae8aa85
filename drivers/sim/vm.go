package sim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"google.golang.org/protobuf/proto"
)

// VM states as written to vm.json.
const (
	stateCreated = "created"
	stateRunning = "running"
	statePaused  = "paused"
	stateStopped = "stopped"
)

var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// record is a VM's vm.json: everything the simulator knows about it, so a new
// plugin process picks up exactly where the last one stopped.
type record struct {
	Spec json.RawMessage `json:"spec"` // pb.VMSpec (driver.MarshalSpecJSON)
	// UUID tells this VM from a later one that reuses its id.
	UUID  string `json:"uuid"`
	State string `json:"state"`
	// Generation counts starts; handles carry it.
	Generation         uint64      `json:"generation"`
	CreatedAtUnixNano  int64       `json:"created_at_unix_nano"`
	StartedAtUnixNano  int64       `json:"started_at_unix_nano,omitempty"`
	StoppedAtUnixNano  int64       `json:"stopped_at_unix_nano,omitempty"`
	BootDelayMS        int64       `json:"boot_delay_ms"`
	Exit               *exitRecord `json:"exit,omitempty"`
	Screen             screen      `json:"screen"`
	SimulatedByVersion string      `json:"simulated_by_version"`
	// Snapshots, oldest first.
	Snapshots []snapshotRecord `json:"snapshots,omitempty"`
}

type exitRecord struct {
	Reason  string `json:"reason"` // the contract's ExitReason, by name: "stopped"
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

// vmConfig is the sim's driver_config_json: per-VM overrides.
type vmConfig struct {
	// BootDelayMS overrides the driver's boot_delay_ms for this VM.
	BootDelayMS *int64 `json:"boot_delay_ms"`
}

// vm is a VM this plugin process knows.
type vm struct {
	dir  string
	spec *pb.VMSpec
	rec  record
	// stopped is closed while the VM does not run; StartVM replaces it.
	stopped chan struct{}
	// readyTimer announces guest-ready for the current generation.
	readyTimer *time.Timer
}

func closedChan() chan struct{} { c := make(chan struct{}); close(c); return c }

func usageOf(spec *pb.VMSpec) usage {
	return usage{vcpus: spec.Vcpus, memoryMiB: spec.MemoryMib, macos: spec.GuestOs == pb.GuestOS_GUEST_OS_MACOS}
}

func (d *Driver) workspace(id string) string { return filepath.Join(d.stateDir, "vms", id) }

// readRecord reads a workspace's vm.json.
func readRecord(dir string) (record, *pb.VMSpec, error) {
	var rec record
	data, err := os.ReadFile(filepath.Join(dir, "vm.json"))
	if err != nil {
		return rec, nil, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, nil, fmt.Errorf("decode %s/vm.json: %w", dir, err)
	}
	spec, err := driver.UnmarshalSpecJSON(rec.Spec)
	if err != nil {
		return rec, nil, fmt.Errorf("decode spec in %s/vm.json: %w", dir, err)
	}
	return rec, spec, nil
}

// writeRecord replaces vm.json atomically (temp file + rename), so a plugin
// killed mid-write leaves the old or the new record, never half of one. It
// does not fsync: the simulator promises to survive its own process, not
// the host's power.
func writeRecord(dir string, rec record) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".vm.json-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, "vm.json"))
}

// consoleLocked appends a "[sim]" line to the VM's console log.
func (d *Driver) consoleLocked(v *vm, format string, args ...any) {
	line := fmt.Sprintf("[sim] %s %s\n", d.now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	f, err := os.OpenFile(filepath.Join(v.dir, "console.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		d.log.Warn("sim: cannot append to console log", "vm", v.spec.Id, "error", err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		d.log.Warn("sim: cannot append to console log", "vm", v.spec.Id, "error", err)
	}
}

func checkID(id string) error {
	if !idPattern.MatchString(id) {
		return driver.Errorf(driver.ErrInvalid, "sim: vm id %q does not match [a-z0-9][a-z0-9-]{0,62}", id)
	}
	return nil
}

func (d *Driver) requireConfigLocked() error {
	if !d.configured {
		return driver.Errorf(driver.ErrState, "sim: the agent has not called SetConfig yet (no state directory)")
	}
	return nil
}

// lookupLocked finds a VM by id: one this process knows, or else one whose
// workspace is on disk (all the simulator's state is there, so a VM a new
// plugin process has not recovered yet can still be inspected, started or
// stopped; it becomes known to this process then).
func (d *Driver) lookupLocked(id string) (*vm, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := d.requireConfigLocked(); err != nil {
		return nil, err
	}
	if v, ok := d.vms[id]; ok {
		return v, nil
	}
	dir := d.workspace(id)
	rec, spec, err := readRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, driver.Errorf(driver.ErrNotFound, "sim: no vm %s on this host", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: load vm %s: %w", id, err)
	}
	return d.adoptLocked(dir, rec, spec), nil
}

// adoptLocked makes a VM read from disk known to this process.
func (d *Driver) adoptLocked(dir string, rec record, spec *pb.VMSpec) *vm {
	v := &vm{dir: dir, spec: spec, rec: rec, stopped: closedChan()}
	if rec.State == stateRunning || rec.State == statePaused {
		v.stopped = make(chan struct{})
		d.scheduleReadyLocked(v, false)
	}
	d.vms[spec.Id] = v
	return v
}

func (v *vm) readyAt() time.Time {
	return time.Unix(0, v.rec.StartedAtUnixNano).Add(time.Duration(v.rec.BootDelayMS) * time.Millisecond)
}

// agentReady: the simulated guest agent answers once the boot delay has
// passed since the start, and only while the VM runs (a paused guest does
// not answer).
func (d *Driver) agentReadyLocked(v *vm) bool {
	return v.rec.State == stateRunning && !d.now().Before(v.readyAt())
}

// scheduleReadyLocked announces guest-ready when the boot delay passes;
// fresh is set by StartVM, whose boot may be ready at once.
func (d *Driver) scheduleReadyLocked(v *vm, fresh bool) {
	if v.readyTimer != nil {
		v.readyTimer.Stop()
	}
	announce := func() {
		d.consoleLocked(v, "vm %s: simulated guest agent ready (agent_version=sim)", v.spec.Id)
		d.publishLocked(v.spec.Id, pb.EventType_EVENT_TYPE_GUEST_READY, "simulated guest agent answers")
	}
	gen := v.rec.Generation
	wait := v.readyAt().Sub(d.now())
	if wait <= 0 {
		if fresh {
			announce()
		}
		// Otherwise it was ready long ago, announced by whoever started it.
		return
	}
	v.readyTimer = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if cur, ok := d.vms[v.spec.Id]; !ok || cur != v || v.rec.Generation != gen || v.rec.State != stateRunning {
			return
		}
		announce()
	})
}

func (d *Driver) statusLocked(v *vm) *pb.VMStatus {
	st := &pb.VMStatus{
		Id:                v.spec.Id,
		StartedAtUnixNano: v.rec.StartedAtUnixNano,
		StoppedAtUnixNano: v.rec.StoppedAtUnixNano,
		AgentReady:        d.agentReadyLocked(v),
		Spec:              v.spec,
		Attributes: map[string]string{
			"simulated":   "true",
			"workspace":   v.dir,
			"uuid":        v.rec.UUID,
			"generation":  strconv.FormatUint(v.rec.Generation, 10),
			"console_log": filepath.Join(v.dir, "console.log"),
		},
	}
	if ids := volumeIDs(v.spec); ids != "" {
		// What a real driver would attach, for tests that check the agent passed it on.
		st.Attributes["volumes"] = ids
	}
	switch v.rec.State {
	case stateCreated:
		st.State = pb.VMState_VM_STATE_CREATED
	case stateRunning:
		st.State = pb.VMState_VM_STATE_RUNNING
	case statePaused:
		st.State = pb.VMState_VM_STATE_PAUSED
	case stateStopped:
		st.State = pb.VMState_VM_STATE_STOPPED
	}
	if v.rec.State == stateStopped && v.rec.Exit != nil {
		st.Exit = v.rec.Exit.pb()
	}
	return st
}

func (e *exitRecord) pb() *pb.ExitResult {
	reason, _ := base.ParseEnum[pb.ExitReason](e.Reason)
	return &pb.ExitResult{Reason: reason, ExitCode: e.Code, Message: e.Message}
}

// validateSpec checks a spec the way a real driver would.
func (d *Driver) validateSpecLocked(spec *pb.VMSpec) (vmConfig, error) {
	var vc vmConfig
	if err := checkID(spec.Id); err != nil {
		return vc, err
	}
	if err := driver.CheckVolumes(spec); err != nil {
		return vc, err
	}
	if spec.Vcpus < 1 {
		return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: vcpus must be at least 1 (got %d)", spec.Id, spec.Vcpus)
	}
	if spec.MemoryMib < 64 {
		return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: memory_mib must be at least 64 (got %d)", spec.Id, spec.MemoryMib)
	}
	if !d.cfg.runs(spec.GuestOs) {
		return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: guest_os %v is not one this driver runs (%v)", spec.Id, spec.GuestOs, d.cfg.GuestOS)
	}
	switch net := spec.GetNetwork(); net.GetMode() {
	case pb.NetworkMode_NETWORK_MODE_UNSPECIFIED, pb.NetworkMode_NETWORK_MODE_NONE, pb.NetworkMode_NETWORK_MODE_USER:
	case pb.NetworkMode_NETWORK_MODE_TAP:
		if net.GetTap() == "" {
			return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: network mode TAP needs a tap device name", spec.Id)
		}
	default:
		return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: network mode %v is not one of NONE, USER, TAP", spec.Id, net.GetMode())
	}
	if len(bytes.TrimSpace(spec.DriverConfigJson)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(spec.DriverConfigJson))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&vc); err != nil {
			return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: driver_config_json: %v (the sim reads only boot_delay_ms)", spec.Id, err)
		}
		if vc.BootDelayMS != nil && *vc.BootDelayMS < 0 {
			return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: driver_config_json: boot_delay_ms must not be negative", spec.Id)
		}
	}
	if !filepath.IsAbs(spec.Image) {
		return vc, driver.Errorf(driver.ErrInvalid, "sim: vm %s: image must be an absolute path (got %q)", spec.Id, spec.Image)
	}
	if _, err := os.Stat(spec.Image); err != nil {
		return vc, driver.Errorf(driver.ErrNotFound, "sim: vm %s: image %s: %v", spec.Id, spec.Image, err)
	}
	if spec.Vcpus > d.cfg.VCPUs || spec.MemoryMib > d.cfg.MemoryMiB {
		return vc, driver.Errorf(driver.ErrNoCapacity, "sim: vm %s asks for %d vCPUs and %d MiB; the sim host has only %d vCPUs and %d MiB in all",
			spec.Id, spec.Vcpus, spec.MemoryMib, d.cfg.VCPUs, d.cfg.MemoryMiB)
	}
	if spec.GuestOs == pb.GuestOS_GUEST_OS_MACOS && d.cfg.MacOSSlots == 0 {
		return vc, driver.Errorf(driver.ErrNoCapacity, "sim: vm %s is macOS but the sim host has 0 macOS slots", spec.Id)
	}
	return vc, nil
}

// CreateVM validates the spec and writes the VM's workspace.
func (d *Driver) CreateVM(_ context.Context, spec *pb.VMSpec) (*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if spec == nil {
		return nil, driver.Errorf(driver.ErrInvalid, "sim: create: no spec")
	}
	if err := d.requireConfigLocked(); err != nil {
		return nil, err
	}
	vc, err := d.validateSpecLocked(spec)
	if err != nil {
		return nil, err
	}
	dir := d.workspace(spec.Id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, driver.Errorf(driver.ErrExists, "sim: vm %s exists already", spec.Id)
		}
		return nil, fmt.Errorf("sim: create vm %s: %w", spec.Id, err)
	}
	spec = proto.Clone(spec).(*pb.VMSpec)
	specJSON, err := driver.MarshalSpecJSON(spec)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("sim: create vm %s: encode spec: %w", spec.Id, err)
	}
	uuid := make([]byte, 16)
	_, _ = rand.Read(uuid)
	rec := record{
		Spec:               specJSON,
		UUID:               hex.EncodeToString(uuid),
		State:              stateCreated,
		CreatedAtUnixNano:  d.now().UnixNano(),
		BootDelayMS:        d.cfg.BootDelayMS,
		SimulatedByVersion: version,
	}
	if vc.BootDelayMS != nil {
		rec.BootDelayMS = *vc.BootDelayMS
	}
	if err := writeRecord(dir, rec); err != nil {
		os.RemoveAll(dir) // a failed create leaves nothing behind
		return nil, fmt.Errorf("sim: create vm %s: write vm.json: %w", spec.Id, err)
	}
	v := &vm{dir: dir, spec: spec, rec: rec, stopped: closedChan()}
	d.vms[spec.Id] = v
	d.consoleLocked(v, "vm %s created (%d vCPUs, %d MiB, %s); simulated: nothing will boot", spec.Id, spec.Vcpus, spec.MemoryMib, base.EnumName(spec.GuestOs))
	d.publishLocked(spec.Id, pb.EventType_EVENT_TYPE_CREATED, "vm created")
	d.log.Info("sim: vm created", "vm", spec.Id)
	return d.statusLocked(v), nil
}

// commitLocked writes rec as the VM's new record and, once it is on disk,
// makes it current.
func (d *Driver) commitLocked(v *vm, rec record) error {
	if err := writeRecord(v.dir, rec); err != nil {
		return fmt.Errorf("sim: vm %s: write vm.json: %w", v.spec.Id, err)
	}
	v.rec = rec
	if rec.State == stateRunning || rec.State == statePaused {
		d.active[v.spec.Id] = usageOf(v.spec)
	} else {
		delete(d.active, v.spec.Id)
	}
	d.notifyFingerprintLocked()
	return nil
}

// handleState is what the sim puts in Handle.state.
type handleState struct {
	ID         string `json:"id"`
	UUID       string `json:"uuid"`
	Generation uint64 `json:"generation"`
}

// StartVM "boots" a created or stopped VM if the simulated host has room.
func (d *Driver) StartVM(_ context.Context, id string) (*pb.Handle, *pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, nil, err
	}
	if v.rec.State == stateRunning || v.rec.State == statePaused {
		return nil, nil, driver.Errorf(driver.ErrState, "sim: vm %s is %s already", id, v.rec.State)
	}
	var vcpus, mem, macos int64
	for other, u := range d.active {
		if other == id {
			continue
		}
		vcpus += u.vcpus
		mem += u.memoryMiB
		if u.macos {
			macos++
		}
	}
	switch {
	case vcpus+v.spec.Vcpus > d.cfg.VCPUs:
		return nil, nil, driver.Errorf(driver.ErrNoCapacity, "sim host has %d of %d vCPUs free; vm %s needs %d", d.cfg.VCPUs-vcpus, d.cfg.VCPUs, id, v.spec.Vcpus)
	case mem+v.spec.MemoryMib > d.cfg.MemoryMiB:
		return nil, nil, driver.Errorf(driver.ErrNoCapacity, "sim host has %d of %d MiB memory free; vm %s needs %d", d.cfg.MemoryMiB-mem, d.cfg.MemoryMiB, id, v.spec.MemoryMib)
	case v.spec.GuestOs == pb.GuestOS_GUEST_OS_MACOS && macos+1 > d.cfg.MacOSSlots:
		return nil, nil, driver.Errorf(driver.ErrNoCapacity, "sim host has %d of %d macOS slots free; vm %s needs 1", max(d.cfg.MacOSSlots-macos, 0), d.cfg.MacOSSlots, id)
	}
	rec := v.rec
	rec.State = stateRunning
	rec.Generation++
	rec.StartedAtUnixNano = d.now().UnixNano()
	rec.StoppedAtUnixNano = 0
	rec.Exit = nil
	rec.Screen = screen{} // a fresh boot shows a fresh screen
	if err := d.commitLocked(v, rec); err != nil {
		return nil, nil, err
	}
	v.stopped = make(chan struct{})
	d.consoleLocked(v, "vm %s started (generation %d); simulated: no guest runs, guest agent ready in %d ms", id, rec.Generation, rec.BootDelayMS)
	d.publishLocked(id, pb.EventType_EVENT_TYPE_STARTED, fmt.Sprintf("vm started (generation %d)", rec.Generation))
	d.scheduleReadyLocked(v, true)
	d.log.Info("sim: vm started", "vm", id, "generation", rec.Generation)
	hs, _ := json.Marshal(handleState{ID: id, UUID: rec.UUID, Generation: rec.Generation})
	return &pb.Handle{Version: handleVersion, Driver: driverName, VmId: id, State: hs}, d.statusLocked(v), nil
}

// RecoverVM takes a VM back from a handle: the VM's vm.json must carry the
// handle's uuid, so a later VM that reused the id is never mistaken for it.
func (d *Driver) RecoverVM(_ context.Context, h *pb.Handle) (*pb.VMStatus, error) {
	if h.GetDriver() != driverName {
		return nil, driver.Errorf(driver.ErrState, "sim: the handle was written by driver %q, not by sim", h.GetDriver())
	}
	if h.GetVersion() > handleVersion {
		return nil, driver.Errorf(driver.ErrState, "sim: handle version %d is newer than this sim driver reads (%d); upgrade the plugin", h.GetVersion(), handleVersion)
	}
	if h.GetVersion() == 0 {
		return nil, driver.Errorf(driver.ErrInvalid, "sim: handle has no version")
	}
	var hs handleState
	dec := json.NewDecoder(bytes.NewReader(h.GetState()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&hs); err != nil {
		return nil, driver.Errorf(driver.ErrInvalid, "sim: corrupt handle state: %v", err)
	}
	if hs.ID != h.GetVmId() || hs.UUID == "" || hs.Generation == 0 {
		return nil, driver.Errorf(driver.ErrInvalid, "sim: corrupt handle state: it names vm %q (uuid %q, generation %d) in a handle for vm %q", hs.ID, hs.UUID, hs.Generation, h.GetVmId())
	}
	if err := checkID(hs.ID); err != nil {
		return nil, driver.Errorf(driver.ErrInvalid, "sim: corrupt handle: %v", err)
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.requireConfigLocked(); err != nil {
		return nil, err
	}
	dir := d.workspace(hs.ID)
	rec, spec, err := readRecord(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, driver.Errorf(driver.ErrNotFound, "sim: nothing is left of vm %s (no workspace %s)", hs.ID, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("sim: recover vm %s: %w", hs.ID, err)
	}
	if rec.UUID != hs.UUID {
		return nil, driver.Errorf(driver.ErrState, "sim: vm %s on disk is a different VM (uuid %s) than the handle's (uuid %s): the id was reused", hs.ID, rec.UUID, hs.UUID)
	}
	if hs.Generation > rec.Generation {
		return nil, driver.Errorf(driver.ErrState, "sim: handle of vm %s is from start %d but the vm was started only %d times", hs.ID, hs.Generation, rec.Generation)
	}
	v, known := d.vms[hs.ID]
	if !known {
		v = d.adoptLocked(dir, rec, spec)
		d.consoleLocked(v, "vm %s recovered by a new sim plugin process (state %s)", hs.ID, rec.State)
		d.publishLocked(hs.ID, pb.EventType_EVENT_TYPE_RECOVERED, "vm recovered in state "+rec.State)
		d.log.Info("sim: vm recovered", "vm", hs.ID, "state", rec.State)
	}
	return d.statusLocked(v), nil
}

// WaitVM blocks until the VM no longer runs.
func (d *Driver) WaitVM(ctx context.Context, id string) (*pb.ExitResult, error) {
	d.mu.Lock()
	v, err := d.lookupLocked(id)
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	stopped := v.stopped
	d.mu.Unlock()
	select {
	case <-stopped:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if v.rec.Exit == nil {
		return &pb.ExitResult{Message: "sim: vm " + id + " has not run"}, nil
	}
	return v.rec.Exit.pb(), nil
}

// WaitReady blocks until the simulated boot delay has passed.
func (d *Driver) WaitReady(ctx context.Context, id string) (map[string]string, error) {
	for {
		d.mu.Lock()
		v, err := d.lookupLocked(id)
		if err != nil {
			d.mu.Unlock()
			return nil, err
		}
		if v.rec.State == stateCreated || v.rec.State == stateStopped {
			d.mu.Unlock()
			return nil, driver.Errorf(driver.ErrState, "sim: vm %s is %s; its guest agent cannot answer", id, v.rec.State)
		}
		if d.agentReadyLocked(v) {
			d.mu.Unlock()
			return map[string]string{"agent_version": "sim", "simulated": "true", "hostname": v.spec.Id}, nil
		}
		wait := v.readyAt().Sub(d.now())
		if v.rec.State == statePaused || wait <= 0 {
			wait = 50 * time.Millisecond // a paused guest answers once resumed
		}
		stopped := v.stopped
		d.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stopped:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, driver.Errorf(driver.ErrTimeout, "sim: vm %s: the simulated guest agent was not ready in time", id)
			}
			return nil, ctx.Err()
		}
	}
}

// stopLocked ends a running or paused VM with the given exit.
func (d *Driver) stopLocked(v *vm, exit exitRecord, event pb.EventType) error {
	rec := v.rec
	rec.State = stateStopped
	rec.StoppedAtUnixNano = d.now().UnixNano()
	rec.Exit = &exit
	if err := d.commitLocked(v, rec); err != nil {
		return err
	}
	if v.readyTimer != nil {
		v.readyTimer.Stop()
	}
	close(v.stopped)
	d.consoleLocked(v, "vm %s stopped (%s): %s", v.spec.Id, exit.Reason, exit.Message)
	d.publishLocked(v.spec.Id, event, exit.Message)
	d.log.Info("sim: vm stopped", "vm", v.spec.Id, "reason", exit.Reason)
	return nil
}

// StopVM stops a running or paused VM. The simulated guest always shuts down
// at once when asked, so a timeout never has to force it; timeout 0 forces
// it without asking.
func (d *Driver) StopVM(_ context.Context, id string, timeout time.Duration) (*pb.ExitResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	switch v.rec.State {
	case stateStopped:
		return v.rec.Exit.pb(), nil
	case stateCreated:
		return &pb.ExitResult{Reason: pb.ExitReason_EXIT_REASON_STOPPED, Message: "sim: vm " + id + " was never started"}, nil
	}
	exit := exitRecord{Reason: "stopped", Message: "simulated guest shut down when asked"}
	if timeout <= 0 {
		exit.Message = "simulated power-off, forced at once"
	}
	if err := d.stopLocked(v, exit, pb.EventType_EVENT_TYPE_STOPPED); err != nil {
		return nil, err
	}
	return exit.pb(), nil
}

// DestroyVM removes the VM's workspace; it needs nothing but the disk, so it
// works from a plugin process that never saw the VM.
func (d *Driver) DestroyVM(_ context.Context, id string, force bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if errors.Is(err, driver.ErrNotFound) {
		// No vm.json, but maybe a folder (a create cut short): it goes too,
		// so a destroy always leaves no workspace.
		if err := os.RemoveAll(d.workspace(id)); err != nil {
			return fmt.Errorf("sim: destroy vm %s: %w", id, err)
		}
		return nil
	}
	if err != nil {
		// An unreadable vm.json must not make a VM indestructible.
		if checkID(id) != nil || !d.configured {
			return err
		}
		d.log.Warn("sim: destroying vm with unreadable state", "vm", id, "error", err)
		if err := os.RemoveAll(d.workspace(id)); err != nil {
			return fmt.Errorf("sim: destroy vm %s: %w", id, err)
		}
		delete(d.active, id)
		d.notifyFingerprintLocked()
		return nil
	}
	if v.rec.State == stateRunning || v.rec.State == statePaused {
		if !force {
			return driver.Errorf(driver.ErrState, "sim: vm %s is %s; stop it first or destroy with force", id, v.rec.State)
		}
		if err := d.stopLocked(v, exitRecord{Reason: "killed", Code: 137, Message: "simulated VM killed by DestroyVM"}, pb.EventType_EVENT_TYPE_STOPPED); err != nil {
			return err
		}
	}
	if v.readyTimer != nil {
		v.readyTimer.Stop()
	}
	if err := os.RemoveAll(v.dir); err != nil {
		return fmt.Errorf("sim: destroy vm %s: remove workspace: %w", id, err)
	}
	delete(d.vms, id)
	delete(d.active, id)
	d.notifyFingerprintLocked()
	d.publishLocked(id, pb.EventType_EVENT_TYPE_DESTROYED, "vm destroyed")
	d.log.Info("sim: vm destroyed", "vm", id)
	return nil
}

// InspectVM reports a VM's status.
func (d *Driver) InspectVM(_ context.Context, id string) (*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	return d.statusLocked(v), nil
}

// ListVMs lists the VMs this plugin process knows, by id.
func (d *Driver) ListVMs(context.Context) ([]*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.vms))
	for id := range d.vms {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]*pb.VMStatus, 0, len(ids))
	for _, id := range ids {
		out = append(out, d.statusLocked(d.vms[id]))
	}
	return out, nil
}

// ConsoleLog returns the tail of the "[sim]" lines the simulator wrote.
func (d *Driver) ConsoleLog(_ context.Context, id string, maxBytes int64) ([]byte, error) {
	d.mu.Lock()
	v, err := d.lookupLocked(id)
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if maxBytes < 0 {
		return nil, driver.Errorf(driver.ErrInvalid, "sim: max_bytes must not be negative")
	}
	f, err := os.Open(filepath.Join(v.dir, "console.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return []byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sim: console log of vm %s: %w", id, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sim: console log of vm %s: %w", id, err)
	}
	if maxBytes > 0 && fi.Size() > maxBytes {
		if _, err := f.Seek(fi.Size()-maxBytes, io.SeekStart); err != nil {
			return nil, fmt.Errorf("sim: console log of vm %s: %w", id, err)
		}
	}
	return io.ReadAll(f)
}

// PauseVM freezes a running VM (its resources stay taken).
func (d *Driver) PauseVM(_ context.Context, id string) error {
	return d.transition(id, stateRunning, statePaused, pb.EventType_EVENT_TYPE_PAUSED, "vm paused (simulated vCPUs frozen)")
}

// ResumeVM unfreezes a paused VM.
func (d *Driver) ResumeVM(_ context.Context, id string) error {
	return d.transition(id, statePaused, stateRunning, pb.EventType_EVENT_TYPE_RESUMED, "vm resumed")
}

func (d *Driver) transition(id, from, to string, event pb.EventType, msg string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return err
	}
	if v.rec.State != from {
		return driver.Errorf(driver.ErrState, "sim: vm %s is %s, not %s", id, v.rec.State, from)
	}
	rec := v.rec
	rec.State = to
	if err := d.commitLocked(v, rec); err != nil {
		return err
	}
	d.consoleLocked(v, "vm %s %s", id, msg)
	d.publishLocked(id, event, msg)
	d.log.Info("sim: "+msg, "vm", id)
	return nil
}

// volumeIDs lists the spec's volume ids, comma-separated.
func volumeIDs(spec *pb.VMSpec) string {
	ids := make([]string, 0, len(spec.GetVolumes()))
	for _, v := range spec.GetVolumes() {
		ids = append(ids, v.GetId())
	}
	return strings.Join(ids, ",")
}
