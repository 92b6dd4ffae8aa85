package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
)

// fixture is a configured in-process sim driver with an image file.
type fixture struct {
	d     *Driver
	state string
	image string
}

func newFixture(t *testing.T, cfg string) *fixture {
	t.Helper()
	f := &fixture{state: t.TempDir()}
	f.image = filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(f.image, []byte("not really a disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.d = f.restart(t, cfg)
	return f
}

// restart gives a fresh driver over the same state dir, as a new plugin
// process would be.
func (f *fixture) restart(t *testing.T, cfg string) *Driver {
	t.Helper()
	d := newDriver(hclog.NewNullLogger(), time.Now)
	if err := d.SetConfig(t.Context(), &basepb.SetConfigRequest{ConfigJson: []byte(cfg), Agent: &basepb.AgentContext{StateDir: f.state}}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return d
}

func (f *fixture) spec(id string) *pb.VMSpec {
	return &pb.VMSpec{Id: id, Name: "vm " + id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: f.image, Vcpus: 2, MemoryMib: 512, Display: true}
}

// text, keys and click make input actions.
func text(s string) *pb.InputAction { return &pb.InputAction{Action: &pb.InputAction_Text{Text: s}} }

func keys(k ...string) *pb.InputAction {
	return &pb.InputAction{Action: &pb.InputAction_Key{Key: &pb.KeyChord{Keys: k}}}
}

func click(b pb.MouseButton, x, y int32) *pb.InputAction {
	return &pb.InputAction{Action: &pb.InputAction_Click{Click: &pb.Click{Button: b, At: &pb.Point{X: x, Y: y}}}}
}

// must returns v, or panics (failing the test) for an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, d *Driver, id string) *pb.Handle {
	t.Helper()
	h, _, err := d.StartVM(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func wantKind(t *testing.T, err, kind error, contains string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error = %v, want kind %v", err, kind)
	}
	if contains != "" && !strings.Contains(err.Error(), contains) {
		t.Fatalf("error %q does not mention %q", err, contains)
	}
}

func TestConfigRejectsUnknownAndNegativeFields(t *testing.T) {
	tests := []struct {
		name, cfg, mention string
	}{
		{"unknown field", `{"vcpu": 4}`, "vcpu"},
		{"negative vcpus", `{"vcpus": -1}`, "vcpus"},
		{"negative memory", `{"memory_mib": -5}`, "memory_mib"},
		{"negative macos slots", `{"macos_slots": -1}`, "macos_slots"},
		{"negative boot delay", `{"boot_delay_ms": -1}`, "boot_delay_ms"},
		{"wrong type", `{"vcpus": "many"}`, "vcpus"},
		{"unknown guest os", `{"guest_os": ["windows"]}`, "windows"},
		{"not an object", `[1]`, "sim config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDriver(nil, time.Now)
			err := d.SetConfig(t.Context(), &basepb.SetConfigRequest{ConfigJson: []byte(tt.cfg), Agent: &basepb.AgentContext{StateDir: t.TempDir()}})
			wantKind(t, err, driver.ErrInvalid, tt.mention)
		})
	}
}

func TestConfigDefaultsAndSchemaAgree(t *testing.T) {
	d := newDriver(nil, time.Now)
	schema := must(d.ConfigSchema(t.Context()))
	obj := map[string]json.RawMessage{}
	for _, a := range schema.Attributes {
		obj[a.Name] = json.RawMessage(a.DefaultJson)
	}
	data, _ := json.Marshal(obj)
	c, err := parseConfig(data)
	if err != nil {
		t.Fatalf("the schema's defaults do not parse: %v", err)
	}
	if c.VCPUs != 64 || c.MemoryMiB != 262144 || c.MacOSSlots != 2 || c.BootDelayMS != 0 || len(c.GuestOS) != 2 {
		t.Fatalf("defaults = %+v", c)
	}
}

func TestDriverSaysItIsASimulator(t *testing.T) {
	f := newFixture(t, "")
	info := must(f.d.PluginInfo(t.Context()))
	if !info.Simulated || info.Description != "simulated hypervisor: boots no guests" {
		t.Fatalf("plugin info = %v", info)
	}
	caps := must(f.d.Capabilities(t.Context()))
	if caps.Exec || !caps.Pause || !caps.Screenshot || !caps.Input || !caps.Headless {
		t.Fatalf("capabilities = %v", caps)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	fp := <-must(f.d.Fingerprint(ctx))
	if fp.Attributes["sim.simulated"] != "true" || !strings.Contains(fp.Description, "simulat") {
		t.Fatalf("fingerprint = %v", fp)
	}
	must(f.d.CreateVM(t.Context(), f.spec("a")))
	st := must(f.d.InspectVM(t.Context(), "a"))
	if st.Attributes["simulated"] != "true" {
		t.Fatalf("vm attributes = %v", st.Attributes)
	}
	_, err := f.d.Exec(t.Context(), &pb.ExecRequest{Id: "a", Command: &pb.ExecRequest_Shell{Shell: "true"}}, nil, nil)
	wantKind(t, err, driver.ErrUnsupported, "cannot run commands")
}

func TestCreateVMValidatesSpec(t *testing.T) {
	f := newFixture(t, `{"guest_os": ["linux"], "vcpus": 8, "memory_mib": 4096}`)
	tests := []struct {
		name    string
		edit    func(s *pb.VMSpec)
		kind    error
		mention string
	}{
		{"bad id", func(s *pb.VMSpec) { s.Id = "Bad_ID" }, driver.ErrInvalid, "Bad_ID"},
		{"path in id", func(s *pb.VMSpec) { s.Id = "../etc" }, driver.ErrInvalid, "../etc"},
		{"id too long", func(s *pb.VMSpec) { s.Id = strings.Repeat("a", 64) }, driver.ErrInvalid, "does not match"},
		{"zero vcpus", func(s *pb.VMSpec) { s.Vcpus = 0 }, driver.ErrInvalid, "vcpus"},
		{"small memory", func(s *pb.VMSpec) { s.MemoryMib = 63 }, driver.ErrInvalid, "memory_mib"},
		{"guest os not configured", func(s *pb.VMSpec) { s.GuestOs = pb.GuestOS_GUEST_OS_MACOS }, driver.ErrInvalid, "MACOS"},
		{"relative image", func(s *pb.VMSpec) { s.Image = "disk.img" }, driver.ErrInvalid, "absolute"},
		{"missing image", func(s *pb.VMSpec) { s.Image = "/nonexistent/disk.img" }, driver.ErrNotFound, "/nonexistent/disk.img"},
		{"unknown driver config", func(s *pb.VMSpec) { s.DriverConfigJson = []byte(`{"turbo": true}`) }, driver.ErrInvalid, "turbo"},
		{"negative boot delay", func(s *pb.VMSpec) { s.DriverConfigJson = []byte(`{"boot_delay_ms": -3}`) }, driver.ErrInvalid, "boot_delay_ms"},
		{"tap without device", func(s *pb.VMSpec) { s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP} }, driver.ErrInvalid, "tap"},
		{"unknown network mode", func(s *pb.VMSpec) { s.Network = &pb.Network{Mode: 99} }, driver.ErrInvalid, "99"},
		{"more vcpus than the host", func(s *pb.VMSpec) { s.Vcpus = 9 }, driver.ErrNoCapacity, "8 vCPUs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := f.spec("vm1")
			tt.edit(s)
			_, err := f.d.CreateVM(t.Context(), s)
			wantKind(t, err, tt.kind, tt.mention)
			if entries, _ := os.ReadDir(filepath.Join(f.state, "vms")); len(entries) != 0 {
				t.Fatalf("a failed create left %v behind", entries)
			}
		})
	}
	must(f.d.CreateVM(t.Context(), f.spec("vm1")))
	_, err := f.d.CreateVM(t.Context(), f.spec("vm1"))
	wantKind(t, err, driver.ErrExists, "vm1")
	// A new plugin process sees the duplicate on disk as well.
	_, err = f.restart(t, `{"guest_os": ["linux"]}`).CreateVM(t.Context(), f.spec("vm1"))
	wantKind(t, err, driver.ErrExists, "vm1")
}

func TestWorkspaceFilesArePrivate(t *testing.T) {
	f := newFixture(t, "")
	must(f.d.CreateVM(t.Context(), f.spec("a")))
	for path, want := range map[string]os.FileMode{"vms/a": 0o700 | os.ModeDir, "vms/a/vm.json": 0o600, "vms/a/console.log": 0o600} {
		fi, err := os.Stat(filepath.Join(f.state, path))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s mode = %v, want %v", path, fi.Mode(), want)
		}
	}
}

func TestStateRules(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	steps := []struct {
		name string
		call func() error
		kind error
	}{
		{"pause created", func() error { return f.d.PauseVM(ctx, "a") }, driver.ErrState},
		{"resume created", func() error { return f.d.ResumeVM(ctx, "a") }, driver.ErrState},
		{"wait ready on created", func() error { _, err := f.d.WaitReady(ctx, "a"); return err }, driver.ErrState},
		{"screenshot created", func() error { _, err := f.d.Screenshot(ctx, "a"); return err }, driver.ErrState},
		{"stop created", func() error { _, err := f.d.StopVM(ctx, "a", time.Second); return err }, nil},
		{"start", func() error { _, _, err := f.d.StartVM(ctx, "a"); return err }, nil},
		{"start running", func() error { _, _, err := f.d.StartVM(ctx, "a"); return err }, driver.ErrState},
		{"resume running", func() error { return f.d.ResumeVM(ctx, "a") }, driver.ErrState},
		{"destroy running without force", func() error { return f.d.DestroyVM(ctx, "a", false) }, driver.ErrState},
		{"pause", func() error { return f.d.PauseVM(ctx, "a") }, nil},
		{"pause paused", func() error { return f.d.PauseVM(ctx, "a") }, driver.ErrState},
		{"start paused", func() error { _, _, err := f.d.StartVM(ctx, "a"); return err }, driver.ErrState},
		{"input paused", func() error { return f.d.SendInput(ctx, "a", []*pb.InputAction{text("x")}) }, driver.ErrState},
		{"destroy paused without force", func() error { return f.d.DestroyVM(ctx, "a", false) }, driver.ErrState},
		{"resume", func() error { return f.d.ResumeVM(ctx, "a") }, nil},
		{"stop", func() error { _, err := f.d.StopVM(ctx, "a", time.Second); return err }, nil},
		{"stop stopped", func() error { _, err := f.d.StopVM(ctx, "a", time.Second); return err }, nil},
		{"pause stopped", func() error { return f.d.PauseVM(ctx, "a") }, driver.ErrState},
		{"input stopped", func() error { return f.d.SendInput(ctx, "a", nil) }, driver.ErrState},
		{"inspect unknown", func() error { _, err := f.d.InspectVM(ctx, "nope"); return err }, driver.ErrNotFound},
		{"start unknown", func() error { _, _, err := f.d.StartVM(ctx, "nope"); return err }, driver.ErrNotFound},
		{"destroy unknown", func() error { return f.d.DestroyVM(ctx, "nope", false) }, nil},
		{"destroy stopped", func() error { return f.d.DestroyVM(ctx, "a", false) }, nil},
		{"inspect destroyed", func() error { _, err := f.d.InspectVM(ctx, "a"); return err }, driver.ErrNotFound},
	}
	for _, s := range steps {
		err := s.call()
		if s.kind == nil && err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.kind != nil && !errors.Is(err, s.kind) {
			t.Fatalf("%s: error = %v, want %v", s.name, err, s.kind)
		}
	}
	if _, err := os.Stat(filepath.Join(f.state, "vms", "a")); !os.IsNotExist(err) {
		t.Fatalf("workspace still there after destroy: %v", err)
	}
}

func TestStartAccountsRunningAndPausedVMs(t *testing.T) {
	f := newFixture(t, `{"vcpus": 4, "memory_mib": 2048, "macos_slots": 1}`)
	ctx := t.Context()
	for _, id := range []string{"a", "b", "c"} {
		must(f.d.CreateVM(ctx, f.spec(id)))
	}
	_, _, err := f.d.StartVM(ctx, "a")
	noErr(t, err)
	noErr(t, f.d.PauseVM(ctx, "a")) // paused VMs keep their resources
	_, _, err = f.d.StartVM(ctx, "b")
	noErr(t, err)
	_, _, err = f.d.StartVM(ctx, "c")
	wantKind(t, err, driver.ErrNoCapacity, "sim host has 0 of 4 vCPUs free")

	// A new plugin process that has recovered nothing still counts them.
	d2 := f.restart(t, `{"vcpus": 4, "memory_mib": 2048, "macos_slots": 1}`)
	_, _, err = d2.StartVM(ctx, "c")
	wantKind(t, err, driver.ErrNoCapacity, "vCPUs free")
	must(d2.StopVM(ctx, "b", 0))
	start(t, d2, "c")

	// macOS slots.
	mac := f.spec("m1")
	mac.GuestOs, mac.Vcpus, mac.MemoryMib = pb.GuestOS_GUEST_OS_MACOS, 1, 64
	must(d2.StopVM(ctx, "c", 0))
	must(d2.CreateVM(ctx, mac))
	mac.Id = "m2"
	must(d2.CreateVM(ctx, mac))
	start(t, d2, "m1")
	_, _, err = d2.StartVM(ctx, "m2")
	wantKind(t, err, driver.ErrNoCapacity, "macOS slots")
}

func TestFingerprintReportsFreeResourcesOnChange(t *testing.T) {
	f := newFixture(t, `{"vcpus": 8, "memory_mib": 4096}`)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := must(f.d.Fingerprint(ctx))
	first := <-ch
	if first.Attributes["sim.vcpus_free"] != "8" || first.Resources.Vcpus != 8 || first.Resources.MemoryMib != 4096 {
		t.Fatalf("first fingerprint = %v", first)
	}
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	select {
	case fp := <-ch:
		if fp.Attributes["sim.vcpus_free"] != "6" || fp.Attributes["sim.memory_mib_free"] != "3584" {
			t.Fatalf("fingerprint after start = %v", fp.Attributes)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no fingerprint after a VM started")
	}
	cancel()
	for range ch {
	}
}

func TestRecoverVMChecksHandle(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	h, _, err := f.d.StartVM(ctx, "a")
	noErr(t, err)

	var hs handleState
	noErr(t, json.Unmarshal(h.State, &hs))
	withState := func(mod func(*handleState)) []byte {
		c := hs
		mod(&c)
		b, _ := json.Marshal(c)
		return b
	}
	tests := []struct {
		name    string
		h       *pb.Handle
		kind    error
		mention string
	}{
		{"other driver", &pb.Handle{Version: 1, Driver: "qemu", VmId: "a", State: h.State}, driver.ErrState, "qemu"},
		{"newer version", &pb.Handle{Version: 2, Driver: "sim", VmId: "a", State: h.State}, driver.ErrState, "handle version 2 is newer than this sim driver reads (1); upgrade the plugin"},
		{"garbage", &pb.Handle{Version: 1, Driver: "sim", VmId: "a", State: []byte("{not json")}, driver.ErrInvalid, "corrupt"},
		{"id mismatch", &pb.Handle{Version: 1, Driver: "sim", VmId: "b", State: h.State}, driver.ErrInvalid, "corrupt"},
		{"reused id", &pb.Handle{Version: 1, Driver: "sim", VmId: "a", State: withState(func(s *handleState) { s.UUID = "00" })}, driver.ErrState, "reused"},
		{"future generation", &pb.Handle{Version: 1, Driver: "sim", VmId: "a", State: withState(func(s *handleState) { s.Generation = 9 })}, driver.ErrState, "started only 1"},
		{"gone", &pb.Handle{Version: 1, Driver: "sim", VmId: "zz", State: withState(func(s *handleState) { s.ID = "zz" })}, driver.ErrNotFound, "zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := f.restart(t, "").RecoverVM(ctx, tt.h)
			wantKind(t, err, tt.kind, tt.mention)
		})
	}

	d2 := f.restart(t, "")
	if vms := must(d2.ListVMs(ctx)); len(vms) != 0 {
		t.Fatalf("a new process lists %d VMs before recovering any", len(vms))
	}
	st := must(d2.RecoverVM(ctx, h))
	if st.State != pb.VMState_VM_STATE_RUNNING || st.Attributes["uuid"] != hs.UUID {
		t.Fatalf("recovered status = %v", st)
	}
	if vms := must(d2.ListVMs(ctx)); len(vms) != 1 {
		t.Fatalf("ListVMs after recover = %d VMs", len(vms))
	}
}

func TestWaitReadyHonoursBootDelay(t *testing.T) {
	f := newFixture(t, `{"boot_delay_ms": 300}`)
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	_, st, err := f.d.StartVM(ctx, "a")
	noErr(t, err)
	if st.AgentReady {
		t.Fatal("agent ready at once despite boot_delay_ms=300")
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = f.d.WaitReady(short, "a")
	wantKind(t, err, driver.ErrTimeout, "not ready")
	begin := time.Now()
	guest := must(f.d.WaitReady(ctx, "a"))
	if guest["agent_version"] != "sim" || guest["simulated"] != "true" {
		t.Fatalf("guest = %v", guest)
	}
	if time.Since(begin) < 150*time.Millisecond {
		t.Fatalf("ready after %v, earlier than the boot delay", time.Since(begin))
	}
	// WaitReady fails when the VM stops meanwhile.
	must(f.d.StopVM(ctx, "a", 0))
	spec := f.spec("b")
	spec.DriverConfigJson = []byte(`{"boot_delay_ms": 10000}`)
	must(f.d.CreateVM(ctx, spec))
	start(t, f.d, "b")
	go func() { time.Sleep(100 * time.Millisecond); _, _ = f.d.StopVM(ctx, "b", 0) }()
	_, err = f.d.WaitReady(ctx, "b")
	wantKind(t, err, driver.ErrState, "stopped")
}

func TestWaitVMReturnsWhenStopped(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	done := make(chan *pb.ExitResult, 1)
	go func() { r, _ := f.d.WaitVM(ctx, "a"); done <- r }()
	select {
	case <-done:
		t.Fatal("WaitVM returned while the VM runs")
	case <-time.After(100 * time.Millisecond):
	}
	noErr(t, f.d.DestroyVM(ctx, "a", true))
	select {
	case r := <-done:
		if r.GetReason() != pb.ExitReason_EXIT_REASON_KILLED {
			t.Fatalf("exit = %v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitVM did not return after destroy")
	}
}

func TestConsoleLogHasSimLines(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	noErr(t, f.d.PauseVM(ctx, "a"))
	noErr(t, f.d.ResumeVM(ctx, "a"))
	must(f.d.StopVM(ctx, "a", time.Second))
	log := string(must(f.d.ConsoleLog(ctx, "a", 0)))
	lines := strings.Split(strings.TrimSpace(log), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "[sim] ") {
			t.Errorf("console line without [sim]: %q", l)
		}
	}
	for _, want := range []string{"created", "started", "paused", "resumed", "stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("console log lacks %q:\n%s", want, log)
		}
	}
	tail := must(f.d.ConsoleLog(ctx, "a", 10))
	if len(tail) != 10 || !strings.HasSuffix(log, string(tail)) {
		t.Fatalf("tail = %q", tail)
	}
}

func TestSendInputValidates(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	tests := []struct {
		name    string
		action  *pb.InputAction
		mention string
	}{
		{"no action", &pb.InputAction{}, "no action"},
		{"unknown key", keys("ctrl", "hyperspace"), "hyperspace"},
		{"no keys", keys(), "at least one"},
		{"bad button", click(4, 1, 1), "4"},
		{"off screen", &pb.InputAction{Action: &pb.InputAction_Move{Move: &pb.Point{X: 640, Y: 0}}}, "outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A valid action before the bad one must not be played either.
			err := f.d.SendInput(ctx, "a", []*pb.InputAction{text("SHOULD-NOT-APPEAR"), tt.action})
			wantKind(t, err, driver.ErrInvalid, tt.mention)
		})
	}
	if strings.Contains(strings.Join(f.d.vms["a"].rec.Screen.Lines, ""), "SHOULD") {
		t.Fatal("a rejected batch was played in part")
	}
}

func TestScreenshotShowsTypedText(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	before := must(f.d.Screenshot(ctx, "a"))
	img, err := png.Decode(bytes.NewReader(before.Png))
	if err != nil {
		t.Fatalf("screenshot is no PNG: %v", err)
	}
	if img.Bounds().Dx() != 640 || img.Bounds().Dy() != 400 || before.Width != 640 || before.Height != 400 {
		t.Fatalf("screenshot is %v (%dx%d)", img.Bounds(), before.Width, before.Height)
	}
	noErr(t, f.d.SendInput(ctx, "a", []*pb.InputAction{
		text("hello"),
		keys("shift", "x"),
		keys("ctrl", "c"),
		click(pb.MouseButton_MOUSE_BUTTON_LEFT, 100, 200),
	}))
	if got := f.d.vms["a"].rec.Screen.Lines; len(got) != 1 || got[0] != "helloX" {
		t.Fatalf("typed lines = %q, want [helloX]", got)
	}
	after := must(f.d.Screenshot(ctx, "a"))
	if bytes.Equal(before.Png, after.Png) {
		t.Fatal("typing did not change the screen")
	}
	// What was typed survives a plugin restart, like a real guest's screen.
	again := must(f.restart(t, "").Screenshot(ctx, "a"))
	if !bytes.Equal(again.Png, after.Png) {
		t.Fatal("the screen changed across a plugin restart")
	}
}

func TestHeadlessVMHasNoScreen(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	s := f.spec("a")
	s.Display = false
	must(f.d.CreateVM(ctx, s))
	start(t, f.d, "a")
	_, err := f.d.Screenshot(ctx, "a")
	wantKind(t, err, driver.ErrState, "display")
	err = f.d.SendInput(ctx, "a", []*pb.InputAction{text("x")})
	wantKind(t, err, driver.ErrState, "display")
}

func TestDestroyFromFreshProcess(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	d2 := f.restart(t, "")
	wantKind(t, d2.DestroyVM(ctx, "a", false), driver.ErrState, "running")
	noErr(t, d2.DestroyVM(ctx, "a", true))
	if _, err := os.Stat(filepath.Join(f.state, "vms", "a")); !os.IsNotExist(err) {
		t.Fatalf("workspace left: %v", err)
	}
	// Unreadable state does not make a VM indestructible.
	must(f.d.CreateVM(ctx, f.spec("b"))) // f.d still thinks nothing of "a"
	noErr(t, os.WriteFile(filepath.Join(f.state, "vms", "b", "vm.json"), []byte("garbage"), 0o600))
	noErr(t, f.restart(t, "").DestroyVM(ctx, "b", true))
	if _, err := os.Stat(filepath.Join(f.state, "vms", "b")); !os.IsNotExist(err) {
		t.Fatalf("workspace with corrupt state left: %v", err)
	}
}

func TestEventsReportStateChanges(t *testing.T) {
	f := newFixture(t, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := must(f.d.Events(ctx))
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	noErr(t, f.d.PauseVM(ctx, "a"))
	noErr(t, f.d.ResumeVM(ctx, "a"))
	must(f.d.StopVM(ctx, "a", 0))
	var got []string
	timeout := time.After(5 * time.Second)
	// Event types by their lower-case names: EVENT_TYPE_GUEST_READY is guest_ready.
	for len(got) < 6 {
		select {
		case ev := <-ch:
			if ev.VmId != "a" || !strings.HasPrefix(ev.Message, "sim: ") {
				t.Fatalf("event = %v", ev)
			}
			got = append(got, base.EnumName(ev.Type))
		case <-timeout:
			t.Fatalf("events so far: %v", got)
		}
	}
	want := "created started guest_ready paused resumed stopped"
	if strings.Join(got, " ") != want {
		t.Fatalf("events = %v, want %s", got, want)
	}
}
