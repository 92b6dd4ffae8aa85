package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

// BenchmarkNodeCreateToReady measures, interleaved in one run, a VM create
// through the node API until the API reports its guest agent ready, against
// the driver-level figure (StartVM + WaitReady through a plugin process) of
// the same image, and reports the ratio (goal ≤ 1.05).
func BenchmarkNodeCreateToReady(b *testing.B) {
	if _, err := image.Load(image.DefaultDir()); err != nil {
		b.Fatalf("guest image: %v (run make guest-image)", err)
	}
	n := newBenchNode(b, `plugin "qemu" {}`)
	bin := drivertest.Build(b, "../..", "./cmd/fluxvm-agent")
	p := drivertest.LaunchCommand(bin, "plugin", "qemu")(b)
	ctx := context.Background()
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: []byte(`{}`), Agent: &basepb.AgentContext{StateDir: b.TempDir()}}); err != nil {
		b.Fatal(err)
	}
	// Warm up both paths once (the QEMU driver probes its accelerator on
	// first use), then time b.N rounds.
	var api, drv []time.Duration
	for i := -1; i < b.N; i++ {
		if i == 0 {
			api, drv = nil, nil
			b.ResetTimer()
		}
		// Through the node API: create, then poll until ready.
		apiRun := func() {
			start := time.Now()
			var vm sdk.VM
			n.must("POST", "/v1/vms", sdk.CreateVMRequest{Name: fmt.Sprintf("bench-%d", i+1), Image: image.DefaultDir(), VCPUs: 1, MemoryMiB: 256, Network: "none"}, http.StatusCreated, &vm)
			for !vm.AgentReady {
				time.Sleep(10 * time.Millisecond)
				n.must("GET", "/v1/vms/"+vm.ID, nil, http.StatusOK, &vm)
				if time.Since(start) > 2*time.Minute {
					b.Fatal("not ready within 2 minutes")
				}
			}
			api = append(api, time.Since(start))
			n.must("DELETE", "/v1/vms/"+vm.ID, nil, http.StatusNoContent, nil)
		}
		// The driver alone: the same spec through a plugin process.
		driverRun := func() {
			id := fmt.Sprintf("drv-%d", i+1)
			if _, err := p.CreateVM(ctx, &pb.VMSpec{Id: id, GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: image.DefaultDir(), Vcpus: 1, MemoryMib: 256, Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_NONE}}); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, _, err := p.StartVM(ctx, id); err != nil {
				b.Fatal(err)
			}
			if _, err := p.WaitReady(ctx, id); err != nil {
				b.Fatal(err)
			}
			drv = append(drv, time.Since(start))
			if err := p.DestroyVM(ctx, id, true); err != nil {
				b.Fatal(err)
			}
		}
		// Alternate which goes first: the first boot after a pause is the
		// slower one here.
		benchstat.Interleave(i, apiRun, driverRun)
	}
	ma, md, ratio := benchstat.Seconds(api), benchstat.Seconds(drv), benchstat.RatiosOfSeconds(api, drv)
	benchstat.Report(b, ma, "api-s")
	benchstat.Report(b, md, "driver-s")
	benchstat.Report(b, ratio, "api/driver")
	b.Logf("to agent ready, s: node API create %v; driver start %v; api/driver round by round %v (goal ≤ 1.05)", ma, md, ratio)
}

// BenchmarkAgentMemoryWith20SimVMs reports the resident memory of the node
// agent and of its sim plugin once they hold 20 VMs. One op is one round: a
// new node, its 20 VMs, the two sizes read. No baseline: it reports each
// size as the median of the rounds with its p10–p90.
func BenchmarkAgentMemoryWith20SimVMs(b *testing.B) {
	var agents, plugins []float64
	for i := 0; i < b.N; i++ {
		n := newBenchNode(b, `plugin "sim" {}`)
		img := filepath.Join(n.dir, "images", "sim.img")
		_ = os.MkdirAll(filepath.Dir(img), 0o700)
		if err := os.WriteFile(img, []byte("sim"), 0o600); err != nil {
			b.Fatal(err)
		}
		for j := range 20 {
			n.must("POST", "/v1/vms", sdk.CreateVMRequest{Name: fmt.Sprintf("sim-%02d", j), Image: img, VCPUs: 1, MemoryMiB: 256}, http.StatusCreated, nil)
		}
		n.must("GET", "/v1/vms", nil, http.StatusOK, nil)
		agents = append(agents, rssMiB(b, n.cmd.Process.Pid))
		plugins = append(plugins, rssMiB(b, pluginPidOf(n.cmd.Process.Pid, "sim")))
		n.stop()
	}
	as, ps := benchstat.Of(agents), benchstat.Of(plugins)
	benchstat.Report(b, as, "agent-MiB")
	benchstat.Report(b, ps, "plugin-MiB")
	b.Logf("with 20 sim VMs, RSS in MiB: agent %v; sim plugin %v", as, ps)
}

// newBenchNode starts a node agent for a benchmark.
func newBenchNode(b *testing.B, plugins string) *node {
	n := newNode(b, plugins)
	n.start()
	return n
}

// rssMiB is a process's resident set size in MiB.
func rssMiB(tb testing.TB, pid int) float64 {
	tb.Helper()
	mib, err := benchstat.ResidentMiB(pid)
	if err != nil {
		tb.Fatal(err)
	}
	return mib
}
