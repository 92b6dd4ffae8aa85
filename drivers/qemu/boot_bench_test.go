//go:build linux

package qemu

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/guest/protocol"
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
// It reports the medians and, for each ratio, its median over the rounds with
// the 10th and 90th percentiles (each round's ratio divides two boots of that
// round): driver/raw (what the driver adds), driver/fastest (what our default
// command line costs) and driver/stock (what our kernel saves against the best
// we know to do with the stock one).
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
		runs := []func(){driverRun, rawRun, fastestRun, stockRun}
		for k := range runs {
			runs[(i+k)%len(runs)]()
		}
	}
	b.StopTimer()
	md, mr, mf, ms := median(drv), median(raw), median(fastest), median(stockRuns)
	b.ReportMetric(md.Seconds(), "driver-s")
	b.ReportMetric(mr.Seconds(), "raw-s")
	b.ReportMetric(mf.Seconds(), "fastest-s")
	b.ReportMetric(ms.Seconds(), "stock-s")
	b.Logf("medians of %d rounds: driver %v, raw same command %v, fastest known %v (kernel %s), stock kernel fastest %v (kernel %s)",
		b.N, md.Round(time.Millisecond), mr.Round(time.Millisecond), mf.Round(time.Millisecond), m.KernelVersion,
		ms.Round(time.Millisecond), stock.KernelVersion)
	for _, r := range []struct {
		name string
		of   []time.Duration
		goal string
	}{
		{"driver/raw", raw, "≤ 1.05"},
		{"driver/fastest", fastest, "≤ 1.15"},
		{"driver/stock", stockRuns, "≤ 0.6"},
	} {
		p10, p50, p90 := ratioSpread(drv, r.of)
		b.ReportMetric(p50, r.name)
		b.ReportMetric(p10, r.name+"-p10")
		b.ReportMetric(p90, r.name+"-p90")
		rm, lo, hi := medianRatioInterval(drv, r.of)
		b.ReportMetric(rm, r.name+"-of-medians")
		b.ReportMetric(lo, r.name+"-ci-lo")
		b.ReportMetric(hi, r.name+"-ci-hi")
		b.Logf("%s: median of per-round ratios %.3f, p10–p90 %.3f–%.3f; ratio of the medians %.3f, bootstrap 95%% interval %.3f–%.3f; %d rounds (goal %s)",
			r.name, p50, p10, p90, rm, lo, hi, len(drv), r.goal)
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

// medianRatioInterval returns median(a)/median(b) and a bootstrap 95%
// interval for it: rounds are drawn again with replacement (a round keeps its
// two boots together), 2,000 times, with a fixed seed so that a run's figures
// can be recomputed.
func medianRatioInterval(a, b []time.Duration) (ratio, lo, hi float64) {
	n := min(len(a), len(b))
	if n == 0 {
		return 0, 0, 0
	}
	ratio = median(a[:n]).Seconds() / median(b[:n]).Seconds()
	rng := rand.New(rand.NewPCG(1, 2))
	const draws = 2000
	rs := make([]float64, draws)
	sa, sb := make([]time.Duration, n), make([]time.Duration, n)
	for k := range rs {
		for i := range n {
			j := rng.IntN(n)
			sa[i], sb[i] = a[j], b[j]
		}
		rs[k] = median(sa).Seconds() / median(sb).Seconds()
	}
	slices.Sort(rs)
	return ratio, rs[draws*25/1000], rs[draws*975/1000]
}

// ratioSpread divides each round's a by the same round's b and returns the
// 10th, 50th and 90th percentiles of those ratios (nearest rank).
func ratioSpread(a, b []time.Duration) (p10, p50, p90 float64) {
	r := make([]float64, 0, len(a))
	for i := range min(len(a), len(b)) {
		r = append(r, a[i].Seconds()/b[i].Seconds())
	}
	if len(r) == 0 {
		return 0, 0, 0
	}
	slices.Sort(r)
	at := func(q float64) float64 { return r[min(len(r)-1, int(q*float64(len(r))))] }
	return at(0.10), at(0.50), at(0.90)
}

// waitAccel reads the acceleration verdict from the fingerprint, waiting out
// the probe.
func waitAccel(b *testing.B, p *driver.Plugin) string {
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

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestRatioSpreadDividesEachRoundByItsOwnBaseline(t *testing.T) {
	s := time.Second
	// Rounds where the machine was slow for both boots keep a ratio of 0.5;
	// one outlier round (1.0) lands above the 90th percentile of ten.
	a := []time.Duration{1 * s, 2 * s, 1 * s, 3 * s, 1 * s, 2 * s, 1 * s, 1 * s, 2 * s, 4 * s}
	b := []time.Duration{2 * s, 4 * s, 2 * s, 6 * s, 2 * s, 4 * s, 2 * s, 2 * s, 4 * s, 4 * s}
	p10, p50, p90 := ratioSpread(a, b)
	if p10 != 0.5 || p50 != 0.5 || p90 != 1.0 {
		t.Errorf("ratioSpread = %v, %v, %v; want 0.5, 0.5, 1.0", p10, p50, p90)
	}
	if p10, p50, p90 := ratioSpread(nil, nil); p10 != 0 || p50 != 0 || p90 != 0 {
		t.Errorf("ratioSpread of no rounds = %v, %v, %v; want zeros", p10, p50, p90)
	}
}

func TestMedianRatioIntervalHoldsTheRatioOfMedians(t *testing.T) {
	s := time.Second
	var a, b []time.Duration
	for i := range 24 {
		a = append(a, time.Duration(10+i%5)*s/10) // 1.0 to 1.4 s
		b = append(b, time.Duration(20+i%7)*s/10) // 2.0 to 2.6 s
	}
	r, lo, hi := medianRatioInterval(a, b)
	if want := 1.2 / 2.3; math.Abs(r-want) > 1e-9 {
		t.Errorf("ratio of medians = %v, want %v", r, want)
	}
	if !(lo <= r && r <= hi) || lo < 1.0/2.6 || hi > 1.4/2.0 {
		t.Errorf("interval %v–%v does not hold %v inside the possible range", lo, hi, r)
	}
	if r, lo, hi := medianRatioInterval(nil, nil); r != 0 || lo != 0 || hi != 0 {
		t.Errorf("no rounds: %v %v %v, want zeros", r, lo, hi)
	}
}
