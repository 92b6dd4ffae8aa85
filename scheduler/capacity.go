package scheduler

import (
	"slices"

	"github.com/fluxvm/fluxvm/sdk"
)

// Capacity reports what tenant ("" for the operator) could launch on nodes under
// pol, as GET /fleet/capacity answers it (sdk.CapacityReport). It applies the same rules as Place without a node selector, nested or
// pinning, so a size it reports is a size Place accepts unless the fleet changes
// in between. Nodes taking nothing (down, cordoned, draining, scrub pending, or
// barred by a lease) are left out, so a tenant never learns of hosts it cannot use.
func Capacity(nodes []Node, tenant string, pol Policy) sdk.CapacityReport {
	rep := sdk.CapacityReport{Tenant: tenant, Nodes: []sdk.NodeCapacity{}}
	linuxReq := Request{Tenant: tenant, GuestOS: GuestLinux}
	macReq := Request{Tenant: tenant, GuestOS: GuestMacOS}
	for _, i := range byName(nodes) {
		n := &nodes[i]
		if !n.Up || !n.Healthy || n.Cordoned || n.Draining || n.ScrubPending {
			continue
		}
		_, linuxLease := leaseRule(n, &linuxReq, pol, false)
		_, macLease := leaseRule(n, &macReq, pol, false)
		nc := sdk.NodeCapacity{
			Node:   n.Name,
			Mac:    n.Mac,
			Leased: tenant != "" && n.LeasedBy == tenant,
			Linux:  linuxLease && slices.Contains(n.GuestOS, GuestLinux),
			MacOS:  macLease && n.Mac && slices.Contains(n.GuestOS, GuestMacOS),
			Free: sdk.Resources{
				VCPUs:     max(free(n.Total.VCPUs, n.Used.VCPUs), 0),
				MemoryMiB: max(free(n.Total.MemoryMiB, n.Used.MemoryMiB), 0),
			},
		}
		if !nc.Linux && !nc.MacOS {
			continue
		}
		if nc.MacOS {
			used, total := macSlots(n)
			nc.Free.MacOSSlots = max(total-used, 0)
			nc.MacOSSlots = total
		}
		rep.Nodes = append(rep.Nodes, nc)

		roomy := nc.Free.VCPUs > 0 && nc.Free.MemoryMiB > 0
		if nc.Linux && roomy && larger(nc, rep.LargestLinux) {
			rep.LargestLinux = sdk.VMSize{Node: nc.Node, VCPUs: nc.Free.VCPUs, MemoryMiB: nc.Free.MemoryMiB}
		}
		if nc.MacOS && nc.Free.MacOSSlots > 0 {
			rep.MacOSSlotsFree += nc.Free.MacOSSlots
			if roomy && larger(nc, rep.LargestMacOS) {
				rep.LargestMacOS = sdk.VMSize{Node: nc.Node, VCPUs: nc.Free.VCPUs, MemoryMiB: nc.Free.MemoryMiB}
			}
		}
	}
	return rep
}

// larger ranks by memory first because memory, not vCPUs, is what runs out
// on VM hosts; nodes come in name order, so ties keep the first name.
func larger(nc sdk.NodeCapacity, than sdk.VMSize) bool {
	if nc.Free.MemoryMiB != than.MemoryMiB {
		return nc.Free.MemoryMiB > than.MemoryMiB
	}
	return nc.Free.VCPUs > than.VCPUs
}
