package sdk

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/billing"
)

// Leases, cordons, drains, scrubs, warm pools and the rebalance plan: the
// fleet API's routes for whole hosts and for VMs kept warm.

// Lease is a tenant's sole use of one whole node (docs/leases.md).
type Lease struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	Node   string `json:"node"`
	// StartedAt is when the lease began; EndsAt when it ends on its own
	// (zero: open-ended, until released).
	StartedAt time.Time `json:"started_at"`
	EndsAt    time.Time `json:"ends_at,omitzero"`
	// MinEnd is the earliest release (StartedAt + the policy's
	// min_lease_hours); billing counts at least until it.
	MinEnd time.Time `json:"min_end"`
	// PricePerHour is what an hour of the lease costs in Currency, fixed
	// when it started, so a later price list does not change it; PriceClass
	// is the Mac class that set it ("" when the Mac met no class and
	// mac_per_hour applied).
	PricePerHour billing.Micros `json:"price_per_hour"`
	PriceClass   string         `json:"price_class,omitempty"`
	Currency     string         `json:"currency,omitempty"`
	// ReleasedAt is when the lease ended (zero: active), EndReason why:
	// "released", "released-forced" or "expired".
	ReleasedAt time.Time `json:"released_at,omitzero"`
	EndReason  string    `json:"end_reason,omitempty"`
	// VMsRemoved is set once central deleted the lessee's VMs on the node
	// after the end.
	VMsRemoved bool `json:"vms_removed"`
	Active     bool `json:"active"`
}

// LeaseList is GET /fleet/leases.
type LeaseList struct {
	Leases []Lease `json:"leases"`
}

// CreateLeaseRequest is POST /fleet/leases. Empty fields leave the choice
// to central: the smallest eligible Mac, open-ended.
type CreateLeaseRequest struct {
	// Node names the node to lease; empty picks the smallest eligible one.
	Node string `json:"node,omitempty"`
	// Hours sets an end (at least min_lease_hours); 0 is open-ended.
	Hours        int               `json:"hours,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Nested       bool              `json:"nested,omitempty"`
	MinMemoryMiB int64             `json:"min_memory_mib,omitempty"`
	MinVCPUs     int64             `json:"min_vcpus,omitempty"`
	// Tenant (id or name; required for the operator), AllowBusy (lease a
	// node that runs VMs) and AnyNode (not only Macs) are the operator's.
	Tenant    string `json:"tenant,omitempty"`
	AllowBusy bool   `json:"allow_busy,omitempty"`
	AnyNode   bool   `json:"any_node,omitempty"`
}

// LeaseQuery narrows ListLeases: Tenant (operator only, id or name) and
// Active (leave out ended leases).
type LeaseQuery struct {
	Tenant string
	Active bool
}

// CreateLease leases a whole node. No eligible node is IsConflict; the
// max_leased_hosts quota IsQuota.
func (f *FleetClient) CreateLease(ctx context.Context, req CreateLeaseRequest) (*Lease, error) {
	var out Lease
	if err := f.c.call(ctx, http.MethodPost, "/fleet/leases", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListLeases lists leases, newest first: a tenant's own, or every lease for
// the operator.
func (f *FleetClient) ListLeases(ctx context.Context, q LeaseQuery) ([]Lease, error) {
	v := url.Values{}
	if q.Tenant != "" {
		v.Set("tenant", q.Tenant)
	}
	if q.Active {
		v.Set("active", "true")
	}
	var out LeaseList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/leases", v, nil, &out); err != nil {
		return nil, err
	}
	if out.Leases == nil {
		out.Leases = []Lease{}
	}
	return out.Leases, nil
}

// GetLease returns one lease; another tenant's is IsNotFound.
func (f *FleetClient) GetLease(ctx context.Context, id string) (*Lease, error) {
	var out Lease
	if err := f.c.call(ctx, http.MethodGet, "/fleet/leases/"+url.PathEscape(id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReleaseLease ends a lease: its node becomes scrub pending and the
// lessee's VMs there are deleted. Before MinEnd it is IsConflict unless the
// operator forces it (force is the operator's: IsForbidden for a tenant).
func (f *FleetClient) ReleaseLease(ctx context.Context, id string, force bool) (*Lease, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	var out Lease
	if err := f.c.call(ctx, http.MethodPost, "/fleet/leases/"+url.PathEscape(id)+"/release", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func nodePath(name, action string) string {
	return "/fleet/nodes/" + url.PathEscape(name) + "/" + action
}

// CordonNode stops new VMs and leases landing on a node; what runs stays
// (operator only).
func (f *FleetClient) CordonNode(ctx context.Context, name string) (*FleetNode, error) {
	var out FleetNode
	if err := f.c.call(ctx, http.MethodPost, nodePath(name, "cordon"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UncordonNode ends a node's cordon and drain (operator only).
func (f *FleetClient) UncordonNode(ctx context.Context, name string) (*FleetNode, error) {
	var out FleetNode
	if err := f.c.call(ctx, http.MethodPost, nodePath(name, "uncordon"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Drain modes.
const (
	// DrainCordon keeps every VM.
	DrainCordon = "cordon"
	// DrainEvictEphemeral deletes VMs with a TTL or the label
	// fluxvm.dev/ephemeral=true.
	DrainEvictEphemeral = "evict-ephemeral"
	// DrainReschedule also recreates reschedulable VMs on other nodes.
	DrainReschedule = "reschedule"
)

// DrainRequest is POST /fleet/nodes/{name}/drain: Mode (empty: DrainCordon)
// and Force, which a leased node needs.
type DrainRequest struct {
	Mode  string
	Force bool
}

// DrainVM is what a drain did to one VM.
type DrainVM struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Tenant    string `json:"tenant,omitempty"`
	Ephemeral bool   `json:"ephemeral"`
	// Action is "kept", "deleted", "moved" (recreated on MovedTo), "failed"
	// (Error says why) or "pending" (a move under way).
	Action  string `json:"action"`
	MovedTo string `json:"moved_to,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Drain is a node's latest drain.
type Drain struct {
	Node       string    `json:"node"`
	Mode       string    `json:"mode"`
	Forced     bool      `json:"forced"`
	StartedAt  time.Time `json:"started_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	Finished   bool      `json:"finished"`
	FinishedAt time.Time `json:"finished_at,omitzero"`
	VMs        []DrainVM `json:"vms"`
	// Draining is whether the node is still marked draining (uncordon ends
	// it); only DrainStatus reports it.
	Draining *bool `json:"draining,omitempty"`
}

// DrainNode cordons a node, marks it draining and handles its VMs by mode;
// the answer is what it did (operator only). A leased node without Force is
// IsConflict.
func (f *FleetClient) DrainNode(ctx context.Context, name string, req DrainRequest) (*Drain, error) {
	q := url.Values{}
	if req.Mode != "" {
		q.Set("mode", req.Mode)
	}
	if req.Force {
		q.Set("force", "true")
	}
	var out Drain
	if err := f.c.call(ctx, http.MethodPost, nodePath(name, "drain"), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DrainStatus returns a node's latest drain; a node never drained is
// IsNotFound (operator only).
func (f *FleetClient) DrainStatus(ctx context.Context, name string) (*Drain, error) {
	var out Drain
	if err := f.c.call(ctx, http.MethodGet, nodePath(name, "drain"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ScrubResult is POST /fleet/nodes/{name}/scrub.
type ScrubResult struct {
	Node         string   `json:"node"`
	ScrubPending bool     `json:"scrub_pending"`
	Deleted      []string `json:"deleted"`
	// WorkspacesRemoved are VM folders no VM owned that the node destroyed
	// (force), as driver/id; Proof says what the node showed at the end.
	WorkspacesRemoved []string `json:"workspaces_removed"`
	Proof             string   `json:"proof"`
}

// ScrubNode clears a node's scrub_pending once it lists no VM; force
// deletes the VMs still there (operator only). A node with VMs and no
// force, or under a lease, is IsConflict.
func (f *FleetClient) ScrubNode(ctx context.Context, name string, force bool) (*ScrubResult, error) {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	var out ScrubResult
	if err := f.c.call(ctx, http.MethodPost, nodePath(name, "scrub"), q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RebalanceQuery is GET /fleet/rebalance/plan's parameters; zero values
// leave central's defaults (0.85 and 10).
type RebalanceQuery struct {
	HighWater float64
	MaxMoves  int
}

// RebalanceMove is one move of a rebalance plan.
type RebalanceMove struct {
	VM     string `json:"vm"`
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// RebalancePlan is a dry run of a rebalance: nothing is changed.
type RebalancePlan struct {
	HighWater float64         `json:"high_water"`
	MaxMoves  int             `json:"max_moves"`
	Moves     []RebalanceMove `json:"moves"`
	// NodesSkipped are overloaded nodes whose VMs could not be listed.
	NodesSkipped []SkippedNode `json:"nodes_skipped"`
}

// RebalancePlan asks which VMs could leave the nodes above the high-water
// mark, and where each would fit (operator only).
func (f *FleetClient) RebalancePlan(ctx context.Context, q RebalanceQuery) (*RebalancePlan, error) {
	v := url.Values{}
	if q.HighWater > 0 {
		v.Set("high_water", strconv.FormatFloat(q.HighWater, 'f', -1, 64))
	}
	if q.MaxMoves > 0 {
		v.Set("max_moves", strconv.Itoa(q.MaxMoves))
	}
	var out RebalancePlan
	if err := f.c.call(ctx, http.MethodGet, "/fleet/rebalance/plan", v, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Pool is a warm pool: booted VMs of one image and size, kept ready to be
// handed out by a launch with Pool set (docs/warm-pools.md).
type Pool struct {
	Name string `json:"name"`
	// Tenant owns the pool; "" is a shared pool of the operator.
	Tenant    string `json:"tenant,omitempty"`
	Image     string `json:"image"`
	GuestOS   string `json:"guest_os"`
	VCPUs     int64  `json:"vcpus"`
	MemoryMiB int64  `json:"memory_mib"`
	// Size is how many warm VMs the pool keeps at least; MaxSize how far it
	// may grow toward recent demand.
	Size         int               `json:"size"`
	MaxSize      int               `json:"max_size"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	CreatedAt    time.Time         `json:"created_at"`
	Deleting     bool              `json:"deleting,omitempty"`
	// Blocked says why the pool could not be filled on the last try.
	Blocked      string    `json:"blocked,omitempty"`
	BlockedSince time.Time `json:"blocked_since,omitzero"`
	// Shared: the pool is the operator's, for the tenants the policy lets
	// claim from shared pools (Tenant is "").
	Shared bool `json:"shared"`
	// Mode is "running" (members are booted, idle VMs holding their
	// memory) or "snapshot" (one booted guest is kept saved, no VM running,
	// and each claim resumes a copy of it).
	Mode string `json:"mode"`
}

// PoolList is GET /fleet/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// CreatePoolRequest is POST /fleet/pools. VCPUs and MemoryMiB default to
// the image's; MaxSize to Size.
type CreatePoolRequest struct {
	Name         string            `json:"name"`
	Image        string            `json:"image"`
	VCPUs        int64             `json:"vcpus,omitempty"`
	MemoryMiB    int64             `json:"memory_mib,omitempty"`
	Size         *int              `json:"size,omitempty"`
	MaxSize      int               `json:"max_size,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Mode is "running" (the default) or "snapshot".
	Mode string `json:"mode,omitempty"`
	// Tenant (id or name) is the operator's: a pool made for a tenant;
	// without it the operator makes a shared pool.
	Tenant string `json:"tenant,omitempty"`
}

// PoolMember is one VM of a pool.
type PoolMember struct {
	Name      string     `json:"name"`
	Node      string     `json:"node"`
	VMID      string     `json:"vm_id,omitempty"`
	State     string     `json:"state"`
	CreatedAt time.Time  `json:"created_at"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	ClaimedAt *time.Time `json:"claimed_at,omitempty"`
}

// PoolStatus is GET /fleet/pools/{name}/status.
type PoolStatus struct {
	Name    string `json:"name"`
	Tenant  string `json:"tenant,omitempty"`
	Shared  bool   `json:"shared"`
	Mode    string `json:"mode"`
	Size    int    `json:"size"`
	MaxSize int    `json:"max_size"`
	// Target is what the pool keeps now: Size, or more (up to MaxSize)
	// after recent claims.
	Target        int    `json:"target"`
	RecentClaims  int    `json:"recent_claims"`
	DemandWindowS int    `json:"demand_window_seconds"`
	Growing       bool   `json:"growing"`
	Warm          int    `json:"warm"`
	Booting       int    `json:"booting"`
	Retiring      int    `json:"retiring"`
	Deleting      bool   `json:"deleting"`
	Blocked       string `json:"blocked,omitempty"`
	// Members are the pool's VMs that are not handed out, and those handed
	// out within the demand window (state claimed).
	Members []PoolMember `json:"members"`
}

func poolPath(name, tenant string, action ...string) (string, url.Values) {
	p := "/fleet/pools/" + url.PathEscape(name)
	for _, a := range action {
		p += "/" + a
	}
	var q url.Values
	if tenant != "" {
		q = url.Values{"tenant": {tenant}}
	}
	return p, q
}

// ListPools lists a tenant's pools and the shared pools it may launch
// from; for the operator, every pool.
func (f *FleetClient) ListPools(ctx context.Context) ([]Pool, error) {
	var out PoolList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/pools", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Pools == nil {
		out.Pools = []Pool{}
	}
	return out.Pools, nil
}

// CreatePool makes a warm pool; central then boots its members. A name in
// use is IsConflict.
func (f *FleetClient) CreatePool(ctx context.Context, req CreatePoolRequest) (*Pool, error) {
	var out Pool
	if err := f.c.call(ctx, http.MethodPost, "/fleet/pools", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPool returns a pool. tenant is the operator's: it names the tenant
// (id or name) whose pool is meant; empty means the caller's own or a
// shared one.
func (f *FleetClient) GetPool(ctx context.Context, name, tenant string) (*Pool, error) {
	p, q := poolPath(name, tenant)
	var out Pool
	if err := f.c.call(ctx, http.MethodGet, p, q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPoolStatus returns a pool's members and what it aims for (tenant as in
// GetPool).
func (f *FleetClient) GetPoolStatus(ctx context.Context, name, tenant string) (*PoolStatus, error) {
	p, q := poolPath(name, tenant, "status")
	var out PoolStatus
	if err := f.c.call(ctx, http.MethodGet, p, q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePool stops a pool handing out VMs and deletes its unclaimed ones,
// then the pool (tenant as in GetPool). done is false when central
// accepted the delete and finishes it in the background.
func (f *FleetClient) DeletePool(ctx context.Context, name, tenant string) (done bool, err error) {
	p, q := poolPath(name, tenant)
	resp, err := f.c.do(ctx, http.MethodDelete, p, q, nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorReply))
	return resp.StatusCode != http.StatusAccepted, nil
}
