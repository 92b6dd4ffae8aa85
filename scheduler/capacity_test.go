package scheduler

import (
	"reflect"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

func capacityFleet() []Node {
	return []Node{
		host("shared-1", used(8, 16384)),
		host("shared-2", func(n *Node) { n.Cordoned = true }),
		mac("acme-mac", leasedBy("acme"), used(6, 32768), macGuests("acme", 1)),
		mac("bob-mac", leasedBy("bob")),
		mac("free-mac", used(0, 0)),
		host("down", func(n *Node) { n.Up = false }),
	}
}

func TestCapacityForTenants(t *testing.T) {
	cases := []struct {
		name   string
		tenant string
		pol    Policy
		want   sdk.CapacityReport
	}{
		{"tenant under the default policy: macOS only on its own Mac", "acme", DefaultPolicy, sdk.CapacityReport{
			Tenant:         "acme",
			LargestLinux:   sdk.VMSize{Node: "free-mac", VCPUs: 12, MemoryMiB: 65536},
			LargestMacOS:   sdk.VMSize{Node: "acme-mac", VCPUs: 6, MemoryMiB: 32768},
			MacOSSlotsFree: 1,
			Nodes: []sdk.NodeCapacity{
				{Node: "acme-mac", Mac: true, Leased: true, Linux: true, MacOS: true, Free: sdk.Resources{VCPUs: 6, MemoryMiB: 32768, MacOSSlots: 1}, MacOSSlots: 2},
				{Node: "free-mac", Mac: true, Linux: true, Free: sdk.Resources{VCPUs: 12, MemoryMiB: 65536}},
				{Node: "shared-1", Linux: true, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 16384}},
			},
		}},
		{"tenant without require_lease_for_macos: unleased Macs count too", "acme", Policy{ExclusiveLeasedHosts: true}, sdk.CapacityReport{
			Tenant:         "acme",
			LargestLinux:   sdk.VMSize{Node: "free-mac", VCPUs: 12, MemoryMiB: 65536},
			LargestMacOS:   sdk.VMSize{Node: "free-mac", VCPUs: 12, MemoryMiB: 65536},
			MacOSSlotsFree: 3,
			Nodes: []sdk.NodeCapacity{
				{Node: "acme-mac", Mac: true, Leased: true, Linux: true, MacOS: true, Free: sdk.Resources{VCPUs: 6, MemoryMiB: 32768, MacOSSlots: 1}, MacOSSlots: 2},
				{Node: "free-mac", Mac: true, Linux: true, MacOS: true, Free: sdk.Resources{VCPUs: 12, MemoryMiB: 65536, MacOSSlots: 2}, MacOSSlots: 2},
				{Node: "shared-1", Linux: true, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 16384}},
			},
		}},
		{"tenant leasing nothing sees no macOS room", "carol", DefaultPolicy, sdk.CapacityReport{
			Tenant:       "carol",
			LargestLinux: sdk.VMSize{Node: "free-mac", VCPUs: 12, MemoryMiB: 65536},
			Nodes: []sdk.NodeCapacity{
				{Node: "free-mac", Mac: true, Linux: true, Free: sdk.Resources{VCPUs: 12, MemoryMiB: 65536}},
				{Node: "shared-1", Linux: true, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 16384}},
			},
		}},
		{"operator: unleased nodes only, as an unpinned Place", "", DefaultPolicy, sdk.CapacityReport{
			LargestLinux:   sdk.VMSize{Node: "free-mac", VCPUs: 12, MemoryMiB: 65536},
			LargestMacOS:   sdk.VMSize{Node: "free-mac", VCPUs: 12, MemoryMiB: 65536},
			MacOSSlotsFree: 2,
			Nodes: []sdk.NodeCapacity{
				{Node: "free-mac", Mac: true, Linux: true, MacOS: true, Free: sdk.Resources{VCPUs: 12, MemoryMiB: 65536, MacOSSlots: 2}, MacOSSlots: 2},
				{Node: "shared-1", Linux: true, Free: sdk.Resources{VCPUs: 8, MemoryMiB: 16384}},
			},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Capacity(capacityFleet(), tc.tenant, tc.pol)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// What Capacity promises, Place delivers.
func TestCapacityLargestSizesArePlaceable(t *testing.T) {
	fleet := capacityFleet()
	rep := Capacity(fleet, "acme", DefaultPolicy)
	for _, c := range []struct {
		size sdk.VMSize
		os   string
	}{{rep.LargestLinux, GuestLinux}, {rep.LargestMacOS, GuestMacOS}} {
		req := Request{Tenant: "acme", GuestOS: c.os, VCPUs: c.size.VCPUs, MemoryMiB: c.size.MemoryMiB}
		if d, err := Place(fleet, req, DefaultPolicy, BinPack); err != nil || d.Node != c.size.Node {
			t.Fatalf("%s %+v: got %+v, %v", c.os, c.size, d, err)
		}
		req.MemoryMiB++
		if _, err := Place(fleet, req, DefaultPolicy, BinPack); err == nil {
			t.Fatalf("%s one MiB more than the largest still placed", c.os)
		}
	}
}

func TestCapacityFullMacHasNoMacOSRoom(t *testing.T) {
	fleet := []Node{mac("m", leasedBy("acme"), macGuests("acme", 2))}
	rep := Capacity(fleet, "acme", DefaultPolicy)
	if rep.MacOSSlotsFree != 0 || rep.LargestMacOS != (sdk.VMSize{}) || len(rep.Nodes) != 1 || rep.Nodes[0].Free.MacOSSlots != 0 || rep.Nodes[0].MacOSSlots != 2 {
		t.Fatalf("got %+v", rep)
	}
}
