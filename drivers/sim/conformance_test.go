package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/internal/benchstat"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// pluginHarness runs the sim as the agent does: `fluxvm-agent plugin sim`.
func pluginHarness(t testing.TB) drivertest.Harness {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	image := filepath.Join(t.TempDir(), "disk.img")
	if err := os.WriteFile(image, []byte("sim disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The guest port 22 of every simulated VM is this host server.
	guest, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { guest.Close() })
	go func() {
		for {
			c, err := guest.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return drivertest.Harness{
		Launch:      drivertest.LaunchCommand(bin, "plugin", "sim"),
		Config:      []byte(`{"vcpus": 64, "memory_mib": 65536, "macos_slots": 2, "boot_delay_ms": 50, "guest_os": ["linux", "macos"], "port_forwards": {"22": "` + guest.Addr().String() + `"}}`),
		ForwardPort: 22,
		StateDir:    t.TempDir(),
		Spec: func(id string) *pb.VMSpec {
			return &pb.VMSpec{Id: id, Name: "conformance " + id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: image, Vcpus: 1, MemoryMib: 256, Display: true}
		},
		ReadyTimeout: 10 * time.Second,
	}
}

func TestSimPassesConformanceSuite(t *testing.T) {
	drivertest.Run(t, pluginHarness(t))
}

// launch starts and configures a sim plugin process over h's state dir.
func launch(t *testing.T, h drivertest.Harness, config string) *driver.Plugin {
	t.Helper()
	p := h.Launch(t)
	if err := p.SetConfig(t.Context(), &basepb.SetConfigRequest{ConfigJson: []byte(config), Agent: &basepb.AgentContext{StateDir: h.StateDir}}); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	return p
}

// TestSimVMsSurvivePluginKill: twenty VMs in mixed states survive a SIGKILL
// of their plugin; a new process recovers each from its handle with the same
// state, screen and resource accounting, and errors keep their codes across
// the process boundary.
func TestSimVMsSurvivePluginKill(t *testing.T) {
	h := pluginHarness(t)
	const config = `{"vcpus": 20, "memory_mib": 65536}`
	ctx := t.Context()
	p := launch(t, h, config)
	if !p.Info.Simulated {
		t.Fatal("the sim plugin does not say it is simulated")
	}
	handles := map[string]*pb.Handle{}
	for i := range 20 {
		spec := h.Spec(fmt.Sprintf("vm-%02d", i))
		if _, err := p.CreateVM(ctx, spec); err != nil {
			t.Fatalf("CreateVM %s: %v", spec.Id, err)
		}
		hd, _, err := p.StartVM(ctx, spec.Id)
		if err != nil {
			t.Fatalf("StartVM %s: %v", spec.Id, err)
		}
		handles[spec.Id] = hd
	}
	// Every vCPU is taken now.
	extra := h.Spec("extra")
	if _, err := p.CreateVM(ctx, extra); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.StartVM(ctx, "extra"); !errors.Is(err, driver.ErrNoCapacity) {
		t.Fatalf("StartVM on a full host = %v, want ErrNoCapacity", err)
	}
	if err := p.PauseVM(ctx, "vm-03"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.StopVM(ctx, "vm-07", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.SendInput(ctx, "vm-01", []*pb.InputAction{text("still here")}); err != nil {
		t.Fatal(err)
	}
	shot, err := p.Screenshot(ctx, "vm-01")
	if err != nil {
		t.Fatal(err)
	}

	pid := p.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill plugin %d: %v", pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); !p.Exited(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed plugin did not exit")
		}
	}

	p = launch(t, h, config)
	if vms, err := p.ListVMs(ctx); err != nil || len(vms) != 0 {
		t.Fatalf("a fresh plugin lists %d VMs (%v) before recovering any", len(vms), err)
	}
	// The stopped VM's vCPU is free; the paused one's is not.
	if _, _, err := p.StartVM(ctx, "extra"); err != nil {
		t.Fatalf("StartVM into the freed vCPU: %v", err)
	}
	want := func(id string) pb.VMState {
		switch id {
		case "vm-03":
			return pb.VMState_VM_STATE_PAUSED
		case "vm-07":
			return pb.VMState_VM_STATE_STOPPED
		}
		return pb.VMState_VM_STATE_RUNNING
	}
	for id, hd := range handles {
		st, err := p.RecoverVM(ctx, hd)
		if err != nil {
			t.Fatalf("RecoverVM %s: %v", id, err)
		}
		if st.State != want(id) || st.Attributes["simulated"] != "true" {
			t.Errorf("recovered %s: state %s (want %s), attributes %v", id, st.State, want(id), st.Attributes)
		}
	}
	if vms, _ := p.ListVMs(ctx); len(vms) != 21 {
		t.Errorf("ListVMs after recovery: %d VMs, want 21", len(vms))
	}
	again, err := p.Screenshot(ctx, "vm-01")
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Png) != string(shot.Png) {
		t.Error("the simulated screen changed across the plugin restart")
	}
	// An old handle of a destroyed and re-created id must not take the new VM.
	if err := p.DestroyVM(ctx, "vm-00", true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateVM(ctx, h.Spec("vm-00")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.RecoverVM(ctx, handles["vm-00"]); !errors.Is(err, driver.ErrState) {
		t.Errorf("RecoverVM with the handle of an earlier vm-00 = %v, want ErrState", err)
	}
	for id := range handles {
		if err := p.DestroyVM(ctx, id, true); err != nil {
			t.Errorf("DestroyVM %s: %v", id, err)
		}
	}
}

// BenchmarkPluginRoundTrip measures RPCs through a real sim plugin process.
// No baseline: it reports the time of one call as the median of the calls
// timed one by one, with its p10–p90.
func BenchmarkPluginRoundTrip(b *testing.B) {
	h := pluginHarness(b)
	bin := drivertest.Build(b, "../..", "./cmd/fluxvm-agent")
	p, err := driver.Launch(b.Context(), driver.LaunchConfig{Cmd: exec.Command(bin, "plugin", "sim")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Kill)
	ctx := context.Background()
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: []byte(`{}`), Agent: &basepb.AgentContext{StateDir: h.StateDir}}); err != nil {
		b.Fatal(err)
	}
	if _, err := p.CreateVM(ctx, h.Spec("bench")); err != nil {
		b.Fatal(err)
	}
	for _, rpc := range []struct {
		name string
		call func() error
	}{
		{"PluginInfo", func() error { _, err := p.PluginInfo(ctx); return err }},
		{"InspectVM", func() error { _, err := p.InspectVM(ctx, "bench"); return err }},
	} {
		b.Run(rpc.name, func(b *testing.B) {
			took := benchstat.NewSamples()
			for b.Loop() {
				t0 := time.Now()
				err := rpc.call()
				took.Add(time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
			}
			s := took.Seconds().Scaled(1e6)
			benchstat.Report(b, s, "µs/call")
			b.Logf("%s through a plugin process, µs: %v", rpc.name, s)
		})
	}
}
