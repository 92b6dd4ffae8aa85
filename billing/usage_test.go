package billing

import (
	"reflect"
	"testing"
	"time"
)

func TestComputeUsageMetersTheWindowAsOfNow(t *testing.T) {
	from, to := october, at("2026-11-01T00:00:00Z")
	now := at("2026-10-20T12:00:00.7Z")
	start := at("2026-10-20T00:00:00Z")
	early := lease24("early", "acme", "mac-1", 1, start)
	early.ReleasedAt = start.Add(3 * time.Hour)
	vms := []VM{
		// Running: counts up to now (12 h), truncated to the second.
		{ID: "run", Tenant: "acme", Node: "mac-1", VCPUs: 2, MemoryMiB: 1024, MacOS: true, Start: start},
		// Started in September: counts from the window's start, not as a start.
		{ID: "sep", Tenant: "acme", Node: "shared-1", VCPUs: 1, MemoryMiB: 512,
			Start: at("2026-09-30T22:00:00Z"), End: at("2026-10-01T01:00:00.999Z")},
		// The operator's VMs are metered under tenant "".
		{ID: "op", Tenant: "", Node: "shared-1", VCPUs: 4, MemoryMiB: 4096, Start: start, End: start.Add(time.Hour)},
		// Entirely outside the window: no row for this tenant.
		{ID: "old", Tenant: "gone", Node: "shared-1", VCPUs: 4, MemoryMiB: 4096,
			Start: at("2026-09-01T00:00:00Z"), End: at("2026-09-02T00:00:00Z")},
	}
	active := lease24("active", "acme", "mac-2", 1, start.Add(6*time.Hour))
	got := ComputeUsage(vms, []Lease{early, active}, from, to, now)
	want := []Usage{
		{Tenant: "", VMSeconds: 3600, VCPUSeconds: 4 * 3600, MemoryMiBSeconds: 4096 * 3600, VMsStarted: 1},
		{Tenant: "acme",
			VMSeconds: 12*3600 + 3600, VCPUSeconds: 2*12*3600 + 3600, MemoryMiBSeconds: 1024*12*3600 + 512*3600,
			MacOSVMSeconds: 12 * 3600,
			// early: 3 h held, 24 h billable (past now); active: 6 h so far.
			LeaseSeconds: 3*3600 + 6*3600, BillableLeaseSeconds: 24*3600 + 6*3600,
			VMsStarted: 1, LeasesStarted: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("usage\n%+v\nwant\n%+v", got, want)
	}
	if got := ComputeUsage(vms, nil, to, from, now); got == nil || len(got) != 0 {
		t.Fatalf("an empty window gave %+v; want an empty list", got)
	}
}
