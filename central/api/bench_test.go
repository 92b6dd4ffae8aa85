package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/rawtxn"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
)

// Central's benchmarks (docs/benchmarks.md, "Central"). Each measures its
// baseline in the same run, interleaved round by round, and reports medians
// with their p10–p90 spread (internal/benchstat).

const (
	// benchClients creates are in flight at once, one per tenant; each
	// tenant's max_vms is its share of a round, so every create passes a
	// quota check that one more would fail.
	benchClients = 16
	// benchRound creates make one round.
	benchRound = 64
	benchNodes = 3
	// benchFleet is the registered fleet of the large case: benchNodes real
	// sim nodes and full nodes registered by one heartbeat each.
	benchFleet = 2000
)

// BenchmarkPlacementThroughAPI measures launches per second through the
// real HTTP API: POST /fleet/vms from benchClients tenants with quotas at
// once, onto real `fluxvm-agent node` processes with the sim driver (whose
// create is a few store writes, so the figure is central's and etcd's, not a
// boot's). One launch is the decision on the watched view, the reservation
// transaction, the node's create and the ledger commit. One op is one round:
// benchRound launches, and as many bare compare-and-put transactions
// (rawtxn.Rate) from benchClients workers on the same etcd, in
// alternating order; the VMs are deleted between rounds, untimed, so the
// quotas free. Sub-benchmarks: 3 nodes with one central and with two
// centrals on one etcd taking turns, then 2,000 registered nodes (the 3 real
// ones and 1,997 full ones registered by a heartbeat each, which the
// scheduler weighs and refuses on every launch). Each reports launches/s,
// txn/s, their ratio (goal ≥ 0.25 at 2,000 nodes) and the latency of one
// launch, as medians of the rounds with p10–p90; the latency ratio of
// 2,000 to 3 nodes (goal ≤ 1.5) is logged at the end. Each also reports the
// CPU a launch costs (this process, which holds the clients, the centrals
// and etcd, and the node agents with their plugins, apart) and the most
// launches per bare transaction the machine's cores allow at that cost.
// Run it with -benchtime Nx (N rounds each).
func BenchmarkPlacementThroughAPI(b *testing.B) {
	stA := fxStore(b, nil)
	stB := fxStore(b, stA.Endpoints())
	a, c := newFxCentral(b, stA), newFxCentral(b, stB)
	images, img := fxImages(b)
	var names []string
	pids := []int{os.Getpid()} // the processes a launch runs in: this one (clients, centrals, etcd) and the nodes
	for i := range benchNodes {
		name := fmt.Sprintf("sim-%d", i+1)
		names = append(names, name)
		n := startFxNode(b, name, []*fxCentral{a, c}[i%2].url, images, 256, 1<<20)
		pids = append(pids, n.cmd.Process.Pid)
	}
	// cpuNow is the CPU spent so far by this process and by the nodes with
	// their driver plugins.
	cpuNow := func() (self, nodes time.Duration) {
		self, err := benchstat.ProcessCPU(os.Getpid())
		if err != nil {
			b.Fatal(err)
		}
		all, err := benchstat.TreeCPU(pids...)
		if err != nil {
			b.Fatal(err)
		}
		return self, all - self
	}
	fxWaitUp(b, a.url, names...)
	fxMust(b, "PUT", a.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchClients}}
	var ca, cb []*sdk.FleetClient // one client per tenant, on central a and b
	for i := range benchClients {
		_, token := fxTenant(b, a.url, fmt.Sprintf("bench-%d", i), map[string]int64{"max_vms": benchRound / benchClients, "max_vcpus": 64, "max_memory_mib": 65536})
		for _, url := range []string{a.url, c.url} {
			fc, err := sdk.NewFleetClient(url, sdk.WithToken(token), sdk.WithHTTPClient(hc))
			if err != nil {
				b.Fatal(err)
			}
			if url == a.url {
				ca = append(ca, fc)
			} else {
				cb = append(cb, fc)
			}
		}
	}
	latency := map[string]float64{} // fleet size -> median launch latency (s)
	var seq atomic.Int64
	run := func(name string, clients func(i int) *sdk.FleetClient) {
		b.Run(name, func(b *testing.B) {
			b.StopTimer()
			ctx := context.Background()
			var launches, txns, ratios, cpuPer, selfPer, nodesPer, cores, bound, selfBound, etcdOnly []float64
			var lat []time.Duration
			for round := range b.N {
				raw := func() {
					r, err := rawtxn.Rate(stA.Client(), benchClients, benchRound, 0)
					if err != nil {
						b.Fatal(err)
					}
					txns = append(txns, r)
				}
				if round%2 == 0 {
					raw()
				}
				created := make([]*sdk.FleetCreateVMResponse, benchRound)
				took := make([]time.Duration, benchRound)
				errs := make([]error, benchRound)
				var wg sync.WaitGroup
				b.StartTimer()
				self0, nodes0 := cpuNow()
				start := time.Now()
				for w := range benchClients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < benchRound; i += benchClients {
							t0 := time.Now()
							created[i], errs[i] = clients(w).CreateVM(ctx, sdk.FleetCreateVMRequest{
								Name: "b-" + strconv.FormatInt(seq.Add(1), 10), Image: "tiny"})
							took[i] = time.Since(t0)
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				self1, nodes1 := cpuNow()
				b.StopTimer()
				launches = append(launches, float64(benchRound)/elapsed.Seconds())
				self, nodes := self1-self0, nodes1-nodes0
				selfPer = append(selfPer, self.Seconds()*1000/benchRound)
				nodesPer = append(nodesPer, nodes.Seconds()*1000/benchRound)
				cpuPer = append(cpuPer, (self+nodes).Seconds()*1000/benchRound)
				cores = append(cores, (self+nodes).Seconds()/elapsed.Seconds())
				lat = append(lat, took...)
				if round%2 == 1 {
					raw()
				}
				ratios = append(ratios, launches[len(launches)-1]/txns[len(txns)-1])
				etcdOnly = append(etcdOnly, launchShapedRate(b, stA)/txns[len(txns)-1])
				// The most launches/s the machine's cores allow at this round's CPU per
				// launch, against the round's bare transactions: all of it, and this
				// process's share alone (as if the nodes cost nothing).
				ncpu := float64(runtime.NumCPU())
				bound = append(bound, ncpu*1000/cpuPer[len(cpuPer)-1]/txns[len(txns)-1])
				selfBound = append(selfBound, ncpu*1000/selfPer[len(selfPer)-1]/txns[len(txns)-1])
				for i := range benchRound {
					if errs[i] != nil {
						b.Fatalf("create: %v", errs[i])
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[i] = clients(i%benchClients).DeleteVM(ctx, created[i].Node, created[i].VM.ID)
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatalf("delete: %v", err)
					}
				}
			}
			ls, ts, rs, ms := benchstat.Of(launches), benchstat.Of(txns), benchstat.Of(ratios), benchstat.Seconds(lat)
			benchstat.Report(b, ls, "launches/s")
			benchstat.Report(b, ts, "txn/s")
			benchstat.Report(b, rs, "launch/txn")
			b.ReportMetric(ms.Median*1000, "latency-ms")
			b.ReportMetric(ms.P90*1000, "latency-p90-ms")
			cs, ss, ns := benchstat.Of(cpuPer), benchstat.Of(selfPer), benchstat.Of(nodesPer)
			co, bs, sb := benchstat.Of(cores), benchstat.Of(bound), benchstat.Of(selfBound)
			benchstat.Report(b, cs, "cpu-ms/launch")
			benchstat.Report(b, ss, "central-cpu-ms/launch")
			benchstat.Report(b, ns, "nodes-cpu-ms/launch")
			benchstat.Report(b, co, "cores")
			benchstat.Report(b, bs, "cpu-bound-launch/txn")
			benchstat.Report(b, sb, "central-cpu-bound-launch/txn")
			eo := benchstat.Of(etcdOnly)
			benchstat.Report(b, eo, "etcd-work-launch/txn")
			b.Logf("launches/s %v; raw txn/s %v; launch/txn %v; latency of one launch %.1f ms (p10–p90 %.1f–%.1f)",
				ls, ts, rs, ms.Median*1000, ms.P10*1000, ms.P90*1000)
			b.Logf("CPU per launch: %v ms, of which this process (clients, centrals, etcd) %v ms and the nodes with their plugins %v ms; "+
				"%v cores busy; at that CPU per launch the machine's %d cores allow at most %v launches per bare transaction, "+
				"and at this process's share alone at most %v", cs, ss, ns, co, runtime.NumCPU(), bs, sb)
			b.Logf("a launch's etcd work alone (launchShape: its reads and transactions, nothing else), from %d workers: "+
				"%v of the bare rate, the most launches per bare transaction any central could reach with that work",
				benchClients, eo)
			latency[name] = ms.Median
		})
	}
	run("nodes=3/1-central", func(i int) *sdk.FleetClient { return ca[i] })
	run("nodes=3/2-centrals", func(i int) *sdk.FleetClient { return []*sdk.FleetClient{ca[i], cb[i]}[i%2] })
	registerFullNodes(b, a.url, benchFleet-benchNodes)
	run("nodes=2000/1-central", func(i int) *sdk.FleetClient { return ca[i] })
	if l3, l2000 := latency["nodes=3/1-central"], latency["nodes=2000/1-central"]; l3 > 0 && l2000 > 0 {
		b.Logf("median launch latency at %d nodes ÷ at %d nodes: %.2f (goal ≤ 1.5)", benchFleet, benchNodes, l2000/l3)
	}
}

// launchShape is one launch's etcd work, as listed key by key while
// developing (docs/benchmarks.md): five reads (the token, its tenant, the
// image, the policy, the warm pools), the reservation (four compares, two
// counters and two leased keys), the ledger commit (five compares; the
// ledger entry, its two running keys and the two counters written, the two
// reservation keys deleted) and the vm.created notification (the event, its
// tenant copy, its outbox key and its once-key).
var launchShape = rawtxn.Shape{Reads: 5, Txns: []rawtxn.TxnShape{
	{Compares: 4, Puts: 4, Leased: 2, ValueBytes: 200},
	{Compares: 5, Puts: 5, Fresh: 3, Deletes: 2, ValueBytes: 300},
	{Compares: 1, Puts: 4, Fresh: 4, ValueBytes: 300},
}}

// launchShapedRate runs benchRound units of launchShape from benchClients
// workers on st's etcd, untimed, and returns units per second.
func launchShapedRate(b *testing.B, st *store.Store) float64 {
	b.Helper()
	r, err := rawtxn.ShapedRate(st.Client(), "/bench/launch-shaped/", benchClients, benchRound, launchShape)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// registerFullNodes registers n nodes through the heartbeat API, each
// reporting all its 64 vCPUs in use by its own VMs, 64 heartbeats at once.
func registerFullNodes(b *testing.B, url string, n int) {
	b.Helper()
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(fxToken), sdk.WithHTTPClient(&http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}))
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	next := make(chan int)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				hb := sdk.Heartbeat{URL: fmt.Sprintf("http://10.%d.%d.1:7777", i/250, i%250), Version: "bench",
					Drivers:  []sdk.HeartbeatDriver{{Name: "sim", Health: "healthy", Simulated: true, GuestOS: []string{"linux"}}},
					Capacity: sdk.Capacity{Total: sdk.Resources{VCPUs: 64, MemoryMiB: 262144}, Free: sdk.Resources{VCPUs: 0, MemoryMiB: 0}}}
				if _, err := fc.Heartbeat(context.Background(), fmt.Sprintf("full-%04d", i), hb); err != nil {
					failed.Add(1)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d registering heartbeats failed", f, n)
	}
}

// BenchmarkLaunchCentralVsNode measures what central adds to a launch: one
// VM at a time on one real `fluxvm-agent node` with the sim driver, created
// through central (POST /fleet/vms by a tenant with quotas: view, reservation,
// node call, ledger commit) and directly through the node API (POST /v1/vms
// with the node's admin token), alternating which goes first, each deleted
// before the next.
// One op is one pair; it reports both latencies and the ratio
// central ÷ node, median of the pairs with p10–p90. Run it with -benchtime Nx.
func BenchmarkLaunchCentralVsNode(b *testing.B) {
	st := fxStore(b, nil)
	c := newFxCentral(b, st)
	images, img := fxImages(b)
	n := startFxNode(b, "sim-1", c.url, images, 64, 262144)
	fxWaitUp(b, c.url, n.name)
	fxMust(b, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(b, c.url, "bench", map[string]int64{"max_vms": 1, "max_vcpus": 1, "max_memory_mib": 64})
	fc, err := sdk.NewFleetClient(c.url, sdk.WithToken(token))
	if err != nil {
		b.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(n.url, sdk.WithToken(n.admin))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var viaCentral, viaNode []time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		central := func() {
			b.StartTimer()
			t0 := time.Now()
			out, err := fc.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: fmt.Sprintf("c-%d", i), Image: "tiny"})
			viaCentral = append(viaCentral, time.Since(t0))
			b.StopTimer()
			if err != nil {
				b.Fatalf("create through central: %v", err)
			}
			if err := fc.DeleteVM(ctx, out.Node, out.VM.ID); err != nil {
				b.Fatal(err)
			}
		}
		node := func() {
			b.StartTimer()
			t0 := time.Now()
			vm, err := nc.CreateVM(ctx, sdk.CreateVMRequest{Name: fmt.Sprintf("n-%d", i), Image: img, VCPUs: 1, MemoryMiB: 64})
			viaNode = append(viaNode, time.Since(t0))
			b.StopTimer()
			if err != nil {
				b.Fatalf("create through the node API: %v", err)
			}
			if err := nc.DeleteVM(ctx, vm.ID); err != nil {
				b.Fatal(err)
			}
		}
		benchstat.Interleave(i, central, node)
	}
	cs, ns, rs := benchstat.Seconds(viaCentral), benchstat.Seconds(viaNode), benchstat.RatiosOfSeconds(viaCentral, viaNode)
	b.ReportMetric(cs.Median*1000, "central-ms")
	b.ReportMetric(cs.P10*1000, "central-ms-p10")
	b.ReportMetric(cs.P90*1000, "central-ms-p90")
	b.ReportMetric(ns.Median*1000, "node-ms")
	b.ReportMetric(ns.P10*1000, "node-ms-p10")
	b.ReportMetric(ns.P90*1000, "node-ms-p90")
	benchstat.Report(b, rs, "central/node")
	b.Logf("one launch through central %.2f ms (p10–p90 %.2f–%.2f), through the node API %.2f ms (p10–p90 %.2f–%.2f); central/node %v",
		cs.Median*1000, cs.P10*1000, cs.P90*1000, ns.Median*1000, ns.P10*1000, ns.P90*1000, rs)
}

// BenchmarkHeartbeat2000Nodes runs a real central (central.Run: embedded
// etcd with fsync, the leader's node checks) and 2,000 simulated nodes, each
// a goroutine posting sdk.Heartbeat with three VMs through the HTTP API every
// 10 s, the nodes spread evenly over the interval (200 heartbeats a second).
// The nodes run in a child process (this test binary again, see init), so
// the CPU this process spends while they beat is central's alone (its
// embedded etcd included) and the load generator's is measured apart. One op
// is one such run of 30 s: its first 10 s are not measured (the first op's
// register the nodes; later ops' nodes, the same names, are known already),
// the next 20 s are. For each run it takes the latency each node sees (p50,
// p99, max) and central's CPU (cores busy on average, milliseconds per
// heartbeat). No baseline: it reports each as the median of the runs with its
// p10–p90, so run it with -benchtime 5x or more.
func BenchmarkHeartbeat2000Nodes(b *testing.B) {
	url := startFxCentral(b, central.Options{HeartbeatInterval: hbInterval})
	measured := time.Duration(hbRounds-1) * hbInterval
	var p50, p99, most, perSec, cores, cpuPer []float64
	b.ResetTimer()
	for i := range b.N {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), hbLoadEnv+"="+url)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		lines := bufio.NewScanner(out)
		var from, centralCPU time.Duration
		var res hbResult
		for lines.Scan() {
			line := lines.Text()
			if line == hbMeasuring {
				from = cpuSelf(b)
				continue
			}
			centralCPU = cpuSelf(b) - from
			if err := json.Unmarshal([]byte(line), &res); err != nil {
				b.Fatalf("load generator said %q: %v", line, err)
			}
		}
		if err := cmd.Wait(); err != nil {
			b.Fatalf("load generator: %v", err)
		}
		loadCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		if res.Failed > 0 || res.Count == 0 {
			b.Fatalf("%d heartbeats failed, %d measured", res.Failed, res.Count)
		}
		p50, p99, most = append(p50, res.P50Ms), append(p99, res.P99Ms), append(most, res.MaxMs)
		perSec = append(perSec, float64(res.Count)/measured.Seconds())
		cores = append(cores, centralCPU.Seconds()/measured.Seconds())
		cpuPer = append(cpuPer, float64(centralCPU.Microseconds())/1000/float64(res.Count))
		b.Logf("round %d: central's CPU while measured %v over %v; the load generator's, all its rounds, %v",
			i+1, centralCPU.Round(time.Millisecond), measured, loadCPU.Round(time.Millisecond))
	}
	b.StopTimer()
	for _, m := range []struct {
		unit string
		xs   []float64
	}{
		{"p50-ms", p50}, {"p99-ms", p99}, {"max-ms", most}, {"heartbeats/s", perSec},
		{"central-cores", cores}, {"central-cpu-ms/heartbeat", cpuPer},
	} {
		s := benchstat.Of(m.xs)
		benchstat.Report(b, s, m.unit)
		b.Logf("%s: %v", m.unit, s)
	}
}

const (
	hbNodes    = 2000
	hbInterval = 10 * time.Second
	hbRounds   = 3 // the first is not measured
	// hbLoadEnv names central's URL for the load generator's process.
	hbLoadEnv = "FLUXVM_BENCH_HEARTBEAT_LOAD"
	// hbMeasuring is the line the load generator prints when its measured rounds begin.
	hbMeasuring = "measuring"
)

// hbResult is what the load generator prints when it ends.
type hbResult struct {
	P50Ms, P99Ms, MaxMs float64
	Count, Failed       int
}

// The load generator of BenchmarkHeartbeat2000Nodes: this test binary,
// started by the benchmark with hbLoadEnv set, runs it and exits before
// any test.
func init() {
	if url := os.Getenv(hbLoadEnv); url != "" {
		os.Exit(heartbeatLoad(url))
	}
}

func heartbeatLoad(url string) int {
	ctx := context.Background()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(fxToken), sdk.WithHTTPClient(hc))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	heartbeat := func(i int) sdk.Heartbeat {
		hb := sdk.Heartbeat{URL: fmt.Sprintf("http://10.%d.%d.1:7777", i/250, i%250), Version: "bench",
			Labels:   map[string]string{"rack": strconv.Itoa(i % 40)},
			Drivers:  []sdk.HeartbeatDriver{{Name: "sim", Health: "healthy", Simulated: true, GuestOS: []string{"linux"}}},
			Capacity: sdk.Capacity{Total: sdk.Resources{VCPUs: 64, MemoryMiB: 262144}, Free: sdk.Resources{VCPUs: 58, MemoryMiB: 255000}}}
		for v := range 3 {
			hb.VMs = append(hb.VMs, sdk.HeartbeatVM{ID: fmt.Sprintf("vm-%d-%d", i, v), Name: fmt.Sprintf("ci-%d", v),
				State: "running", VCPUs: 2, MemoryMiB: 2048, GuestOS: "linux"})
		}
		return hb
	}
	lat := make([][]time.Duration, hbNodes)
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	measuring := time.AfterFunc(hbInterval, func() { fmt.Println(hbMeasuring) })
	defer measuring.Stop()
	for i := range hbNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("node-%04d", i)
			hb := heartbeat(i)
			for r := range hbRounds {
				at := start.Add(time.Duration(r)*hbInterval + time.Duration(i)*hbInterval/hbNodes)
				time.Sleep(time.Until(at))
				t0 := time.Now()
				if _, err := fc.Heartbeat(ctx, name, hb); err != nil {
					failed.Add(1)
					continue
				}
				if r > 0 {
					lat[i] = append(lat[i], time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := hbResult{Count: len(all), Failed: int(failed.Load())}
	if len(all) > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		res.P50Ms, res.P99Ms, res.MaxMs = ms(all[len(all)/2]), ms(all[len(all)*99/100]), ms(all[len(all)-1])
	}
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	return 0
}

// cpuSelf is the CPU time this process has used.
func cpuSelf(b *testing.B) time.Duration {
	d, err := benchstat.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkTenantVMList measures a tenant's GET /fleet/vms, its VMs on one
// of 3 real sim nodes, first with those 3 registered and then with 1,997
// more registered by a heartbeat each (addresses no test may reach: a list
// that asked them would fail), and reports both latencies, each the median
// of the calls with its p10–p90, and the ratio of the medians (2,000 nodes
// ÷ 3; the baseline is the same list on the small fleet, same run). One op
// is 20 lists. The sizes cannot take turns (the large fleet stays
// registered), so every 3-node call comes first. Run it with -benchtime Nx.
func BenchmarkTenantVMList(b *testing.B) {
	st := fxStore(b, nil)
	c := newFxCentral(b, st)
	images, img := fxImages(b)
	var names []string
	for i := range benchNodes {
		name := fmt.Sprintf("list-%d", i+1)
		names = append(names, name)
		startFxNode(b, name, c.url, images, 64, 65536)
	}
	fxWaitUp(b, c.url, names...)
	fxMust(b, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(b, c.url, "lister", nil)
	for i := range 4 {
		fxMust(b, "POST", c.url+"/fleet/vms", token, map[string]any{"name": fmt.Sprintf("l-%d", i), "image": "tiny"}, http.StatusCreated, nil)
	}
	fc, err := sdk.NewFleetClient(c.url, sdk.WithToken(token))
	if err != nil {
		b.Fatal(err)
	}
	measure := func(b *testing.B) []time.Duration {
		var took []time.Duration
		for range b.N {
			for range 20 {
				t0 := time.Now()
				list, err := fc.ListVMs(context.Background())
				took = append(took, time.Since(t0))
				if err != nil || len(list.VMs) != 4 || len(list.UnreachableNodes) != 0 {
					b.Fatalf("the tenant's list = %+v, %v; want its 4 VMs and no unreachable node", list, err)
				}
			}
		}
		return took
	}
	var small, large []time.Duration
	b.Run("nodes=3", func(b *testing.B) {
		small = measure(b)
		benchstat.Report(b, benchstat.Seconds(small).Scaled(1000), "list-ms")
	})
	registerFullNodes(b, c.url, benchFleet-benchNodes)
	b.Run("nodes=2000", func(b *testing.B) {
		large = measure(b)
		s := benchstat.Seconds(large)
		benchstat.Report(b, s.Scaled(1000), "list-ms")
		ratio := s.Median / benchstat.Seconds(small).Median
		b.ReportMetric(ratio, "list-2000/3")
		b.Logf("a tenant's GET /fleet/vms at %d nodes: %v s; at %d: %v s; ratio of the medians %.3g", benchNodes, benchstat.Seconds(small),
			benchFleet, s, ratio)
	})
}
