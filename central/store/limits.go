package store

import (
	"cmp"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// Ranges of the numbers central stores, as schemas/fleet-openapi.yaml gives
// them; the API refuses anything outside them before it reaches the store
// (a test in central/api holds these to the description). A record an older
// central wrote outside them is read clamped into them (clampStored), so no
// duration, sum or product made from it can wrap.
const (
	MaxMinLeaseHours       = 8760  // a year
	MaxLeaseHours          = 26280 // three years
	MaxLedgerRetentionDays = 3650
	MaxSnapshotsPerVM      = 1000
	MaxSnapshotGiB         = 1 << 20 // a snapshot's size as recorded (1 PiB)
	MaxVMVCPUs             = 1024
	MaxVMMemoryMiB         = 16 << 20
	MaxNodeVCPUs           = 1 << 20
	MaxNodeMemoryMiB       = 1 << 30
	MaxNodeMacOSSlots      = 1024
)

// clamp is v limited to [lo, hi].
func clamp[T cmp.Ordered](v, lo, hi T) T { return min(max(v, lo), hi) }

// clampStored brings a record just read into today's ranges, for the record
// types that implement it and the policy; getJSON, listJSON and decodeOne
// call it on every record they decode.
func clampStored(v any) {
	switch r := v.(type) {
	case *sdk.Policy:
		clampPolicy(r)
	case interface{ clampStored() }:
		r.clampStored()
	}
}

func clampPolicy(p *sdk.Policy) {
	p.MinLeaseHours = clamp(p.MinLeaseHours, MinLeaseHoursFloor, MaxMinLeaseHours)
	p.LedgerRetentionDays = clamp(p.LedgerRetentionDays, 0, MaxLedgerRetentionDays)
	p.MaxSnapshotsPerVM = clamp(p.MaxSnapshotsPerVM, 0, MaxSnapshotsPerVM)
	t := &p.Tunnels
	t.IdleTimeoutMinutes = clamp(t.IdleTimeoutMinutes, 1, 1440)
	t.MaxLifetimeMinutes = clamp(t.MaxLifetimeMinutes, 1, 10080)
	t.MaxPerTenant = clamp(t.MaxPerTenant, 1, 1000)
}

// LedgerRetention is how long ended ledger entries and leases are kept (0:
// for ever), never more than MaxLedgerRetentionDays.
func LedgerRetention(p sdk.Policy) time.Duration {
	return time.Duration(clamp(p.LedgerRetentionDays, 0, MaxLedgerRetentionDays)) * 24 * time.Hour
}

func (p *Pool) clampStored() {
	p.VCPUs = clamp(p.VCPUs, 1, MaxVMVCPUs)
	p.MemoryMiB = clamp(p.MemoryMiB, 1, MaxVMMemoryMiB)
	p.Size = clamp(p.Size, 0, MaxPoolSize)
	p.MaxSize = clamp(p.MaxSize, p.Size, MaxPoolSize)
}

func (n *Node) clampStored() {
	both := func(r *sdk.Resources, lo int64) {
		r.VCPUs = clamp(r.VCPUs, lo*MaxNodeVCPUs, MaxNodeVCPUs)
		r.MemoryMiB = clamp(r.MemoryMiB, lo*MaxNodeMemoryMiB, MaxNodeMemoryMiB)
		r.MacOSSlots = clamp(r.MacOSSlots, lo*MaxNodeMacOSSlots, MaxNodeMacOSSlots)
	}
	both(&n.Capacity.Total, 0)
	both(&n.Capacity.Free, -1) // free goes below zero on a node running more than it offers
	for i := range n.VMs {
		n.VMs[i].VCPUs = clamp(n.VMs[i].VCPUs, 0, MaxVMVCPUs)
		n.VMs[i].MemoryMiB = clamp(n.VMs[i].MemoryMiB, 0, MaxVMMemoryMiB)
	}
}
