package sdk

import (
	"time"

	"github.com/fluxvm/fluxvm/billing"
)

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
	// Networks names the node's network plugins that are up ("netns"):
	// a node with one can put VMs in their tenant's network.
	Networks []string `json:"networks,omitempty"`
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
	Nested  bool `json:"nested,omitempty"`
	Display bool `json:"display,omitempty"`
	// Network is "user" (QEMU's NAT), "none" or "tenant" (the tenant's
	// own network); empty is "tenant" for a tenant while the policy's
	// isolate_tenant_networks is on, else "user" (docs/networks.md).
	Network string `json:"network,omitempty"`
	// Reschedulable lets a drain recreate the VM on another node (without
	// its disk state); only such VMs have their create request kept.
	Reschedulable bool `json:"reschedulable,omitempty"`
	// Pool takes the VM from the named warm pool (its image and size).
	Pool string `json:"pool,omitempty"`
	// SSHAuthorizedKeys are OpenSSH public keys the guest agent installs
	// in ~/.ssh/authorized_keys of the catalog image's ssh_user; see
	// CheckSSHAuthorizedKeys for the limits.
	SSHAuthorizedKeys []string `json:"ssh_authorized_keys,omitempty"`
	// Volumes are the names or ids of the tenant's volumes to attach (at
	// most 2, each free): the VM is pinned to their node (docs/volumes.md).
	Volumes []string `json:"volumes,omitempty"`
	// Networks are the names of the tenant's overlays the VM joins (one is
	// built: the VM's one NIC is in it). The VM must name its Node, a member
	// of the overlay.
	Networks []string `json:"networks,omitempty"`
}

// Placement says why central put a VM where it did.
type Placement struct {
	Reason string `json:"reason"`
	// Considered holds the chosen node's verdict and, on a fleet of more
	// than 10 nodes, those of the best-scored other fitting nodes, 10 in
	// all, in name order (a refusal, NoPlacementBody, lists every node).
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
	// FromPool names the warm pool the VM was taken from (empty: booted
	// for this launch).
	FromPool string `json:"from_pool,omitempty"`
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
	// ImageName is the catalog image the VM was launched from (empty for a
	// VM central did not launch); VM.Image is the node's path of it.
	ImageName string `json:"image_name,omitempty"`
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

// FleetHealth is GET /healthz: whether this central can serve.
type FleetHealth struct {
	// Status is "ok", or "degraded" when etcd does not answer (then
	// Health returns it with an *APIError of status 503).
	Status  string `json:"status"`
	Version string `json:"version"`
	// Etcd is "ok" or "unavailable".
	Etcd string `json:"etcd"`
	// Leader says whether this central runs the background loops now.
	Leader bool `json:"leader"`
}

// Node states in central.
const (
	NodeUp   = "up"
	NodeDown = "down"
)

// FleetNode is a node as central keeps it (GET /fleet/nodes), rewritten by
// each heartbeat.
type FleetNode struct {
	Name   string            `json:"name"`
	URL    string            `json:"url"`
	Labels map[string]string `json:"labels,omitempty"`
	// Capacity is what the node offers VMs (its total less what its config
	// keeps for the host) and what it reported free.
	Capacity    FleetNodeCapacity `json:"capacity"`
	Drivers     []FleetNodeDriver `json:"drivers,omitempty"`
	Fingerprint map[string]string `json:"fingerprint,omitempty"`
	// LastHeartbeat is when the node last reported.
	LastHeartbeat time.Time `json:"last_heartbeat"`
	// State is NodeUp, or NodeDown after three missed heartbeats.
	State        string `json:"state"`
	Cordoned     bool   `json:"cordoned"`
	Draining     bool   `json:"draining"`
	ScrubPending bool   `json:"scrub_pending"`
	// LeasedBy is the tenant holding the node's active lease, and LeaseID
	// that lease ("" when the node is not leased).
	LeasedBy string `json:"leased_by,omitempty"`
	LeaseID  string `json:"lease_id,omitempty"`
	// GuestOS lists the guests the node's healthy drivers run.
	GuestOS []string `json:"guest_os,omitempty"`
	Nested  bool     `json:"nested"`
	// Networks names the network plugins up at the node's last heartbeat
	// (none: the node cannot take a VM in a tenant network).
	Networks []string `json:"networks,omitempty"`
	// VMs are every VM of the node's last heartbeat.
	VMs []HeartbeatVM `json:"vms,omitempty"`
	// Enrolled is a node that heartbeats with its own credential (fluxvm-agent
	// node enroll): central calls it only through its channel, without the
	// operator's token.
	Enrolled bool `json:"enrolled,omitempty"`
}

// FleetNodeCapacity is a node's capacity as central keeps it.
type FleetNodeCapacity struct {
	Total Resources `json:"total"`
	Free  Resources `json:"free"`
}

// FleetNodeDriver is one hypervisor plugin of a node as central keeps it.
type FleetNodeDriver struct {
	Name string `json:"name"`
	// Health is healthy, unhealthy, undetected or down.
	Health    string `json:"health"`
	Simulated bool   `json:"simulated,omitempty"`
}

// LeasedNode is what a tenant sees of a node it leases (GET
// /fleet/nodes/{name} with a tenant's token): its size, what central
// counts free, its drivers and the lease; never its address or labels.
// The fields it shares with FleetNode decode into one too (GetNode).
type LeasedNode struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Capacity's Free is what central counts free: VMs running and
	// reserved through central, or what the node reports, whichever is more.
	Capacity FleetNodeCapacity `json:"capacity"`
	Drivers  []FleetNodeDriver `json:"drivers"`
	GuestOS  []string          `json:"guest_os"`
	Nested   bool              `json:"nested"`
	LeaseID  string            `json:"lease_id"`
	// VMs counts the VMs of the node's last heartbeat.
	VMs int `json:"vms"`
}

// FleetNodeList is GET /fleet/nodes.
type FleetNodeList struct {
	Nodes []FleetNode `json:"nodes"`
}

// VMSize is the largest VM of one guest OS a node can take now.
type VMSize struct {
	Node      string `json:"node"`
	VCPUs     int64  `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
}

// NodeCapacity is one node the caller may place on and what is free there
// (built by the scheduler's Capacity, with the same rules as a placement).
type NodeCapacity struct {
	Node string `json:"node"`
	Mac  bool   `json:"mac"`
	// Leased is true when the calling tenant leases this host.
	Leased bool `json:"leased"`
	// Linux and MacOS say which of the caller's guests the node may take.
	Linux bool `json:"linux"`
	MacOS bool `json:"macos"`
	// Free is what is left; MacOSSlots is 0 where MacOS is false.
	Free Resources `json:"free"`
	// MacOSSlots is how many macOS guests the Mac takes in all (the
	// licence's two at most); 0 where MacOS is false.
	MacOSSlots int64 `json:"macos_slots,omitempty"`
}

// CapacityReport is GET /fleet/capacity: what the caller could launch now.
type CapacityReport struct {
	// Tenant the report is for, "" for the operator.
	Tenant string `json:"tenant"`
	// LargestLinux is the node with the most free memory (then vCPUs) that
	// takes the caller's Linux guests; zero when none can take one.
	LargestLinux VMSize `json:"largest_linux"`
	// LargestMacOS is the same for macOS guests, on Macs with a free slot.
	LargestMacOS VMSize `json:"largest_macos"`
	// MacOSSlotsFree sums the free macOS slots the caller may use: under
	// require_lease_for_macos, those on the Macs it leases.
	MacOSSlotsFree int64 `json:"macos_slots_free"`
	// Nodes lists every node the caller may place on, sorted by name; nodes
	// taking nothing (down, cordoned, draining, scrub pending, or barred by
	// a lease) are left out.
	Nodes []NodeCapacity `json:"nodes"`
}

// Quota names, the keys of Quotas and QuotaPatch.
const (
	QuotaMaxVMs            = "max_vms"
	QuotaMaxVCPUs          = "max_vcpus"
	QuotaMaxMemoryMiB      = "max_memory_mib"
	QuotaMaxLeasedHosts    = "max_leased_hosts"
	QuotaMaxSnapshotsPerVM = "max_snapshots_per_vm"
	QuotaMaxVolumeGiB      = "max_volume_gib"
)

// Quotas limit a tenant. A zero MaxVMs, MaxVCPUs, MaxMemoryMiB,
// MaxLeasedHosts or MaxVolumeGiB is no limit. A nil MaxSnapshotsPerVM
// follows the policy's; an explicit 0 turns snapshots off for the tenant.
type Quotas struct {
	MaxVMs            int64  `json:"max_vms,omitempty"`
	MaxVCPUs          int64  `json:"max_vcpus,omitempty"`
	MaxMemoryMiB      int64  `json:"max_memory_mib,omitempty"`
	MaxLeasedHosts    int64  `json:"max_leased_hosts,omitempty"`
	MaxSnapshotsPerVM *int64 `json:"max_snapshots_per_vm,omitempty"`
	MaxVolumeGiB      int64  `json:"max_volume_gib,omitempty"`
}

// QuotaPatch changes some of a tenant's quotas, keyed by the Quota*
// names: a number sets one, a nil value removes it (no limit; for
// max_snapshots_per_vm, the policy's), and a quota not in the map stays.
type QuotaPatch map[string]*int64

// Tenant is a customer of the fleet. Its token is never shown again after
// CreateTenant and RotateTenantToken.
type Tenant struct {
	// ID is "t-" and 16 hex digits.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Disabled tenants are refused (403).
	Disabled  bool      `json:"disabled"`
	Quota     Quotas    `json:"quota"`
	CreatedAt time.Time `json:"created_at"`
	// BudgetMonthly is the tenant's monthly budget in the price list's
	// currency (nil: none). It only informs: nothing is stopped.
	BudgetMonthly *billing.Micros `json:"budget_monthly,omitempty"`
}

// TenantList is GET /fleet/tenants.
type TenantList struct {
	Tenants []Tenant `json:"tenants"`
}

// CreateTenantRequest is POST /fleet/tenants.
type CreateTenantRequest struct {
	// Name is unique: 1-64 letters, digits, '.', '_' or '-'; "me" is reserved.
	Name  string `json:"name"`
	Quota Quotas `json:"quota"`
}

// UpdateTenantRequest is PATCH /fleet/tenants/{id}: nil fields stay as
// they are.
type UpdateTenantRequest struct {
	Name     *string    `json:"name,omitempty"`
	Disabled *bool      `json:"disabled,omitempty"`
	Quota    QuotaPatch `json:"quota,omitempty"`
}

// TenantWithToken answers CreateTenant and RotateTenantToken. Token is in
// no other answer, ever: central keeps only its SHA-256.
type TenantWithToken struct {
	Tenant Tenant `json:"tenant"`
	// Token is the tenant's fvt_ bearer token.
	Token string `json:"token"`
	// Note is central's reminder to store the token now.
	Note string `json:"note"`
}

// APIKeyPrefix starts every named API key, as fvt_ starts a tenant's
// primary token; central and fluxctl tell the two apart by it.
const APIKeyPrefix = "fvk_"

// DefaultKeyExpiresDays is how long a key works when CreateKeyRequest does
// not say.
const DefaultKeyExpiresDays = 90

// APIKey is one of a tenant's named API keys: a bearer credential central
// takes for the tenant itself (its quotas, its objects), with a name the
// activity log records, so that a pipeline or a colleague has a secret of
// its own that can be revoked by itself. The key itself is shown only once,
// by CreateKey; central keeps only its SHA-256.
type APIKey struct {
	// ID is "key-" and 16 hex digits.
	ID string `json:"id"`
	// Name is unique within the tenant (see CreateKeyRequest.Name).
	Name string `json:"name"`
	// ReadOnly keys may only read: any method but GET and HEAD is refused.
	ReadOnly  bool      `json:"read_only"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the key stops working; zero: it never expires.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// LastUsedAt is when the key was last used, to within a minute; zero:
	// never.
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
}

// APIKeyList is GET /fleet/tenants/me/keys and /fleet/tenants/{id}/keys.
type APIKeyList struct {
	Keys []APIKey `json:"keys"`
}

// CreateKeyRequest is POST /fleet/tenants/me/keys (the tenant's primary
// token) and /fleet/tenants/{id}/keys (the operator).
type CreateKeyRequest struct {
	// Name is 1-63 letters, digits, '.', '_' or '-', starting with a letter
	// or digit, unique within the tenant, and not of a key id's form
	// (key- and 16 hex digits), so that a key is revoked by either.
	Name     string `json:"name"`
	ReadOnly bool   `json:"read_only,omitempty"`
	// ExpiresDays is how many days the key works: nil is
	// DefaultKeyExpiresDays, 0 never expires; at most 3650.
	ExpiresDays *int `json:"expires_days,omitempty"`
}

// APIKeyWithToken answers CreateKey. Token is in no other answer, ever:
// central keeps only its SHA-256.
type APIKeyWithToken struct {
	Key APIKey `json:"key"`
	// Token is the key: fvk_ and 43 characters, sent as a bearer token.
	Token string `json:"token"`
	// Note is central's reminder to store the key now.
	Note string `json:"note"`
}

// Role is what a member of a tenant may do there; each role may do all the
// ones before it may, and more.
type Role string

// The roles, least first.
const (
	// RoleViewer looks: the tenant's VMs, usage, bills and activity.
	RoleViewer Role = "viewer"
	// RoleMember also launches, controls, runs commands in and deletes VMs.
	RoleMember Role = "member"
	// RoleAdmin also manages leases, warm pools, keys, members and the
	// budget, but neither makes nor changes an owner.
	RoleAdmin Role = "admin"
	// RoleOwner may do everything in the tenant, other owners included.
	RoleOwner Role = "owner"
)

// Roles lists the roles, least first.
var Roles = []Role{RoleViewer, RoleMember, RoleAdmin, RoleOwner}

// Rank orders roles (viewer 1 to owner 4); 0 for anything else.
func (r Role) Rank() int {
	for i, x := range Roles {
		if r == x {
			return i + 1
		}
	}
	return 0
}

// Member is a person of a tenant's team: they sign in with the company's
// identity provider by Email and get Role in the tenant.
type Member struct {
	// Email is matched lowercase; one person may be in several tenants.
	Email string `json:"email"`
	Role  Role   `json:"role"`
	// AddedBy says who added them: "operator", "token" (the tenant's
	// primary token), "key:<name>" or a member's email.
	AddedBy string    `json:"added_by"`
	AddedAt time.Time `json:"added_at"`
	// LastSignInAt is their last sign-in to this tenant; zero: never.
	LastSignInAt time.Time `json:"last_sign_in_at,omitzero"`
}

// MemberList is GET /fleet/tenants/me/members and
// /fleet/tenants/{id}/members.
type MemberList struct {
	Members []Member `json:"members"`
}

// AddMemberRequest is POST /fleet/tenants/me/members and
// /fleet/tenants/{id}/members.
type AddMemberRequest struct {
	// Email is at most 254 characters; it is kept lowercase.
	Email string `json:"email"`
	Role  Role   `json:"role"`
}

// MemberRoleRequest is PATCH …/members/{email}.
type MemberRoleRequest struct {
	Role Role `json:"role"`
}

// AuthConfig is GET /auth/config: whether the console offers sign-in with
// the company's identity provider.
type AuthConfig struct {
	SSO bool `json:"sso"`
	// ProviderName labels the sign-in button ("Sign in with Okta").
	ProviderName string `json:"provider_name,omitempty"`
	// LoginURL is where the browser starts a sign-in (add ?tenant=T to
	// pick a team).
	LoginURL string `json:"login_url,omitempty"`
}

// ConsoleSession is GET /auth/session: who the browser's console session
// is for, now (POST /auth/logout answers it signed out).
type ConsoleSession struct {
	SignedIn bool   `json:"signed_in"`
	Email    string `json:"email,omitempty"`
	// Operator sessions have no tenant and no role.
	Operator   bool   `json:"operator,omitempty"`
	TenantID   string `json:"tenant_id,omitempty"`
	TenantName string `json:"tenant_name,omitempty"`
	// Role is the member's role in the tenant now.
	Role      Role      `json:"role,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Usage is an amount of VMs, vCPUs, memory and macOS guests.
type Usage struct {
	VMs       int64 `json:"vms"`
	VCPUs     int64 `json:"vcpus"`
	MemoryMiB int64 `json:"memory_mib"`
	MacOS     int64 `json:"macos"`
}

// TenantUsage is what a tenant has in use, checked against its quota:
// running VMs, creates in flight (Reserved), and their sum (Total).
type TenantUsage struct {
	Running  Usage `json:"running"`
	Reserved Usage `json:"reserved"`
	Total    Usage `json:"total"`
}

// TenantMe is GET /fleet/tenants/me: the calling tenant, what it uses and
// its effective snapshot limit.
type TenantMe struct {
	Tenant Tenant      `json:"tenant"`
	Usage  TenantUsage `json:"usage"`
	// MaxSnapshotsPerVM is the limit that applies: the tenant's quota, else
	// the policy's.
	MaxSnapshotsPerVM int64 `json:"max_snapshots_per_vm"`
	// Billing is what the month under way has cost so far, against the
	// budget.
	Billing *Budget `json:"billing,omitempty"`
}

// TunnelPolicy is the policy's tunnels block.
type TunnelPolicy struct {
	Enabled bool `json:"enabled"`
	// Ports are single ports and inclusive ranges ("22", "1024-65535").
	Ports              []string `json:"ports"`
	IdleTimeoutMinutes int      `json:"idle_timeout_minutes"`
	MaxLifetimeMinutes int      `json:"max_lifetime_minutes"`
	MaxPerTenant       int      `json:"max_per_tenant"`
}

// Policy is the operator's fleet-wide rules (GET/PUT /fleet/policy). PUT
// replaces the whole document: get it, change a field, put it back.
type Policy struct {
	RequireLeaseForMacOS bool `json:"require_lease_for_macos"`
	ExclusiveLeasedHosts bool `json:"exclusive_leased_hosts"`
	// MinLeaseHours below 24 is raised to 24.
	MinLeaseHours int `json:"min_lease_hours"`
	// LedgerRetentionDays drops ended ledger entries older than this (0
	// keeps all).
	LedgerRetentionDays            int          `json:"ledger_retention_days"`
	IsolateTenantNetworks          bool         `json:"isolate_tenant_networks"`
	TenantSubnetPrefix             string       `json:"tenant_subnet_prefix"`
	AllowSharedPoolClaims          bool         `json:"allow_shared_pool_claims"`
	SignupRequireEmailVerification bool         `json:"signup_require_email_verification"`
	MaxSnapshotsPerVM              int64        `json:"max_snapshots_per_vm"`
	OperatorEmails                 []string     `json:"operator_emails"`
	Tunnels                        TunnelPolicy `json:"tunnels"`
	// Egress is the fleet-wide egress floor of tenant networks: every node
	// enforces it, and a tenant network's own policy may tighten it, never
	// loosen it. Absent: open, nothing blocked.
	Egress *EgressPolicy `json:"egress,omitempty"`
	// FleetEgress is, on a member central, its fleet owner's floor and
	// what tenant networks here get under it. Read-only: central fills it
	// on GET and ignores it on PUT (so a document read can be put back).
	FleetEgress *FleetEgress `json:"fleet_egress,omitempty"`
}

// Image is a catalog entry: a disk the operator has put on the nodes,
// launched by name.
type Image struct {
	// Name is what FleetCreateVMRequest.Image gives.
	Name        string `json:"name"`
	DisplayName string `json:"display_name,omitempty"`
	// GuestOS is "linux" or "macos".
	GuestOS string `json:"guest_os"`
	// Image is the disk's path on the nodes.
	Image string `json:"image"`
	// VCPUs and MemoryMiB are the size a launch gets unless it asks for
	// another (central fills 4 and 8192 when left 0).
	VCPUs     int64 `json:"vcpus"`
	MemoryMiB int64 `json:"memory_mib"`
	// Source says where the image came from (an OCI reference, a URL).
	Source string `json:"source,omitempty"`
	// SSHUser is the image's login name (central fills "admin").
	SSHUser string `json:"ssh_user"`
}

// ImageList is GET /fleet/images.
type ImageList struct {
	Images []Image `json:"images"`
}

// Event is one change, or refused request, recorded in central's activity
// log.
type Event struct {
	Time time.Time `json:"time"`
	// Who is "operator" or "tenant:<id>".
	Who string `json:"who"`
	// Tenant is the tenant's id, for a tenant's event.
	Tenant string `json:"tenant,omitempty"`
	// Actor names who did it for people: "operator", or the tenant's name
	// when the event was recorded.
	Actor string `json:"actor,omitempty"`
	// Key is the name of the tenant's API key the request came with ("":
	// the tenant's primary token, or the operator).
	Key string `json:"key,omitempty"`
	// User is the email of the person who signed in to the console and
	// made the request in their session ("": not made in a session).
	User   string `json:"user,omitempty"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Target is the name or id the change was about.
	Target string `json:"target,omitempty"`
	// Action is what was asked, in words: "launch vm web-1", "run in
	// web-1", "cordon node mac-3".
	Action string `json:"action,omitempty"`
	// Status is the HTTP status central answered.
	Status int `json:"status"`
	// Suppressed, when set, makes the event a summary: the principal went
	// over its activity budget and this many requests, from Time to Until,
	// were counted rather than recorded; Method, Path, Action, Key and
	// Status are the last one's.
	Suppressed int       `json:"suppressed,omitempty"`
	Until      time.Time `json:"until,omitzero"`
	// Tunnel is set on a tunnel's CLOSE event (method CLOSE).
	Tunnel *TunnelEnd `json:"tunnel,omitempty"`
}

// EventList is GET /fleet/events.
type EventList struct {
	Events []Event `json:"events"`
}

// EventQuery narrows ListEvents.
type EventQuery struct {
	// Limit is how many of the newest events (0: central's default, 100).
	Limit int
	// Tenant is a tenant id or name (operator only; a tenant sees its own).
	Tenant string
}

// ReconcileReport says what one reconcile pass saw and did.
type ReconcileReport struct {
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// NodesChecked are the nodes whose VM lists were compared with the ledger.
	NodesChecked []string `json:"nodes_checked"`
	// NodesSkipped were down or did not answer: a VM out of sight is not gone.
	NodesSkipped []SkippedNode `json:"nodes_skipped"`
	// Ended are ledger entries closed because their node no longer lists the VM.
	Ended []LedgerChange `json:"ended"`
	// Adopted are VMs a node runs with a tenant stamp that the ledger lacked.
	Adopted []LedgerChange `json:"adopted"`
	// Dropped counts ended entries older than ledger_retention_days.
	Dropped int `json:"dropped"`
	// CountersFixed are usage counters the recount found wrong and rewrote.
	CountersFixed []CounterFix `json:"counters_fixed"`
	// LeasesEnded are the ids of leases whose end time passed, ended by this
	// pass (their nodes are scrub pending and the lessee's VMs there deleted).
	LeasesEnded []string `json:"leases_ended"`
}

// SkippedNode is a node a reconcile pass could not check.
type SkippedNode struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// LedgerChange is one ledger entry a reconcile pass closed or wrote.
type LedgerChange struct {
	Entry  string `json:"entry"`
	Node   string `json:"node"`
	VMID   string `json:"vm_id"`
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
}

// CounterFix is a usage counter the recount rewrote.
type CounterFix struct {
	Scope string `json:"scope"`
	Name  string `json:"name"`
	Was   Usage  `json:"was"`
	Now   Usage  `json:"now"`
}
