package sdk

import (
	"encoding/json"
	"reflect"
	"time"
)

// VM states as the node API reports them.
const (
	// StateCreating is a VM whose create is under way.
	StateCreating = "creating"
	StateCreated  = "created"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateStopped  = "stopped"
	// StateLost is a VM whose driver could not recover it after a restart;
	// LastError says why.
	StateLost = "lost"
)

// VM is a virtual machine on one node.
type VM struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Driver    string `json:"driver"`
	GuestOS   string `json:"guest_os"`
	Image     string `json:"image"`
	VCPUs     int64  `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
	Display   bool   `json:"display"`
	Network   string `json:"network"`
	// Address is the guest's address in its tenant network ("10.230.7.2/24"),
	// for network "tenant", as the network plugin reports it.
	Address string            `json:"address,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	// Tenant is an opaque stamp set by central; the node only stores it.
	Tenant     string     `json:"tenant,omitempty"`
	State      string     `json:"state"`
	AgentReady bool       `json:"agent_ready"`
	CreatedAt  time.Time  `json:"created_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	// ExpiresAt is when a VM with a TTL is deleted by the node.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Attributes are the driver's facts: pid, workspace, accel, ...
	Attributes map[string]string `json:"attributes,omitempty"`
	LastError  string            `json:"last_error,omitempty"`
}

// VMList is GET /v1/vms.
type VMList struct {
	VMs []VM `json:"vms"`
}

// CreateVMRequest asks a node for a VM.
type CreateVMRequest struct {
	Name    string `json:"name"`
	GuestOS string `json:"guest_os,omitempty"` // "linux" (default) or "macos"
	// Image is an absolute path on the node, inside its allowed image dirs.
	Image     string `json:"image"`
	VCPUs     int64  `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
	Display   bool   `json:"display,omitempty"`
	// Network is "user" (default: NAT through the hypervisor), "none", or
	// "tenant": an interface in the tenant's own network on the node, from
	// the node's network plugin, which needs Tenant and Subnet.
	Network string `json:"network,omitempty"`
	// Subnet is the tenant's IPv4 subnet on the node, for network "tenant"
	// ("10.230.7.0/24"). Central is to hand out one /24 per tenant; until
	// it does, the caller chooses it.
	Subnet     string            `json:"subnet,omitempty"`
	TTLSeconds int64             `json:"ttl_seconds,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Tenant     string            `json:"tenant,omitempty"`
	// Driver picks the hypervisor plugin; empty means the node's first
	// healthy driver that runs GuestOS.
	Driver string `json:"driver,omitempty"`
	// DriverConfig holds driver-specific fields, passed through as is.
	DriverConfig json.RawMessage `json:"driver_config,omitempty"`
	// SSHAuthorizedKeys are OpenSSH public keys (authorized_keys lines) the
	// guest agent installs for SSHUser once the guest is ready; see
	// CheckSSHAuthorizedKeys for the limits.
	SSHAuthorizedKeys []string `json:"ssh_authorized_keys,omitempty"`
	// SSHUser is the login the keys are for (central sends the catalog
	// image's ssh_user); empty means DefaultSSHUser.
	SSHUser string `json:"ssh_user,omitempty"`
	// Volumes are the names or ids of node volumes (GET /v1/volumes) to
	// attach, at most 2; each must be free (no other VM on the node names
	// it). The node records their ids.
	Volumes []string `json:"volumes,omitempty"`
}

// NodeHealth is GET /v1/health.
type NodeHealth struct {
	Node    string            `json:"node"`
	Version string            `json:"version"`
	Labels  map[string]string `json:"labels,omitempty"`
	Drivers []DriverHealth    `json:"drivers"`
	// Networks are the node's network plugins (none: no tenant networks).
	Networks []NetworkHealth `json:"networks,omitempty"`
	Capacity Capacity        `json:"capacity"`
	VMs      int             `json:"vms"`
}

// DriverHealth is one driver plugin as the node sees it.
type DriverHealth struct {
	Name         string            `json:"name"`
	Version      string            `json:"version"`
	Health       string            `json:"health"` // healthy, unhealthy, undetected, down
	Description  string            `json:"description"`
	Simulated    bool              `json:"simulated"`
	Capabilities []string          `json:"capabilities"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	Restarts     int               `json:"restarts"`
}

// NetworkHealth is one network plugin as the node sees it.
type NetworkHealth struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Health is "up" while the plugin process answers, else "down".
	Health      string `json:"health"`
	Description string `json:"description,omitempty"`
	// Capabilities are what its networks promise: tenant_isolation,
	// egress_nat, assigns_addresses.
	Capabilities []string `json:"capabilities"`
	Restarts     int      `json:"restarts"`
}

// Resources is an amount of compute.
type Resources struct {
	VCPUs      int64 `json:"vcpus"`
	MemoryMiB  int64 `json:"memory_mib"`
	MacOSSlots int64 `json:"macos_slots"`
}

// Capacity is what the node offers VMs (its drivers' resources less what
// the operator reserved) and what of it is free.
type Capacity struct {
	Total    Resources `json:"total"`
	Reserved Resources `json:"reserved"`
	Free     Resources `json:"free"`
}

// ExecRequest runs a command in a VM through its guest agent. Command is an
// argv list, or a string run by /bin/sh -c.
type ExecRequest struct {
	Command        Command  `json:"command"`
	Env            []string `json:"env,omitempty"`
	Stdin          string   `json:"stdin,omitempty"`
	TimeoutSeconds int64    `json:"timeout_seconds,omitempty"`
}

// Command is an argv list or a shell string.
type Command struct {
	Argv  []string
	Shell string
}

// MarshalJSON writes a list for argv, a string for a shell command.
func (c Command) MarshalJSON() ([]byte, error) {
	if c.Argv != nil {
		return json.Marshal(c.Argv)
	}
	return json.Marshal(c.Shell)
}

// UnmarshalJSON takes a list of strings or a string.
func (c *Command) UnmarshalJSON(b []byte) error {
	var argv []string
	if err := json.Unmarshal(b, &argv); err == nil {
		*c = Command{Argv: argv}
		return nil
	}
	var shell string
	if err := json.Unmarshal(b, &shell); err != nil {
		// Value names the JSON kind only: a command may carry secrets.
		kind := "value"
		if len(b) > 0 {
			kind = map[byte]string{'{': "object", '[': "array", 't': "bool", 'f': "bool", 'n': "null"}[b[0]]
			if kind == "" {
				kind = "number"
			}
		}
		return &json.UnmarshalTypeError{Value: kind, Type: reflect.TypeOf([]string(nil)), Field: "command"}
	}
	*c = Command{Shell: shell}
	return nil
}

// ExecResult is what a command printed and how it ended.
type ExecResult struct {
	ExitCode   int    `json:"exit_code"`
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	DurationMS int64  `json:"duration_ms"`
}

// InputAction is one keyboard or pointer action; see the driver contract.
type InputAction struct {
	Kind   string   `json:"kind"` // key, text, move, click, scroll
	Keys   []string `json:"keys,omitempty"`
	Text   string   `json:"text,omitempty"`
	X      int32    `json:"x,omitempty"`
	Y      int32    `json:"y,omitempty"`
	Button string   `json:"button,omitempty"`
	DY     int32    `json:"dy,omitempty"`
}

// InputRequest is POST /v1/vms/{id}/input.
type InputRequest struct {
	Actions []InputAction `json:"actions"`
}

// StopRequest is the optional body of POST /v1/vms/{id}/stop.
type StopRequest struct {
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// ErrorBody is every error response: what went wrong and what to do.
type ErrorBody struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

// Workspace is a VM's folder in a driver's state directory on a node
// (GET /v1/workspaces). Owned says whether a VM record of the node owns it;
// one that none owns is left over (a VM whose create was cut short).
type Workspace struct {
	Driver string `json:"driver"`
	ID     string `json:"id"`
	Owned  bool   `json:"owned"`
}

// WorkspaceList is GET /v1/workspaces and POST /v1/workspaces/clean (the
// workspaces removed).
type WorkspaceList struct {
	Workspaces []Workspace `json:"workspaces"`
}

// Snapshot is one snapshot of a VM, as GET /v1/vms/{id}/snapshots lists it.
type Snapshot struct {
	Tag string `json:"tag"`
	// Memory: the snapshot holds RAM and device state, not only the disks.
	Memory    bool      `json:"memory"`
	CreatedAt time.Time `json:"created_at"`
	// VMState is the VM's state when the snapshot was taken.
	VMState string `json:"vm_state"`
	// SizeBytes is the space the snapshot holds on the host as its driver
	// tells it (0: it cannot tell).
	SizeBytes int64 `json:"size_bytes,omitempty"`
}

// SnapshotRequest is POST /v1/vms/{id}/snapshot.
type SnapshotRequest struct {
	// Tag names the snapshot: 1 to 64 letters, digits, '.', '_', '-', starting
	// with a letter or digit, unique per VM.
	Tag string `json:"tag"`
	// Memory takes a memory snapshot (driver capability memory_snapshots)
	// instead of a disk snapshot (disk_snapshots).
	Memory bool `json:"memory,omitempty"`
}

// RestoreRequest is POST /v1/vms/{id}/restore.
type RestoreRequest struct {
	Tag string `json:"tag"`
}

// CloneRequest is POST /v1/vms/{id}/clone: a new VM, started, whose disk is
// the source's at a snapshot (or as it is, when the source does not run).
type CloneRequest struct {
	// Name is the clone's name, unique on the node like any VM's.
	Name string `json:"name"`
	// Snapshot is the source's snapshot tag to clone; empty for its current disk.
	Snapshot string            `json:"snapshot,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// ResumeMemory resumes the clone from Snapshot's memory instead of
	// booting it (a memory snapshot the driver can resume from); the guest
	// keeps its own idea of its identity (MAC, machine id, host name).
	ResumeMemory bool `json:"resume_memory,omitempty"`
}
