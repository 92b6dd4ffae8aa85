package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/internal/benchstat"
)

// benchFleet is 2,000 nodes: 1,500 Linux hosts and 500 Macs, 100 of them leased
// by 20 tenants, some cordoned or down, all partly used.
func benchFleet() []Node {
	rng := rand.New(rand.NewPCG(1, 1))
	nodes := make([]Node, 2000)
	for i := range nodes {
		var n Node
		if i%4 == 0 {
			n = mac(fmt.Sprintf("mac-%04d", i))
			if i%20 == 0 {
				n.LeasedBy = fmt.Sprintf("tenant-%02d", i/20%20)
			}
			n.VMs = make([]VMRef, rng.IntN(3))
			for k := range n.VMs {
				n.VMs[k] = VMRef{Tenant: n.LeasedBy, GuestOS: GuestMacOS}
			}
		} else {
			n = host(fmt.Sprintf("linux-%04d", i))
			n.Total = Resources{VCPUs: 64, MemoryMiB: 262144}
		}
		n.Labels = map[string]string{"rack": fmt.Sprintf("r%d", i%8)}
		n.Used.VCPUs = rng.Int64N(n.Total.VCPUs + 1)
		n.Used.MemoryMiB = rng.Int64N(n.Total.MemoryMiB + 1)
		n.Cordoned = i%97 == 0
		n.Up = i%101 != 0
		nodes[i] = n
	}
	return nodes
}

// BenchmarkPlace: one placement decision over 2,000 nodes, with every verdict
// recorded. The "refused" case is the worst: every node builds its reasons.
// The "-short" cases are PlaceShort (the choice and the ten best), the
// "-memo" cases PlaceShortMemo with one node changed between decisions.
// No baseline: it reports decisions/s and the time of one decision as the
// median of the decisions timed one by one, with its p10–p90.
func BenchmarkPlace(b *testing.B) {
	nodes := benchFleet()
	cases := []struct {
		name string
		req  Request
	}{
		{"linux", Request{Tenant: "tenant-03", GuestOS: GuestLinux, VCPUs: 4, MemoryMiB: 8192}},
		{"linux-selector", Request{Tenant: "tenant-03", GuestOS: GuestLinux, VCPUs: 4, MemoryMiB: 8192, NodeSelector: map[string]string{"rack": "r3"}}},
		{"macos-leased", Request{Tenant: "tenant-03", GuestOS: GuestMacOS, VCPUs: 4, MemoryMiB: 8192}},
		{"refused", Request{Tenant: "tenant-03", GuestOS: GuestLinux, VCPUs: 4096, MemoryMiB: 8192}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			took := benchstat.NewSamples()
			for b.Loop() {
				t0 := time.Now()
				_, _ = Place(nodes, tc.req, DefaultPolicy, BinPack)
				took.Add(time.Since(t0))
			}
			reportDecisions(b, took)
		})
	}
	// PlaceShort, as central's watched placement calls it: the choice and
	// the ten best, no words for refusals.
	for _, tc := range cases[:2] {
		b.Run(tc.name+"-short", func(b *testing.B) {
			b.ReportAllocs()
			took := benchstat.NewSamples()
			for b.Loop() {
				t0 := time.Now()
				_, _ = PlaceShort(nodes, tc.req, DefaultPolicy, BinPack, 10)
				took.Add(time.Since(t0))
			}
			reportDecisions(b, took)
		})
	}
	// PlaceShortMemo, as central's view calls it: the list in name order, one
	// node changed (and forgotten) before each decision, the requests of many
	// tenants of one kind.
	sorted := slices.Clone(nodes)
	slices.SortFunc(sorted, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
	for _, tc := range cases[:2] {
		b.Run(tc.name+"-memo", func(b *testing.B) {
			b.ReportAllocs()
			took := benchstat.NewSamples()
			var m Memo
			i := 0
			for b.Loop() {
				k := i % len(sorted)
				sorted[k].Used.VCPUs += int64(1 - 2*(i/len(sorted)%2)) // up one pass, down the next
				m.Forget(k)
				req := tc.req
				req.Tenant = fmt.Sprintf("tenant-%02d", i%20)
				i++
				t0 := time.Now()
				_, _ = PlaceShortMemo(sorted, &m, req, DefaultPolicy, BinPack, 10)
				took.Add(time.Since(t0))
			}
			reportDecisions(b, took)
		})
	}
}

// leaseFleet is 1,000 nodes: 800 Linux hosts and 200 Macs, 100 of the Macs
// leased by 100 tenants (one each, tenant-000 … tenant-099), all partly used;
// a leased Mac runs 0 or 1 of its lessee's macOS guests, so most have a slot free.
func leaseFleet() []Node {
	rng := rand.New(rand.NewPCG(2, 2))
	nodes := make([]Node, 1000)
	for i := range nodes {
		var n Node
		if i%5 == 0 { // 200 Macs
			n = mac(fmt.Sprintf("mac-%04d", i))
			if k := i / 5; k%2 == 0 { // every other Mac: 100 leased
				n.LeasedBy = fmt.Sprintf("tenant-%03d", k/2)
				n.VMs = make([]VMRef, rng.IntN(2))
				for j := range n.VMs {
					n.VMs[j] = VMRef{Tenant: n.LeasedBy, GuestOS: GuestMacOS}
				}
				n.Used.MacOSSlots = int64(len(n.VMs))
			}
		} else {
			n = host(fmt.Sprintf("linux-%04d", i))
			n.Total = Resources{VCPUs: 64, MemoryMiB: 262144}
		}
		n.Labels = map[string]string{"rack": fmt.Sprintf("r%d", i%8)}
		n.Used.VCPUs = rng.Int64N(n.Total.VCPUs/2 + 1)
		n.Used.MemoryMiB = rng.Int64N(n.Total.MemoryMiB/2 + 1)
		nodes[i] = n
	}
	return nodes
}

// BenchmarkPlaceWithLeases: placement decisions per second over 1,000 nodes of
// which 100 are leased to 100 tenants, under DefaultPolicy (macOS only on the
// tenant's leased Mac, leased hosts exclusive). The requests cycle through
// every tenant, three Linux guests for each macOS guest. No baseline: it
// reports as BenchmarkPlace does.
func BenchmarkPlaceWithLeases(b *testing.B) {
	nodes := leaseFleet()
	var reqs []Request
	for k := range 100 {
		tenant := fmt.Sprintf("tenant-%03d", k)
		reqs = append(reqs,
			Request{Tenant: tenant, GuestOS: GuestLinux, VCPUs: 2, MemoryMiB: 4096},
			Request{Tenant: tenant, GuestOS: GuestMacOS, VCPUs: 4, MemoryMiB: 8192},
			Request{Tenant: tenant, GuestOS: GuestLinux, VCPUs: 4, MemoryMiB: 8192},
			Request{Tenant: tenant, GuestOS: GuestLinux, VCPUs: 8, MemoryMiB: 16384},
		)
	}
	// The mix does what the rules say: a tenant's macOS guest lands on the
	// Mac it leases, a Linux guest on an unleased host.
	leased := map[string]string{}
	for _, n := range nodes {
		if n.LeasedBy != "" {
			leased[n.Name] = n.LeasedBy
		}
	}
	placed := map[string]int{}
	for _, req := range reqs {
		d, err := Place(nodes, req, DefaultPolicy, BinPack)
		if err != nil {
			continue // a full Mac refuses by name
		}
		placed[req.GuestOS]++
		lessee, isLeased := leased[d.Node]
		if req.GuestOS == GuestMacOS && lessee != req.Tenant || req.GuestOS == GuestLinux && isLeased {
			b.Fatalf("%s guest of %s placed on %s (leased by %q)", req.GuestOS, req.Tenant, d.Node, lessee)
		}
	}
	if placed[GuestMacOS] == 0 || placed[GuestLinux] != 300 {
		b.Fatalf("placed %v of 100 macOS and 300 Linux guests", placed)
	}
	b.ReportAllocs()
	took := benchstat.NewSamples()
	i := 0
	for b.Loop() {
		t0 := time.Now()
		_, _ = Place(nodes, reqs[i%len(reqs)], DefaultPolicy, BinPack)
		took.Add(time.Since(t0))
		i++
	}
	reportDecisions(b, took)
}

// reportDecisions reports decisions/s over the whole loop and the time of
// one decision (µs/decision: median, p10, p90).
func reportDecisions(b *testing.B, took *benchstat.Samples) {
	b.Helper()
	perSec, one := float64(b.N)/b.Elapsed().Seconds(), took.Seconds().Scaled(1e6)
	b.ReportMetric(perSec, "decisions/s")
	benchstat.Report(b, one, "µs/decision")
	b.Logf("%.0f decisions/s; one decision, µs: %v", perSec, one)
}
