package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
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
			for b.Loop() {
				_, _ = Place(nodes, tc.req, DefaultPolicy, BinPack)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
