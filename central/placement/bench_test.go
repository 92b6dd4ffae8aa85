package placement

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/rawtxn"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

const (
	// stepClients placements are in flight at once, one per tenant (each
	// with quotas: every placement passes a quota check), and as many workers
	// run the raw etcd baseline.
	stepClients = 16
	// stepOps placements (and as many raw transactions) make one round.
	stepOps = 256
)

// BenchmarkPlacementStep measures the placement step as the API runs it:
// the decision on the watched view plus its reservation transaction
// (PlaceAndReserve), against an embedded etcd with fsync on, at 3, 100, 500
// and 2,000 registered nodes. One op is one round: stepOps placements from
// stepClients tenants at once, and stepOps bare compare-and-put transactions
// (rawtxn.Rate) from as many workers, in alternating order; the
// reservations are released between rounds, untimed. It reports placements
// per second and the ratio to raw transactions per second, each as the median
// of the rounds with its p10–p90 spread (goal at 2,000 nodes: ≥ 0.5).
// Run it with -benchtime Nx (N rounds per fleet size).
func BenchmarkPlacementStep(b *testing.B) {
	ctx := context.Background()
	st := storetest.OpenDurable(b)
	var tenants []string
	for i := range stepClients {
		tn := &store.Tenant{Tenant: sdk.Tenant{Name: fmt.Sprintf("bench-%d", i), Quota: sdk.Quotas{MaxVMs: 10 * stepOps, MaxVCPUs: 10 * stepOps}},
			TokenSHA256: store.HashToken(fmt.Sprintf("fvt_bench-%d", i))}
		if err := st.CreateTenant(ctx, tn); err != nil {
			b.Fatal(err)
		}
		tenants = append(tenants, tn.ID)
	}
	pol := store.DefaultPolicy()
	registered := 0
	for _, size := range []int{3, 100, 500, 2000} {
		registerNodes(b, st, registered, size)
		registered = size
		b.Run(fmt.Sprintf("nodes=%d", size), func(b *testing.B) {
			p := New(st)
			if _, _, err := p.Snapshot(ctx); err != nil { // loads the view
				b.Fatal(err)
			}
			var placed, raw, ratio, shaped []float64
			var decide []time.Duration
			b.ResetTimer()
			for round := range b.N {
				measureRaw := func() {
					r, err := rawtxn.Rate(st.Client(), stepClients, stepOps, 0)
					if err != nil {
						b.Fatal(err)
					}
					raw = append(raw, r)
				}
				if round%2 == 0 {
					measureRaw()
				}
				rate, held := placeBurst(b, p, tenants, pol)
				placed = append(placed, rate)
				if round%2 == 1 {
					measureRaw()
				}
				ratio = append(ratio, rate/raw[len(raw)-1])
				b.StopTimer()
				shaped = append(shaped, reserveShapedTxns(b, st))
				releaseAll(b, st, held)
				// The decision alone, on this view, for reference.
				t0 := time.Now()
				if _, _, err := p.v.decide(scheduler.Request{Tenant: tenants[0], GuestOS: store.GuestLinux, VCPUs: 1, MemoryMiB: 256},
					SchedulerPolicy(pol), nil, nil); err != nil {
					b.Fatal(err)
				}
				decide = append(decide, time.Since(t0))
				b.StartTimer()
			}
			b.StopTimer()
			pl, rw, rt, dc := benchstat.Of(placed), benchstat.Of(raw), benchstat.Of(ratio), benchstat.Seconds(decide)
			benchstat.Report(b, pl, "placements/s")
			benchstat.Report(b, rw, "txn/s")
			benchstat.Report(b, rt, "placement/txn")
			b.ReportMetric(dc.Median*1000, "decide-ms")
			sh := benchstat.Of(shaped)
			benchstat.Report(b, sh, "reserve-shaped-txn/s")
			b.Logf("%d nodes: placements/s %v; raw txn/s %v; placement/txn %v (goal at 2,000 nodes ≥ 0.5); decision alone %.3f ms; bare transactions of a reservation's shape %v txn/s",
				size, pl, rw, rt, dc.Median*1000, sh)
		})
	}
}

// reserveShape is a reservation from the view as etcd sees it: four compares,
// two counters rewritten and two leased keys written.
var reserveShape = rawtxn.Shape{Txns: []rawtxn.TxnShape{{Compares: 4, Puts: 4, Leased: 2, ValueBytes: 200}}}

// reserveShapedTxns runs stepOps bare etcd transactions of a reservation's
// shape, stepClients at once, each on keys of its own, and returns
// transactions per second: what etcd alone gives for that shape, untimed by
// the benchmark and reported for reference.
func reserveShapedTxns(b *testing.B, st *store.Store) float64 {
	b.Helper()
	r, err := rawtxn.ShapedRate(st.Client(), "/bench/shaped/", stepClients, stepOps, reserveShape)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// registerNodes writes node records from-1 .. to-1 (128 vCPUs, 512 GiB each: 3 take a round),
// 32 at a time.
func registerNodes(b *testing.B, st *store.Store, from, to int) {
	b.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				n := &store.Node{FleetNode: sdk.FleetNode{Name: fmt.Sprintf("node-%04d", i), URL: fmt.Sprintf("http://10.%d.%d.1:7777", i/250, i%250),
					State: store.NodeUp, GuestOS: []string{store.GuestLinux}, Drivers: []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}},
					Labels:        map[string]string{"rack": fmt.Sprint(i % 40)},
					Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 128, MemoryMiB: 524288}, Free: sdk.Resources{VCPUs: 128, MemoryMiB: 524288}},
					LastHeartbeat: time.Now().UTC()}}
				if err := st.PutNode(ctx, n); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatalf("register nodes: %v", err)
	default:
	}
}

// placeBurst runs stepOps placements, stepClients at once (client i for
// tenant i), and returns placements per second and the reservations made.
func placeBurst(b *testing.B, p *Placer, tenants []string, pol sdk.Policy) (float64, []*store.Reservation) {
	b.Helper()
	ctx := context.Background()
	held := make([][]*store.Reservation, len(tenants))
	errs := make([]error, len(tenants))
	var wg sync.WaitGroup
	start := time.Now()
	for c := range tenants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; i < stepOps; i += len(tenants) {
				_, _, res, err := p.PlaceAndReserve(ctx, scheduler.Request{Tenant: tenants[c], GuestOS: store.GuestLinux, VCPUs: 1, MemoryMiB: 256},
					pol, store.ReserveRequest{Tenant: tenants[c], VCPUs: 1, MemoryMiB: 256}, nil)
				if err != nil {
					errs[c] = err
					return
				}
				held[c] = append(held[c], res)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var all []*store.Reservation
	for c := range tenants {
		if errs[c] != nil {
			b.Fatalf("placement: %v", errs[c])
		}
		all = append(all, held[c]...)
	}
	return float64(len(all)) / elapsed.Seconds(), all
}

func releaseAll(b *testing.B, st *store.Store, rs []*store.Reservation) {
	b.Helper()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, r := range rs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := st.Release(context.Background(), r); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
}
