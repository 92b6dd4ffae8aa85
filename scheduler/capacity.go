package scheduler

import "slices"

// VMSize is the largest VM of one guest OS a node can take now.
type VMSize struct {
	Node      string `json:"node"`
	VCPUs     int64  `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
}

// NodeCapacity is one node a tenant may use and what is free on it.
type NodeCapacity struct {
	Node string `json:"node"`
	Mac  bool   `json:"mac"`
	// Leased is true when the tenant asking leases this host.
	Leased bool `json:"leased"`
	// Linux and MacOS say which guests of this tenant the node may take.
	Linux bool `json:"linux"`
	MacOS bool `json:"macos"`
	// Free is what is left; MacOSSlots is 0 where MacOS is false.
	Free Resources `json:"free"`
}

// CapacityReport answers GET /fleet/capacity: what a tenant could launch now.
type CapacityReport struct {
	// Tenant the report is for, "" for the operator.
	Tenant string `json:"tenant"`
	// LargestLinux is the node with the most free memory (then vCPUs) that takes
	// this tenant's Linux guests; zero when none can take even a small one.
	LargestLinux VMSize `json:"largest_linux"`
	// LargestMacOS is the same for macOS guests, on Macs with a free slot.
	LargestMacOS VMSize `json:"largest_macos"`
	// MacOSSlotsFree sums the free macOS slots the tenant may use: under
	// require_lease_for_macos, those on the Macs it leases.
	MacOSSlotsFree int64 `json:"macos_slots_free"`
	// Nodes lists every node the tenant may place on, sorted by name.
	Nodes []NodeCapacity `json:"nodes"`
}

// Capacity reports what tenant ("" for the operator) could launch on nodes under
// pol. It applies the same rules as Place without a node selector, nested or
// pinning, so a size it reports is a size Place accepts unless the fleet changes
// in between. Nodes taking nothing (down, cordoned, draining, scrub pending, or
// barred by a lease) are left out, so a tenant never learns of hosts it cannot use.
func Capacity(nodes []Node, tenant string, pol Policy) CapacityReport {
	rep := CapacityReport{Tenant: tenant, Nodes: []NodeCapacity{}}
	linuxReq := Request{Tenant: tenant, GuestOS: GuestLinux}
	macReq := Request{Tenant: tenant, GuestOS: GuestMacOS}
	for _, i := range byName(nodes) {
		n := &nodes[i]
		if !n.Up || !n.Healthy || n.Cordoned || n.Draining || n.ScrubPending {
			continue
		}
		_, linuxLease := leaseRule(n, &linuxReq, pol, false)
		_, macLease := leaseRule(n, &macReq, pol, false)
		nc := NodeCapacity{
			Node:   n.Name,
			Mac:    n.Mac,
			Leased: tenant != "" && n.LeasedBy == tenant,
			Linux:  linuxLease && slices.Contains(n.GuestOS, GuestLinux),
			MacOS:  macLease && n.Mac && slices.Contains(n.GuestOS, GuestMacOS),
			Free: Resources{
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
		}
		rep.Nodes = append(rep.Nodes, nc)

		roomy := nc.Free.VCPUs > 0 && nc.Free.MemoryMiB > 0
		if nc.Linux && roomy && larger(nc, rep.LargestLinux) {
			rep.LargestLinux = VMSize{Node: nc.Node, VCPUs: nc.Free.VCPUs, MemoryMiB: nc.Free.MemoryMiB}
		}
		if nc.MacOS && nc.Free.MacOSSlots > 0 {
			rep.MacOSSlotsFree += nc.Free.MacOSSlots
			if roomy && larger(nc, rep.LargestMacOS) {
				rep.LargestMacOS = VMSize{Node: nc.Node, VCPUs: nc.Free.VCPUs, MemoryMiB: nc.Free.MemoryMiB}
			}
		}
	}
	return rep
}

// larger ranks by memory first because memory, not vCPUs, is what runs out
// on VM hosts; nodes come in name order, so ties keep the first name.
func larger(nc NodeCapacity, than VMSize) bool {
	if nc.Free.MemoryMiB != than.MemoryMiB {
		return nc.Free.MemoryMiB > than.MemoryMiB
	}
	return nc.Free.VCPUs > than.VCPUs
}
