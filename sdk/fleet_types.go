package sdk

import "time"

// Heartbeat is what a node agent reports to central every few seconds
// (POST /fleet/nodes/{name}/heartbeat, with the fleet token). Central
// rewrites the node's record from it and marks the node down when
// heartbeats stop.
type Heartbeat struct {
	// URL is where central reaches this node's API (http or https). Central
	// calls it with the fleet token, so that token must be one of the node's
	// admin tokens.
	URL string `json:"url"`
	// Version of the node agent.
	Version string `json:"version,omitempty"`
	// Labels are the node's labels, matched by node selectors.
	Labels map[string]string `json:"labels,omitempty"`
	// Capacity is the node's own view: total (all drivers' resources),
	// what its config reserves for the host, and what is free now.
	Capacity Capacity `json:"capacity"`
	// Drivers are the node's hypervisor plugins.
	Drivers []HeartbeatDriver `json:"drivers"`
	// Nested is true when guests on this node can run their own hypervisor.
	Nested bool `json:"nested"`
	// VMs are every VM on the node, central's or not.
	VMs []HeartbeatVM `json:"vms"`
}

// HeartbeatDriver is one hypervisor plugin of a heartbeat.
type HeartbeatDriver struct {
	Name string `json:"name"`
	// Health is healthy, unhealthy, undetected or down.
	Health    string `json:"health"`
	Simulated bool   `json:"simulated,omitempty"`
	// GuestOS lists the guests the driver runs ("linux", "macos").
	GuestOS []string `json:"guest_os"`
	// Capabilities are optional features (pause, exec, screenshot, ...).
	Capabilities []string `json:"capabilities,omitempty"`
}

// HeartbeatVM is one VM of a heartbeat: enough to place, meter and show it
// while the node does not answer.
type HeartbeatVM struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Tenant    string `json:"tenant,omitempty"`
	State     string `json:"state"`
	VCPUs     int64  `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
	GuestOS   string `json:"guest_os"`
}

// HeartbeatReply is central's answer to a heartbeat.
type HeartbeatReply struct {
	// State is the node's state in central after this heartbeat ("up").
	State string `json:"state"`
	// IntervalSeconds is when central expects the next heartbeat; it marks
	// the node down after three intervals without one.
	IntervalSeconds int `json:"interval_seconds"`
}

// FleetCreateVMRequest is POST /fleet/vms: a VM placed by central's
// scheduler. Give a catalog image by name (tenants must) or, as the
// operator, a disk path on the nodes.
type FleetCreateVMRequest struct {
	// Name of the VM: 1-63 letters, digits, '.', '_' or '-'.
	Name string `json:"name"`
	// Image is a catalog image's name (GET /fleet/images). Its guest OS,
	// vCPUs and memory are the defaults of this request.
	Image string `json:"image,omitempty"`
	// ImagePath is an absolute image path on the nodes (operator only).
	ImagePath string `json:"image_path,omitempty"`
	// GuestOS is "linux" (the default) or "macos"; with a catalog image it
	// must match the image's or be left out.
	GuestOS string `json:"guest_os,omitempty"`
	// VCPUs and MemoryMiB size the VM (with a catalog image: its defaults).
	VCPUs     int64 `json:"vcpus,omitempty"`
	MemoryMiB int64 `json:"memory_mib,omitempty"`
	// TTLSeconds deletes the VM that long after it starts (0: never).
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Node pins the VM to one node; placement rules still apply.
	Node string `json:"node,omitempty"`
	// NodeSelector must match node labels, every key.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Nested asks for a node that offers nested virtualisation.
	Nested  bool   `json:"nested,omitempty"`
	Display bool   `json:"display,omitempty"`
	Network string `json:"network,omitempty"` // "user" (default) or "none"
}

// Placement says why central put a VM where it did.
type Placement struct {
	Reason string `json:"reason"`
	// Considered holds one verdict per node looked at.
	Considered []PlacementVerdict `json:"considered"`
}

// PlacementVerdict is one node's answer to a placement.
type PlacementVerdict struct {
	Node    string   `json:"node"`
	Fits    bool     `json:"fits"`
	Score   float64  `json:"score"`
	Reasons []string `json:"reasons,omitempty"`
}

// FleetCreateVMResponse is the 201 answer of POST /fleet/vms.
type FleetCreateVMResponse struct {
	Node      string    `json:"node"`
	VM        VM        `json:"vm"`
	Placement Placement `json:"placement"`
}

// NoPlacementBody is the 409 answer of POST /fleet/vms when no node can
// take the VM: the scheduler's sentence, and each node's reasons.
type NoPlacementBody struct {
	Error      string             `json:"error"`
	Hint       string             `json:"hint,omitempty"`
	Considered []PlacementVerdict `json:"considered"`
}

// FleetVM is one VM of GET /fleet/vms: the node's view of it, and which
// node it is on. When Unreachable is set the node did not answer (or is
// down) and the VM is shown as the node's last heartbeat reported it, or,
// for a VM created after that heartbeat, from the ledger with state
// "unknown": it is not lost, only out of sight.
type FleetVM struct {
	Node        string `json:"node"`
	Unreachable bool   `json:"unreachable,omitempty"`
	VM
}

// UnreachableNode is a node GET /fleet/vms could not list.
type UnreachableNode struct {
	Node string `json:"node"`
	// Error says why (operator only; tenants see only the node's name).
	Error string `json:"error,omitempty"`
	// LastHeartbeat is when the node last reported (operator only).
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
}

// FleetVMList is GET /fleet/vms.
type FleetVMList struct {
	VMs              []FleetVM         `json:"vms"`
	UnreachableNodes []UnreachableNode `json:"unreachable_nodes"`
}
