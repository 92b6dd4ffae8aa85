//go:build linux

package qemu

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// newTestDriver configures a driver on a fresh state directory.
func newTestDriver(t *testing.T, stateDir, config string) *Driver {
	t.Helper()
	d := New(nil).(*Driver)
	if err := d.SetConfig(context.Background(), &basepb.SetConfigRequest{ConfigJson: []byte(config), Agent: &basepb.AgentContext{StateDir: stateDir}}); err != nil {
		t.Fatal(err)
	}
	return d
}

// guestImage is the guest image the real-guest tests boot, built by make
// guest-image; a test fails with how to build it when it is missing.
func guestImage(t *testing.T) string {
	t.Helper()
	img := image.DefaultDir()
	if _, err := image.Load(img); err != nil {
		t.Fatalf("no usable guest image in %s: run make guest-image (%v)", img, err)
	}
	return img
}

// memoryFileSpec is the spec of a memory_file guest the resume tests save
// and clone: the guest image, 1 vCPU, 256 MiB, user-mode networking.
func memoryFileSpec(id, img string) *pb.VMSpec {
	return &pb.VMSpec{Id: id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: img, Vcpus: 1, MemoryMib: 256,
		Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER}, DriverConfigJson: []byte(`{"memory_file": true}`)}
}

func TestStartVMReportsWhyQEMUFailed(t *testing.T) {
	requireQEMU(t)
	bundle, _ := testImages(t, t.TempDir()) // its kernel is not a kernel
	d := newTestDriver(t, t.TempDir(), `{"accel": "tcg"}`)
	ctx := context.Background()
	if _, err := d.CreateVM(ctx, &pb.VMSpec{Id: "bad-kernel", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128}); err != nil {
		t.Fatal(err)
	}
	_, _, err := d.StartVM(ctx, "bad-kernel")
	if err == nil {
		t.Fatal("StartVM with a stand-in kernel succeeded")
	}
	if !strings.Contains(err.Error(), "qemu said") || strings.Contains(err.Error(), "qemu said: (nothing)") {
		t.Errorf("StartVM error %q does not carry QEMU's own message", err)
	}
	st, err := d.InspectVM(ctx, "bad-kernel")
	if err != nil {
		t.Fatal(err)
	}
	if st.State != pb.VMState_VM_STATE_STOPPED || st.Exit.GetReason() != pb.ExitReason_EXIT_REASON_CRASHED {
		t.Errorf("after a failed start: state %s, exit %v; want STOPPED, crashed", st.State, st.Exit)
	}
	if err := d.DestroyVM(ctx, "bad-kernel", false); err != nil {
		t.Errorf("DestroyVM: %v", err)
	}
}

// TestRealVMDetails boots the guest image in-process and checks what the
// conformance suite leaves to drivers: attributes, the screen, cancelled
// execs, stopping at once and waiting on a stopped VM. Its state directory
// holds a comma, which QEMU option strings must escape.
func TestRealVMDetails(t *testing.T) {
	requireQEMU(t)
	img := guestImage(t)
	state := filepath.Join(t.TempDir(), "a,b")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t, state, `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	fpCh, _ := d.Fingerprint(ctx)
	fp := <-fpCh
	if fp.Health != pb.Health_HEALTH_HEALTHY || fp.Attributes["qemu.version"] == "" || fp.Attributes["qemu.machine"] != "microvm" {
		t.Errorf("fingerprint = %v", fp)
	}
	accel, err := d.accelerator(ctx)
	if err != nil || (accel.Accel != "kvm" && accel.Accel != "tcg") || accel.Reason == "" {
		t.Fatalf("accelerator = %+v, %v", accel, err)
	}
	if _, ok := loadAccelVerdict(filepath.Join(state, "accel.json"), accel.Key); !ok {
		t.Error("the verdict was not cached in accel.json")
	}

	spec := &pb.VMSpec{Id: "details", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: img, Vcpus: 1, MemoryMib: 256, Display: true, Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER}}
	if _, err := d.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer d.DestroyVM(context.Background(), spec.Id, true)
	if _, err := d.WaitReady(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
		t.Errorf("WaitReady on a created vm = %v, want ErrState", err)
	}
	if _, _, err := d.StartVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitReady(ctx, spec.Id); err != nil {
		log, _ := d.ConsoleLog(ctx, spec.Id, 4096)
		t.Fatalf("WaitReady: %v\n%s", err, log)
	}
	// User-mode networking: the driver configured the NIC through the agent.
	var netOut bytes.Buffer
	if code, err := d.Exec(ctx, &pb.ExecRequest{Id: spec.Id, Command: shell("ip -4 addr show; ip route")}, &netOut, &netOut); err != nil || code != 0 ||
		!strings.Contains(netOut.String(), "10.0.2.15/24") || !strings.Contains(netOut.String(), "default via 10.0.2.2") {
		t.Errorf("guest network after ready = %d, %v:\n%s", code, err, netOut.String())
	}
	st, _ := d.InspectVM(ctx, spec.Id)
	for _, k := range []string{"pid", "workspace", "accel", "machine", "qmp_socket", "vnc_socket", "console_log"} {
		if st.Attributes[k] == "" {
			t.Errorf("attribute %s missing from %v", k, st.Attributes)
		}
	}
	if _, err := os.Stat(st.Attributes["vnc_socket"]); err != nil {
		t.Errorf("vnc socket: %v", err)
	}

	shot, err := d.Screenshot(ctx, spec.Id)
	if err != nil {
		t.Fatal(err)
	}
	if img, err := png.Decode(bytes.NewReader(shot.Png)); err != nil || img.Bounds().Dx() != int(shot.Width) || shot.Width == 0 {
		t.Errorf("screenshot %dx%d: %v", shot.Width, shot.Height, err)
	}
	if err := d.SendInput(ctx, spec.Id, []*pb.InputAction{
		{Action: &pb.InputAction_Text{Text: "Hi"}},
		{Action: &pb.InputAction_Click{Click: &pb.Click{At: &pb.Point{X: 1, Y: 1}}}},
	}); err != nil {
		t.Errorf("SendInput: %v", err)
	}

	// Cancelling an exec returns at once and kills the command in the guest.
	ectx, ecancel := context.WithTimeout(ctx, 500*time.Millisecond)
	start := time.Now()
	_, err = d.Exec(ectx, &pb.ExecRequest{Id: spec.Id, Command: shell("touch /tmp/started; sleep 30; touch /tmp/survived")}, nil, nil)
	ecancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("cancelled exec = %v after %v", err, time.Since(start))
	}
	var out bytes.Buffer
	if code, err := d.Exec(ctx, &pb.ExecRequest{Id: spec.Id, Command: shell("test -e /tmp/started || exit 9; sleep 1; cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -c 'sleep 3[0]' || true")}, &out, nil); err != nil || code != 0 || strings.TrimSpace(out.String()) != "0" {
		t.Errorf("after cancel the guest still runs the command: %d, %v, %q", code, err, out.String())
	}

	if log, err := d.ConsoleLog(ctx, spec.Id, 0); err != nil || len(log) == 0 {
		t.Errorf("ConsoleLog = %d bytes, %v", len(log), err)
	}
	if log, _ := d.ConsoleLog(ctx, spec.Id, 10); len(log) > 10 {
		t.Errorf("ConsoleLog(10) returned %d bytes", len(log))
	}

	waited := make(chan *pb.ExitResult, 1)
	go func() {
		exit, _ := d.WaitVM(ctx, spec.Id)
		waited <- exit
	}()
	exit, err := d.StopVM(ctx, spec.Id, 0)
	if err != nil || exit.GetReason() != pb.ExitReason_EXIT_REASON_STOPPED {
		t.Fatalf("StopVM(0) = %v, %v; want reason stopped", exit, err)
	}
	select {
	case w := <-waited:
		if w.GetReason() != pb.ExitReason_EXIT_REASON_STOPPED {
			t.Errorf("WaitVM = %v", w)
		}
	case <-time.After(5 * time.Second):
		t.Error("WaitVM did not return when the vm stopped")
	}
	if _, err := d.Screenshot(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
		t.Errorf("Screenshot of a stopped vm = %v, want ErrState", err)
	}
	if err := d.PauseVM(ctx, spec.Id); !errors.Is(err, driver.ErrState) {
		t.Errorf("PauseVM of a stopped vm = %v, want ErrState", err)
	}
	if _, err := d.Exec(ctx, &pb.ExecRequest{Id: spec.Id, Command: &pb.ExecRequest_Argv{Argv: &pb.Argv{Args: []string{"true"}}}}, nil, nil); !errors.Is(err, driver.ErrState) {
		t.Errorf("Exec in a stopped vm = %v, want ErrState", err)
	}
}

// shell is an exec command run by /bin/sh -c.
func shell(line string) *pb.ExecRequest_Shell { return &pb.ExecRequest_Shell{Shell: line} }
