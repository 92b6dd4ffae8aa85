//go:build linux

package qemu

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
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

// boundDrivers is a shell line printing the driver of every device that has
// one, one a line: the same whether a driver is built into the kernel (our
// kernel) or a loaded module (the stock one).
const boundDrivers = `for d in /sys/bus/*/devices/*/driver; do [ -e "$d" ] && basename "$(readlink "$d")"; done; true`

// TestHeadlessBootIsCleanAndLoadsNoDisplayDriver boots headless VMs: their
// console log has no "Fatal" line, the kernel prints errors on the console
// again once the agent runs (microvm boots one level quieter), and no display
// driver is loaded, in the initramfs or bound to a device in the guest, so
// headless boots do not pay for displays (our kernel has them built in, idle).
func TestHeadlessBootIsCleanAndLoadsNoDisplayDriver(t *testing.T) {
	requireQEMU(t)
	d := newTestDriver(t, t.TempDir(), `{}`)
	for _, machine := range []string{machineMicrovm, machinePC} {
		t.Run(machine, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id := "headless-" + machine
			bootImageVM(ctx, t, d, id, machine, false)
			out := guestOutput(ctx, t, d, id, "cut -f1 /proc/sys/kernel/printk; cut -d' ' -f1 /proc/modules 2>/dev/null; ls -R /lib/modules; ls -d /sys/class/drm/card* 2>/dev/null; cat /proc/cmdline; "+boundDrivers)
			if level := strings.Fields(out)[0]; level != "4" {
				t.Errorf("console log level in the guest is %s, want 4 (errors shown):\n%s", level, out)
			}
			for _, mod := range []string{"drm", "virtio_gpu", "bochs", "virtio_input"} {
				if strings.Contains(out, mod) {
					t.Errorf("a headless guest has %s (loaded, in its initramfs or bound to a device):\n%s", mod, out)
				}
			}
			assertCleanConsole(ctx, t, d, id)
		})
	}
}

// TestDisplayVMShowsTheGuestConsole boots VMs with a display on both
// machines and checks that the screen shows the guest's console text, not
// QEMU's "Guest has not initialized the display": the picture differs from
// the one taken at start and holds several lines of text; the guest has a
// framebuffer console; and a key pressed through SendInput reaches it. The
// screenshots are kept in the test's artifact directory (go test -artifacts).
func TestDisplayVMShowsTheGuestConsole(t *testing.T) {
	requireQEMU(t)
	d := newTestDriver(t, t.TempDir(), `{}`)
	for _, tc := range []struct {
		machine string
		drivers []string // bound to a device
		input   string   // in /proc/bus/input/devices
	}{
		{machineMicrovm, []string{"virtio_gpu", "virtio_input"}, "Virtio Keyboard"},
		{machinePC, []string{"bochs-drm"}, "AT Translated Set 2 keyboard"},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id := "display-" + tc.machine
			first := bootImageVM(ctx, t, d, id, tc.machine, true)
			dir := t.ArtifactDir()
			savePNG(t, filepath.Join(dir, "at-start.png"), first.Png)
			before, err := png.Decode(bytes.NewReader(first.Png))
			if err != nil {
				t.Fatal(err)
			}

			// The display drivers load right after readiness, in the background.
			ready := time.Now()
			var shot *pb.ScreenshotResponse
			var lines int
			deadline := time.Now().Add(90 * time.Second)
			for {
				if shot, err = d.Screenshot(ctx, id); err != nil {
					t.Fatal(err)
				}
				img, err := png.Decode(bytes.NewReader(shot.Png))
				if err != nil {
					t.Fatal(err)
				}
				lines = textLines(img)
				if lines >= 5 && differs(before, img) {
					break
				}
				if time.Now().After(deadline) {
					savePNG(t, filepath.Join(dir, "screen.png"), shot.Png)
					t.Fatalf("after 90 s the screen (%dx%d) shows %d lines of text and differs from the start: %v; see %s",
						shot.Width, shot.Height, lines, differs(before, img), dir)
				}
				time.Sleep(500 * time.Millisecond)
			}
			savePNG(t, filepath.Join(dir, "screen.png"), shot.Png)
			t.Logf("%s: screen %dx%d with %d lines of text %.1fs after ready (at start %dx%d); screenshots in %s",
				tc.machine, shot.Width, shot.Height, lines, time.Since(ready).Seconds(), first.Width, first.Height, dir)

			out := guestOutput(ctx, t, d, id, "cat /proc/fb /sys/class/vtconsole/vtcon*/name /proc/bus/input/devices; "+boundDrivers)
			if !strings.Contains(out, "frame buffer device") {
				t.Errorf("no framebuffer console in the guest:\n%s", out)
			}
			for _, want := range append(tc.drivers, tc.input) {
				if !strings.Contains(out, want) {
					t.Errorf("guest lacks %s:\n%s", want, out)
				}
			}

			// A key typed on the screen reaches the guest's terminal. Keys
			// pressed while nothing has the terminal open are dropped, so
			// press until the reader has one. (The terminal forgets stty's
			// settings when stty closes it: one open serves both.)
			read := make(chan string, 1)
			go func() {
				var out bytes.Buffer
				_, _ = d.Exec(ctx, &pb.ExecRequest{Id: id, Command: shell("(stty -icanon -echo && timeout 60 dd bs=1 count=1 2>/dev/null) </dev/tty1")}, &out, &out)
				read <- out.String()
			}()
		press:
			for {
				if err := d.SendInput(ctx, id, []*pb.InputAction{{Action: &pb.InputAction_Key{Key: &pb.KeyChord{Keys: []string{"x"}}}}}); err != nil {
					t.Fatalf("SendInput: %v", err)
				}
				select {
				case got := <-read:
					if got != "x" {
						t.Errorf("the guest's terminal read %q, want the x pressed on the screen", got)
					}
					break press
				case <-time.After(500 * time.Millisecond):
				case <-ctx.Done():
					t.Fatal("no key reached the guest's terminal")
				}
			}
			assertCleanConsole(ctx, t, d, id)
		})
	}
}

// textLines counts the bands of rows that hold ink, anything other than the
// background (the colour of the bottom-right pixel, where no text reaches):
// a line of console text is one band. QEMU's "Guest has not initialized the
// display" is a single line.
func textLines(img image.Image) int {
	b := img.Bounds()
	bg := img.At(b.Max.X-1, b.Max.Y-1)
	br, bgc, bb, _ := bg.RGBA()
	lines, inLine := 0, false
	for y := b.Min.Y; y < b.Max.Y; y++ {
		ink := 0
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if r != br || g != bgc || bl != bb {
				ink++
			}
		}
		if ink > 0 && !inLine {
			lines++
		}
		inLine = ink > 0
	}
	return lines
}

// differs reports whether two pictures differ in size or in any pixel.
func differs(a, b image.Image) bool {
	if a.Bounds() != b.Bounds() {
		return true
	}
	for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
		for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
			r1, g1, b1, _ := a.At(x, y).RGBA()
			r2, g2, b2, _ := b.At(x, y).RGBA()
			if r1 != r2 || g1 != g2 || b1 != b2 {
				return true
			}
		}
	}
	return false
}

func savePNG(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
