package main

import (
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestFleetNodesWideShowsNetworkPlugins: fleet nodes -o wide has a NETWORKS
// column with the node's network plugins (none: empty).
func TestFleetNodesWideShowsNetworkPlugins(t *testing.T) {
	for _, c := range nodeColumns(time.Now()) {
		if c.name != "networks" {
			continue
		}
		if !c.wide || c.header != "NETWORKS" {
			t.Fatalf("networks column %+v: want a wide NETWORKS column", c)
		}
		if got := c.value(&sdk.FleetNode{Networks: []string{"netns"}}); got != "netns" {
			t.Fatalf("networks = %q; want netns", got)
		}
		if got := c.value(&sdk.FleetNode{}); got != "" {
			t.Fatalf("networks of a node without a plugin = %q; want empty", got)
		}
		return
	}
	t.Fatal("fleet nodes has no networks column")
}
