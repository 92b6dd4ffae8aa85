//go:build linux

package qemu

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	guestimage "github.com/fluxvm/fluxvm/guest/image"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// bootImageVM creates and starts a VM of the guest image on machine and
// returns once its agent answers, with the screenshot taken right after
// StartVM (nil for a headless VM), before the guest could draw anything.
func bootImageVM(ctx context.Context, t *testing.T, d *Driver, id, machine string, display bool) *pb.ScreenshotResponse {
	t.Helper()
	img := guestimage.DefaultDir()
	if _, err := guestimage.Load(img); err != nil {
		t.Fatalf("no usable guest image in %s: run make guest-image (%v)", img, err)
	}
	spec := &pb.VMSpec{
		Id: id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: img, Vcpus: 1, MemoryMib: 256, Display: display,
		DriverConfigJson: []byte(fmt.Sprintf(`{"machine": %q}`, machine)),
	}
	if _, err := d.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.DestroyVM(context.Background(), id, true) })
	if _, _, err := d.StartVM(ctx, id); err != nil {
		t.Fatal(err)
	}
	var first *pb.ScreenshotResponse
	if display {
		var err error
		if first, err = d.Screenshot(ctx, id); err != nil {
			t.Fatalf("screenshot at start: %v", err)
		}
	}
	if _, err := d.WaitReady(ctx, id); err != nil {
		log, _ := d.ConsoleLog(ctx, id, 4096)
		t.Fatalf("WaitReady: %v\n%s", err, log)
	}
	return first
}

// guestOutput runs a shell line in the guest and returns its output, failing
// the test when it does not exit 0.
func guestOutput(ctx context.Context, t *testing.T, d *Driver, id, line string) string {
	t.Helper()
	var out bytes.Buffer
	code, err := d.Exec(ctx, &pb.ExecRequest{Id: id, Command: shell(line)}, &out, &out)
	if err != nil || code != 0 {
		t.Fatalf("exec %q = %d, %v:\n%s", line, code, err, out.String())
	}
	return out.String()
}

// assertCleanConsole fails when the serial console of a normal boot has a
// line saying "Fatal" (what microvm's kernel said about PCI before).
func assertCleanConsole(ctx context.Context, t *testing.T, d *Driver, id string) {
	t.Helper()
	log, err := d.ConsoleLog(ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "Fatal") {
			t.Errorf("console log has %q; all of it:\n%s", l, log)
		}
	}
}

// TestHeadlessBootIsCleanAndLoadsNoDisplayDriver boots headless VMs: their
// console log has no "Fatal" line, the kernel prints errors on the console
// again once the agent runs (microvm boots one level quieter), and no display
// driver is in the guest, so headless boots do not pay for displays.
func TestHeadlessBootIsCleanAndLoadsNoDisplayDriver(t *testing.T) {
	requireQEMU(t)
	d := newTestDriver(t, t.TempDir(), `{}`)
	for _, machine := range []string{machineMicrovm, machinePC} {
		t.Run(machine, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id := "headless-" + machine
			bootImageVM(ctx, t, d, id, machine, false)
			out := guestOutput(ctx, t, d, id, "cut -f1 /proc/sys/kernel/printk; cut -d' ' -f1 /proc/modules; ls -R /lib/modules; cat /proc/cmdline")
			if level := strings.Fields(out)[0]; level != "4" {
				t.Errorf("console log level in the guest is %s, want 4 (errors shown):\n%s", level, out)
			}
			for _, mod := range []string{"drm", "virtio_gpu", "bochs", "virtio_input"} {
				if strings.Contains(out, mod) {
					t.Errorf("a headless guest has %s (loaded or in its initramfs):\n%s", mod, out)
				}
			}
			assertCleanConsole(ctx, t, d, id)
		})
	}
}
