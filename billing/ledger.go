package billing

import (
	"math"
	"time"
)

// VM is a VM's row in central's ledger.
type VM struct {
	// ID, Name and Image are the caller's to show; no charge depends on them.
	// Tenant is "" for the operator's own VMs.
	ID, Tenant, Node, Name, Image string
	// VCPUs and MemoryMiB are the VM's size; MacOS marks a macOS guest.
	VCPUs, MemoryMiB int64
	MacOS            bool
	// Start and End bound the VM's running time; a zero End means it still runs.
	Start, End time.Time
}

// Lease is a lease's row in central's ledger.
type Lease struct {
	ID, Tenant, Node string
	// Class is the Mac class that priced the lease when it started ("" when
	// mac_per_hour did), PricePerHour that price. Both stay fixed for the
	// lease's life.
	Class        string
	PricePerHour Micros
	// Start is when the lease began; MinEnd is Start plus the minimum term, the
	// least that is billed.
	Start, MinEnd time.Time
	// EndsAt is when the lease expires by its terms (zero: open-ended); it is
	// never before MinEnd.
	EndsAt time.Time
	// ReleasedAt is when the lease ended, early or forced releases included
	// (zero: still active).
	ReleasedAt time.Time
}

// Snapshot is a snapshot's row in central's records: SizeGiB kept from
// Start (when it was taken) to End (when it was deleted; zero: kept).
type Snapshot struct {
	// ID, Node, VM and Name are the caller's to show; no charge depends on
	// them. Tenant is "" for the operator's own VMs.
	ID, Tenant, Node, VM, Name string
	SizeGiB                    int64
	Start, End                 time.Time
}

// Volume is a volume's row in central's records at one size: SizeGiB from
// Start (its creation, or the resize to this size) to End (the next resize,
// or its deletion; zero: still so). A volume that was resized is several
// rows, one per size.
type Volume struct {
	// ID, Node and Name are the caller's to show; no charge depends on them.
	// Tenant is "" for the operator's own volumes.
	ID, Tenant, Node, Name string
	SizeGiB                int64
	Start, End             time.Time
}

// Rows are the ledger rows statements are computed from.
type Rows struct {
	VMs       []VM
	Leases    []Lease
	Snapshots []Snapshot
	Volumes   []Volume
}

// Instants become Unix seconds at the first step of every computation. Unix()
// rounds down, which is t.Truncate(time.Second) whatever t's location, so every
// span is a whole number of seconds and a window split anywhere splits usage
// exactly.

// never stands for a bound that is not set (an open-ended lease).
const never = math.MaxInt64

func unixOr(t time.Time, zero int64) int64 {
	if t.IsZero() {
		return zero
	}
	return t.Unix()
}

// timeOf turns Unix seconds back into a UTC instant.
func timeOf(s int64) time.Time { return time.Unix(s, 0).UTC() }

// overlap is the length of [a, b) ∩ [c, d), 0 when they are disjoint.
func overlap(a, b, c, d int64) int64 {
	lo, hi := max(a, c), min(b, d)
	if hi > lo {
		return hi - lo
	}
	return 0
}

// running is the VM's running time [start, end): to End, or to now while it
// runs.
func (v *VM) running(now int64) (start, end int64) {
	return v.Start.Unix(), unixOr(v.End, now)
}

// kept is the time the snapshot was kept [start, end): to End, or to now
// while it is kept.
func (s *Snapshot) kept(now int64) (start, end int64) {
	return s.Start.Unix(), unixOr(s.End, now)
}

// kept is the time the volume had this size [start, end): to End, or to now
// while it still has it.
func (v *Volume) kept(now int64) (start, end int64) {
	return v.Start.Unix(), unixOr(v.End, now)
}

// held is the time the tenant actually had the Mac: to ReleasedAt, or while
// active to now but never past EndsAt (a lease the reconciler has not yet ended
// is over by its terms).
func (l *Lease) held(now int64) (start, end int64) {
	start = l.Start.Unix()
	if !l.ReleasedAt.IsZero() {
		return start, l.ReleasedAt.Unix()
	}
	return start, min(now, unixOr(l.EndsAt, never))
}

// billed is the time charged for the lease: a released lease to ReleasedAt but
// at least to MinEnd, even when MinEnd is still ahead; an active one to now or
// MinEnd, whichever is later, but never past EndsAt.
func (l *Lease) billed(now int64) (start, end int64) {
	start = l.Start.Unix()
	minEnd := unixOr(l.MinEnd, start)
	if !l.ReleasedAt.IsZero() {
		return start, max(l.ReleasedAt.Unix(), minEnd)
	}
	return start, min(max(now, minEnd), unixOr(l.EndsAt, never))
}
