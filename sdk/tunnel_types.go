package sdk

import "time"

// Tunnel kinds: a TCP port of the guest, or its screen (VNC).
const (
	TunnelPort   = "port"
	TunnelScreen = "screen"
)

// Tunnel is one open tunnel (GET /fleet/tunnels): a relayed connection to
// a guest port or to a VM's screen. Tunnels live in the memory of the
// central relaying them.
type Tunnel struct {
	ID         string `json:"id"`
	Tenant     string `json:"tenant,omitempty"`
	TenantName string `json:"tenant_name,omitempty"`
	Node       string `json:"node"`
	VM         string `json:"vm"`
	VMName     string `json:"vm_name"`
	// Kind is TunnelPort or TunnelScreen; Port is 0 for a screen.
	Kind string `json:"kind"`
	Port int    `json:"port,omitempty"`
	// OpenedBy names who opened it: "primary token", "key <name>", a
	// member's email or "operator".
	OpenedBy   string    `json:"opened_by"`
	OpenedAt   time.Time `json:"opened_at"`
	LastActive time.Time `json:"last_active"`
	// BytesToVM and BytesFromVM count the relayed bytes each way.
	BytesToVM   int64 `json:"bytes_to_vm"`
	BytesFromVM int64 `json:"bytes_from_vm"`
}

// TunnelList is GET /fleet/tunnels: the caller's open tunnels (all of
// them for the operator) and the policy's limits.
type TunnelList struct {
	Tunnels []Tunnel     `json:"tunnels"`
	Limits  TunnelPolicy `json:"limits"`
}

// WSTicketRequest asks for a one-use WebSocket ticket
// (POST /fleet/vms/{node}/{id}/ws-ticket). Kind is "vnc".
type WSTicketRequest struct {
	Kind string `json:"kind"`
}

// WSTicket is a one-use credential for GET Path (/fleet/ws/{ticket}),
// valid for ExpiresIn seconds.
type WSTicket struct {
	Ticket    string `json:"ticket"`
	ExpiresIn int    `json:"expires_in"`
	Path      string `json:"path"`
}

// TunnelEnd is what the activity log's CLOSE event of a tunnel says
// (Event.Tunnel): the bytes each way, how long it was open and why it
// ended.
type TunnelEnd struct {
	ID          string `json:"id"`
	BytesToVM   int64  `json:"bytes_to_vm"`
	BytesFromVM int64  `json:"bytes_from_vm"`
	DurationMS  int64  `json:"duration_ms"`
	Reason      string `json:"reason"`
}
