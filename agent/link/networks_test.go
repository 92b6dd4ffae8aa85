package link

import (
	"slices"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestSnapshotReportsNetworkPluginsThatAreUp: the heartbeat names the
// network plugins that are up, and only those (central places tenant-network
// VMs by it).
func TestSnapshotReportsNetworkPluginsThatAreUp(t *testing.T) {
	h := &sdk.NodeHealth{Networks: []sdk.NetworkHealth{{Name: "netns", Health: "up"}, {Name: "other", Health: "down"}}}
	if hb := Snapshot("http://n:7777", h, nil, false, nil); !slices.Equal(hb.Networks, []string{"netns"}) {
		t.Fatalf("networks = %v; want [netns]", hb.Networks)
	}
	if hb := Snapshot("http://n:7777", &sdk.NodeHealth{}, nil, false, nil); hb.Networks != nil {
		t.Fatalf("networks = %v; want none", hb.Networks)
	}
}
