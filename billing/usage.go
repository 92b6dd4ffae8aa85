package billing

import (
	"slices"
	"strings"
	"time"
)

// Usage is what one tenant used in a window, in seconds (weighted by size where
// the name says so) and counts. The operator's own VMs are metered under
// tenant "".
type Usage struct {
	Tenant string `json:"tenant"`
	// VM running time; VCPUSeconds and MemoryMiBSeconds weight it by the VM's
	// size, MacOSVMSeconds counts macOS guests only.
	VMSeconds        int64 `json:"vm_seconds"`
	VCPUSeconds      int64 `json:"vcpu_seconds"`
	MemoryMiBSeconds int64 `json:"memory_mib_seconds"`
	MacOSVMSeconds   int64 `json:"macos_vm_seconds"`
	// LeaseSeconds is the time leases were actually held; BillableLeaseSeconds
	// extends each released lease to its minimum term.
	LeaseSeconds         int64 `json:"lease_seconds"`
	BillableLeaseSeconds int64 `json:"billable_lease_seconds"`
	// VMsStarted and LeasesStarted count starts inside the window.
	VMsStarted    int64 `json:"vms_started"`
	LeasesStarted int64 `json:"leases_started"`
}

// ComputeUsage meters every tenant over the window [from, to) as of now: a VM
// still running counts up to now, a lease still active up to now (and never
// past its EndsAt). A released lease's billable time runs to its minimum end
// even when that is later than now. Only tenants with some usage are returned,
// sorted by tenant. Usage is additive: for any b, the usage over [a, c) is the
// usage over [a, b) plus that over [b, c).
func ComputeUsage(vms []VM, leases []Lease, from, to, now time.Time) []Usage {
	f, t, n := from.Unix(), to.Unix(), now.Unix()
	if t <= f {
		return []Usage{}
	}
	byTenant := make(map[string]*Usage)
	get := func(tenant string) *Usage {
		u := byTenant[tenant]
		if u == nil {
			u = &Usage{Tenant: tenant}
			byTenant[tenant] = u
		}
		return u
	}
	for i := range vms {
		v := &vms[i]
		start, end := v.running(n)
		secs := overlap(start, end, f, t)
		started := start >= f && start < t
		if secs == 0 && !started {
			continue
		}
		u := get(v.Tenant)
		u.VMSeconds += secs
		u.VCPUSeconds += secs * max(v.VCPUs, 0)
		u.MemoryMiBSeconds += secs * max(v.MemoryMiB, 0)
		if v.MacOS {
			u.MacOSVMSeconds += secs
		}
		if started {
			u.VMsStarted++
		}
	}
	for i := range leases {
		l := &leases[i]
		start, end := l.held(n)
		held := overlap(start, end, f, t)
		billable := held
		if !l.ReleasedAt.IsZero() {
			start, end = l.billed(n)
			billable = overlap(start, end, f, t)
		}
		started := start >= f && start < t
		if held == 0 && billable == 0 && !started {
			continue
		}
		u := get(l.Tenant)
		u.LeaseSeconds += held
		u.BillableLeaseSeconds += billable
		if started {
			u.LeasesStarted++
		}
	}
	out := make([]Usage, 0, len(byTenant))
	// A tenant gets a row only once it has a non-zero figure (above).
	for _, u := range byTenant {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b Usage) int { return strings.Compare(a.Tenant, b.Tenant) })
	return out
}
