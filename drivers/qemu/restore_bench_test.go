//go:build linux

package qemu

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// BenchmarkRestoreVsCold measures, in one run and interleaved (alternating
// which goes first), through a real plugin process and with the same guest
// image and size:
//
//   - cold:     CreateVM + StartVM + WaitReady, a boot;
//   - restored: CloneVM (resume_memory) from a saved memory_file guest +
//     StartVM + WaitReady, the guest resuming from its saved RAM.
//
// Both are timed from the first call to the guest agent's answer. It
// reports both medians with their p10–p90, restored/cold round by round
// (median, p10–p90) and the ratio of the medians with its bootstrap 95%
// interval (goal ≤ 0.15).
func BenchmarkRestoreVsCold(b *testing.B) {
	m, err := image.Load(image.DefaultDir())
	if err != nil {
		b.Fatalf("guest image: %v (run make guest-image)", err)
	}
	bin := drivertest.Build(b, "../..", "./cmd/fluxvm-agent")
	p := drivertest.LaunchCommand(bin, "plugin", "qemu")(b)
	ctx := context.Background()
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{
		ConfigJson: []byte(`{"machine": "microvm"}`),
		Agent:      &basepb.AgentContext{StateDir: b.TempDir(), NodeName: "bench"},
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("accel %s", waitAccel(b, p))
	spec := func(id, cfg string) *pb.VMSpec {
		return &pb.VMSpec{Id: id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: m.Dir(), Vcpus: 1, MemoryMib: 256,
			Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}, DriverConfigJson: []byte(cfg)}
	}
	ready := func(id string) {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, err := p.WaitReady(rctx, id); err != nil {
			b.Fatal(err)
		}
	}
	// The saved guest: booted once, saved, stopped.
	if _, err := p.CreateVM(ctx, spec("template", `{"memory_file": true}`)); err != nil {
		b.Fatal(err)
	}
	defer p.DestroyVM(ctx, "template", true) // also when a step below fails: no QEMU left behind
	if _, _, err := p.StartVM(ctx, "template"); err != nil {
		b.Fatal(err)
	}
	ready("template")
	// Saved once it has finished starting, as a snapshot pool saves its
	// template (central/pools: fluxvm-guest settle).
	var out bytes.Buffer
	if code, err := p.Exec(ctx, &pb.ExecRequest{Id: "template", Command: &pb.ExecRequest_Argv{Argv: &pb.Argv{Args: []string{"/init", "settle"}}}}, &out, &out); err != nil || code != 0 {
		b.Fatalf("settle the template: %d, %v: %s (an image older than its agent source? run make guest-image)", code, err, out.String())
	}
	if _, err := p.SnapshotVM(ctx, "template", "warm", true); err != nil {
		b.Fatal(err)
	}
	if _, err := p.StopVM(ctx, "template", 10*time.Second); err != nil {
		b.Fatal(err)
	}

	var cold, restored []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		coldRun := func() {
			id := fmt.Sprintf("cold-%d", i)
			start := time.Now()
			if _, err := p.CreateVM(ctx, spec(id, "")); err != nil {
				b.Fatal(err)
			}
			if _, _, err := p.StartVM(ctx, id); err != nil {
				b.Fatal(err)
			}
			ready(id)
			cold = append(cold, time.Since(start))
			if err := p.DestroyVM(ctx, id, true); err != nil {
				b.Fatal(err)
			}
		}
		restoreRun := func() {
			id := fmt.Sprintf("restored-%d", i)
			start := time.Now()
			if _, err := p.CloneVM(ctx, &pb.CloneVMRequest{SourceId: "template", SnapshotTag: "warm", Id: id, ResumeMemory: true}); err != nil {
				b.Fatal(err)
			}
			if _, _, err := p.StartVM(ctx, id); err != nil {
				b.Fatal(err)
			}
			ready(id)
			restored = append(restored, time.Since(start))
			if err := p.DestroyVM(ctx, id, true); err != nil {
				b.Fatal(err)
			}
		}
		benchstat.Interleave(i, coldRun, restoreRun)
	}
	b.StopTimer()
	mc, mr := benchstat.Seconds(cold), benchstat.Seconds(restored)
	per, of := benchstat.RatiosOfSeconds(restored, cold), benchstat.RatioOfMediansOfSeconds(restored, cold)
	benchstat.Report(b, mc, "cold-s")
	benchstat.Report(b, mr, "restored-s")
	benchstat.Report(b, per, "restored/cold")
	benchstat.ReportInterval(b, of, "restored/cold-of-medians")
	b.Logf("to agent ready, s: cold launch %v; restored launch %v; restored/cold round by round %v; ratio of the medians %v (goal ≤ 0.15)",
		mc, mr, per, of)
}
