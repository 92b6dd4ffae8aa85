package drivertest

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/base/basetest"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/reaper"
	"google.golang.org/protobuf/proto"
)

// suite carries what the tests share: the harness and the plugin process of
// the moment (recovery tests replace it).
type suite struct {
	h    Harness
	caps *pb.CapabilitiesResponse
	info *basepb.PluginInfoResponse
}

// Run checks the driver against the contract. Tests that need a capability
// run only when the driver claims it, and then must pass.
func Run(t *testing.T, h Harness) {
	if h.Launch == nil || h.Spec == nil {
		t.Fatal("drivertest: Harness.Launch and Harness.Spec are required")
	}
	if h.StateDir == "" {
		h.StateDir = t.TempDir()
	}
	if h.ReadyTimeout == 0 {
		h.ReadyTimeout = 2 * time.Minute
	}
	if h.Config == nil {
		h.Config = []byte("{}")
	}
	// VMs whose plugin the suite kills are re-parented to this process;
	// reap them when they end (see package reaper).
	if err := reaper.Start(); err != nil {
		t.Logf("drivertest: cannot become a child subreaper (%v); killed VMs may linger as zombies", err)
	}
	s := &suite{h: h}
	p := s.launch(t)
	ctx := t.Context()
	var err error
	if s.info, err = p.PluginInfo(ctx); err != nil {
		t.Fatalf("PluginInfo: %v", err)
	}
	if s.caps, err = p.Capabilities(ctx); err != nil {
		t.Fatalf("Capabilities: %v", err)
	}
	t.Logf("driver %s %s, capabilities: %v", s.info.Name, s.info.Version, s.caps)

	t.Run("PluginInfoNamesDriverAndVersions", s.testInfo)
	t.Run("CapabilitiesAreKnown", s.testCapabilities)
	t.Run("ConfigSchemaIsWellFormed", s.testSchema)
	t.Run("SetConfigRefusesBadConfig", s.testBadConfig)
	t.Run("FingerprintSendsAtOnce", s.testFingerprint)
	t.Run("CreateRefusesBadSpecs", s.testBadSpecs)
	t.Run("UnclaimedCapabilitiesAreRefused", s.testUnclaimed)
	t.Run("Lifecycle", s.testLifecycle)
	if s.caps.Headless && (s.caps.Screenshot || s.caps.Input) {
		t.Run("NoScreenWithoutDisplay", s.testHeadless)
	}
	if s.caps.DiskSnapshots {
		t.Run("DiskSnapshots", s.testDiskSnapshots)
	}
	if s.caps.MemorySnapshots {
		t.Run("MemorySnapshots", s.testMemorySnapshots)
	}
	if s.caps.Clones {
		t.Run("Clones", s.testClones)
	}
	if s.caps.PortForward {
		t.Run("PortForward", s.testPortForward)
	}
	if s.caps.Volumes {
		t.Run("Volumes", s.testVolumes)
	}
	t.Run("RecoverRefusesBadHandles", s.testBadHandles)
	t.Run("DestroyWorksWhenProcessIsGone", s.testDestroyAfterCrash)
}

// launch starts a plugin process and configures it.
func (s *suite) launch(t *testing.T) *driver.Plugin {
	t.Helper()
	p := s.h.Launch(t)
	// Not t.Context(): clean-ups launch plugins too, after it is cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{
		ConfigJson: s.h.Config,
		Agent:      &basepb.AgentContext{StateDir: s.h.StateDir, NodeName: "drivertest", LogLevel: basepb.LogLevel_LOG_LEVEL_DEBUG},
	}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return p
}

func (s *suite) testInfo(t *testing.T) {
	basetest.CheckInfo(t, s.info, basepb.PluginType_PLUGIN_TYPE_DRIVER, driver.APIVersion)
}

// testCapabilities checks what the capabilities say beyond the optional RPCs
// (those are exercised where they are used).
func (s *suite) testCapabilities(t *testing.T) {
	if len(s.caps.GuestOs) == 0 {
		t.Error("guest_os lists no guest OS")
	}
	for _, os := range s.caps.GuestOs {
		if base.EnumName(os) == "" {
			t.Errorf("guest_os lists %v, which is not a guest OS of the contract", os)
		}
	}
}

func (s *suite) testSchema(t *testing.T) {
	basetest.CheckSchema(t, s.launch(t))
}

func (s *suite) testBadConfig(t *testing.T) {
	basetest.CheckBadConfig(t, s.h.Launch(t), s.h.StateDir)
}

func (s *suite) testFingerprint(t *testing.T) {
	p := s.launch(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatalf("Fingerprint: %v", err)
	}
	select {
	case fp, ok := <-ch:
		if !ok {
			t.Fatal("fingerprint stream ended before its first message")
		}
		if fp.Health == pb.Health_HEALTH_UNSPECIFIED {
			t.Error("first fingerprint has no health")
		}
		if fp.Health != pb.Health_HEALTH_HEALTHY {
			t.Fatalf("driver is not healthy on this host: %s (%s)", fp.Health, fp.Description)
		}
		if fp.Resources.GetVcpus() <= 0 || fp.Resources.GetMemoryMib() <= 0 {
			t.Errorf("healthy fingerprint reports no resources: %v", fp.Resources)
		}
	case <-ctx.Done():
		t.Fatal("no fingerprint within 30s: the first must be sent at once")
	}
}

// vmID makes a VM id unique to this run and test.
func vmID(short string) string {
	return short + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
}

func (s *suite) workspace(id string) string { return filepath.Join(s.h.StateDir, "vms", id) }

func (s *suite) testBadSpecs(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	mutate := func(f func(*pb.VMSpec)) *pb.VMSpec {
		spec := proto.Clone(s.h.Spec(vmID("bad"))).(*pb.VMSpec)
		f(spec)
		return spec
	}
	cases := []struct {
		name string
		spec *pb.VMSpec
		want error
	}{
		{"empty id", mutate(func(v *pb.VMSpec) { v.Id = "" }), driver.ErrInvalid},
		{"id with slash", mutate(func(v *pb.VMSpec) { v.Id = "../escape" }), driver.ErrInvalid},
		{"zero vcpus", mutate(func(v *pb.VMSpec) { v.Vcpus = 0 }), driver.ErrInvalid},
		{"negative memory", mutate(func(v *pb.VMSpec) { v.MemoryMib = -1 }), driver.ErrInvalid},
		{"no guest os", mutate(func(v *pb.VMSpec) { v.GuestOs = pb.GuestOS_GUEST_OS_UNSPECIFIED }), driver.ErrInvalid},
		{"unknown guest os", mutate(func(v *pb.VMSpec) { v.GuestOs = pb.GuestOS(99) }), driver.ErrInvalid},
		{"unknown network mode", mutate(func(v *pb.VMSpec) { v.Network = &pb.Network{Mode: pb.NetworkMode(99)} }), driver.ErrInvalid},
		{"missing image", mutate(func(v *pb.VMSpec) { v.Image = "/nonexistent/fluxvm/image.qcow2" }), driver.ErrNotFound},
		{"unknown driver field", mutate(func(v *pb.VMSpec) { v.DriverConfigJson = []byte(`{"no_such_field": true}`) }), driver.ErrInvalid},
		{"driver config not json", mutate(func(v *pb.VMSpec) { v.DriverConfigJson = []byte(`{`) }), driver.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			_, err := p.CreateVM(ctx, c.spec)
			if !errors.Is(err, c.want) {
				t.Fatalf("CreateVM = %v, want %v", err, c.want)
			}
			if err.Error() == "" {
				t.Error("the error has no message")
			}
			if c.spec.Id != "" && !strings.Contains(c.spec.Id, "/") {
				if _, statErr := os.Stat(s.workspace(c.spec.Id)); statErr == nil {
					t.Errorf("a failed create left %s behind", s.workspace(c.spec.Id))
				}
			}
		})
	}
	t.Run("duplicate_id", func(t *testing.T) {
		spec := s.h.Spec(vmID("dup"))
		if _, err := p.CreateVM(ctx, spec); err != nil {
			t.Fatalf("first CreateVM: %v", err)
		}
		defer p.DestroyVM(context.Background(), spec.Id, true)
		if _, err := p.CreateVM(ctx, spec); !errors.Is(err, driver.ErrExists) {
			t.Fatalf("second CreateVM = %v, want ErrExists", err)
		}
	})
	t.Run("unknown_vm", func(t *testing.T) {
		if _, err := p.InspectVM(ctx, "no-such-vm"); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("InspectVM(unknown) = %v, want ErrNotFound", err)
		}
		if _, _, err := p.StartVM(ctx, "no-such-vm"); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("StartVM(unknown) = %v, want ErrNotFound", err)
		}
		if err := p.DestroyVM(ctx, "no-such-vm", true); err != nil {
			t.Errorf("DestroyVM(unknown) = %v, want success", err)
		}
	})
}

func (s *suite) testUnclaimed(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	check := func(rpc string, claimed bool, err error) {
		if !claimed && !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("%s without the capability = %v, want ErrUnsupported", rpc, err)
		}
	}
	check("PauseVM", s.caps.Pause, p.PauseVM(ctx, "no-such-vm"))
	_, err := p.Screenshot(ctx, "no-such-vm")
	check("Screenshot", s.caps.Screenshot, err)
	check("SendInput", s.caps.Input, p.SendInput(ctx, "no-such-vm", nil))
	_, err = p.Exec(ctx, &pb.ExecRequest{Id: "no-such-vm", Command: argv("true")}, nil, nil)
	check("Exec", s.caps.Exec, err)
	_, err = p.SnapshotVM(ctx, "no-such-vm", "t", false)
	check("SnapshotVM (disk)", s.caps.DiskSnapshots, err)
	_, err = p.SnapshotVM(ctx, "no-such-vm", "t", true)
	check("SnapshotVM (memory)", s.caps.MemorySnapshots, err)
	anySnapshots := s.caps.DiskSnapshots || s.caps.MemorySnapshots
	_, err = p.ListSnapshots(ctx, "no-such-vm")
	check("ListSnapshots", anySnapshots, err)
	check("DeleteSnapshot", anySnapshots, p.DeleteSnapshot(ctx, "no-such-vm", "t"))
	_, err = p.RestoreVM(ctx, "no-such-vm", "t")
	check("RestoreVM", anySnapshots, err)
	_, err = p.CloneVM(ctx, &pb.CloneVMRequest{SourceId: "no-such-vm", Id: vmID("clone")})
	check("CloneVM", s.caps.Clones, err)
	_, err = p.ForwardPort(ctx, "no-such-vm", 22)
	check("ForwardPort", s.caps.PortForward, err)
}

// events collects a plugin's event stream in the background.
type events struct {
	ch   <-chan *pb.Event
	seen []*pb.Event
}

func (e *events) waitFor(t *testing.T, vm string, typ pb.EventType, timeout time.Duration) {
	t.Helper()
	if slices.ContainsFunc(e.seen, func(ev *pb.Event) bool { return ev.VmId == vm && ev.Type == typ }) {
		return
	}
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-e.ch:
			if !ok {
				t.Fatalf("event stream ended before %s for %s", typ, vm)
			}
			e.seen = append(e.seen, ev)
			if ev.VmId == vm && ev.Type == typ {
				return
			}
		case <-deadline:
			t.Fatalf("no %s event for %s within %v (saw %v)", typ, vm, timeout, e.seen)
		}
	}
}

func (s *suite) testLifecycle(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	evCh, err := p.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	ev := &events{ch: evCh}
	spec := s.h.Spec(vmID("life"))
	st, err := p.CreateVM(ctx, spec)
	if err != nil {
		t.Fatalf("CreateVM: %v", err)
	}
	// If the test stops half-way, a fresh plugin removes the VM.
	t.Cleanup(func() { _ = s.launch(t).DestroyVM(context.Background(), spec.Id, true) })
	if st.State != pb.VMState_VM_STATE_CREATED {
		t.Errorf("after create the state is %s, want CREATED", st.State)
	}
	handle, st, err := p.StartVM(ctx, spec.Id)
	if err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	if handle.GetVersion() < 1 || handle.GetDriver() != s.info.Name || handle.GetVmId() != spec.Id {
		t.Fatalf("handle %v must carry version ≥ 1, driver %q and vm id %q", handle, s.info.Name, spec.Id)
	}
	if st.State != pb.VMState_VM_STATE_RUNNING {
		t.Errorf("after start the state is %s, want RUNNING", st.State)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
		t.Errorf("starting a running VM = %v, want ErrState", err)
	}
	s.waitReady(t, p, spec.Id)
	ev.waitFor(t, spec.Id, pb.EventType_EVENT_TYPE_STARTED, 10*time.Second)
	s.checkRunning(t, p, spec)

	if s.caps.Pause {
		if err := p.PauseVM(ctx, spec.Id); err != nil {
			t.Fatalf("PauseVM: %v", err)
		}
		s.wantState(t, p, spec.Id, pb.VMState_VM_STATE_PAUSED)
		if err := p.PauseVM(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
			t.Errorf("pausing a paused VM = %v, want ErrState", err)
		}
		ev.waitFor(t, spec.Id, pb.EventType_EVENT_TYPE_PAUSED, 10*time.Second)
		if err := p.ResumeVM(ctx, spec.Id); err != nil {
			t.Fatalf("ResumeVM: %v", err)
		}
		s.wantState(t, p, spec.Id, pb.VMState_VM_STATE_RUNNING)
		if err := p.ResumeVM(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
			t.Errorf("resuming a running VM = %v, want ErrState", err)
		}
		ev.waitFor(t, spec.Id, pb.EventType_EVENT_TYPE_RESUMED, 10*time.Second)
		s.checkExec(t, p, spec.Id)
	}

	// Kill the plugin process: the VM must keep running, and a new plugin
	// process must take it back from the handle.
	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", pid, err)
	}
	waitGone(t, pid, 10*time.Second)
	vmPid := 0
	if v, ok := st.Attributes["pid"]; ok {
		vmPid, _ = strconv.Atoi(v)
		if !alive(vmPid) {
			t.Fatalf("the VM process %d died with its plugin", vmPid)
		}
	}
	p = s.launch(t)
	rst, err := p.RecoverVM(ctx, handle)
	if err != nil {
		t.Fatalf("RecoverVM after the plugin was killed: %v", err)
	}
	if rst.State != pb.VMState_VM_STATE_RUNNING {
		t.Fatalf("recovered VM is %s, want RUNNING", rst.State)
	}
	list, err := p.ListVMs(ctx)
	if err != nil || !slices.ContainsFunc(list, func(v *pb.VMStatus) bool { return v.Id == spec.Id }) {
		t.Errorf("ListVMs after recovery = %v, %v; want it to hold %s", list, err, spec.Id)
	}
	s.waitReady(t, p, spec.Id)
	s.checkExec(t, p, spec.Id)

	evCh, err = p.Events(ctx)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	ev = &events{ch: evCh}
	exit, err := p.StopVM(ctx, spec.Id, 30*time.Second)
	if err != nil {
		t.Fatalf("StopVM: %v", err)
	}
	if r := exit.GetReason(); r != pb.ExitReason_EXIT_REASON_STOPPED && r != pb.ExitReason_EXIT_REASON_KILLED {
		t.Errorf("StopVM returned exit reason %s, want STOPPED or KILLED", r)
	}
	s.wantState(t, p, spec.Id, pb.VMState_VM_STATE_STOPPED)
	ev.waitFor(t, spec.Id, pb.EventType_EVENT_TYPE_STOPPED, 10*time.Second)
	if vmPid != 0 {
		waitGone(t, vmPid, 10*time.Second)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := p.WaitVM(wctx, spec.Id); err != nil {
		t.Errorf("WaitVM on a stopped VM must return at once: %v", err)
	}
	cancel()
	if _, err := p.StopVM(ctx, spec.Id, time.Second); err != nil {
		t.Errorf("stopping a stopped VM = %v, want success", err)
	}
	if s.caps.Pause {
		if err := p.PauseVM(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
			t.Errorf("pausing a stopped VM = %v, want ErrState", err)
		}
	}
	if log, err := p.ConsoleLog(ctx, spec.Id, 4096); err != nil {
		t.Errorf("ConsoleLog of a stopped VM: %v", err)
	} else if len(log) > 4096 {
		t.Errorf("ConsoleLog returned %d bytes, asked for at most 4096", len(log))
	}

	// A stopped VM starts again.
	_, st, err = p.StartVM(ctx, spec.Id)
	if err != nil {
		t.Fatalf("StartVM after stop: %v", err)
	}
	s.waitReady(t, p, spec.Id)
	if v, ok := st.Attributes["pid"]; ok {
		vmPid, _ = strconv.Atoi(v)
	}
	if err := p.DestroyVM(ctx, spec.Id, false); !errors.Is(err, driver.ErrState) {
		t.Errorf("destroying a running VM without force = %v, want ErrState", err)
	}
	if err := p.DestroyVM(ctx, spec.Id, true); err != nil {
		t.Fatalf("DestroyVM: %v", err)
	}
	s.checkGone(t, p, spec.Id, vmPid)
	if _, err := p.RecoverVM(ctx, handle); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("RecoverVM of a destroyed VM = %v, want ErrNotFound", err)
	}
}

func (s *suite) testHeadless(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	spec := proto.Clone(s.h.Spec(vmID("headless"))).(*pb.VMSpec)
	spec.Display = false
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatalf("CreateVM without a display: %v", err)
	}
	defer p.DestroyVM(context.Background(), spec.Id, true)
	if s.caps.Screenshot {
		if _, err := p.Screenshot(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
			t.Errorf("Screenshot of a VM without a display = %v, want ErrState", err)
		}
	}
	if s.caps.Input {
		err := p.SendInput(ctx, spec.Id, []*pb.InputAction{{Action: &pb.InputAction_Text{Text: "x"}}})
		if !errors.Is(err, driver.ErrState) {
			t.Errorf("SendInput to a VM without a display = %v, want ErrState", err)
		}
	}
}

func (s *suite) waitReady(t *testing.T, p *driver.Plugin, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), s.h.ReadyTimeout)
	defer cancel()
	start := time.Now()
	guest, err := p.WaitReady(ctx, id)
	if err != nil {
		log, _ := p.ConsoleLog(context.Background(), id, 4096)
		t.Fatalf("WaitReady(%s): %v\nconsole:\n%s", id, err, log)
	}
	t.Logf("%s ready after %v: %v", id, time.Since(start).Round(time.Millisecond), guest)
	st, err := p.InspectVM(t.Context(), id)
	if err != nil {
		t.Fatalf("InspectVM: %v", err)
	}
	if !st.AgentReady {
		t.Errorf("InspectVM after WaitReady says agent_ready=false")
	}
}

func (s *suite) wantState(t *testing.T, p *driver.Plugin, id string, want pb.VMState) {
	t.Helper()
	st, err := p.InspectVM(t.Context(), id)
	if err != nil {
		t.Fatalf("InspectVM(%s): %v", id, err)
	}
	if st.State != want {
		t.Fatalf("VM %s is %s, want %s", id, st.State, want)
	}
}

// checkRunning exercises every claimed capability on a running VM.
func (s *suite) checkRunning(t *testing.T, p *driver.Plugin, spec *pb.VMSpec) {
	t.Helper()
	ctx := t.Context()
	st, err := p.InspectVM(ctx, spec.Id)
	if err != nil {
		t.Fatalf("InspectVM: %v", err)
	}
	if st.Spec.GetId() != spec.Id || st.Spec.GetVcpus() != spec.Vcpus || st.Spec.GetMemoryMib() != spec.MemoryMib {
		t.Errorf("InspectVM spec = %v, want the created spec %v", st.Spec, spec)
	}
	if ws, ok := st.Attributes["workspace"]; ok && ws != s.workspace(spec.Id) {
		t.Errorf("workspace attribute %q, want %q", ws, s.workspace(spec.Id))
	}
	if s.caps.Exec {
		s.checkExec(t, p, spec.Id)
	}
	if s.caps.Screenshot && spec.Display {
		shot, err := p.Screenshot(ctx, spec.Id)
		if err != nil {
			t.Fatalf("Screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(shot.Png))
		if err != nil {
			t.Fatalf("the screenshot is not a PNG: %v", err)
		}
		if b := img.Bounds(); b.Dx() != int(shot.Width) || b.Dy() != int(shot.Height) || b.Dx() == 0 {
			t.Errorf("screenshot is %dx%d, response says %dx%d", b.Dx(), b.Dy(), shot.Width, shot.Height)
		}
	}
	if s.caps.Input && spec.Display {
		actions := []*pb.InputAction{
			{Action: &pb.InputAction_Key{Key: &pb.KeyChord{Keys: []string{"shift", "a"}}}},
			{Action: &pb.InputAction_Text{Text: "hello"}},
			{Action: &pb.InputAction_Move{Move: &pb.Point{X: 10, Y: 10}}},
			{Action: &pb.InputAction_Click{Click: &pb.Click{Button: pb.MouseButton_MOUSE_BUTTON_LEFT, At: &pb.Point{X: 20, Y: 20}}}},
			{Action: &pb.InputAction_Click{Click: &pb.Click{At: &pb.Point{X: 20, Y: 20}}}}, // no button: left
			{Action: &pb.InputAction_Scroll{Scroll: &pb.Scroll{Dy: -1}}},
		}
		if err := p.SendInput(ctx, spec.Id, actions); err != nil {
			t.Errorf("SendInput: %v", err)
		}
		err := p.SendInput(ctx, spec.Id, []*pb.InputAction{{Action: &pb.InputAction_Key{Key: &pb.KeyChord{Keys: []string{"no-such-key"}}}}})
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), "no-such-key") {
			t.Errorf("SendInput(unknown key) = %v, want ErrInvalid naming the key", err)
		}
		for _, bad := range []*pb.InputAction{
			{}, // no action
			{Action: &pb.InputAction_Click{Click: &pb.Click{Button: pb.MouseButton(99)}}},
		} {
			if err := p.SendInput(ctx, spec.Id, []*pb.InputAction{bad}); !errors.Is(err, driver.ErrInvalid) {
				t.Errorf("SendInput(%v) = %v, want ErrInvalid", bad, err)
			}
		}
	}
}

func (s *suite) checkExec(t *testing.T, p *driver.Plugin, id string) {
	t.Helper()
	if !s.caps.Exec {
		return
	}
	ctx := t.Context()
	var out, errOut bytes.Buffer
	code, err := p.Exec(ctx, &pb.ExecRequest{Id: id, Command: argv("uname", "-a")}, &out, &errOut)
	if err != nil || code != 0 || !strings.Contains(out.String(), "Linux") {
		t.Fatalf("exec uname -a = %d, %v, stdout %q, stderr %q; want 0 and Linux", code, err, out.String(), errOut.String())
	}
	out.Reset()
	errOut.Reset()
	code, err = p.Exec(ctx, &pb.ExecRequest{Id: id, Command: &pb.ExecRequest_Shell{Shell: "echo out; echo err >&2; exit 3"}}, &out, &errOut)
	if err != nil || code != 3 || out.String() != "out\n" || errOut.String() != "err\n" {
		t.Fatalf("exec 'exit 3' = %d, %v, stdout %q, stderr %q; want 3, out, err", code, err, out.String(), errOut.String())
	}
	out.Reset()
	code, err = p.Exec(ctx, &pb.ExecRequest{Id: id, Command: argv("cat"), Stdin: []byte("from stdin")}, &out, nil)
	if err != nil || code != 0 || out.String() != "from stdin" {
		t.Errorf("exec cat with stdin = %d, %v, %q", code, err, out.String())
	}
	code, err = p.Exec(ctx, &pb.ExecRequest{Id: id, Command: argv("sleep", "30"), TimeoutMs: 300}, nil, nil)
	if err != nil || code != 124 {
		t.Errorf("exec past its timeout = %d, %v; want 124", code, err)
	}
	if _, err := p.Exec(ctx, &pb.ExecRequest{Id: id}, nil, nil); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("exec without a command = %v, want ErrInvalid", err)
	}
}

// argv is an exec command run without a shell.
func argv(args ...string) *pb.ExecRequest_Argv {
	return &pb.ExecRequest_Argv{Argv: &pb.Argv{Args: args}}
}

// checkGone asserts that a destroyed VM left nothing: no status, no
// workspace, no process.
func (s *suite) checkGone(t *testing.T, p *driver.Plugin, id string, pid int) {
	t.Helper()
	if _, err := p.InspectVM(t.Context(), id); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("InspectVM after destroy = %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(s.workspace(id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace %s is still there after destroy (%v)", s.workspace(id), err)
	}
	if pid != 0 {
		waitGone(t, pid, 10*time.Second)
	}
}

func (s *suite) testBadHandles(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	spec := s.h.Spec(vmID("handle"))
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatalf("CreateVM: %v", err)
	}
	defer p.DestroyVM(context.Background(), spec.Id, true)
	h, _, err := p.StartVM(ctx, spec.Id)
	if err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	cases := []struct {
		name string
		edit func(*pb.Handle)
		want error
	}{
		// StartVM writes the newest version the driver knows.
		{"newer version", func(h *pb.Handle) { h.Version++ }, driver.ErrState},
		{"other driver", func(h *pb.Handle) { h.Driver = "not-" + s.info.Name }, driver.ErrState},
		{"corrupt state", func(h *pb.Handle) { h.State = []byte("\x00garbage{") }, driver.ErrInvalid},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			bad := proto.Clone(h).(*pb.Handle)
			c.edit(bad)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			if _, err := p.RecoverVM(ctx, bad); !errors.Is(err, c.want) {
				t.Errorf("RecoverVM = %v, want %v", err, c.want)
			}
		})
	}
}

func (s *suite) testDestroyAfterCrash(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	spec := s.h.Spec(vmID("crash"))
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatalf("CreateVM: %v", err)
	}
	_, st, err := p.StartVM(ctx, spec.Id)
	if err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	// The VM's process dies, then its plugin: a fresh plugin process that
	// never saw the VM must still clean it up.
	pid := 0
	if v, ok := st.Attributes["pid"]; ok {
		pid, _ = strconv.Atoi(v)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill VM process %d: %v", pid, err)
		}
		waitGone(t, pid, 10*time.Second)
	}
	p.Kill()
	p = s.launch(t)
	if err := p.DestroyVM(ctx, spec.Id, true); err != nil {
		t.Fatalf("DestroyVM by a plugin that never saw the VM: %v", err)
	}
	if _, err := os.Stat(s.workspace(spec.Id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace %s is still there after destroy (%v)", s.workspace(spec.Id), err)
	}
}

// alive reports whether a process exists and has not exited (a zombie has).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

func waitGone(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs after %v", pid, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tags lists the tags of a VM's snapshots, in the driver's order.
func (s *suite) tags(t *testing.T, p *driver.Plugin, id string) []string {
	t.Helper()
	snaps, err := p.ListSnapshots(t.Context(), id)
	if err != nil {
		t.Fatalf("ListSnapshots(%s): %v", id, err)
	}
	out := []string{}
	for _, sn := range snaps {
		out = append(out, sn.Tag)
	}
	return out
}

// startReady creates and starts a VM from the harness's spec and waits for
// its guest; a fresh plugin destroys it when the test ends.
func (s *suite) startReady(t *testing.T, p *driver.Plugin, short string) *pb.VMSpec {
	t.Helper()
	spec := s.h.Spec(vmID(short))
	if _, err := p.CreateVM(t.Context(), spec); err != nil {
		t.Fatalf("CreateVM: %v", err)
	}
	t.Cleanup(func() { _ = s.launch(t).DestroyVM(context.Background(), spec.Id, true) })
	if _, _, err := p.StartVM(t.Context(), spec.Id); err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	s.waitReady(t, p, spec.Id)
	return spec
}

// testDiskSnapshots checks the disk_snapshots RPCs' states and errors: taken
// of a created and of a running VM (which keeps running), restored only
// into a VM that does not run, listed oldest first, deleted one by one.
func (s *suite) testDiskSnapshots(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	spec := s.h.Spec(vmID("dsnap"))
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatalf("CreateVM: %v", err)
	}
	t.Cleanup(func() { _ = s.launch(t).DestroyVM(context.Background(), spec.Id, true) })
	for _, bad := range []string{"", "-lead", ".dot", "with space", "a/b", strings.Repeat("a", 65)} {
		if _, err := p.SnapshotVM(ctx, spec.Id, bad, false); !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("SnapshotVM with tag %q = %v, want ErrInvalid", bad, err)
		}
	}
	snap, err := p.SnapshotVM(ctx, spec.Id, "created", false)
	if err != nil {
		t.Fatalf("SnapshotVM of a created VM: %v", err)
	}
	if snap.Tag != "created" || snap.Memory || snap.CreatedAtUnixNano == 0 {
		t.Errorf("snapshot = %v, want tag created, no memory, a creation time", snap)
	}
	if _, err := p.SnapshotVM(ctx, spec.Id, "created", false); !errors.Is(err, driver.ErrExists) {
		t.Errorf("SnapshotVM with a used tag = %v, want ErrExists", err)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	s.waitReady(t, p, spec.Id)
	if _, err := p.SnapshotVM(ctx, spec.Id, "running", false); err != nil {
		t.Fatalf("SnapshotVM of a running VM: %v", err)
	}
	s.wantState(t, p, spec.Id, pb.VMState_VM_STATE_RUNNING)
	if !s.caps.MemorySnapshots {
		if _, err := p.SnapshotVM(ctx, spec.Id, "mem", true); !errors.Is(err, driver.ErrUnsupported) {
			t.Errorf("a memory snapshot from a driver without memory_snapshots = %v, want ErrUnsupported", err)
		}
	}
	if _, err := p.RestoreVM(ctx, spec.Id, "created"); !errors.Is(err, driver.ErrState) {
		t.Errorf("RestoreVM of a disk snapshot into a running VM = %v, want ErrState", err)
	}
	if got := s.tags(t, p, spec.Id); !slices.Equal(got, []string{"created", "running"}) {
		t.Errorf("ListSnapshots = %v, want [created running]", got)
	}
	if _, err := p.StopVM(ctx, spec.Id, 0); err != nil {
		t.Fatalf("StopVM: %v", err)
	}
	if _, err := p.RestoreVM(ctx, spec.Id, "no-such-tag"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("RestoreVM of an unknown tag = %v, want ErrNotFound", err)
	}
	st, err := p.RestoreVM(ctx, spec.Id, "running")
	if err != nil {
		t.Fatalf("RestoreVM of a stopped VM: %v", err)
	}
	if st.State == pb.VMState_VM_STATE_RUNNING || st.State == pb.VMState_VM_STATE_PAUSED {
		t.Errorf("after restoring a disk snapshot the VM is %s; it must not run until started", st.State)
	}
	if err := p.DeleteSnapshot(ctx, spec.Id, "created"); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if err := p.DeleteSnapshot(ctx, spec.Id, "created"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("DeleteSnapshot of a deleted tag = %v, want ErrNotFound", err)
	}
	if got := s.tags(t, p, spec.Id); !slices.Equal(got, []string{"running"}) {
		t.Errorf("ListSnapshots after a delete = %v, want [running]", got)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); err != nil {
		t.Fatalf("StartVM after a restore: %v", err)
	}
	s.waitReady(t, p, spec.Id)
}

// testMemorySnapshots checks the memory_snapshots RPCs' states and errors:
// taken of a running VM only, restored into a running VM, which runs on
// (and whose guest agent, if it has one, answers).
func (s *suite) testMemorySnapshots(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	spec := s.h.Spec(vmID("msnap"))
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatalf("CreateVM: %v", err)
	}
	t.Cleanup(func() { _ = s.launch(t).DestroyVM(context.Background(), spec.Id, true) })
	if _, err := p.SnapshotVM(ctx, spec.Id, "m", true); !errors.Is(err, driver.ErrState) {
		t.Errorf("a memory snapshot of a created VM = %v, want ErrState", err)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); err != nil {
		t.Fatalf("StartVM: %v", err)
	}
	s.waitReady(t, p, spec.Id)
	snap, err := p.SnapshotVM(ctx, spec.Id, "m", true)
	if err != nil {
		t.Fatalf("SnapshotVM with memory: %v", err)
	}
	if !snap.Memory || snap.VmState != pb.VMState_VM_STATE_RUNNING {
		t.Errorf("snapshot = %v, want memory, taken while RUNNING", snap)
	}
	s.wantState(t, p, spec.Id, pb.VMState_VM_STATE_RUNNING)
	st, err := p.RestoreVM(ctx, spec.Id, "m")
	if err != nil {
		t.Fatalf("RestoreVM of a memory snapshot: %v", err)
	}
	if st.State != pb.VMState_VM_STATE_RUNNING {
		t.Errorf("after restoring a memory snapshot the VM is %s, want RUNNING", st.State)
	}
	if s.caps.Exec {
		s.checkExec(t, p, spec.Id)
	}
	if _, err := p.StopVM(ctx, spec.Id, 0); err != nil {
		t.Fatalf("StopVM: %v", err)
	}
	if _, err := p.RestoreVM(ctx, spec.Id, "m"); !errors.Is(err, driver.ErrState) {
		t.Errorf("RestoreVM of a memory snapshot into a stopped VM = %v, want ErrState", err)
	}
}

// testClones checks CloneVM: a clone is a created VM of its own (new id,
// never the source's MAC) that boots while its source keeps running, and
// outlives it.
func (s *suite) testClones(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	src := s.startReady(t, p, "csrc")
	cloneID := vmID("clone")
	t.Cleanup(func() { _ = s.launch(t).DestroyVM(context.Background(), cloneID, true) })
	req := &pb.CloneVMRequest{SourceId: src.Id, Id: cloneID}
	if _, err := p.CloneVM(ctx, &pb.CloneVMRequest{SourceId: "no-such-vm", Id: cloneID}); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("CloneVM of an unknown source = %v, want ErrNotFound", err)
	}
	if _, err := p.CloneVM(ctx, req); !errors.Is(err, driver.ErrState) {
		t.Errorf("CloneVM of a running source without a snapshot = %v, want ErrState", err)
	}
	if s.caps.DiskSnapshots {
		if _, err := p.SnapshotVM(ctx, src.Id, "base", false); err != nil {
			t.Fatalf("SnapshotVM: %v", err)
		}
		req.SnapshotTag = "base"
	} else {
		if _, err := p.StopVM(ctx, src.Id, 0); err != nil {
			t.Fatalf("StopVM: %v", err)
		}
	}
	taken := proto.Clone(req).(*pb.CloneVMRequest)
	taken.Id = src.Id
	if _, err := p.CloneVM(ctx, taken); !errors.Is(err, driver.ErrExists) {
		t.Errorf("CloneVM onto a used id = %v, want ErrExists", err)
	}
	st, err := p.CloneVM(ctx, req)
	if err != nil {
		t.Fatalf("CloneVM: %v", err)
	}
	if st.Id != cloneID || st.State != pb.VMState_VM_STATE_CREATED {
		t.Errorf("clone status: id %q state %s, want %q CREATED", st.Id, st.State, cloneID)
	}
	if srcMAC := src.GetNetwork().GetMac(); srcMAC != "" && st.GetSpec().GetNetwork().GetMac() == srcMAC {
		t.Errorf("the clone has its source's MAC %s", srcMAC)
	}
	if s.caps.DiskSnapshots || s.caps.MemorySnapshots {
		if got := s.tags(t, p, cloneID); len(got) != 0 {
			t.Errorf("the clone has snapshots %v, want none", got)
		}
	}
	if _, _, err := p.StartVM(ctx, cloneID); err != nil {
		t.Fatalf("StartVM of the clone: %v", err)
	}
	s.waitReady(t, p, cloneID)
	if s.caps.DiskSnapshots {
		s.wantState(t, p, src.Id, pb.VMState_VM_STATE_RUNNING)
	}
	if err := p.DestroyVM(ctx, src.Id, true); err != nil {
		t.Fatalf("DestroyVM of the source: %v", err)
	}
	s.wantState(t, p, cloneID, pb.VMState_VM_STATE_RUNNING)
	if s.caps.Exec {
		s.checkExec(t, p, cloneID)
	}
}

// testPortForward checks ForwardPort: an IP literal and port that accepts
// connections while the VM runs, the same address for the same port, the
// errors for a bad port and an unknown VM, and FAILED_PRECONDITION once the
// VM is stopped.
func (s *suite) testPortForward(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	port := s.h.ForwardPort
	if port == 0 {
		port = 22
	}
	spec := s.startReady(t, p, "fwd")
	addr, err := p.ForwardPort(ctx, spec.Id, port)
	if err != nil {
		t.Fatalf("ForwardPort(%d): %v", port, err)
	}
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Port() == 0 {
		t.Fatalf("ForwardPort answered %q, want an ip:port with an IP literal (%v)", addr, err)
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("connect to the forward %s: %v", addr, err)
	}
	c.Close()
	again, err := p.ForwardPort(ctx, spec.Id, port)
	if err != nil || again != addr {
		t.Errorf("ForwardPort again = %q, %v; want the same %q", again, err, addr)
	}
	if _, err := p.ForwardPort(ctx, spec.Id, 0); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("ForwardPort(0) = %v, want ErrInvalid", err)
	}
	if _, err := p.ForwardPort(ctx, spec.Id, 65536); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("ForwardPort(65536) = %v, want ErrInvalid", err)
	}
	if _, err := p.ForwardPort(ctx, vmID("nosuch"), port); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("ForwardPort of an unknown VM = %v, want ErrNotFound", err)
	}
	if _, err := p.StopVM(ctx, spec.Id, 0); err != nil {
		t.Fatalf("StopVM: %v", err)
	}
	if _, err := p.ForwardPort(ctx, spec.Id, port); !errors.Is(err, driver.ErrState) {
		t.Errorf("ForwardPort of a stopped VM = %v, want ErrState", err)
	}
}

// testVolumes checks capability volumes: a spec's volumes are refused when
// malformed (bad id, relative path, twice, too many) or missing (NOT_FOUND);
// a VM with a volume keeps it in its spec, starts, and (with exec) its guest
// sees a disk whose serial is the volume id; destroying the VM leaves the
// volume's file as it was.
func (s *suite) testVolumes(t *testing.T) {
	p := s.launch(t)
	ctx := t.Context()
	dir := t.TempDir()
	file := filepath.Join(dir, "vol.raw")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(file, 64<<20); err != nil {
		t.Fatal(err)
	}
	const volID = "vol-0123456789ab"
	bad := []struct {
		name string
		vols []*pb.Volume
		want error
	}{
		{"id longer than a serial", []*pb.Volume{{Id: "vol-0123456789abcdef0", Path: file}}, driver.ErrInvalid},
		{"id with capitals", []*pb.Volume{{Id: "Vol-1", Path: file}}, driver.ErrInvalid},
		{"relative path", []*pb.Volume{{Id: volID, Path: "vol.raw"}}, driver.ErrInvalid},
		{"named twice", []*pb.Volume{{Id: volID, Path: file}, {Id: "vol-2", Path: file}}, driver.ErrInvalid},
		{"too many", []*pb.Volume{{Id: "v1", Path: file}, {Id: "v2", Path: file + "2"}, {Id: "v3", Path: file + "3"}}, driver.ErrInvalid},
		{"missing file", []*pb.Volume{{Id: volID, Path: filepath.Join(dir, "none.raw")}}, driver.ErrNotFound},
		{"a directory", []*pb.Volume{{Id: volID, Path: dir}}, driver.ErrInvalid},
	}
	for _, c := range bad {
		spec := s.h.Spec(vmID("vbad"))
		spec.Volumes = c.vols
		if _, err := p.CreateVM(ctx, spec); !errors.Is(err, c.want) {
			t.Errorf("CreateVM with volumes (%s) = %v, want %v", c.name, err, c.want)
			_ = p.DestroyVM(ctx, spec.Id, true)
		}
	}
	spec := s.h.Spec(vmID("vol"))
	spec.Volumes = []*pb.Volume{{Id: volID, Path: file}}
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatalf("CreateVM with a volume: %v", err)
	}
	t.Cleanup(func() { _ = s.launch(t).DestroyVM(context.Background(), spec.Id, true) })
	st, err := p.InspectVM(ctx, spec.Id)
	if err != nil {
		t.Fatalf("InspectVM: %v", err)
	}
	if v := st.GetSpec().GetVolumes(); len(v) != 1 || v[0].GetId() != volID || v[0].GetPath() != file {
		t.Errorf("InspectVM spec volumes = %v, want [%s %s]", v, volID, file)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); err != nil {
		t.Fatalf("StartVM with a volume: %v", err)
	}
	s.waitReady(t, p, spec.Id)
	if s.caps.Exec {
		var out, errOut bytes.Buffer
		code, err := p.Exec(ctx, &pb.ExecRequest{Id: spec.Id, Command: &pb.ExecRequest_Shell{Shell: "cat /sys/block/vd*/serial; echo"}}, &out, &errOut)
		if err != nil || code != 0 || !strings.Contains(out.String(), volID) {
			t.Errorf("guest disk serials = %d, %v, %q (stderr %q); want one to be %s", code, err, out.String(), errOut.String(), volID)
		}
	}
	if err := p.DestroyVM(ctx, spec.Id, true); err != nil {
		t.Fatalf("DestroyVM: %v", err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Size() != 64<<20 {
		t.Errorf("the volume's file after DestroyVM: %v, %v; want it kept at 64 MiB", fi, err)
	}
}
