package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store/rawtxn"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// burst runs n concurrent Reserves, spread round-robin over the stores, and sorts the outcomes.
func burst(t *testing.T, stores []*Store, n int, req ReserveRequest) (ok []*Reservation, refused map[string]int) {
	t.Helper()
	ctx := testCtx(t)
	var mu sync.Mutex
	refused = map[string]int{}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(s *Store) {
			defer wg.Done()
			<-start
			res, err := s.Reserve(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			var qe *QuotaError
			var ce *CapacityError
			switch {
			case err == nil:
				ok = append(ok, res)
			case errors.As(err, &qe) && errors.Is(err, ErrQuota):
				refused[qe.Field]++
			case errors.As(err, &ce) && errors.Is(err, ErrNoCapacity):
				refused[ce.Resource]++
			default:
				refused["other: "+err.Error()]++
			}
		}(stores[i%len(stores)])
	}
	close(start)
	wg.Wait()
	return ok, refused
}

func TestReserveNeverOvershootsUnderConcurrentBursts(t *testing.T) {
	cases := []struct {
		name    string
		quotas  sdk.Quotas
		node    [3]int64 // vcpus, memory, macOS slots
		req     ReserveRequest
		refusal string
	}{
		{"max_vms", sdk.Quotas{MaxVMs: 10}, [3]int64{1000, 1 << 30, 0}, ReserveRequest{VCPUs: 1, MemoryMiB: 512}, "max_vms"},
		{"max_vcpus", sdk.Quotas{MaxVCPUs: 40}, [3]int64{1000, 1 << 30, 0}, ReserveRequest{VCPUs: 4, MemoryMiB: 512}, "max_vcpus"},
		{"max_memory_mib", sdk.Quotas{MaxMemoryMiB: 81920}, [3]int64{1000, 1 << 30, 0}, ReserveRequest{VCPUs: 1, MemoryMiB: 8192}, "max_memory_mib"},
		{"node vcpus, unlimited tenant", sdk.Quotas{}, [3]int64{20, 1 << 30, 0}, ReserveRequest{VCPUs: 2, MemoryMiB: 512}, "vcpus"},
		{"node memory, operator", sdk.Quotas{}, [3]int64{1000, 10240, 0}, ReserveRequest{VCPUs: 1, MemoryMiB: 1024}, "memory_mib"},
		{"node macOS slots", sdk.Quotas{}, [3]int64{1000, 1 << 30, 10}, ReserveRequest{VCPUs: 1, MemoryMiB: 512, MacOS: true}, "macos_slots"},
	}
	// "without local queue" turns off the in-process queue (locks.go) so that all 200
	// goroutines race through etcd transactions alone, as 200 centrals would.
	for _, setup := range []string{"1 central", "2 centrals", "3 centrals without local queue"} {
		for _, c := range cases {
			if setup == "3 centrals without local queue" && c.name != "max_vms" && c.name != "node vcpus, unlimited tenant" {
				continue // slow (every lost race is a raft round); two cases make the point
			}
			t.Run(setup+"/"+c.name, func(t *testing.T) {
				host := openEmbedded(t, Options{})
				stores := []*Store{host}
				for len(stores) < int(setup[0]-'0') {
					stores = append(stores, openPeer(t, host, Options{}))
				}
				if setup == "3 centrals without local queue" {
					for _, s := range stores {
						s.locks.disabled = true
						s.retries = 50 // 200 racers: a loser may see every one of the 10 winners and more
					}
				}
				testNode(t, host, "n1", c.node[0], c.node[1], c.node[2])
				req := c.req
				req.Node = "n1"
				if c.name != "node memory, operator" {
					tn := testTenant(t, host, "acme", c.quotas)
					req.Tenant, req.Quotas = tn.ID, &tn.Quota
				}
				start := time.Now()
				ok, refused := burst(t, stores, 200, req)
				t.Logf("200 concurrent reserves in %v: %d ok, refused %v", time.Since(start), len(ok), refused)
				if len(ok) != 10 || refused[c.refusal] != 190 {
					t.Fatalf("%d reserved, refusals %v; want exactly 10 and 190 %s", len(ok), refused, c.refusal)
				}
				rs, err := host.ListReservations(testCtx(t))
				if err != nil || len(rs) != 10 {
					t.Errorf("live reservations = %d, %v; want 10", len(rs), err)
				}
				nu, _ := host.NodeUsage(testCtx(t), "n1")
				if nu.Reserved.VMs != 10 || nu.Running.VMs != 0 {
					t.Errorf("node usage = %+v; want 10 reserved, 0 running", nu)
				}
			})
		}
	}
}

func TestReserveReadsTheTenantWhenNoQuotasAreGiven(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 100, 1<<20, 0)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 10})
	ok, refused := burst(t, []*Store{s}, 50, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 1, MemoryMiB: 1})
	if len(ok) != 10 || refused["max_vms"] != 40 {
		t.Errorf("%d reserved, refused %v; want 10 and 40 max_vms", len(ok), refused)
	}
	// Raising the quota is seen by the very next reserve; disabling refuses at once.
	if _, err := s.UpdateTenant(ctx, tn.ID, func(t *Tenant) error { t.Quota.MaxVMs = 11; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 1, MemoryMiB: 1}); err != nil {
		t.Errorf("reserve after raising the quota: %v", err)
	}
	if _, err := s.UpdateTenant(ctx, tn.ID, func(t *Tenant) error { t.Disabled = true; t.Quota.MaxVMs = 0; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 1, MemoryMiB: 1}); err == nil {
		t.Error("disabled tenant reserved")
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Tenant: "t-nobody", Node: "n1", VCPUs: 1, MemoryMiB: 1}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown tenant: %v, want ErrNotFound", err)
	}
}

func TestReserveRefusesUnschedulableAndMissingNodes(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 100, 1<<20, 2)
	req := ReserveRequest{Node: "n1", VCPUs: 1, MemoryMiB: 1}
	for _, c := range []struct {
		name string
		set  func(*Node)
	}{
		{"down", func(n *Node) { n.State = NodeDown }},
		{"cordoned", func(n *Node) { n.Cordoned = true }},
		{"draining", func(n *Node) { n.Draining = true }},
		{"scrub pending", func(n *Node) { n.ScrubPending = true }},
	} {
		if _, err := s.UpdateNode(ctx, "n1", false, func(n *Node) error {
			*n = Node{FleetNode: sdk.FleetNode{Name: n.Name, State: NodeUp, Capacity: n.Capacity}}
			c.set(n)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var ce *CapacityError
		if _, err := s.Reserve(ctx, req); !errors.As(err, &ce) || ce.Resource != "state" {
			t.Errorf("%s node: %v; want a state CapacityError", c.name, err)
		}
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Node: "ghost", VCPUs: 1, MemoryMiB: 1}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing node: %v, want ErrNotFound", err)
	}
	if _, err := s.Reserve(ctx, ReserveRequest{Node: "n1", VCPUs: 0, MemoryMiB: 1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("0 vCPUs: %v, want ErrInvalid", err)
	}
}

func TestDeadCentralsReservationsExpireAndFreeTheQuota(t *testing.T) {
	ctx := testCtx(t)
	host := openEmbedded(t, Options{})
	dying := openPeer(t, host, Options{SessionTTL: 2})
	survivor := openPeer(t, host, Options{})
	testNode(t, host, "n1", 100, 1<<20, 0)
	tn := testTenant(t, host, "acme", sdk.Quotas{MaxVMs: 10})
	req := ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 1, MemoryMiB: 1}

	// The survivor holds 4, the dying central 6: the tenant is full.
	for i := 0; i < 4; i++ {
		if _, err := survivor.Reserve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	ok, _ := burst(t, []*Store{dying}, 20, req)
	if len(ok) != 6 {
		t.Fatalf("dying central reserved %d, want 6", len(ok))
	}
	if _, err := survivor.Reserve(ctx, req); !errors.Is(err, ErrQuota) {
		t.Fatalf("reserve on a full tenant: %v, want ErrQuota", err)
	}

	killAbruptly(dying)
	died := time.Now()
	var freedAfter time.Duration
	for {
		if _, err := survivor.Reserve(ctx, req); err == nil {
			freedAfter = time.Since(died)
			break
		} else if !errors.Is(err, ErrQuota) {
			t.Fatalf("reserve while waiting for the lease: %v", err)
		}
		if time.Since(died) > 15*time.Second {
			t.Fatal("the dead central's reservations are still there after 15 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("quota freed %v after the central died (TTL 2 s)", freedAfter)
	// All 6 came back, not just one; the survivor's own 4 (+1) are untouched.
	ok, refused := burst(t, []*Store{survivor}, 20, req)
	if len(ok) != 5 || refused["max_vms"] != 15 {
		t.Errorf("after expiry %d more reserved (refused %v); want 5", len(ok), refused)
	}
	u, _ := survivor.TenantUsage(ctx, tn.ID)
	if u.Reserved.VMs != 10 || u.Running.VMs != 0 {
		t.Errorf("usage after expiry = %+v; want 10 reserved", u)
	}
	// The dead central never touched a counter: nothing to repair.
	if rep, err := survivor.Recount(ctx); err != nil || len(rep.Fixed) != 0 {
		t.Errorf("recount after a central died = %+v, %v; want nothing to fix", rep, err)
	}
	// A Close (an orderly shutdown) revokes at once instead of waiting for the TTL.
	survivor.Close()
	if u, _ := host.TenantUsage(ctx, tn.ID); u.Reserved.VMs != 0 {
		t.Errorf("reservations after an orderly close = %+v; want none", u.Reserved)
	}
}

func TestCountersStayExactThroughRandomConcurrentOps(t *testing.T) {
	ctx := testCtx(t)
	host := openEmbedded(t, Options{})
	stores := []*Store{host, openPeer(t, host, Options{})}
	nodes := []string{"n1", "n2", "n3"}
	for _, n := range append(nodes, "n-adopt") {
		testNode(t, host, n, 64, 1<<20, 2)
	}
	tenants := []string{""} // the operator
	for _, name := range []string{"acme", "globex", "initech"} {
		tenants = append(tenants, testTenant(t, host, name, sdk.Quotas{MaxVMs: 12, MaxVCPUs: 40}).ID)
	}

	var mu sync.Mutex
	var reserved []*Reservation
	var running []string
	var ops atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			s := stores[w%len(stores)]
			pop := func(list *[]*Reservation) *Reservation {
				mu.Lock()
				defer mu.Unlock()
				if len(*list) == 0 {
					return nil
				}
				i := rng.IntN(len(*list))
				r := (*list)[i]
				*list = append((*list)[:i], (*list)[i+1:]...)
				return r
			}
			for i := 0; i < 150; i++ {
				ops.Add(1)
				switch op := rng.IntN(10); {
				case op < 4:
					res, err := s.Reserve(ctx, ReserveRequest{Tenant: tenants[rng.IntN(len(tenants))], Node: nodes[rng.IntN(len(nodes))],
						VCPUs: 1 + rng.Int64N(4), MemoryMiB: 256 * (1 + rng.Int64N(8)), MacOS: rng.IntN(5) == 0})
					if err == nil {
						mu.Lock()
						reserved = append(reserved, res)
						mu.Unlock()
					} else if !errors.Is(err, ErrQuota) && !errors.Is(err, ErrNoCapacity) && !errors.Is(err, ErrNotFound) {
						t.Errorf("reserve: %v", err)
					}
				case op < 7:
					if res := pop(&reserved); res != nil {
						e, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-" + res.ID, Name: "vm"})
						if err != nil {
							t.Errorf("commit: %v", err)
							continue
						}
						mu.Lock()
						running = append(running, e.ID)
						mu.Unlock()
					}
				case op < 8:
					if res := pop(&reserved); res != nil {
						if err := s.Release(ctx, res); err != nil {
							t.Errorf("release: %v", err)
						}
					}
				case op < 9:
					mu.Lock()
					var id string
					if len(running) > 0 {
						j := rng.IntN(len(running))
						id = running[j]
						running = append(running[:j], running[j+1:]...)
					}
					mu.Unlock()
					if id != "" {
						if _, err := s.EndEntry(ctx, id, "deleted", time.Now()); err != nil {
							t.Errorf("end: %v", err)
						}
					}
				default:
					// Adoption checks no quota (the VM exists), so it goes to a node reserves do
					// not use and to the operator, keeping the over-quota checks below meaningful.
					if _, err := s.RecordEntry(ctx, LedgerEntry{Node: "n-adopt",
						VMID: fmt.Sprintf("adopted-%d-%d", w, i), Name: "adopted", VCPUs: 1, MemoryMiB: 128}); err != nil {
						t.Errorf("record: %v", err)
					}
				}
			}
		}(w)
	}
	wg.Wait()

	rep, err := host.Recount(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d random ops; %d running entries; recount fixed %v", ops.Load(), rep.Running, rep.Fixed)
	if len(rep.Fixed) != 0 {
		t.Errorf("counters drifted from the ledger: %+v", rep.Fixed)
	}
	if rep.Running == 0 {
		t.Error("no entry ran: the test proved nothing")
	}
	// The counters also agree with the running index, and with what reserve sees.
	for _, tn := range tenants[1:] {
		es, _ := host.RunningForTenant(ctx, tn)
		var sum Usage
		for i := range es {
			sum = sum.Add(es[i].usage())
		}
		u, _ := host.TenantUsage(ctx, tn)
		if u.Running != sum {
			t.Errorf("tenant %s counter %+v, running index sums to %+v", tn, u.Running, sum)
		}
		if u.Total().VMs > 12 || u.Total().VCPUs > 40 {
			t.Errorf("tenant %s over quota: %+v", tn, u.Total())
		}
	}
	for _, n := range nodes {
		u, _ := host.NodeUsage(ctx, n)
		if u.Total().VCPUs > 64 || u.Total().MacOS > 2 {
			t.Errorf("node %s over capacity: %+v", n, u.Total())
		}
	}

	// Recount is not a rubber stamp: a counter edited behind the store's back is found and fixed.
	key := host.usageNodeKey("n1")
	if _, err := host.client.Put(ctx, key, mustJSON(counter{Usage: Usage{VMs: 999}})); err != nil {
		t.Fatal(err)
	}
	rep, err = host.Recount(ctx)
	if err != nil || len(rep.Fixed) != 1 || rep.Fixed[0].Name != "n1" || rep.Fixed[0].Was.VMs != 999 {
		t.Fatalf("recount after corrupting n1 = %+v, %v; want n1 fixed", rep, err)
	}
	if rep, _ = host.Recount(ctx); len(rep.Fixed) != 0 {
		t.Errorf("second recount still fixes %+v", rep.Fixed)
	}
}

// ---- benchmark: reservations next to bare etcd transactions ----

const (
	// reserveWorkers goroutines run at once, for the reservations and for the
	// baseline alike.
	reserveWorkers = 8
	// reserveRoundOps reservations (and as many bare transactions) make one round.
	reserveRoundOps = 256
)

// BenchmarkReserveVsRawTxn measures Reserve as placement runs it without a
// watched view (and the pools and snapshots always): one read transaction and
// one compare-and-write transaction (more on a lost race), each followed by a
// Release (one write) so that the reservation prefixes stay small; against
// bare compare-and-put transactions, each worker on a key of its own, the
// floor every guarded write in this package pays. Both run on an embedded
// etcd with fsync on, from reserveWorkers goroutines. One op is one round:
// reserveRoundOps reservations and reserveRoundOps bare transactions,
// alternating which goes first. Sub-benchmarks: one central, or two on the
// same etcd with the workers spread over them; a tenant and a node for each
// worker (tenant-each), one tenant for all (one-tenant: that tenant's usage
// is contended) or one node for all (one-node: that node's usage is). It
// reports reserves/s, txn/s and their ratio, each as the median of the
// rounds with its p10–p90, and how many reservations gave up after losing
// every race (ErrConflict). Run it with -benchtime Nx (N rounds each).
func BenchmarkReserveVsRawTxn(b *testing.B) {
	for _, centrals := range []int{1, 2} {
		for _, mode := range []string{"tenant-each", "one-tenant", "one-node"} {
			b.Run(fmt.Sprintf("centrals=%d/%s", centrals, mode), func(b *testing.B) {
				host := openEmbedded(b, Options{})
				stores := []*Store{host}
				if centrals == 2 {
					stores = append(stores, openPeer(b, host, Options{}))
				}
				tenants, nodes := make([]string, reserveWorkers), make([]string, reserveWorkers)
				shared := testTenant(b, host, "shared", sdk.Quotas{}).ID
				for w := range reserveWorkers {
					testNode(b, host, fmt.Sprintf("n%d", w), 1<<20, 1<<30, 0)
					tenants[w], nodes[w] = testTenant(b, host, fmt.Sprintf("bench-%d", w), sdk.Quotas{}).ID, fmt.Sprintf("n%d", w)
					switch mode {
					case "one-tenant":
						tenants[w] = shared
					case "one-node":
						nodes[w] = "n0"
					}
				}
				var reserves, txns []float64
				var gaveUp int64
				b.ResetTimer()
				for round := range b.N {
					benchstat.Interleave(round,
						func() {
							r, g := reserveRound(b, stores, tenants, nodes)
							reserves, gaveUp = append(reserves, r), gaveUp+g
						},
						func() {
							r, err := rawtxn.Rate(host.client, reserveWorkers, reserveRoundOps, 0)
							if err != nil {
								b.Fatal(err)
							}
							txns = append(txns, r)
						})
				}
				b.StopTimer()
				rs, ts, ratio := benchstat.Of(reserves), benchstat.Of(txns), benchstat.Ratios(reserves, txns)
				benchstat.Report(b, rs, "reserves/s")
				benchstat.Report(b, ts, "txn/s")
				benchstat.Report(b, ratio, "reserve/txn")
				b.ReportMetric(float64(gaveUp), "gave-up")
				b.Logf("reserve+release/s %v; bare compare-put txn/s %v; reserve/txn round by round %v; %d reservations gave up",
					rs, ts, ratio, gaveUp)
			})
		}
	}
}

// reserveRound runs reserveRoundOps Reserve+Release pairs from reserveWorkers
// goroutines (worker w for tenants[w] on nodes[w], through the stores in turn)
// and returns the reservations made per second and how many gave up.
func reserveRound(b *testing.B, stores []*Store, tenants, nodes []string) (perSec float64, gaveUp int64) {
	b.Helper()
	ctx := testCtx(b)
	var next, done, conflicts atomic.Int64
	errs := make([]error, reserveWorkers)
	var wg sync.WaitGroup
	start := time.Now()
	for w := range reserveWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[w%len(stores)]
			for next.Add(1) <= reserveRoundOps {
				res, err := s.Reserve(ctx, ReserveRequest{Tenant: tenants[w], Node: nodes[w], VCPUs: 1, MemoryMiB: 1, Quotas: &sdk.Quotas{}})
				if errors.Is(err, ErrConflict) {
					conflicts.Add(1)
					continue
				}
				if err == nil {
					err = s.Release(ctx, res)
				}
				if err != nil {
					errs[w] = err
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		b.Fatal(err)
	}
	return float64(done.Load()) / elapsed.Seconds(), conflicts.Load()
}

func TestCommitAfterTheLeaseWasLostRecordsTheVMAndReserveGetsANewLease(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 8, 8192, 0)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 1})
	res, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	// The lease goes as if this central had stalled past its TTL.
	if _, err := s.client.Revoke(ctx, clientv3.LeaseID(res.Lease)); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.TenantUsage(ctx, tn.ID); u.Reserved.VMs != 0 {
		t.Fatalf("reservation survived its lease: %+v", u)
	}
	// Reserving right away meets "lease not found" and moves to a new session.
	op, err := s.Reserve(ctx, ReserveRequest{Node: "n1", VCPUs: 1, MemoryMiB: 1})
	if err != nil {
		t.Fatalf("reserve right after the lease was lost: %v", err)
	}
	if op.Lease == res.Lease {
		t.Error("reserve used the revoked lease")
	}
	if err := s.Release(ctx, op); err != nil {
		t.Fatal(err)
	}
	// The VM exists on the node, so the commit records it all the same.
	if _, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-1", Name: "late"}); err != nil {
		t.Fatalf("commit after the lease was lost: %v", err)
	}
	if u, _ := s.TenantUsage(ctx, tn.ID); u.Running.VMs != 1 || u.Running.VCPUs != 2 {
		t.Errorf("usage after a late commit = %+v; want the VM counted", u)
	}
	// The next reserve works on a fresh lease (after ending the VM to make room).
	if _, err := s.EndEntry(ctx, EntryID("n1", "vm-1"), "deleted", time.Now()); err != nil {
		t.Fatal(err)
	}
	res2, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatalf("reserve after the lease was lost: %v", err)
	}
	if res2.Lease != op.Lease {
		t.Error("reserve did not keep using the new session")
	}
	if rep, err := s.Recount(ctx); err != nil || len(rep.Fixed) != 0 {
		t.Errorf("recount = %+v, %v; want nothing to fix", rep, err)
	}
}

// txnCounter counts the transactions a store sends: reads (no compare) and
// guarded writes.
type txnCounter struct {
	clientv3.KV
	reads, writes atomic.Int64
}

func (c *txnCounter) Txn(ctx context.Context) clientv3.Txn {
	return &countedTxn{Txn: c.KV.Txn(ctx), c: c}
}

type countedTxn struct {
	clientv3.Txn
	c       *txnCounter
	guarded bool
}

func (t *countedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	t.guarded = t.guarded || len(cs) > 0
	t.Txn = t.Txn.If(cs...)
	return t
}
func (t *countedTxn) Then(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(ops...); return t }
func (t *countedTxn) Else(ops ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(ops...); return t }
func (t *countedTxn) Commit() (*clientv3.TxnResponse, error) {
	if t.guarded {
		t.c.writes.Add(1)
	} else {
		t.c.reads.Add(1)
	}
	return t.Txn.Commit()
}

// TestCommitWritesOnTheCountersThisProcessLastWrote: a commit right after its
// reservation writes without reading first (the counters are as the
// reservation wrote them, which the compare proves); when another central
// wrote a counter in between, the compare is lost and the commit reads and
// writes again; either way the counters stay exact.
func TestCommitWritesOnTheCountersThisProcessLastWrote(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	other := openPeer(t, s, Options{})
	testNode(t, s, "n1", 16, 16384, 0)
	tn := testTenant(t, s, "acme", sdk.Quotas{MaxVMs: 10})
	counted := &txnCounter{KV: s.client.KV}
	s.client.KV = counted

	res, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	counted.reads.Store(0)
	counted.writes.Store(0)
	if _, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-1", Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if r, w := counted.reads.Load(), counted.writes.Load(); r != 0 || w != 1 {
		t.Errorf("a commit after its reservation: %d reads and %d writes; want one write and no read", r, w)
	}

	// Another central takes room on the same node between this one's reservation
	// and its commit: the node's counter moved, so the first write loses.
	res2, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "n1", VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Reserve(ctx, ReserveRequest{Node: "n1", VCPUs: 1, MemoryMiB: 512}); err != nil {
		t.Fatal(err)
	}
	counted.reads.Store(0)
	counted.writes.Store(0)
	if _, err := s.Commit(ctx, res2, LedgerEntry{VMID: "vm-2", Name: "b"}); err != nil {
		t.Fatal(err)
	}
	if r, w := counted.reads.Load(), counted.writes.Load(); r != 0 || w != 2 {
		t.Errorf("a commit after another central's write: %d reads and %d writes; want the lost write and one more (its Else read)", r, w)
	}
	nu, err := s.NodeUsage(ctx, "n1")
	if err != nil || nu.Running.VCPUs != 3 || nu.Running.VMs != 2 || nu.Reserved.VCPUs != 1 {
		t.Errorf("node usage = %+v, %v; want the two VMs running (3 vCPUs) and the other central's 1 reserved", nu, err)
	}
	if rep, err := s.Recount(ctx); err != nil || len(rep.Fixed) != 0 {
		t.Errorf("recount = %+v, %v; want nothing to fix", rep, err)
	}
}
