package scheduler

import (
	"errors"
	"slices"
	"testing"
)

// TestTenantNetworkNeedsANetworkPlugin: a VM in its tenant's network goes
// only to a node with a network plugin up, and every other node says why.
func TestTenantNetworkNeedsANetworkPlugin(t *testing.T) {
	withNet := func(n *Node) { n.Networks = []string{"netns"} }
	nodes := []Node{host("a"), host("b", withNet), host("c")}
	req := Request{Tenant: "acme", VCPUs: 1, MemoryMiB: 256, TenantNetwork: true}
	d, err := Place(nodes, req, DefaultPolicy, BinPack)
	if err != nil || d.Node != "b" {
		t.Fatalf("Place = %+v, %v; want node b, the only one with a network plugin", d, err)
	}
	for _, v := range d.Considered {
		if v.Node != "b" && (v.Fits || !slices.Contains(v.Reasons, "no tenant network plugin")) {
			t.Errorf("verdict %+v: want refused with %q", v, "no tenant network plugin")
		}
	}
	// Without the flag every node fits, as before.
	req.TenantNetwork = false
	if d, err := Place(nodes, req, DefaultPolicy, BinPack); err != nil || d.Node != "a" {
		t.Fatalf("Place without tenant network = %+v, %v; want node a", d, err)
	}

	// No node has one: the summary says so.
	req.TenantNetwork = true
	_, err = Place([]Node{host("a"), host("c")}, req, DefaultPolicy, BinPack)
	var np *NoPlacementError
	if !errors.As(err, &np) || np.Summary != "no node can take 1 vCPU / 256 MiB for linux: 2 nodes have no tenant network plugin" {
		t.Fatalf("err = %v; want the nodes without a network plugin counted", err)
	}
	req.Node = "a"
	_, err = Place([]Node{host("a"), host("c")}, req, DefaultPolicy, BinPack)
	if !errors.As(err, &np) || np.Summary != "node a cannot take 1 vCPU / 256 MiB for linux: no tenant network plugin" {
		t.Fatalf("pinned err = %v; want node a named with the reason", err)
	}
}
