//go:build linux

package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/fluxvm/fluxvm/guest/protocol"
	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// vm is one VM this plugin process knows.
type vm struct {
	d    *Driver
	id   string
	ws   string
	rec  vmRecord
	spec *pb.VMSpec

	// op serialises the lifecycle operations (start, stop, destroy, recover).
	op sync.Mutex

	mu         sync.Mutex
	state      pb.VMState
	proc       *process
	done       chan struct{} // closed when the running process is gone
	accel      string
	binary     string
	startedAt  time.Time
	stoppedAt  time.Time
	exit       *pb.ExitResult
	agentReady bool
	resumed    bool          // this run resumed a saved guest rather than booted
	stopReason pb.ExitReason // STOPPED or KILLED while StopVM or DestroyVM ends the VM
	shutdown   string        // reason of QEMU's SHUTDOWN event, if one came
	panicked   bool          // a GUEST_PANICKED event came
	mon        *monitor
	destroyed  bool
	// pending is a QEMU started ahead for this VM's resume and not yet given
	// its saved state (spare.go); the next StartVM takes it. pendingAccel is
	// the accelerator it was started with.
	pending      *process
	pendingAccel string
	// resumedFrom is the saved guest this VM was cloned from with
	// resume_memory in this plugin process (zero otherwise).
	resumedFrom spareKey

	monMu   sync.Mutex // serialises (re)connecting the monitor
	fwdMu   sync.Mutex // serialises adding host forwards (forward.go)
	agentMu sync.Mutex
	agent   *protocol.Client
}

// workspace returns a VM's workspace directory.
func workspace(stateDir, id string) string {
	return filepath.Join(stateDir, "vms", id)
}

// lookup returns a VM this process knows.
func (d *Driver) lookup(id string) (*vm, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v := d.vms[id]; v != nil {
		return v, nil
	}
	return nil, driver.Errorf(driver.ErrNotFound, "vm %q not found", id)
}

// lookupOrLoad returns a known VM or loads a stopped one from its workspace
// (a VM created by an earlier plugin process). A VM whose QEMU still runs is
// not loaded this way: RecoverVM takes it back.
func (d *Driver) lookupOrLoad(id string) (*vm, error) {
	if v, err := d.lookup(id); err == nil {
		return v, nil
	}
	_, stateDir := d.config()
	if stateDir == "" || !idPattern.MatchString(id) {
		return nil, driver.Errorf(driver.ErrNotFound, "vm %q not found", id)
	}
	v, err := d.loadVM(id, workspace(stateDir, id))
	if err != nil {
		return nil, err
	}
	if p, ok := adoptProcess(v.ws, v.rec.StartedIn, 0); ok {
		if v.rec.Resume == nil || v.rec.StartedIn == "" {
			unixClose(p)
			return nil, driver.Errorf(driver.ErrState, "vm %s runs in a QEMU started by an earlier plugin process; recover it with its handle first", id)
		}
		// A QEMU started ahead for the VM's resume that an earlier plugin process
		// never gave the saved state: end it, and the VM's start launches its own.
		killSpareProcess(p)
		v.rec.StartedIn, v.rec.QEMUName = "", ""
		if err := v.writeRecord(); err != nil {
			return nil, fmt.Errorf("load vm %s: %w", id, err)
		}
	}
	return d.register(v), nil
}

// loadVM reads a VM's spec.json; the VM is in state CREATED or STOPPED.
func (d *Driver) loadVM(id, ws string) (*vm, error) {
	data, err := os.ReadFile(filepath.Join(ws, specFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, driver.Errorf(driver.ErrNotFound, "vm %q not found (no %s)", id, filepath.Join(ws, specFile))
	}
	if err != nil {
		return nil, fmt.Errorf("read vm %s: %w", id, err)
	}
	v := &vm{d: d, id: id, ws: ws, state: pb.VMState_VM_STATE_CREATED}
	if err := json.Unmarshal(data, &v.rec); err != nil {
		return nil, fmt.Errorf("read vm %s: %s: %w", id, specFile, err)
	}
	if v.spec, err = driver.UnmarshalSpecJSON(v.rec.Spec); err != nil {
		return nil, fmt.Errorf("read vm %s: %s: spec: %w", id, specFile, err)
	}
	if _, err := os.Stat(filepath.Join(ws, runFile)); err == nil {
		v.state = pb.VMState_VM_STATE_STOPPED
		v.exit = &pb.ExitResult{Message: "the vm stopped while no plugin process watched it"}
	}
	return v, nil
}

// register adds v to the known VMs, or returns the one already there.
func (d *Driver) register(v *vm) *vm {
	d.mu.Lock()
	defer d.mu.Unlock()
	if old := d.vms[v.id]; old != nil {
		return old
	}
	d.vms[v.id] = v
	return v
}

func unixClose(p *process) {
	if p.pidfd >= 0 {
		_ = syscall.Close(p.pidfd)
	}
}

// CreateVM validates the spec and makes the workspace and overlay disk.
func (d *Driver) CreateVM(ctx context.Context, spec *pb.VMSpec) (*pb.VMStatus, error) {
	st, _, err := d.createVM(ctx, spec, false)
	return st, err
}

// createVM is CreateVM; for a clone (clone set) it leaves the disk for the
// clone to write (copyDisk makes it whole: an empty overlay first would be
// one more qemu-img run, thrown away). It also returns the backing image's
// format.
func (d *Driver) createVM(ctx context.Context, spec *pb.VMSpec, clone bool) (*pb.VMStatus, string, error) {
	cfg, stateDir := d.config()
	if stateDir == "" {
		return nil, "", driver.Errorf(driver.ErrState, "the qemu driver has no configuration yet; call SetConfig first")
	}
	rec, format, err := validateSpec(ctx, cfg, spec)
	if err != nil {
		return nil, "", err
	}
	if _, err := d.lookup(spec.Id); err == nil {
		return nil, "", driver.Errorf(driver.ErrExists, "vm %s already exists", spec.Id)
	}
	ws := workspace(stateDir, spec.Id)
	if longest := filepath.Join(ws, agentSock); len(longest) > maxSocketPath {
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: socket path %s is %d bytes, longer than unix sockets allow (%d); use a shorter id or state_dir",
			spec.Id, longest, len(longest), maxSocketPath)
	}
	if err := os.Mkdir(ws, 0o700); errors.Is(err, os.ErrExist) {
		return nil, "", driver.Errorf(driver.ErrExists, "vm %s already exists (workspace %s)", spec.Id, ws)
	} else if err != nil {
		return nil, "", fmt.Errorf("create vm %s: %w", spec.Id, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(ws)
		}
	}()
	rec.UUID = newUUID()
	if rec.Backing != "" {
		rec.Disk = filepath.Join(ws, overlayFile)
	}
	if rec.Backing != "" && !clone {
		if err := createOverlay(ctx, cfg.QEMUImg, rec.Backing, format, rec.Disk); err != nil {
			return nil, "", fmt.Errorf("create vm %s: %w", spec.Id, err)
		}
	}
	if rec.Spec, err = driver.MarshalSpecJSON(spec); err != nil {
		return nil, "", fmt.Errorf("create vm %s: %w", spec.Id, err)
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, "", fmt.Errorf("create vm %s: %w", spec.Id, err)
	}
	if err := writeFileAtomic(filepath.Join(ws, specFile), append(data, '\n')); err != nil {
		return nil, "", fmt.Errorf("create vm %s: write %s: %w", spec.Id, specFile, err)
	}
	v := &vm{d: d, id: spec.Id, ws: ws, rec: *rec, spec: spec, state: pb.VMState_VM_STATE_CREATED}
	if d.register(v) != v {
		return nil, "", driver.Errorf(driver.ErrExists, "vm %s already exists", spec.Id)
	}
	ok = true
	d.emit(v.id, pb.EventType_EVENT_TYPE_CREATED, "")
	return v.status(), format, nil
}

// StartVM launches QEMU for a created or stopped VM.
func (d *Driver) StartVM(ctx context.Context, id string) (*pb.Handle, *pb.VMStatus, error) {
	v, err := d.lookupOrLoad(id)
	if err != nil {
		return nil, nil, err
	}
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	state, destroyed := v.state, v.destroyed
	v.mu.Unlock()
	if destroyed {
		return nil, nil, driver.Errorf(driver.ErrNotFound, "vm %q not found", id)
	}
	if state == pb.VMState_VM_STATE_RUNNING || state == pb.VMState_VM_STATE_PAUSED {
		return nil, nil, driver.Errorf(driver.ErrState, "vm %s already runs", id)
	}
	if avail := availableMemoryMiB(); avail > 0 && v.spec.MemoryMib > avail {
		return nil, nil, driver.Errorf(driver.ErrNoCapacity, "vm %s needs %d MiB of memory, the host has %d MiB available now", id, v.spec.MemoryMib, avail)
	}
	cfg, _ := d.config()
	accel, err := d.accelerator(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("start vm %s: acceleration probe: %w", id, err)
	}
	l := v.launch(accel.Accel)
	if r := v.rec.Resume; r != nil {
		l.RAMFile, l.RAMShared, l.Incoming = r.RAM, false, true
	}
	var proc *process
	if v.pending != nil {
		// A QEMU started ahead for this resume (spare.go): it waits for the saved state.
		proc, v.pending = v.pending, nil
		l.Accel = v.pendingAccel
	} else {
		if v.rec.StartedIn != "" {
			// An earlier run's QEMU was one started ahead; this one is the VM's own.
			v.rec.StartedIn, v.rec.QEMUName = "", ""
			if err := v.writeRecord(); err != nil {
				return nil, nil, fmt.Errorf("start vm %s: %w", id, err)
			}
		}
		if proc, err = d.execQEMU(v, cfg.QEMUBinary, l); err != nil {
			return nil, nil, err
		}
	}
	started := time.Now()
	done := make(chan struct{})
	v.mu.Lock()
	v.state, v.proc, v.done = pb.VMState_VM_STATE_RUNNING, proc, done
	v.accel, v.binary, v.startedAt = accel.Accel, cfg.QEMUBinary, started
	v.stoppedAt, v.exit, v.agentReady, v.stopReason, v.shutdown, v.panicked = time.Time{}, nil, false, pb.ExitReason_EXIT_REASON_UNSPECIFIED, "", false
	v.resumed = l.Incoming
	v.mu.Unlock()
	go v.watch(proc, done)

	mon, err := v.connectMonitor(ctx, done, 10*time.Second)
	if err == nil && l.Incoming {
		err = v.resume(ctx, mon)
	} else if err == nil {
		var st string
		if st, err = mon.queryStatus(ctx); err == nil && st != "running" {
			err = fmt.Errorf("qemu reports status %q right after start", st)
		}
	}
	if err != nil {
		select {
		case <-done: // QEMU gave up by itself: its log says why
		default:
			v.mu.Lock()
			v.stopReason = pb.ExitReason_EXIT_REASON_KILLED
			v.mu.Unlock()
			_ = proc.signal(syscall.SIGKILL)
			<-done
		}
		return nil, nil, fmt.Errorf("start vm %s: %v; qemu said: %s", id, err, v.qemuLogTail())
	}
	hs := handleState{
		PID:        proc.pid,
		Workspace:  v.ws,
		QMPSocket:  filepath.Join(v.ws, qmpSock),
		UUID:       v.rec.UUID,
		StartedAt:  started.UnixNano(),
		QEMUBinary: cfg.QEMUBinary,
	}
	if l.Incoming {
		// Resumed once; a later start boots.
		v.rec.Resume = nil
		if err := v.writeRecord(); err != nil {
			d.logger.Warn("cannot record that the vm has resumed", "vm", id, "error", err)
		}
	}
	h, err := encodeHandle(id, hs)
	if err == nil {
		var data []byte
		if data, err = json.MarshalIndent(hs, "", "  "); err == nil {
			err = writeFileAtomic(filepath.Join(v.ws, runFile), append(data, '\n'))
		}
	}
	if err != nil {
		d.logger.Warn("cannot record the running vm in its workspace", "vm", id, "error", err)
	}
	d.emit(id, pb.EventType_EVENT_TYPE_STARTED, fmt.Sprintf("pid %d, %s, %s", proc.pid, l.Machine, l.Accel))
	return h, v.status(), nil
}

// execQEMU starts QEMU for v as l describes, in its own session with its
// output going to the workspace's log; for an incoming launch its descriptor
// 3 is the saved device state. It returns once the process runs.
func (d *Driver) execQEMU(v *vm, binary string, l launch) (*process, error) {
	id := v.id
	for _, f := range []string{qmpSock, agentSock, vncSock, pidFile} {
		_ = os.Remove(filepath.Join(v.ws, f))
	}
	logf, err := os.OpenFile(filepath.Join(v.ws, qemuLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start vm %s: %w", id, err)
	}
	fmt.Fprintf(logf, "--- fluxvm: starting qemu at %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	// QEMU must outlive this plugin: its own session, output to a file (never a
	// pipe to us), no stdin.
	cmd := exec.Command(binary, l.args()...)
	cmd.Dir = v.ws
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var stateFile *os.File
	if l.Incoming {
		// The saved device state, QEMU's descriptor 3 (resume reads it
		// from there: no shell and cat to start).
		if stateFile, err = os.Open(v.rec.Resume.State); err != nil {
			logf.Close()
			return nil, fmt.Errorf("start vm %s: the saved state: %w", id, err)
		}
		cmd.ExtraFiles = []*os.File{stateFile}
	}
	err = cmd.Start()
	logf.Close()
	if stateFile != nil {
		stateFile.Close()
	}
	if err != nil {
		return nil, driver.Errorf(driver.ErrUnavailable, "start vm %s: run %s: %v", id, binary, err)
	}
	return &process{pid: cmd.Process.Pid, cmd: cmd, pidfd: -1}, nil
}

// launch makes the QEMU command line description for this VM.
func (v *vm) launch(accel string) launch {
	l := launch{
		ID:         v.id,
		UUID:       v.rec.UUID,
		Workspace:  v.ws,
		Machine:    v.rec.Machine,
		Accel:      accel,
		VCPUs:      v.spec.Vcpus,
		MemoryMiB:  v.spec.MemoryMib,
		Kernel:     v.rec.Kernel,
		Initrd:     v.rec.Initrd,
		AgentPort:  v.rec.AgentPort,
		Disk:       v.rec.Disk,
		Volumes:    v.spec.GetVolumes(),
		Display:    v.spec.Display,
		Network:    "none",
		MAC:        v.rec.MAC,
		NoAnnounce: v.rec.NoAnnounce,
	}
	if v.rec.MemoryFile {
		l.RAMFile, l.RAMShared = filepath.Join(v.ws, ramFile), true
	}
	switch v.spec.GetNetwork().GetMode() {
	case pb.NetworkMode_NETWORK_MODE_USER:
		l.Network = "user"
	case pb.NetworkMode_NETWORK_MODE_TAP:
		l.Network, l.Tap = "tap", v.spec.GetNetwork().GetTap()
	}
	if l.Kernel != "" {
		l.Cmdline = kernelCmdline(v.rec.Cmdline, v.rec.Extra, hostTSCkHz(), l.Machine, l.Display)
		// The guest's machine id is the VM's UUID (systemd reads this
		// parameter; other guests find it in /proc/cmdline), so a clone,
		// whose disk is a copy, still has an identity of its own.
		l.Cmdline += " systemd.machine_id=" + strings.ReplaceAll(v.rec.UUID, "-", "")
	}
	return l
}

// connectMonitor returns the VM's QMP connection, connecting (and, at start,
// waiting for QEMU to create the socket) when there is none.
func (v *vm) connectMonitor(ctx context.Context, done <-chan struct{}, wait time.Duration) (*monitor, error) {
	v.monMu.Lock()
	defer v.monMu.Unlock()
	v.mu.Lock()
	mon := v.mon
	v.mu.Unlock()
	if mon != nil && !mon.isClosed() {
		return mon, nil
	}
	path := filepath.Join(v.ws, qmpSock)
	start := time.Now()
	deadline := start.Add(wait)
	for {
		m, err := dialMonitor(path, 3*time.Second, v.onQMPEvent)
		if err == nil {
			v.mu.Lock()
			v.mon = m
			v.mu.Unlock()
			return m, nil
		}
		if time.Now().After(deadline) {
			return nil, driver.Errorf(driver.ErrUnavailable, "vm %s: cannot reach qmp socket %s: %v", v.id, path, err)
		}
		select {
		case <-done:
			return nil, driver.Errorf(driver.ErrState, "vm %s: qemu exited", v.id)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(monitorPollPause(time.Since(start))):
		}
	}
}

// monitorPollPause is how long connectMonitor waits before trying the QMP
// socket again: QEMU makes it 30 to 90 ms after it starts, and a resumed
// guest is ready about 100 ms after that, so the first tries come often (a
// failed connect to a missing socket is one cheap system call); a QEMU
// that is slow to start is tried less often.
func monitorPollPause(waited time.Duration) time.Duration {
	if waited < 500*time.Millisecond {
		return 2 * time.Millisecond
	}
	return 20 * time.Millisecond
}

// monitor returns the QMP connection of a running VM.
func (v *vm) monitor(ctx context.Context) (*monitor, error) {
	v.mu.Lock()
	done, running := v.done, v.state == pb.VMState_VM_STATE_RUNNING || v.state == pb.VMState_VM_STATE_PAUSED
	v.mu.Unlock()
	if !running {
		return nil, driver.Errorf(driver.ErrState, "vm %s is not running", v.id)
	}
	return v.connectMonitor(ctx, done, 3*time.Second)
}

// transition moves the VM from one state to another and emits the event,
// once: both the RPC that caused the change and QEMU's own event for it call
// this, in either order, and only the first one finds the old state. A STOP
// that is part of a shutdown is not a pause.
func (v *vm) transition(from, to pb.VMState, event pb.EventType) {
	v.mu.Lock()
	changed := v.state == from && v.shutdown == ""
	if changed {
		v.state = to
	}
	v.mu.Unlock()
	if changed {
		v.d.emit(v.id, event, "")
	}
}

// onQMPEvent turns QEMU's events into VM state and contract events.
func (v *vm) onQMPEvent(ev qmp.Event) {
	switch ev.Event {
	case "STOP":
		v.transition(pb.VMState_VM_STATE_RUNNING, pb.VMState_VM_STATE_PAUSED, pb.EventType_EVENT_TYPE_PAUSED)
	case "RESUME":
		v.transition(pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, pb.EventType_EVENT_TYPE_RESUMED)
	case "SHUTDOWN":
		reason, _ := ev.Data["reason"].(string)
		guest, _ := ev.Data["guest"].(bool)
		v.mu.Lock()
		v.shutdown = reason
		v.mu.Unlock()
		if guest {
			v.d.emit(v.id, pb.EventType_EVENT_TYPE_GUEST_SHUTDOWN, reason)
		}
	case "GUEST_PANICKED":
		v.mu.Lock()
		v.panicked = true
		v.mu.Unlock()
		v.d.emit(v.id, pb.EventType_EVENT_TYPE_CRASHED, "the guest kernel panicked")
	}
}

// watch waits for the VM's process to end and records how it ended.
func (v *vm) watch(p *process, done chan struct{}) {
	st := p.wait()
	v.mu.Lock()
	exit := v.exitResult(st)
	v.state, v.stoppedAt, v.exit = pb.VMState_VM_STATE_STOPPED, time.Now(), exit
	v.agentReady = false
	mon := v.mon
	v.mon, v.proc = nil, nil
	v.mu.Unlock()
	if mon != nil {
		mon.close()
	}
	v.closeAgent()
	close(done)
	typ := pb.EventType_EVENT_TYPE_STOPPED
	if exit.Reason == pb.ExitReason_EXIT_REASON_CRASHED {
		typ = pb.EventType_EVENT_TYPE_CRASHED
	}
	how := base.EnumName(exit.Reason)
	if how == "" {
		how = "unknown"
	}
	v.d.emit(v.id, typ, how+": "+exit.Message)
}

// exitResult says how the VM ended; v.mu is held.
func (v *vm) exitResult(st exitStatus) *pb.ExitResult {
	r := &pb.ExitResult{}
	if st.known {
		r.ExitCode = int32(st.code)
		if st.signal != 0 {
			r.ExitCode = 128 + int32(st.signal)
		}
	}
	switch {
	case v.stopReason != pb.ExitReason_EXIT_REASON_UNSPECIFIED:
		r.Reason = v.stopReason
		r.Message = "ended by the driver"
		if v.shutdown != "" {
			r.Message += " (" + v.shutdown + ")"
		}
	case v.panicked:
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_CRASHED, "the guest kernel panicked"
	case v.shutdown == "guest-shutdown":
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_SHUTDOWN, "the guest powered off"
	case v.shutdown == "guest-reset":
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_SHUTDOWN, "the guest reset (reboot or kernel panic); vms run with -no-reboot"
	case v.shutdown == "host-signal":
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_KILLED, "qemu was told to quit by a signal"
	case v.shutdown != "":
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_STOPPED, "qemu shut down: "+v.shutdown
	case st.known && st.signal != 0:
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_CRASHED, fmt.Sprintf("qemu was killed by signal %d (%s)", int(st.signal), st.signal)
	case st.known && st.code != 0:
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_CRASHED, fmt.Sprintf("qemu exited with status %d: %s", st.code, v.qemuLogTail())
	case st.known:
		r.Reason, r.Message = pb.ExitReason_EXIT_REASON_SHUTDOWN, "qemu exited"
	default:
		r.Message = "qemu ended while this plugin was not its parent; its exit status is unknown"
	}
	return r
}

// qemuLogTail returns the last line QEMU wrote.
func (v *vm) qemuLogTail() string {
	data, err := tailFile(filepath.Join(v.ws, qemuLogFile), 4096)
	if err != nil || len(data) == 0 {
		return "(nothing)"
	}
	return lastLine(string(data))
}

// tailFile returns the last max bytes of a file (all of it for max <= 0).
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

// status reports the VM's status.
func (v *vm) status() *pb.VMStatus {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := &pb.VMStatus{
		Id:         v.id,
		State:      v.state,
		AgentReady: v.agentReady,
		Exit:       v.exit,
		Spec:       v.spec,
		Attributes: map[string]string{
			"workspace":   v.ws,
			"machine":     v.rec.Machine,
			"qmp_socket":  filepath.Join(v.ws, qmpSock),
			"console_log": filepath.Join(v.ws, consoleFile),
			"uuid":        v.rec.UUID,
		},
	}
	if !v.startedAt.IsZero() {
		st.StartedAtUnixNano = v.startedAt.UnixNano()
	}
	if !v.stoppedAt.IsZero() {
		st.StoppedAtUnixNano = v.stoppedAt.UnixNano()
	}
	if v.proc != nil {
		st.Attributes["pid"] = strconv.Itoa(v.proc.pid)
	}
	if v.accel != "" {
		st.Attributes["accel"] = v.accel
	}
	if v.spec.GetDisplay() {
		st.Attributes["vnc_socket"] = filepath.Join(v.ws, vncSock)
	}
	return st
}

// RecoverVM takes back a VM started by an earlier plugin process.
func (d *Driver) RecoverVM(ctx context.Context, h *pb.Handle) (*pb.VMStatus, error) {
	hs, err := decodeHandle(h)
	if err != nil {
		return nil, err
	}
	id := h.VmId
	if v, err := d.lookup(id); err == nil {
		v.mu.Lock()
		running := v.proc != nil
		v.mu.Unlock()
		if running {
			return v.status(), nil // already ours
		}
	}
	if _, err := os.Stat(hs.Workspace); errors.Is(err, os.ErrNotExist) {
		return nil, driver.Errorf(driver.ErrNotFound, "vm %s: nothing left of it (no workspace %s)", id, hs.Workspace)
	}
	v, err := d.loadVM(id, hs.Workspace)
	if err != nil {
		return nil, err
	}
	if v.rec.UUID != hs.UUID {
		return nil, driver.Errorf(driver.ErrState, "vm %s: the handle's uuid %s is not the workspace's %s; it belongs to an earlier vm of the same id", id, hs.UUID, v.rec.UUID)
	}
	v = d.register(v)
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	if v.proc != nil { // recovered concurrently
		v.mu.Unlock()
		return v.status(), nil
	}
	v.binary, v.startedAt = hs.QEMUBinary, time.Unix(0, hs.StartedAt)
	v.mu.Unlock()

	p, alive := adoptProcess(v.ws, v.rec.StartedIn, hs.PID)
	if !alive {
		v.markStopped()
		return v.status(), nil
	}
	done := make(chan struct{})
	v.mu.Lock()
	v.state, v.proc, v.done, v.exit = pb.VMState_VM_STATE_RUNNING, p, done, nil
	v.mu.Unlock()
	mon, err := v.connectMonitor(ctx, done, 3*time.Second)
	if err == nil {
		var who identity
		if who, err = mon.queryIdentity(ctx); err == nil && (who.Name != v.qemuName() || who.UUID != hs.UUID) {
			err = driver.Errorf(driver.ErrState, "vm %s: the qemu at %s says it is %q (uuid %s), not this vm (uuid %s)", id, hs.QMPSocket, who.Name, who.UUID, hs.UUID)
		}
	}
	var status string
	if err == nil {
		status, err = mon.queryStatus(ctx)
	}
	if err != nil {
		v.mu.Lock()
		v.state, v.proc, v.done = pb.VMState_VM_STATE_STOPPED, nil, nil
		m := v.mon
		v.mon = nil
		v.mu.Unlock()
		if m != nil {
			m.close()
		}
		unixClose(p)
		p2, still := adoptProcess(v.ws, v.rec.StartedIn, hs.PID)
		if !still {
			v.markStopped()
			return v.status(), nil
		}
		unixClose(p2)
		if errors.Is(err, driver.ErrState) {
			return nil, err
		}
		return nil, driver.Errorf(driver.ErrUnavailable, "recover vm %s: its qemu (pid %d) runs but does not answer on qmp: %v", id, p.pid, err)
	}
	v.mu.Lock()
	v.accel = v.readAccel()
	if status == "paused" {
		v.state = pb.VMState_VM_STATE_PAUSED
	}
	v.mu.Unlock()
	go v.watch(p, done)
	d.emit(id, pb.EventType_EVENT_TYPE_RECOVERED, fmt.Sprintf("pid %d, %s", p.pid, status))
	return v.status(), nil
}

// readAccel reads the accelerator from QEMU's command line; v.mu is held.
func (v *vm) readAccel() string {
	if v.proc == nil {
		return ""
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(v.proc.pid) + "/cmdline")
	if err != nil {
		return ""
	}
	args := splitNUL(data)
	for i, a := range args {
		if a == "-accel" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func splitNUL(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			out = append(out, string(b[start:i]))
			start = i + 1
		}
	}
	return out
}

// markStopped records a VM found not running.
func (v *vm) markStopped() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.state = pb.VMState_VM_STATE_STOPPED
	if v.exit == nil || v.exit.Reason == pb.ExitReason_EXIT_REASON_UNSPECIFIED {
		v.exit = &pb.ExitResult{Message: "the vm's qemu ended while no plugin process watched it"}
	}
}

// WaitVM blocks until the VM stops.
func (d *Driver) WaitVM(ctx context.Context, id string) (*pb.ExitResult, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	done, exit, state := v.done, v.exit, v.state
	v.mu.Unlock()
	if state != pb.VMState_VM_STATE_RUNNING && state != pb.VMState_VM_STATE_PAUSED {
		if exit == nil {
			exit = &pb.ExitResult{Message: "the vm has not run"}
		}
		return exit, nil
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.exit, nil
}

// StopVM shuts the VM down: the guest agent first, then the ACPI power
// button, then QMP quit, then SIGKILL, sharing the timeout between them.
// A stopped memory_file VM with a saved guest gets spares for it (spare.go).
func (d *Driver) StopVM(ctx context.Context, id string, timeout time.Duration) (*pb.ExitResult, error) {
	exit, err := d.stopVM(ctx, id, timeout)
	if err == nil {
		d.sparesAfterStop(id)
	}
	return exit, err
}

func (d *Driver) stopVM(ctx context.Context, id string, timeout time.Duration) (*pb.ExitResult, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	done, proc, state, ready := v.done, v.proc, v.state, v.agentReady
	if proc == nil {
		exit := v.exit
		v.mu.Unlock()
		if exit == nil {
			exit = &pb.ExitResult{Reason: pb.ExitReason_EXIT_REASON_STOPPED, Message: "the vm was not running"}
		}
		return exit, nil
	}
	v.stopReason = pb.ExitReason_EXIT_REASON_STOPPED
	v.mu.Unlock()

	start := time.Now()
	gone := func(until time.Time) bool {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		select {
		case <-done:
			return true
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	if timeout > 0 && ctx.Err() == nil {
		phaseEnd := func(share int64) time.Time { return start.Add(time.Duration(int64(timeout) * share / 100)) }
		paused := state == pb.VMState_VM_STATE_PAUSED
		if !paused && ready {
			// 1. Ask the guest agent to power off (it syncs the disks first).
			until := phaseEnd(60)
			actx, cancel := context.WithDeadline(ctx, until)
			go func() {
				defer cancel()
				if c, err := v.agentClient(actx); err == nil {
					_ = c.Shutdown(actx)
				}
			}()
			if gone(until) {
				return v.exitNow(), nil
			}
		}
		if !paused && ctx.Err() == nil {
			// 2. The ACPI power button.
			if mon, err := v.monitor(ctx); err == nil {
				_ = mon.run(ctx, "system_powerdown", nil, nil)
			}
			if gone(phaseEnd(80)) {
				return v.exitNow(), nil
			}
		}
		if ctx.Err() == nil {
			// 3. Ask QEMU itself to quit.
			if mon, err := v.monitor(ctx); err == nil {
				_ = mon.run(ctx, "quit", nil, nil)
			}
			if gone(start.Add(timeout)) {
				return v.exitNow(), nil
			}
		}
	}
	// 4. Force.
	v.mu.Lock()
	if timeout > 0 {
		v.stopReason = pb.ExitReason_EXIT_REASON_KILLED
	}
	v.mu.Unlock()
	_ = proc.signal(syscall.SIGKILL)
	select {
	case <-done:
		return v.exitNow(), nil
	case <-time.After(10 * time.Second):
		return nil, fmt.Errorf("stop vm %s: qemu (pid %d) did not end 10s after SIGKILL", id, proc.pid)
	}
}

// exitNow returns the recorded exit of a stopped VM.
func (v *vm) exitNow() *pb.ExitResult {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.exit
}

// DestroyVM kills the VM's QEMU (with force) and removes its workspace. It
// needs nothing in memory: the workspace tells which process is the VM's.
func (d *Driver) DestroyVM(ctx context.Context, id string, force bool) error {
	if !idPattern.MatchString(id) {
		return driver.Errorf(driver.ErrInvalid, "vm id %q does not match [a-z0-9][a-z0-9-]{0,62}", id)
	}
	_, stateDir := d.config()
	v, err := d.lookup(id)
	if err != nil {
		if stateDir == "" {
			return nil // no state dir, no workspaces: the id is unknown
		}
		ws := workspace(stateDir, id)
		if _, err := os.Stat(ws); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		v = &vm{d: d, id: id, ws: ws, state: pb.VMState_VM_STATE_STOPPED}
		if loaded, err := d.loadVM(id, ws); err == nil {
			v = loaded
		}
		v = d.register(v)
	}
	v.op.Lock()
	defer v.op.Unlock()
	if v.pending != nil { // started ahead, never started as this VM (spare.go)
		killSpareProcess(v.pending)
		v.pending = nil
	}
	v.mu.Lock()
	proc, done := v.proc, v.done
	v.mu.Unlock()
	if proc == nil {
		// Not ours (yet): is a QEMU running from this workspace?
		if p, ok := adoptProcess(v.ws, v.rec.StartedIn, 0); ok {
			if !force {
				unixClose(p)
				return driver.Errorf(driver.ErrState, "vm %s is running; stop it first or destroy with force", id)
			}
			if err := v.verifyForKill(ctx, p); err != nil {
				unixClose(p)
				return err
			}
			proc = p
			done = make(chan struct{})
			v.mu.Lock()
			v.proc, v.done, v.state = p, done, pb.VMState_VM_STATE_RUNNING
			v.mu.Unlock()
			go v.watch(p, done)
		}
	}
	if proc != nil {
		if !force {
			return driver.Errorf(driver.ErrState, "vm %s is running; stop it first or destroy with force", id)
		}
		v.mu.Lock()
		v.stopReason = pb.ExitReason_EXIT_REASON_KILLED
		v.mu.Unlock()
		_ = proc.signal(syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("destroy vm %s: qemu (pid %d) did not end 10s after SIGKILL", id, proc.pid)
		}
	}
	v.closeAgent()
	release := d.holdSpares(id, "")
	defer release()
	if err := os.RemoveAll(v.ws); err != nil {
		return fmt.Errorf("destroy vm %s: remove workspace: %w", id, err)
	}
	v.mu.Lock()
	v.destroyed = true
	v.mu.Unlock()
	d.mu.Lock()
	if d.vms[id] == v {
		delete(d.vms, id)
	}
	d.mu.Unlock()
	d.emit(id, pb.EventType_EVENT_TYPE_DESTROYED, "")
	return nil
}

// qemuName is the -name its QEMU was started with: the VM's id, or the
// spare's it was started as (spare.go).
func (v *vm) qemuName() string {
	if v.rec.QEMUName != "" {
		return v.rec.QEMUName
	}
	return v.id
}

// verifyForKill checks, before a kill, that p is this VM's QEMU: through QMP
// when it answers (name and uuid), else by its command line naming the
// workspace (adoptProcess checked that already).
func (v *vm) verifyForKill(ctx context.Context, p *process) error {
	if v.rec.UUID == "" {
		return nil
	}
	m, err := dialMonitor(filepath.Join(v.ws, qmpSock), 2*time.Second, nil)
	if err != nil {
		return nil // QMP is gone or held by another client; the command line matched
	}
	defer m.close()
	who, err := m.queryIdentity(ctx)
	if err != nil {
		return nil
	}
	if who.Name != v.qemuName() || who.UUID != v.rec.UUID {
		return driver.Errorf(driver.ErrState, "vm %s: the qemu (pid %d) on its qmp socket says it is %q (uuid %s), not this vm; not killing it", v.id, p.pid, who.Name, who.UUID)
	}
	return nil
}

// InspectVM reports a known VM's status.
func (d *Driver) InspectVM(_ context.Context, id string) (*pb.VMStatus, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	return v.status(), nil
}

// ListVMs lists the VMs this process knows.
func (d *Driver) ListVMs(context.Context) ([]*pb.VMStatus, error) {
	d.mu.Lock()
	vms := make([]*vm, 0, len(d.vms))
	for _, v := range d.vms {
		vms = append(vms, v)
	}
	d.mu.Unlock()
	out := make([]*pb.VMStatus, 0, len(vms))
	for _, v := range vms {
		out = append(out, v.status())
	}
	return out, nil
}

// ConsoleLog returns the tail of the serial console.
func (d *Driver) ConsoleLog(_ context.Context, id string, maxBytes int64) ([]byte, error) {
	v, err := d.lookupOrLoad(id)
	if err != nil && errors.Is(err, driver.ErrState) {
		// Running under an earlier plugin process: its console file is there all the same.
		_, stateDir := d.config()
		v = &vm{id: id, ws: workspace(stateDir, id)}
	} else if err != nil {
		return nil, err
	}
	data, err := tailFile(filepath.Join(v.ws, consoleFile), maxBytes)
	if errors.Is(err, os.ErrNotExist) {
		return []byte{}, nil // never started
	}
	if err != nil {
		return nil, fmt.Errorf("console log of vm %s: %w", id, err)
	}
	return data, nil
}

// PauseVM freezes the VM's vCPUs.
func (d *Driver) PauseVM(ctx context.Context, id string) error {
	return d.freeze(ctx, id, pb.VMState_VM_STATE_RUNNING, pb.VMState_VM_STATE_PAUSED, "stop", pb.EventType_EVENT_TYPE_PAUSED)
}

// ResumeVM unfreezes a paused VM.
func (d *Driver) ResumeVM(ctx context.Context, id string) error {
	return d.freeze(ctx, id, pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, "cont", pb.EventType_EVENT_TYPE_RESUMED)
}

// freeze moves a VM between running and paused with the QMP command that
// does it ("stop" or "cont"), refusing a VM that is not in the from state.
func (d *Driver) freeze(ctx context.Context, id string, from, to pb.VMState, command string, event pb.EventType) error {
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
	mon, err := v.monitor(ctx)
	if err != nil {
		return err
	}
	if err := mon.run(ctx, command, nil, nil); err != nil {
		return fmt.Errorf("vm %s: qmp %s: %w", id, command, err)
	}
	v.transition(from, to, event)
	return nil
}

// stateName is a state for people: "running", "paused", ...
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
	return "in an unknown state"
}
