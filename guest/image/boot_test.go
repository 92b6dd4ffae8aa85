package image_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/guest/protocol"
)

// hostTSCkHz is the host TSC frequency: microvm under TCG hangs without tsc_early_khz.
func hostTSCkHz(t *testing.T) int {
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return v
		}
	}
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return int(math.Round(mhz * 1000))
			}
		}
	}
	t.Fatal("cannot find the host TSC frequency in sysfs or /proc/cpuinfo")
	return 0
}

// TestBootImage boots the built image the way the QEMU driver does, on both machine
// types, and drives the agent: readiness, exec, network set-up, shutdown.
func TestBootImage(t *testing.T) {
	m, err := image.Load(image.DefaultDir())
	if errors.Is(err, image.ErrNotBuilt) {
		t.Fatalf("no guest image in %s: run `make guest-image` (scripts/guest-image.sh) first: %v", image.DefaultDir(), err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: install qemu-system-x86")
	}
	tuned := fmt.Sprintf(" tsc_early_khz=%d tsc=reliable no_timer_check i8042.noaux i8042.nokbd pci=lastbus=0 random.trust_cpu=on noreplace-smp", hostTSCkHz(t))
	for _, tc := range []struct {
		machine string
		devices []string // serial bus, disk, NIC
		extra   string
	}{
		// The driver boots microvm one level quieter than quiet (its kernel's PCI
		// complaint); the agent must let errors through again.
		{"microvm", []string{"virtio-serial-device", "virtio-blk-device", "virtio-net-device"}, " loglevel=3"},
		{"pc", []string{"virtio-serial-pci", "virtio-blk-pci", "virtio-net-pci"}, ""},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			bootAndDrive(t, m, tc.machine, tc.devices, m.Cmdline+tuned+tc.extra)
		})
	}
}

func bootAndDrive(t *testing.T, m *image.Manifest, machine string, devices []string, cmdline string) {
	dir := t.TempDir()
	overlay := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", m.Path("disk"), overlay).CombinedOutput(); err != nil {
		t.Fatalf("create overlay: %v: %s", err, out)
	}
	sock := filepath.Join(dir, "ga.sock")
	consoleLog := filepath.Join(dir, "console.log")
	const mac = "52:54:00:12:34:56"
	args := []string{
		"-M", machine, "-accel", "tcg", "-m", "256", "-no-reboot", "-nodefaults", "-no-user-config", "-display", "none",
		"-kernel", m.Path("kernel"), "-initrd", m.Path("initrd"), "-append", cmdline,
		"-device", devices[0],
		"-chardev", "socket,path=" + sock + ",server=on,wait=off,id=ga",
		"-device", "virtserialport,chardev=ga,name=" + m.AgentPort(),
		"-serial", "file:" + consoleLog,
		"-blockdev", "driver=qcow2,node-name=d0,file.driver=file,file.filename=" + overlay,
		"-device", devices[1] + ",drive=d0,serial=fluxvm-data",
		"-netdev", "user,id=n0", "-device", devices[2] + ",netdev=n0,mac=" + mac,
	}
	var qemuOut bytes.Buffer
	qemu := exec.Command("qemu-system-x86_64", args...)
	qemu.Stdout, qemu.Stderr = &qemuOut, &qemuOut
	start := time.Now()
	if err := qemu.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = qemu.Wait(); close(exited) }()
	defer func() {
		_ = qemu.Process.Kill()
		<-exited
		if t.Failed() {
			b, _ := os.ReadFile(consoleLog)
			t.Logf("qemu output:\n%s\nconsole:\n%s", qemuOut.String(), b)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := protocol.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.WaitReady(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: agent ready %.2fs after qemu started (guest uptime %.2fs, kernel %s, os %q, interfaces %v)",
		machine, time.Since(start).Seconds(), info.Uptime, info.Kernel, info.OS, info.Interfaces)
	if info.Kernel != m.KernelVersion {
		t.Errorf("guest kernel %q, manifest says %q", info.Kernel, m.KernelVersion)
	}
	if b, _ := os.ReadFile(consoleLog); !strings.Contains(string(b), protocol.ReadyLine) || strings.Contains(string(b), "Fatal") {
		t.Errorf("console log lacks the ready line or says Fatal:\n%s", b)
	}

	run := func(req *protocol.ExecRequest) (int, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		code, err := c.Exec(ctx, req, &out, &errOut)
		if err != nil {
			t.Fatalf("exec %+v: %v", req, err)
		}
		return code, out.String() + errOut.String()
	}
	// The agent answers before the disk and network drivers are in; a command sent
	// right after ready must still find both.
	if code, out := run(&protocol.ExecRequest{Shell: "cat /sys/block/vda/serial /sys/class/net/*/address"}); code != 0 ||
		!strings.Contains(out, "fluxvm-data") || !strings.Contains(out, mac) {
		t.Errorf("first command after ready: %d, %q; want vda with serial fluxvm-data and a NIC with MAC %s", code, out, mac)
	}
	if code, out := run(&protocol.ExecRequest{Argv: []string{"uname", "-a"}}); code != 0 || !strings.Contains(out, "Linux") {
		t.Errorf("uname -a = %d, %q", code, out)
	}
	// Kernel errors reach the console (the quiet level), however quiet the boot was.
	if code, out := run(&protocol.ExecRequest{Argv: []string{"cut", "-f1", "/proc/sys/kernel/printk"}}); code != 0 || strings.TrimSpace(out) != "4" {
		t.Errorf("console log level = %d, %q; want 4", code, out)
	}
	// The host side may go away and come back (agent restart): the guest sees EOF on
	// the port meanwhile and must keep serving once a new client connects.
	c.Close()
	time.Sleep(300 * time.Millisecond)
	if c, err = protocol.Dial(ctx, sock); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatalf("agent not ready after the host reconnected: %v", err)
	}
	if code, out := run(&protocol.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}); code != 3 {
		t.Errorf("sh -c 'exit 3' = %d, %q; want 3", code, out)
	}
	if code, err := c.Exec(ctx, &protocol.ExecRequest{Shell: "sleep 10", TimeoutMS: 200}, nil, nil); code != protocol.CodeTimeout || !errors.Is(err, protocol.ErrTimeout) {
		t.Errorf("timed-out exec = %d, %v; want 124 and ErrTimeout", code, err)
	}

	err = c.ConfigureNetwork(ctx, &protocol.NetworkConfig{
		Interfaces: []protocol.Interface{{MAC: strings.ToUpper(mac), Addresses: []string{"10.0.2.15/24"}, Gateway: "10.0.2.2", MTU: 1500}},
		DNS:        []string{"10.0.2.3"},
		Hostname:   "fluxvm-test",
	})
	if err != nil {
		t.Fatal(err)
	}
	if code, out := run(&protocol.ExecRequest{Shell: "ip addr; ip route; cat /etc/resolv.conf; hostname"}); code != 0 ||
		!strings.Contains(out, "10.0.2.15/24") || !strings.Contains(out, "default via 10.0.2.2") ||
		!strings.Contains(out, "nameserver 10.0.2.3") || !strings.Contains(out, "fluxvm-test") {
		t.Errorf("network not configured: %d\n%s", code, out)
	}
	// QEMU's user network answers pings to its gateway.
	if code, out := run(&protocol.ExecRequest{Argv: []string{"ping", "-c", "1", "-W", "5", "10.0.2.2"}}); code != 0 {
		t.Errorf("ping gateway = %d, %q", code, out)
	}

	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("qemu still running 30s after the guest acknowledged shutdown")
	}
}
