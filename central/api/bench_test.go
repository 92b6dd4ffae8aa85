package api_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Central's benchmarks (docs/benchmarks.md, "Central"). Each measures its
// baseline in the same run: placements through the API next to bare etcd
// transactions on the same etcd.

const (
	// benchClients is how many creates are in flight at once: one tenant's
	// burst, which is also its max_vms, so every create passes a quota check
	// that the next one would fail.
	benchClients = 16
	benchNodes   = 3
)

// benchEtcd opens a store as central does: with no endpoints an embedded
// etcd that fsyncs (fxStore turns fsync off, which flatters etcd), else a
// peer on those endpoints.
func benchEtcd(b *testing.B, endpoints []string) *store.Store {
	b.Helper()
	opts := store.Options{Endpoints: endpoints, Logger: fxLogger("store")}
	if len(endpoints) == 0 {
		opts.DataDir = filepath.Join(fxTempDir(b), "etcd")
	}
	st, err := store.Open(context.Background(), opts)
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkPlacementThroughAPI measures placements per second through the
// real HTTP API: POST /fleet/vms from one tenant with quotas, benchClients at
// once, onto real `fluxvm-agent node` processes with the sim driver (whose
// create is a few store writes, so the figure is central's and etcd's, not a
// boot's). One op is one placement: scheduler, reservation transaction, the
// node's create, the ledger commit. The VMs are deleted between rounds with
// the timer stopped, so quota frees. Sub-benchmarks: one central, and two
// centrals on one etcd taking turns; each then measures bare put-if-revision
// transactions on the same etcd at the same concurrency for a second and
// reports the ratio. raw-etcd-txn is that baseline as a benchmark of its own.
func BenchmarkPlacementThroughAPI(b *testing.B) {
	stA := benchEtcd(b, nil)
	stB := benchEtcd(b, stA.Endpoints())
	a, c := newFxCentral(b, stA), newFxCentral(b, stB)
	images, img := fxImages(b)
	var names []string
	for i := range benchNodes {
		name := fmt.Sprintf("sim-%d", i+1)
		names = append(names, name)
		startFxNode(b, name, []*fxCentral{a, c}[i%2].url, images, 64, 262144)
	}
	fxWaitUp(b, a.url, names...)
	fxMust(b, "PUT", a.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(b, a.url, "bench", map[string]int64{"max_vms": benchClients, "max_vcpus": 64, "max_memory_mib": 65536})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * benchClients}}
	client := func(url string) *sdk.FleetClient {
		fc, err := sdk.NewFleetClient(url, sdk.WithToken(token), sdk.WithHTTPClient(hc))
		if err != nil {
			b.Fatal(err)
		}
		return fc
	}
	ca, cb := client(a.url), client(c.url)

	b.Run("raw-etcd-txn", func(b *testing.B) {
		start := time.Now()
		rawTxns(b, stA.Client(), benchClients, b.N, 0)
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "txn/s")
	})
	var seq atomic.Int64
	for _, tc := range []struct {
		name    string
		clients []*sdk.FleetClient
	}{
		{"1-central", []*sdk.FleetClient{ca}},
		{"2-centrals", []*sdk.FleetClient{ca, cb}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.StopTimer()
			ctx := context.Background()
			var placing time.Duration
			for done := 0; done < b.N; {
				k := min(benchClients, b.N-done)
				created := make([]*sdk.FleetCreateVMResponse, k)
				errs := make([]error, k)
				var wg sync.WaitGroup
				start := time.Now()
				b.StartTimer()
				for i := range k {
					wg.Add(1)
					go func() {
						defer wg.Done()
						created[i], errs[i] = tc.clients[i%len(tc.clients)].CreateVM(ctx, sdk.FleetCreateVMRequest{
							Name: "b-" + strconv.FormatInt(seq.Add(1), 10), Image: "tiny"})
					}()
				}
				wg.Wait()
				b.StopTimer()
				placing += time.Since(start)
				for i := range k {
					if errs[i] != nil {
						b.Fatalf("create: %v", errs[i])
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						errs[i] = tc.clients[i%len(tc.clients)].DeleteVM(ctx, created[i].Node, created[i].VM.ID)
					}()
				}
				wg.Wait()
				for _, err := range errs {
					if err != nil {
						b.Fatalf("delete: %v", err)
					}
				}
				done += k
			}
			placements := float64(b.N) / placing.Seconds()
			txns := rawTxns(b, stA.Client(), benchClients, 0, time.Second)
			b.ReportMetric(placements, "placements/s")
			b.ReportMetric(txns, "txn/s")
			b.ReportMetric(txns/placements, "txn-per-placement")
		})
	}
}

// rawTxns runs bare etcd transactions from workers goroutines, each on its
// own key: put, if the key's revision is still the one this worker last
// wrote (the shape of every guarded write in central/store). It runs ops
// transactions, or for d when ops is 0, and returns transactions per second.
func rawTxns(b *testing.B, cli *clientv3.Client, workers, ops int, d time.Duration) float64 {
	b.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, workers)
	start := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("/bench/raw/%d", w)
			var rev int64
			for {
				n := next.Add(1)
				if (ops > 0 && n > int64(ops)) || (ops == 0 && time.Since(start) >= d) {
					return
				}
				r, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
					Then(clientv3.OpPut(key, strconv.FormatInt(n, 10))).Else(clientv3.OpGet(key)).Commit()
				if err != nil {
					errs[w] = err
					return
				}
				if r.Succeeded {
					rev = r.Header.Revision
				} else if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
					rev = kvs[0].ModRevision
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			b.Fatalf("raw txn: %v", err)
		}
	}
	done := next.Load() - int64(workers) // each worker's last Add did not run
	return float64(done) / elapsed.Seconds()
}

// BenchmarkHeartbeat2000Nodes runs a real central (central.Run: embedded
// etcd with fsync, the leader's node checks) and 2,000 simulated nodes, each
// a goroutine posting sdk.Heartbeat with three VMs through the HTTP API every
// 10 s, the nodes spread evenly over the interval (200 heartbeats a second).
// The first round registers the nodes and is not measured; the next two
// rounds (20 s) are. It reports the latency each node sees, p50 and p99.
// Every op is one such 30 s run, so run it with -benchtime 1x.
func BenchmarkHeartbeat2000Nodes(b *testing.B) {
	const (
		nodes    = 2000
		interval = 10 * time.Second
		rounds   = 3 // the first is not measured
	)
	ctx := context.Background()
	url := startFxCentral(b, central.Options{HeartbeatInterval: interval})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(fxToken), sdk.WithHTTPClient(hc))
	if err != nil {
		b.Fatal(err)
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

	b.ResetTimer()
	var p50, p99, worst time.Duration
	var rate float64
	for range b.N {
		lat := make([][]time.Duration, nodes)
		var failed atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for i := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("node-%04d", i)
				hb := heartbeat(i)
				for r := range rounds {
					at := start.Add(time.Duration(r)*interval + time.Duration(i)*interval/nodes)
					time.Sleep(time.Until(at))
					t0 := time.Now()
					_, err := fc.Heartbeat(ctx, name, hb)
					if err != nil {
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
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d heartbeats failed", n)
		}
		all := slices.Concat(lat...)
		slices.Sort(all)
		p50, p99, worst = all[len(all)/2], all[len(all)*99/100], all[len(all)-1]
		rate = float64(len(all)) / (time.Duration(rounds-1) * interval).Seconds()
	}
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms")
	b.ReportMetric(rate, "heartbeats/s")
}
