//go:build linux

package qemu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/guest/protocol"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// BenchmarkBoot measures, in one run and interleaved (in a rotating order)
// so that load on the machine hits all four alike, the time from starting a VM of the guest
// image to its guest agent answering:
//
//   - driver:  StartVM + WaitReady through a real plugin process, default image
//     (FluxVM's own kernel);
//   - raw:     qemu-system-x86_64 run by hand with the very command line the
//     driver uses (same image, same devices), to the same point;
//   - fastest: the fastest known raw command here (ARCHITECTURE.md, "Boot
//     speed"), with the same kernel and initramfs;
//   - stock:   that fastest raw command with Debian's stock kernel and its
//     modules (the debian-minimal-stock image, make guest-image-stock).
//
// It reports each kind's median with its p10–p90 and, for each ratio, the
// median of the per-round ratios (each round's ratio divides two boots of that
// round) with their p10–p90, and the ratio of the medians with a bootstrap 95%
// interval (internal/benchstat): driver/raw (what the driver adds),
// driver/fastest (what our default command line costs) and driver/stock (what
// our kernel saves against the best we know to do with the stock one).
func BenchmarkBoot(b *testing.B) {
	m, err := image.Load(image.DefaultDir())
	if err != nil {
		b.Fatalf("guest image: %v (run make guest-image)", err)
	}
	stock, err := image.Load(image.StockDir())
	if err != nil {
		b.Fatalf("stock-kernel guest image: %v (run make guest-image-stock)", err)
	}
	if m.BuiltFrom["guest_kernel"] == "debian" {
		b.Logf("note: the default image %s boots the stock kernel too; driver/stock compares the stock kernel with itself", m.Dir())
	}
	bin := drivertest.Build(b, "../..", "./cmd/fluxvm-agent")
	stateDir := b.TempDir()
	p := drivertest.LaunchCommand(bin, "plugin", "qemu")(b)
	ctx := context.Background()
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{
		ConfigJson: []byte(`{"machine": "microvm"}`),
		Agent:      &basepb.AgentContext{StateDir: stateDir, NodeName: "bench"},
	}); err != nil {
		b.Fatal(err)
	}
	accel := waitAccel(b, p)
	b.Logf("accel %s", accel)

	var drv, raw, fastest, stockRuns []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("bench-%d", i)
		driverRun := func() {
			spec := &pb.VMSpec{Id: id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: m.Dir(), Vcpus: 1, MemoryMib: 256, Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}}
			if _, err := p.CreateVM(ctx, spec); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, _, err := p.StartVM(ctx, id); err != nil {
				b.Fatal(err)
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			if _, err := p.WaitReady(rctx, id); err != nil {
				b.Fatal(err)
			}
			cancel()
			drv = append(drv, time.Since(start))
			// Only one VM runs at a time, so the runs do not slow each other.
			if err := p.DestroyVM(ctx, id, true); err != nil {
				b.Fatal(err)
			}
		}
		// The raw run uses the driver's own command line for such a VM, in a
		// workspace of its own.
		rawRun := func() {
			ws := filepath.Join(b.TempDir(), "ws")
			if err := os.MkdirAll(ws, 0o700); err != nil {
				b.Fatal(err)
			}
			overlay := filepath.Join(ws, overlayFile)
			if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", m.Path("disk"), overlay).CombinedOutput(); err != nil {
				b.Fatalf("qemu-img: %v: %s", err, out)
			}
			l := launch{
				ID: id + "-raw", UUID: "2b5e7f9c-0000-4000-8000-00000000000" + strconv.Itoa(i%10), Workspace: ws,
				Machine: machineMicrovm, Accel: accel, VCPUs: 1, MemoryMiB: 256,
				Kernel: m.Path("kernel"), Initrd: m.Path("initrd"), AgentPort: m.AgentPort(), Disk: overlay, Network: "none",
				Cmdline: kernelCmdline(m.Cmdline, "", hostTSCkHz(), machineMicrovm, false),
			}
			raw = append(raw, bootRaw(b, l.args(), filepath.Join(ws, agentSock)))
		}
		fastestRun := func() { fastest = append(fastest, bootFastest(b, accel, m)) }
		stockRun := func() { stockRuns = append(stockRuns, bootFastest(b, accel, stock)) }
		// The order rotates every round: whichever boot comes first after
		// a pause runs slower here, and a fixed order would hand that to one
		// of the four every time.
		benchstat.Interleave(i, driverRun, rawRun, fastestRun, stockRun)
	}
	b.StopTimer()
	md, mr, mf, ms := benchstat.Seconds(drv), benchstat.Seconds(raw), benchstat.Seconds(fastest), benchstat.Seconds(stockRuns)
	benchstat.Report(b, md, "driver-s")
	benchstat.Report(b, mr, "raw-s")
	benchstat.Report(b, mf, "fastest-s")
	benchstat.Report(b, ms, "stock-s")
	b.Logf("boot to agent ready, s: driver %v; raw same command %v; fastest known %v (kernel %s); stock kernel fastest %v (kernel %s)",
		md, mr, mf, m.KernelVersion, ms, stock.KernelVersion)
	for _, r := range []struct {
		name string
		of   []time.Duration
		goal string
	}{
		{"driver/raw", raw, "≤ 1.05"},
		{"driver/fastest", fastest, "≤ 1.15"},
		{"driver/stock", stockRuns, "≤ 0.6"},
	} {
		per, of := benchstat.RatiosOfSeconds(drv, r.of), benchstat.RatioOfMediansOfSeconds(drv, r.of)
		benchstat.Report(b, per, r.name)
		benchstat.ReportInterval(b, of, r.name+"-of-medians")
		b.Logf("%s: round by round %v; ratio of the medians %v (goal %s)", r.name, per, of, r.goal)
	}
}

// bootFastest boots image m with the fastest raw command known here
// (ARCHITECTURE.md, "Boot speed") and returns the time to its agent answering.
func bootFastest(b *testing.B, accel string, m *image.Manifest) time.Duration {
	fdir := b.TempDir()
	return bootRaw(b, []string{
		"-M", "microvm", "-accel", accel, "-m", "256", "-no-reboot", "-nodefaults", "-no-user-config", "-display", "none",
		"-kernel", m.Path("kernel"), "-initrd", m.Path("initrd"),
		"-append", "console=ttyS0 quiet panic=-1 tsc_early_khz=" + strconv.FormatInt(hostTSCkHz(), 10) +
			" tsc=reliable no_timer_check i8042.noaux i8042.nokbd pci=lastbus=0 random.trust_cpu=on noreplace-smp",
		"-serial", "file:" + filepath.Join(fdir, "console.log"),
		"-device", "virtio-serial-device",
		"-chardev", "socket,id=ga,path=" + filepath.Join(fdir, "agent.sock") + ",server=on,wait=off",
		"-device", "virtserialport,chardev=ga,name=" + m.AgentPort(),
	}, filepath.Join(fdir, "agent.sock"))
}

// waitAccel reads the acceleration verdict from the fingerprint, waiting out
// the probe.
func waitAccel(b testing.TB, p *driver.Plugin) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fps, err := p.Fingerprint(ctx)
	if err != nil {
		b.Fatal(err)
	}
	for fp := range fps {
		if a := fp.Attributes["qemu.accel"]; a == "kvm" || a == "tcg" {
			return a
		}
	}
	b.Fatal("no acceleration verdict within a minute")
	return ""
}

// bootRaw runs QEMU with args until the guest agent on sock answers, and
// returns how long that took from the start of the process.
func bootRaw(b *testing.B, args []string, sock string) time.Duration {
	cmd := exec.Command("qemu-system-x86_64", args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := protocol.Dial(ctx, sock)
	if err != nil {
		b.Fatalf("raw boot: dial agent: %v", err)
	}
	defer c.Close()
	if _, err := c.WaitReady(ctx); err != nil {
		b.Fatalf("raw boot: %v", err)
	}
	return time.Since(start)
}
