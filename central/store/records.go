package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Guest operating systems central knows. They match the driver contract's guest_os values.
const (
	GuestLinux = "linux"
	GuestMacOS = "macos"
)

// Node states: sdk's.
const (
	NodeUp   = sdk.NodeUp
	NodeDown = sdk.NodeDown
)

// nameRE is the rule for every name that becomes a key segment (nodes, tenants, images):
// 1-64 letters, digits, '.', '_' and '-', starting with a letter or digit. It keeps '/' out of keys.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ValidName reports whether name is a valid node, tenant or image name.
func ValidName(name string) bool { return nameRE.MatchString(name) }

func checkName(kind, name string) error {
	if !ValidName(name) {
		return fmt.Errorf("%w: %s name %q: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalid, kind, jsonapi.Echo(name))
	}
	return nil
}

// Node is a registered host, rewritten by each heartbeat: the node the API shows
// (sdk.FleetNode, the one definition of its fields, with its capacity in sdk.Resources, its
// drivers and the VMs of its last heartbeat) and nothing else, since central keeps nothing
// about a node that the operator does not see. Capacity's Free is what the node sees free,
// which includes VMs not created through central. LeasedBy and LeaseID are written only by
// CreateLease and EndLease, in the same transaction as the lease, so a Reserve that compares
// the node record's revision always decides on the current lessee. The store's rules about a
// node are its methods here.
type Node struct {
	sdk.FleetNode
}

// Unavailable says why n takes no new VM and no lease now ("" when it
// does): it is down, cordoned, draining, or waiting for a scrub. It is the
// one rule for "can this node be used": the reservation and lease
// transactions (Reserve, CreateLease), lease choice (central/leases) and
// placement (through placement.SchedulerNode) all decide with it.
func (n *Node) Unavailable() string {
	switch {
	case n.State == NodeDown:
		return "not reporting"
	case n.Cordoned:
		return "cordoned"
	case n.Draining:
		return "draining"
	case n.ScrubPending:
		return "waiting for a scrub"
	}
	return ""
}

// Healthy says whether one of n's drivers reports itself healthy.
func (n *Node) Healthy() bool {
	for _, d := range n.Drivers {
		if d.Health == "healthy" {
			return true
		}
	}
	return false
}

// Validate checks what the store relies on.
func (n *Node) Validate() error {
	if err := checkName("node", n.Name); err != nil {
		return err
	}
	if n.State != "" && n.State != NodeUp && n.State != NodeDown {
		return fmt.Errorf("%w: node state %q: want %q or %q", ErrInvalid, jsonapi.Echo(n.State), NodeUp, NodeDown)
	}
	t := n.Capacity.Total
	if t.VCPUs < 0 || t.MemoryMiB < 0 || t.MacOSSlots < 0 {
		return fmt.Errorf("%w: node %s: negative capacity", ErrInvalid, n.Name)
	}
	return nil
}

// Documents stored as the API shows them
//
// The fleet policy (sdk.Policy with its tunnels block), a tenant's quotas
// (sdk.Quotas) and a catalog image (sdk.Image) are documents the operator
// writes whole: PUT /fleet/policy and PUT /fleet/images/{name} replace them,
// and quotas come in with the tenant. Central keeps nothing about them that
// the operator does not see, so the store persists the sdk type itself, on
// purpose: one definition, no conversion at the edge, and the record's JSON
// is the wire document's. The store adds its rules as functions over the sdk
// type (checkPolicy, checkQuotas, checkImage and the defaults they fill,
// clampPolicy on read). A change to one of these sdk types changes etcd's
// layout too: TestStoredRecordsReadAndWriteAsBefore reads records of the
// existing layout (testdata/stored) and fails on any change that would not
// read them, and such a change needs a read-side migration here. The price
// list (billing.Prices, billing.go) is stored the same way. Records that keep
// more than the API shows, or less (Tenant, Lease, Pool, Drain, Node), embed
// their sdk type instead: docs/design/004-central-layers.md, "Wire types and
// records".

// checkQuotas refuses negative limits. For max_vms, max_vcpus, max_memory_mib,
// max_leased_hosts and max_volume_gib, 0 (or unset) means no limit: the spec creates tenants
// with only some quotas given ("--max-vms 20 --max-memory-mib 98304") and says "no limit
// when unset" for volumes, so an absent quota must not mean "nothing allowed".
// max_snapshots_per_vm is different because the spec makes 0 mean "snapshots off": nil
// follows the policy's max_snapshots_per_vm, and an explicit 0 turns snapshots off for this
// tenant (SnapshotsPerVM).
func checkQuotas(q sdk.Quotas) error {
	for _, f := range []struct {
		name string
		v    int64
	}{{"max_vms", q.MaxVMs}, {"max_vcpus", q.MaxVCPUs}, {"max_memory_mib", q.MaxMemoryMiB},
		{"max_leased_hosts", q.MaxLeasedHosts}, {"max_volume_gib", q.MaxVolumeGiB}} {
		if f.v < 0 {
			return fmt.Errorf("%w: quota %s is %d; use 0 for no limit", ErrInvalid, f.name, f.v)
		}
	}
	if q.MaxSnapshotsPerVM != nil && *q.MaxSnapshotsPerVM < 0 {
		return fmt.Errorf("%w: quota max_snapshots_per_vm is %d; use 0 to turn snapshots off", ErrInvalid, *q.MaxSnapshotsPerVM)
	}
	return nil
}

// SnapshotsPerVM is a tenant's snapshot limit given its quotas and the policy.
func SnapshotsPerVM(q sdk.Quotas, p sdk.Policy) int64 {
	if q.MaxSnapshotsPerVM != nil {
		return *q.MaxSnapshotsPerVM
	}
	return p.MaxSnapshotsPerVM
}

// Tenant is a customer of the cloud as the store keeps it: the tenant the API shows
// (sdk.Tenant, the one definition of its fields) and, stored beside them, what no answer
// carries: its token, only as a SHA-256 hex digest.
type Tenant struct {
	sdk.Tenant
	TokenSHA256 string `json:"token_sha256"`
}

// Budget is the tenant's monthly budget (0: none). Nothing is stopped when it is spent;
// central warns at 80 % and 100 % (budget.near, budget.over).
func (t *Tenant) Budget() billing.Micros {
	if t.BudgetMonthly == nil {
		return 0
	}
	return *t.BudgetMonthly
}

// SetBudget sets the monthly budget; 0 removes it, so the record has no budget_monthly and
// the API shows none.
func (t *Tenant) SetBudget(monthly billing.Micros) {
	t.BudgetMonthly = nil
	if monthly != 0 {
		t.BudgetMonthly = &monthly
	}
}

var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks the name, the token digest and the quotas.
func (t *Tenant) Validate() error {
	if err := checkName("tenant", t.Name); err != nil {
		return err
	}
	if !sha256HexRE.MatchString(t.TokenSHA256) {
		return fmt.Errorf("%w: tenant %s: token_sha256 must be 64 lowercase hex digits", ErrInvalid, t.Name)
	}
	if t.Budget() < 0 {
		return fmt.Errorf("%w: tenant %s: budget_monthly must not be negative", ErrInvalid, t.Name)
	}
	return checkQuotas(t.Quota)
}

// MinLeaseHoursFloor is Apple's 24-hour minimum; lower policy values are raised to it.
const MinLeaseHoursFloor = 24

// DefaultPolicy is the policy with the spec's defaults; a missing policy record reads as it.
// The tunnels block takes the values of the spec's example ("enabled": true, ports 22 and
// 1024-65535, 60/480 minutes, 20 per tenant).
func DefaultPolicy() sdk.Policy {
	return sdk.Policy{
		RequireLeaseForMacOS:           true,
		ExclusiveLeasedHosts:           true,
		MinLeaseHours:                  24,
		LedgerRetentionDays:            400,
		IsolateTenantNetworks:          false,
		TenantSubnetPrefix:             "10.230",
		AllowSharedPoolClaims:          false,
		SignupRequireEmailVerification: true,
		MaxSnapshotsPerVM:              20,
		OperatorEmails:                 []string{},
		Tunnels: sdk.TunnelPolicy{
			Enabled:            true,
			Ports:              []string{"22", "1024-65535"},
			IdleTimeoutMinutes: 60,
			MaxLifetimeMinutes: 480,
			MaxPerTenant:       20,
		},
	}
}

// checkPolicy normalises the policy (min_lease_hours below 24 is raised to 24, as the spec
// says, rather than refused) and checks every value's range.
func checkPolicy(p *sdk.Policy) error {
	p.FleetEgress = nil // read-only: the owner's, kept by central/fleet
	if p.MinLeaseHours < MinLeaseHoursFloor {
		p.MinLeaseHours = MinLeaseHoursFloor
	}
	if p.LedgerRetentionDays < 0 {
		return fmt.Errorf("%w: ledger_retention_days %d: use 0 to keep all", ErrInvalid, p.LedgerRetentionDays)
	}
	if err := checkSubnetPrefix(p.TenantSubnetPrefix); err != nil {
		return err
	}
	if err := sdk.CheckEgressPolicy(p.Egress); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if p.MaxSnapshotsPerVM < 0 {
		return fmt.Errorf("%w: max_snapshots_per_vm %d: use 0 to turn snapshots off", ErrInvalid, p.MaxSnapshotsPerVM)
	}
	if p.OperatorEmails == nil {
		p.OperatorEmails = []string{}
	}
	for _, e := range p.OperatorEmails {
		if at := strings.IndexByte(e, '@'); at < 1 || at == len(e)-1 || strings.ContainsAny(e, " \t\r\n,") {
			return fmt.Errorf("%w: operator_emails: %q is not an email address", ErrInvalid, jsonapi.Echo(e))
		}
	}
	t := &p.Tunnels
	if len(t.Ports) > 64 {
		return fmt.Errorf("%w: tunnels.ports has %d entries, at most 64", ErrInvalid, len(t.Ports))
	}
	for _, r := range t.Ports {
		if err := checkPortRange(r); err != nil {
			return err
		}
	}
	if t.Ports == nil {
		t.Ports = []string{}
	}
	if t.IdleTimeoutMinutes < 1 || t.IdleTimeoutMinutes > 1440 {
		return fmt.Errorf("%w: tunnels.idle_timeout_minutes %d: want 1-1440", ErrInvalid, t.IdleTimeoutMinutes)
	}
	if t.MaxLifetimeMinutes < 1 || t.MaxLifetimeMinutes > 10080 {
		return fmt.Errorf("%w: tunnels.max_lifetime_minutes %d: want 1-10080", ErrInvalid, t.MaxLifetimeMinutes)
	}
	if t.MaxPerTenant < 1 || t.MaxPerTenant > 1000 {
		return fmt.Errorf("%w: tunnels.max_per_tenant %d: want 1-1000", ErrInvalid, t.MaxPerTenant)
	}
	return nil
}

// checkSubnetPrefix accepts "a.b" with two octets: tenant n gets a.b.n.0/24.
func checkSubnetPrefix(s string) error {
	parts := strings.Split(s, ".")
	ok := len(parts) == 2
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 255 || p != strconv.Itoa(n) {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("%w: tenant_subnet_prefix %q: want two octets like 10.230", ErrInvalid, jsonapi.Echo(s))
	}
	return nil
}

// checkPortRange accepts "N" or "A-B" with 1 <= A <= B <= 65535.
func checkPortRange(r string) error {
	lo, hi, isRange := strings.Cut(r, "-")
	if !isRange {
		hi = lo
	}
	a, err1 := strconv.Atoi(lo)
	b, err2 := strconv.Atoi(hi)
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return fmt.Errorf("%w: tunnels.ports entry %q: want a port or an inclusive range like 1024-65535", ErrInvalid, jsonapi.Echo(r))
	}
	return nil
}

// DecodePolicy reads a policy document over base (pass DefaultPolicy() so omitted fields take
// their defaults, or the current policy for patch semantics). Unknown fields and trailing
// data are refused, and the result is validated.
func DecodePolicy(r io.Reader, base sdk.Policy) (sdk.Policy, error) {
	p := base
	p.OperatorEmails = append([]string(nil), base.OperatorEmails...)
	p.Tunnels.Ports = append([]string(nil), base.Tunnels.Ports...)
	if err := decodeStrict(r, &p); err != nil {
		return sdk.Policy{}, fmt.Errorf("%w: policy: %v", ErrInvalid, err)
	}
	if err := checkPolicy(&p); err != nil {
		return sdk.Policy{}, err
	}
	return p, nil
}

// decodeStrict decodes one JSON value, refusing unknown fields and anything after it.
func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON value")
	}
	return nil
}

// DecodeStrict is decodeStrict for request bodies of other packages' records in this one
// (tenants, images, quotas): unknown fields and trailing data are refused.
func DecodeStrict(data []byte, v any) error { return decodeStrict(bytes.NewReader(data), v) }

// Image defaults the console offers when the operator gives none (spec, "Image catalog").
const (
	DefaultImageVCPUs     = 4
	DefaultImageMemoryMiB = 8192
	DefaultImageSSHUser   = "admin"
)

// checkImage fills a catalog entry's defaults (vcpus 4, memory_mib 8192, ssh_user admin) and
// checks it.
func checkImage(im *sdk.Image) error {
	if err := checkName("image", im.Name); err != nil {
		return err
	}
	if im.VCPUs == 0 {
		im.VCPUs = DefaultImageVCPUs
	}
	if im.MemoryMiB == 0 {
		im.MemoryMiB = DefaultImageMemoryMiB
	}
	if im.SSHUser == "" {
		im.SSHUser = DefaultImageSSHUser
	}
	if im.GuestOS != GuestLinux && im.GuestOS != GuestMacOS {
		return fmt.Errorf("%w: image %s: guest_os %q: want %q or %q", ErrInvalid, im.Name, jsonapi.Echo(im.GuestOS), GuestLinux, GuestMacOS)
	}
	if strings.TrimSpace(im.Image) == "" {
		return fmt.Errorf("%w: image %s: image (the disk's path on the Macs) is required", ErrInvalid, im.Name)
	}
	if im.VCPUs < 1 || im.VCPUs > 1024 {
		return fmt.Errorf("%w: image %s: vcpus %d: want 1-1024", ErrInvalid, im.Name, im.VCPUs)
	}
	if im.MemoryMiB < 64 || im.MemoryMiB > 16<<20 {
		return fmt.Errorf("%w: image %s: memory_mib %d: want 64-16777216", ErrInvalid, im.Name, im.MemoryMiB)
	}
	return nil
}

// LedgerEntry records one VM created through central: who, where, how big, from when to when.
// It is the source of truth for quotas and metering.
type LedgerEntry struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant,omitempty"` // empty: the operator
	Node      string    `json:"node"`
	VMID      string    `json:"vm_id"`
	Name      string    `json:"name"`
	VCPUs     int64     `json:"vcpus"`
	MemoryMiB int64     `json:"memory_mib"`
	GuestOS   string    `json:"guest_os"`
	Image     string    `json:"image,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"` // zero: running
	EndReason string    `json:"end_reason,omitempty"`
	// Replaces is the entry of the VM a drain recreated as this one (drain
	// mode reschedule): a drain taken up again finds the copy it made.
	Replaces string `json:"replaces,omitempty"`
}

// Running reports whether the entry has not ended.
func (e *LedgerEntry) Running() bool { return e.EndedAt.IsZero() }

// usage is what the entry counts for while it runs.
func (e *LedgerEntry) usage() Usage {
	u := Usage{VMs: 1, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB}
	if e.GuestOS == GuestMacOS {
		u.MacOS = 1
	}
	return u
}

// Reservation is quota and node capacity held for a create in flight. It lives under keys
// attached to the reserving central's etcd lease, so it vanishes when that central dies.
type Reservation struct {
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant,omitempty"` // empty: the operator
	Node      string    `json:"node"`
	VCPUs     int64     `json:"vcpus"`
	MemoryMiB int64     `json:"memory_mib"`
	MacOS     bool      `json:"macos"`
	CreatedAt time.Time `json:"created_at"`
	Lease     int64     `json:"lease"` // the etcd lease holding it
	// Replaces is the running entry this VM is to replace (a reschedule):
	// the tenant's quota does not count that entry while this is reserved.
	Replaces string `json:"replaces,omitempty"`
}

// Size is what the reservation holds: one VM, its vCPUs, memory and macOS slot.
func (r *Reservation) Size() Usage { return r.usage() }

func (r *Reservation) usage() Usage {
	u := Usage{VMs: 1, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB}
	if r.MacOS {
		u.MacOS = 1
	}
	return u
}

// Usage is an amount of VMs, vCPUs, memory and macOS guests.
type Usage struct {
	VMs       int64 `json:"vms"`
	VCPUs     int64 `json:"vcpus"`
	MemoryMiB int64 `json:"memory_mib"`
	MacOS     int64 `json:"macos"`
}

// Add is u + v, field by field.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.VMs + v.VMs, u.VCPUs + v.VCPUs, u.MemoryMiB + v.MemoryMiB, u.MacOS + v.MacOS}
}

// Sub is u - v, field by field.
func (u Usage) Sub(v Usage) Usage {
	return Usage{u.VMs - v.VMs, u.VCPUs - v.VCPUs, u.MemoryMiB - v.MemoryMiB, u.MacOS - v.MacOS}
}

// QuotaError says which quota a reservation would break. It wraps ErrQuota.
type QuotaError struct {
	Field string // "max_vms", "max_vcpus" or "max_memory_mib"
	Limit int64
	Used  int64 // running plus reserved
	Asked int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("quota %s exceeded: %d in use of %d, asked for %d more", e.Field, e.Used, e.Limit, e.Asked)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

// CapacityError says why a node cannot take a reservation. It wraps ErrNoCapacity.
type CapacityError struct {
	Node     string
	Resource string // "vcpus", "memory_mib", "macos_slots", or "state" for an unschedulable node
	Free     int64
	Asked    int64
	Reason   string // for Resource "state": down, cordoned, draining, scrub pending
}

func (e *CapacityError) Error() string {
	if e.Resource == "state" {
		return fmt.Sprintf("node %s takes no new VMs: %s", e.Node, e.Reason)
	}
	return fmt.Sprintf("node %s has %d %s free, asked for %d", e.Node, e.Free, e.Resource, e.Asked)
}

func (e *CapacityError) Unwrap() error { return ErrNoCapacity }
