package vz

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base/basetest"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
)

// testDirs is a short state dir (unix socket paths are short on macOS, and
// the driver refuses longer ones) with a Linux and a macOS image in it. Host
// processes left running when the test ends are stopped.
type testDirs struct {
	state, linuxImage, macImage string
}

func newTestDirs(t testing.TB) testDirs {
	t.Helper()
	root, err := os.MkdirTemp("", "vz")
	if err != nil {
		t.Fatal(err)
	}
	d := testDirs{state: filepath.Join(root, "s"), linuxImage: filepath.Join(root, "linux.img"), macImage: filepath.Join(root, "macos")}
	if err := os.WriteFile(d.linuxImage, []byte("linux raw disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(d.macImage, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{diskName: "macOS disk", auxName: "aux storage", hwModelName: "hardware model M1"} {
		if err := os.WriteFile(filepath.Join(d.macImage, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(filepath.Join(d.state, "vms"))
		for _, e := range entries {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _, _ = hostClient{socket: filepath.Join(d.state, "vms", e.Name(), socketName)}.call(ctx, hostRequest{Op: opStop, Force: true})
			cancel()
		}
		os.RemoveAll(root)
	})
	return d
}

func (d testDirs) linuxSpec(id string) *pb.VMSpec {
	return &pb.VMSpec{Id: id, Name: "test " + id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: d.linuxImage, Vcpus: 1, MemoryMib: 256}
}

func (d testDirs) macSpec(id string) *pb.VMSpec {
	return &pb.VMSpec{Id: id, Name: "test " + id, GuestOs: pb.GuestOS_GUEST_OS_MACOS, Image: d.macImage, Vcpus: 2, MemoryMib: 4096, Display: true}
}

// launchFakePlugin runs this test binary as a vz plugin process over the
// fake VM, configured with dir as its state dir.
func launchFakePlugin(t testing.TB, state string) *driver.Plugin {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fakePluginEnv+"=1")
	logger := hclog.New(&hclog.LoggerOptions{Name: "vz", Level: hclog.Debug, Output: basetest.LogWriter(t)})
	p, err := driver.Launch(context.Background(), driver.LaunchConfig{Cmd: cmd, Logger: logger})
	if err != nil {
		t.Fatalf("launch vz plugin: %v", err)
	}
	t.Cleanup(p.Kill)
	if state != "" {
		if err := p.SetConfig(context.Background(), &basepb.SetConfigRequest{Agent: &basepb.AgentContext{StateDir: state}}); err != nil {
			t.Fatalf("SetConfig: %v", err)
		}
	}
	return p
}

// newFakeDriver is the driver in this process, over the fake VM.
func newFakeDriver(t testing.TB, state string) *Driver {
	t.Helper()
	d := NewWithOptions(hclog.New(&hclog.LoggerOptions{Name: "vz", Level: hclog.Debug, Output: basetest.LogWriter(t)}), fakeOptions())
	if err := d.SetConfig(context.Background(), &basepb.SetConfigRequest{Agent: &basepb.AgentContext{StateDir: state}}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return d
}

// The conformance suite, with the plugin and host processes real and only
// the framework's VM faked: it proves the protocol, recovery, snapshots and
// clones of the driver, not that a Mac boots anything.
func TestVZOverFakeVMPassesConformanceSuite(t *testing.T) {
	dirs := newTestDirs(t)
	drivertest.Run(t, drivertest.Harness{
		Launch:       func(t testing.TB) *driver.Plugin { return launchFakePlugin(t, "") },
		StateDir:     dirs.state,
		Spec:         dirs.linuxSpec,
		ReadyTimeout: 20 * time.Second,
	})
}

func TestPluginKilledAndRestartedFindsItsVMs(t *testing.T) {
	dirs := newTestDirs(t)
	ctx := t.Context()
	p1 := launchFakePlugin(t, dirs.state)
	specs := []*pb.VMSpec{dirs.linuxSpec("run"), dirs.linuxSpec("paused"), dirs.macSpec("mac")}
	handles := map[string]*pb.Handle{}
	pids := map[string]string{}
	for _, spec := range specs {
		if _, err := p1.CreateVM(ctx, spec); err != nil {
			t.Fatalf("CreateVM %s: %v", spec.Id, err)
		}
		h, st, err := p1.StartVM(ctx, spec.Id)
		if err != nil {
			t.Fatalf("StartVM %s: %v", spec.Id, err)
		}
		handles[spec.Id], pids[spec.Id] = h, st.Attributes["pid"]
	}
	if _, err := p1.WaitReady(ctx, "run"); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if err := p1.PauseVM(ctx, "paused"); err != nil {
		t.Fatalf("PauseVM: %v", err)
	}

	p1.Kill()
	p2 := launchFakePlugin(t, dirs.state)
	want := map[string]pb.VMState{"run": pb.VMState_VM_STATE_RUNNING, "paused": pb.VMState_VM_STATE_PAUSED, "mac": pb.VMState_VM_STATE_RUNNING}
	for id, h := range handles {
		st, err := p2.RecoverVM(ctx, h)
		if err != nil {
			t.Fatalf("RecoverVM %s after the plugin was killed: %v", id, err)
		}
		if st.State != want[id] || st.Attributes["pid"] != pids[id] {
			t.Errorf("recovered %s: state %s pid %s, want %s pid %s (the same host process)", id, st.State, st.Attributes["pid"], want[id], pids[id])
		}
	}
	var out bytes.Buffer
	if code, err := p2.Exec(ctx, &pb.ExecRequest{Id: "run", Command: &pb.ExecRequest_Shell{Shell: "echo still here"}}, &out, nil); err != nil || code != 0 || out.String() != "still here\n" {
		t.Errorf("exec in a recovered VM = %d, %v, %q", code, err, out.String())
	}
	if err := p2.ResumeVM(ctx, "paused"); err != nil {
		t.Errorf("ResumeVM of a VM paused under the killed plugin: %v", err)
	}
	// The running macOS VM still holds its slot in the new plugin's count.
	fp, err := p2.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := (<-fp).Attributes["vz.macos_slots_free"]; got != "1" {
		t.Errorf("macOS slots free after recovery = %s, want 1", got)
	}
	exit, err := p2.StopVM(ctx, "run", 5*time.Second)
	if err != nil || exit.Reason != pb.ExitReason_EXIT_REASON_STOPPED {
		t.Errorf("StopVM of a recovered VM = %v, %v; want STOPPED", exit, err)
	}
}

func TestRecoverRefusesASocketServingAnotherVM(t *testing.T) {
	dirs := newTestDirs(t)
	ctx := t.Context()
	p := launchFakePlugin(t, dirs.state)
	for _, id := range []string{"a", "b"} {
		if _, err := p.CreateVM(ctx, dirs.linuxSpec(id)); err != nil {
			t.Fatal(err)
		}
	}
	ha, _, err := p.StartVM(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.StartVM(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.StopVM(ctx, "a", 0); err != nil {
		t.Fatal(err)
	}
	// VM b's host process now answers at the path a's handle records.
	sockA := filepath.Join(dirs.state, "vms", "a", socketName)
	if err := os.Rename(filepath.Join(dirs.state, "vms", "b", socketName), sockA); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	p2 := launchFakePlugin(t, dirs.state)
	_, err = p2.RecoverVM(ctx, ha)
	if !errors.Is(err, driver.ErrState) || !strings.Contains(err.Error(), "serves vm b") {
		t.Fatalf("RecoverVM through a socket serving vm b = %v, want ErrState naming vm b", err)
	}
	if err := os.Rename(sockA, filepath.Join(dirs.state, "vms", "b", socketName)); err != nil {
		t.Fatal(err)
	}

	// A later run of a (a new host process) is not the run the old handle recorded.
	if _, _, err := p2.StartVM(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	p2.Kill()
	p3 := launchFakePlugin(t, dirs.state)
	_, err = p3.RecoverVM(ctx, ha)
	if !errors.Is(err, driver.ErrState) || !strings.Contains(err.Error(), "instance") {
		t.Fatalf("RecoverVM with the handle of an earlier run = %v, want ErrState naming the instance", err)
	}
}

func TestRecoverReportsStoppedWhenHostProcessIsGone(t *testing.T) {
	dirs := newTestDirs(t)
	ctx := t.Context()
	p := launchFakePlugin(t, dirs.state)
	if _, err := p.CreateVM(ctx, dirs.linuxSpec("gone")); err != nil {
		t.Fatal(err)
	}
	h, st, err := p.StartVM(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	// The host process dies while no plugin watches it; its PID may be
	// anyone's now, so only the socket counts.
	pid := st.Attributes["pid"]
	if err := exec.Command("kill", "-9", pid).Run(); err != nil {
		t.Fatalf("kill host process %s: %v", pid, err)
	}
	time.Sleep(200 * time.Millisecond)
	p2 := launchFakePlugin(t, dirs.state)
	got, err := p2.RecoverVM(ctx, h)
	if err != nil || got.State != pb.VMState_VM_STATE_STOPPED {
		t.Fatalf("RecoverVM of a VM whose host process was killed = %v, %v; want STOPPED", got, err)
	}
}

func TestThirdMacOSVMIsRefusedUntilASlotFrees(t *testing.T) {
	dirs := newTestDirs(t)
	ctx := t.Context()
	d := newFakeDriver(t, dirs.state)
	for _, id := range []string{"m1", "m2", "m3", "l1"} {
		spec := dirs.macSpec(id)
		if id == "l1" {
			spec = dirs.linuxSpec(id)
		}
		if _, err := d.CreateVM(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"m1", "m2", "l1"} {
		if _, _, err := d.StartVM(ctx, id); err != nil {
			t.Fatalf("StartVM %s: %v", id, err)
		}
	}
	if _, _, err := d.StartVM(ctx, "m3"); !errors.Is(err, driver.ErrNoCapacity) {
		t.Fatalf("StartVM of a third macOS VM = %v, want ErrNoCapacity", err)
	}
	if _, err := d.StopVM(ctx, "m1", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.StartVM(ctx, "m3"); err != nil {
		t.Fatalf("StartVM of a third macOS VM after one stopped: %v", err)
	}
	for _, id := range []string{"m2", "m3", "l1"} {
		if err := d.DestroyVM(ctx, id, true); err != nil {
			t.Errorf("DestroyVM %s: %v", id, err)
		}
	}
	if free := d.slots.free(); free != MacOSSlots {
		t.Errorf("free macOS slots after every VM was destroyed = %d, want %d", free, MacOSSlots)
	}
}

func TestMacOSCloneKeepsHardwareModelAndGetsOwnMachineIdentifier(t *testing.T) {
	dirs := newTestDirs(t)
	ctx := t.Context()
	d := newFakeDriver(t, dirs.state)
	if _, err := d.CreateVM(ctx, dirs.macSpec("src")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"src"} {
		if _, _, err := d.StartVM(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.SnapshotVM(ctx, "src", "warm", false); err != nil {
		t.Fatalf("SnapshotVM of a running macOS VM: %v", err)
	}
	if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: "src", SnapshotTag: "warm", Id: "dst"}); err != nil {
		t.Fatalf("CloneVM: %v", err)
	}
	if _, err := d.StopVM(ctx, "src", time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.StartVM(ctx, "dst"); err != nil {
		t.Fatal(err)
	}
	read := func(id, name string) []byte {
		b, err := os.ReadFile(filepath.Join(dirs.state, "vms", id, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, name := range []string{hwModelName, auxName} {
		if !bytes.Equal(read("src", name), read("dst", name)) {
			t.Errorf("the clone's %s differs from its source's", name)
		}
	}
	if bytes.Equal(read("src", machineIDName), read("dst", machineIDName)) {
		t.Error("the clone has its source's machine identifier")
	}
}

func TestTranslateSpecToHostConfig(t *testing.T) {
	ws := "/s/vms/v1"
	linux := &pb.VMSpec{Id: "v1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: "/img", Vcpus: 2, MemoryMib: 1024, Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER, Mac: "52:54:00:AA:BB:CC"}}
	hc, err := translate(linux, ws, linux.GuestOs)
	if err != nil {
		t.Fatal(err)
	}
	if hc.GuestOS != "linux" || hc.CPUs != 2 || hc.MemoryMiB != 1024 || hc.EFIVars != ws+"/"+efiVarsName || hc.MachineID != ws+"/"+machineIDName ||
		hc.MAC != "52:54:00:aa:bb:cc" || hc.Socket != ws+"/"+socketName || hc.AgentPort != AgentPort {
		t.Errorf("linux host config = %+v", hc)
	}
	mac := &pb.VMSpec{Id: "v1", GuestOs: pb.GuestOS_GUEST_OS_MACOS, Image: "/img", Vcpus: 4, MemoryMib: 8192}
	hc, err = translate(mac, ws, mac.GuestOs)
	if err != nil {
		t.Fatal(err)
	}
	if hc.GuestOS != "macos" || hc.HardwareModel != ws+"/"+hwModelName || hc.MachineID != ws+"/"+machineIDName || hc.AuxStorage != ws+"/"+auxName || hc.EFIVars != "" {
		t.Errorf("macOS host config = %+v", hc)
	}

	bad := []struct {
		name string
		edit func(*pb.VMSpec)
		ws   string
	}{
		{"no vcpus", func(s *pb.VMSpec) { s.Vcpus = 0 }, ws},
		{"too many vcpus", func(s *pb.VMSpec) { s.Vcpus = maxVCPUs + 1 }, ws},
		{"too little memory", func(s *pb.VMSpec) { s.MemoryMib = 64 }, ws},
		{"relative image", func(s *pb.VMSpec) { s.Image = "img" }, ws},
		{"bad id", func(s *pb.VMSpec) { s.Id = "Bad_Id" }, ws},
		{"tap network", func(s *pb.VMSpec) { s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP} }, ws},
		{"multicast mac", func(s *pb.VMSpec) { s.Network = &pb.Network{Mac: "01:00:5e:00:00:01"} }, ws},
		{"driver config", func(s *pb.VMSpec) { s.DriverConfigJson = []byte(`{"x":1}`) }, ws},
		{"macOS volumes", func(s *pb.VMSpec) {
			s.GuestOs = pb.GuestOS_GUEST_OS_MACOS
			s.Volumes = []*pb.Volume{{Id: "vol-1", Path: "/v.raw"}}
		}, ws},
		{"no guest os", func(s *pb.VMSpec) { s.GuestOs = pb.GuestOS_GUEST_OS_UNSPECIFIED }, ws},
		{"socket path too long for macOS", func(*pb.VMSpec) {}, "/" + strings.Repeat("d", 100) + "/vms/v1"},
	}
	for _, c := range bad {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			spec := &pb.VMSpec{Id: "v1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: "/img", Vcpus: 1, MemoryMib: 256}
			c.edit(spec)
			if _, err := translate(spec, c.ws, spec.GuestOs); !errors.Is(err, driver.ErrInvalid) {
				t.Errorf("translate = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestDecodeHandleRefusesForeignAndCorruptHandles(t *testing.T) {
	good := handleState{Workspace: "/s/vms/v1", Socket: "/s/vms/v1/" + socketName, Instance: strings.Repeat("a", 32), PID: 10}
	h, err := encodeHandle("v1", good)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := decodeHandle(h); err != nil || st != good {
		t.Fatalf("decode(encode) = %+v, %v", st, err)
	}
	cases := []struct {
		name string
		edit func(*pb.Handle, *handleState)
		want error
	}{
		{"other driver", func(h *pb.Handle, _ *handleState) { h.Driver = "qemu" }, driver.ErrState},
		{"newer version", func(h *pb.Handle, _ *handleState) { h.Version = handleVersion + 1 }, driver.ErrState},
		{"no version", func(h *pb.Handle, _ *handleState) { h.Version = 0 }, driver.ErrInvalid},
		{"socket outside workspace", func(_ *pb.Handle, s *handleState) { s.Socket = "/s/vms/v2/" + socketName }, driver.ErrInvalid},
		{"workspace of another vm", func(_ *pb.Handle, s *handleState) { s.Workspace = "/s/vms/v2"; s.Socket = "/s/vms/v2/" + socketName }, driver.ErrInvalid},
		{"no instance", func(_ *pb.Handle, s *handleState) { s.Instance = "" }, driver.ErrInvalid},
		{"relative workspace", func(_ *pb.Handle, s *handleState) { s.Workspace = "vms/v1" }, driver.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			st := good
			h, _ := encodeHandle("v1", good)
			c.edit(h, &st)
			if st != good {
				h2, _ := encodeHandle("v1", st)
				h.State = h2.State
			}
			if _, err := decodeHandle(h); !errors.Is(err, c.want) {
				t.Errorf("decodeHandle = %v, want %v", err, c.want)
			}
		})
	}
}

func TestHostAnswersBadRequestsWithErrors(t *testing.T) {
	dirs := newTestDirs(t)
	ctx := t.Context()
	d := newFakeDriver(t, dirs.state)
	if _, err := d.CreateVM(ctx, dirs.linuxSpec("h")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.StartVM(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	c := hostClient{socket: filepath.Join(dirs.state, "vms", "h", socketName)}
	cases := []struct {
		name string
		req  hostRequest
		want error
	}{
		{"unknown op", hostRequest{Op: "format-disk"}, driver.ErrInvalid},
		{"save outside the workspace", hostRequest{Op: opSave, Path: "/etc/passwd"}, driver.ErrInvalid},
		{"save while running", hostRequest{Op: opSave, Path: filepath.Join(dirs.state, "vms", "h", snapshotsDir, "x", stateFileName)}, driver.ErrState},
		{"vsock to a port nobody listens on", hostRequest{Op: opVsock, Port: 9}, driver.ErrUnavailable},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			if _, _, err := c.call(ctx, tc.req); !errors.Is(err, tc.want) {
				t.Errorf("%s = %v, want %v", tc.req.Op, err, tc.want)
			}
		})
	}
}

// FuzzHostRequestLine: whatever arrives on a host socket is refused or
// decoded into a request, never a crash.
func FuzzHostRequestLine(f *testing.F) {
	for _, s := range []string{`{"op":"hello"}`, `{"op":"vsock","port":1024}`, `{"op":"save","path":"/x"}`, `{"op":1}`, strings.Repeat("[", 1000)} {
		f.Add([]byte(s + "\n"))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req hostRequest
		_ = readLine(bufioReader(data), &req)
	})
}

// FuzzDecodeHandle: any handle bytes are refused or decoded, never a crash,
// and what decodes names a socket in the VM's own workspace.
func FuzzDecodeHandle(f *testing.F) {
	f.Add([]byte(`{"workspace":"/s/vms/v1","socket":"/s/vms/v1/host.sock","instance":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","pid":1}`))
	f.Add([]byte("\x00garbage{"))
	f.Fuzz(func(t *testing.T, state []byte) {
		st, err := decodeHandle(&pb.Handle{Version: 1, Driver: driverName, VmId: "v1", State: state})
		if err == nil && st.Socket != filepath.Join(st.Workspace, socketName) {
			t.Fatalf("decoded a handle whose socket %s is outside workspace %s", st.Socket, st.Workspace)
		}
	})
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// A host process told to end (SIGTERM: its context) presses the power
// button, lets the guest power off, records it and removes its socket.
func TestHostPowersOffWhenSignalled(t *testing.T) {
	dirs := newTestDirs(t)
	ws := filepath.Join(dirs.state, "vms", "sig")
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	hc, err := translate(dirs.linuxSpec("sig"), ws, pb.GuestOS_GUEST_OS_LINUX)
	if err != nil {
		t.Fatal(err)
	}
	if err := cloneFile(dirs.linuxImage, hc.Disk); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(filepath.Join(ws, hostFile), hc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- runHost(ctx, ws, newFakeVM, t.Logf, 5*time.Second) }()
	c := hostClient{socket: hc.Socket}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if h, err := c.hello(t.Context()); err == nil && h.State == MachineRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the host process never answered hello with a running VM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runHost: %v", err)
	}
	var ex hostExit
	if err := readJSON(filepath.Join(ws, exitFile), &ex); err != nil || ex.Reason != "stopped" {
		t.Errorf("exit record = %+v, %v; want stopped (the guest powered off, not killed)", ex, err)
	}
	if _, err := os.Stat(hc.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still there after the host process ended: %v", err)
	}
}
