package scheduler

import (
	"errors"
	"fmt"
)

// Guest operating systems, as the driver contract names them.
const (
	GuestLinux = "linux"
	GuestMacOS = "macos"
)

// MacOSSlotsPerMac is how many macOS guests one Mac may run at once: Apple's
// licence allows two virtual copies of macOS per Mac.
const MacOSSlotsPerMac = 2

// Resources is an amount of compute on a node.
type Resources struct {
	VCPUs     int64 `json:"vcpus"`
	MemoryMiB int64 `json:"memory_mib"`
	// MacOSSlots counts macOS guests (at most MacOSSlotsPerMac on a Mac).
	MacOSSlots int64 `json:"macos_slots"`
}

// VMRef is what placement needs to know about a VM already on a node.
type VMRef struct {
	Tenant  string // "" for the operator's VMs
	GuestOS string // GuestLinux or GuestMacOS
}

// Node is a snapshot of one node as central last saw it, with in-flight
// reservations already folded into Used.
type Node struct {
	Name string
	// Up is false once the node stopped heartbeating.
	Up bool
	// Healthy is the node's own health verdict (agent and at least one driver up).
	Healthy bool
	// GuestOS lists what the node's healthy drivers run ("linux", "macos").
	GuestOS []string
	// Cordoned, Draining and ScrubPending nodes take no new VM.
	Cordoned, Draining, ScrubPending bool
	// Labels are matched by a request's NodeSelector.
	Labels map[string]string
	// Nested is true when guests can run their own hypervisor.
	Nested bool
	// Networks names the node's network plugins that are up; a VM in a
	// tenant network needs one.
	Networks []string
	// Mac is true for an Apple host, the only kind that may run macOS guests.
	Mac bool
	// Total is what the node offers VMs; Used is what VMs and reservations hold.
	// Used.MacOSSlots and the macOS guests in VMs are two views of the same thing
	// that may lag each other, so the larger counts.
	Total, Used Resources
	// LeasedBy is the tenant that leases the whole host, "" when none does.
	LeasedBy string
	// VMs are the VMs on the node.
	VMs []VMRef
}

// NoNetworkPlugin is the refusal of a node without a network plugin up, for
// a VM in its tenant's network (Request.TenantNetwork).
const NoNetworkPlugin = "no tenant network plugin"

// Request is a VM to place.
type Request struct {
	// Tenant asking, "" for the operator.
	Tenant string
	// GuestOS is GuestLinux (the default when empty) or GuestMacOS.
	GuestOS string
	// VCPUs and MemoryMiB must both be positive.
	VCPUs, MemoryMiB int64
	// NodeSelector must match node labels exactly, every key.
	NodeSelector map[string]string
	// Nested asks for a node that offers nested virtualisation.
	Nested bool
	// TenantNetwork asks for a node with a network plugin up: the VM goes
	// in its tenant's network (docs/networks.md).
	TenantNetwork bool
	// Node pins the VM to one node; the rules still apply, except that an
	// operator may pin onto a leased host.
	Node string
}

// Policy is the fleet policy's placement part (GET/PUT /fleet/policy).
type Policy struct {
	// RequireLeaseForMacOS: a tenant's macOS guests run only on Macs it leases.
	RequireLeaseForMacOS bool
	// ExclusiveLeasedHosts: a leased host runs only its lessee's VMs.
	ExclusiveLeasedHosts bool
}

// DefaultPolicy is the policy table's defaults: both rules on.
var DefaultPolicy = Policy{RequireLeaseForMacOS: true, ExclusiveLeasedHosts: true}

// Strategy chooses among the nodes that fit.
type Strategy int

const (
	// BinPack prefers the node that is fullest after placement, keeping whole
	// hosts free for leases and large VMs. It is the default.
	BinPack Strategy = iota
	// Spread prefers the node that is emptiest after placement, so one host
	// failing takes fewer VMs with it.
	Spread
)

// String returns the strategy's name as configuration spells it.
func (s Strategy) String() string {
	switch s {
	case BinPack:
		return "binpack"
	case Spread:
		return "spread"
	}
	return fmt.Sprintf("strategy(%d)", int(s))
}

// ParseStrategy reads a strategy name; "" is BinPack.
func ParseStrategy(name string) (Strategy, error) {
	switch name {
	case "", "binpack":
		return BinPack, nil
	case "spread":
		return Spread, nil
	}
	return 0, fmt.Errorf("%w: strategy %q: use binpack or spread", ErrInvalidRequest, name)
}

// Decision is where a VM goes and why.
type Decision struct {
	// Node that takes the VM.
	Node string `json:"node"`
	// Reason says why this node won, for the caller and the activity log.
	Reason string `json:"reason"`
	// Considered holds one verdict per node looked at, sorted by name: every
	// node, or only the pinned one when the request names a node.
	Considered []Verdict `json:"considered"`
}

// Verdict is one node's answer to a request.
type Verdict struct {
	Node string `json:"node"`
	// Fits is true when every filter passed.
	Fits bool `json:"fits"`
	// Score ranks fitting nodes (higher wins); 0 for refused nodes.
	Score float64 `json:"score"`
	// Reasons lists every filter that refused, in filter order.
	Reasons []string `json:"reasons,omitempty"`
}

// ErrNoPlacement is matched (errors.Is) by every *NoPlacementError, for callers
// that only need to map it to 409.
var ErrNoPlacement = errors.New("no node can take the vm")

// ErrInvalidRequest means the request itself is wrong (400), not the fleet.
var ErrInvalidRequest = errors.New("invalid placement request")

// NoPlacementError says that no node took the request and why each refused.
type NoPlacementError struct {
	// Summary is one sentence naming the rule that refused most of the fleet.
	Summary string
	// Verdicts holds every node's refusal, sorted by name.
	Verdicts []Verdict
}

func (e *NoPlacementError) Error() string { return e.Summary }

// Is makes errors.Is(err, ErrNoPlacement) true.
func (e *NoPlacementError) Is(target error) bool { return target == ErrNoPlacement }
