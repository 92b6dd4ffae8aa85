// Package pools keeps warm pools (docs/warm-pools.md): the leader's pool loop
// boots, watches and retires each pool's VMs so that it holds its target of
// booted, idle ones, and finishes pools being deleted. Launches and macOS
// checkouts take a warm VM from a pool in one etcd transaction
// (store.ClaimMember) instead of booting one.
package pools

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

const (
	// Label is the label every pool VM carries: the pool's name.
	Label = "fluxvm.dev/pool"
	// DefaultEvery is how often the pool loop looks at every pool (a claim
	// or a change on the leading central wakes it at once).
	DefaultEvery = 2 * time.Second
	// DemandWindow is how far back claims count as recent demand: a pool
	// grows (up to max_size) to as many warm VMs as were claimed in it.
	DemandWindow = 15 * time.Minute
	// readyTimeout bounds how long a pool VM may take to answer.
	readyTimeout = 5 * time.Minute
	// MaxNameLen keeps pool-<name>-<8 hex> a valid VM name (63).
	MaxNameLen = 49
	// ModeRunning: members are booted, idle VMs.
	ModeRunning = "running"
	// ModeSnapshot: one saved template, a resumed copy per claim
	// (snapshot.go).
	ModeSnapshot = "snapshot"
)

// Conditions callers branch on.
var (
	// ErrNoImage: the pool names no image of the catalog.
	ErrNoImage = errors.New("no such catalog image")
	// ErrNoMacOSPool: no shared pool of macOS guests matches a checkout.
	ErrNoMacOSPool = errors.New("no shared pool of macOS guests")
	// ErrNoIdle: the matching macOS pools have no warm VM now.
	ErrNoIdle = errors.New("no warm macOS VM is idle now")
)

func storeErr(op string, err error) error { return &store.OpError{Op: op, Err: err} }

// MismatchError is a launch naming a pool whose VMs are of another image
// or size than it asks for.
type MismatchError struct{ Pool store.Pool }

func (e *MismatchError) Error() string {
	return fmt.Sprintf("pool %s keeps %s VMs of %d vCPUs and %d MiB", e.Pool.Name, e.Pool.Image, e.Pool.VCPUs, e.Pool.MemoryMiB)
}

// Store is what warm pools need of central's store.
type Store interface {
	// ID is this central's id, written on the members its loop creates.
	ID() string
	// GetPolicy reads the fleet policy (allow_shared_pool_claims, lease rules).
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	// GetImage reads a catalog image.
	GetImage(ctx context.Context, name string) (*sdk.Image, error)
	// GetNode reads a node record.
	GetNode(ctx context.Context, name string) (*store.Node, error)
	// CreatePool stores a new pool (store.ErrExists when the name is taken).
	CreatePool(ctx context.Context, p *store.Pool) error
	// GetPool reads a pool of a tenant ("" a shared pool).
	GetPool(ctx context.Context, tenant, name string) (*store.Pool, error)
	// ListPools reads every pool.
	ListPools(ctx context.Context) ([]store.Pool, error)
	// UpdatePool changes a pool in one transaction.
	UpdatePool(ctx context.Context, tenant, name string, fn func(*store.Pool) error) (*store.Pool, error)
	// RemovePool deletes a pool's record.
	RemovePool(ctx context.Context, tenant, name string) error
	// ListMembers reads a pool's members.
	ListMembers(ctx context.Context, tenant, pool string) ([]store.PoolMember, error)
	// CreateMember records a member being created.
	CreateMember(ctx context.Context, m *store.PoolMember) error
	// UpdateMember changes a member that is in one of the states from.
	UpdateMember(ctx context.Context, tenant, pool, id string, from []string, fn func(*store.PoolMember)) (*store.PoolMember, error)
	// DeleteMember forgets a member.
	DeleteMember(ctx context.Context, tenant, pool, id string) error
	// ClaimMember hands out one warm member in one transaction.
	ClaimMember(ctx context.Context, req store.ClaimRequest) (*store.Claim, error)
	// GetEntry reads a ledger entry.
	GetEntry(ctx context.Context, id string) (*store.LedgerEntry, error)
	// EndEntry ends a running ledger entry.
	EndEntry(ctx context.Context, id, reason string, at time.Time) (*store.LedgerEntry, error)
	// Commit turns a reservation into a running ledger entry.
	Commit(ctx context.Context, res *store.Reservation, e store.LedgerEntry) (*store.LedgerEntry, error)
	// Release gives a reservation's room back.
	Release(ctx context.Context, res *store.Reservation) error
	// Reserve holds room on one node and the tenant's quota (a snapshot
	// pool's copy is made on its template's node).
	Reserve(ctx context.Context, req store.ReserveRequest) (*store.Reservation, error)
}

// Service keeps the warm pools. It is safe for concurrent use; Loop runs on
// the leader only.
type Service struct {
	st    Store
	nodes *nodecall.Caller
	place *placement.Placer
	now   func() time.Time
	log   hclog.Logger

	// The loop's state in this process: the members it is creating or
	// watching (so a pass neither counts them twice nor cleans them up),
	// and the channel that wakes it.
	mu       sync.Mutex
	inflight map[string]string // member id -> its pool's key (inflightKey)
	kick     chan struct{}
}

// New makes the warm pool service.
func New(st Store, nodes *nodecall.Caller, place *placement.Placer, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, nodes: nodes, place: place, now: now, log: log,
		inflight: map[string]string{}, kick: make(chan struct{}, 1)}
}

// Kick wakes this central's pool loop (a no-op when it does not lead: the
// leader's next tick sees the change).
func (s *Service) Kick() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Lookup finds the pool name of owner (a tenant's id, "" the shared pools).
// With orShared (a tenant asking), a shared pool of that name is found too
// when the policy lets tenants claim from shared pools. store.ErrNotFound
// when there is none.
func (s *Service) Lookup(ctx context.Context, owner, name string, orShared bool) (*store.Pool, error) {
	if !store.ValidName(name) {
		return nil, store.ErrNotFound
	}
	pool, err := s.st.GetPool(ctx, owner, name)
	if errors.Is(err, store.ErrNotFound) && owner != "" && orShared {
		pol, perr := s.st.GetPolicy(ctx)
		if perr != nil {
			return nil, storeErr("read the policy", perr)
		}
		if !pol.AllowSharedPoolClaims {
			return nil, store.ErrNotFound
		}
		pool, err = s.st.GetPool(ctx, "", name)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, storeErr("read pool "+name, err)
	}
	return pool, err
}

// Usable is the pool a launch may take from: tenant's own pool of that
// name, else a shared one it may claim from ("" tenant: the operator, who
// launches from shared pools). Pools being deleted are not usable.
func (s *Service) Usable(ctx context.Context, tenant, name string) (*store.Pool, bool) {
	if !store.ValidName(name) {
		return nil, false
	}
	if tenant != "" {
		if pool, err := s.st.GetPool(ctx, tenant, name); err == nil && !pool.Deleting {
			return pool, true
		}
		pol, err := s.st.GetPolicy(ctx)
		if err != nil || !pol.AllowSharedPoolClaims {
			return nil, false
		}
	}
	pool, err := s.st.GetPool(ctx, "", name)
	if err != nil || pool.Deleting {
		return nil, false
	}
	return pool, true
}

// List is the pools a caller sees: the operator (tenant "") every pool; a
// tenant its own and, when the policy allows claims from them, the shared
// ones.
func (s *Service) List(ctx context.Context, tenant string) ([]store.Pool, error) {
	all, err := s.st.ListPools(ctx)
	if err != nil {
		return nil, storeErr("list pools", err)
	}
	shared := tenant == ""
	if tenant != "" {
		pol, err := s.st.GetPolicy(ctx)
		if err != nil {
			return nil, storeErr("read the policy", err)
		}
		shared = pol.AllowSharedPoolClaims
	}
	out := []store.Pool{}
	for _, pl := range all {
		if tenant == "" || pl.Tenant == tenant || pl.Tenant == "" && shared {
			out = append(out, pl)
		}
	}
	return out, nil
}

// Create makes pool p of catalog image p.Image: its guest OS, and its vCPUs
// and memory where p leaves them 0, come from the image; max_size 0 is its
// size. ErrNoImage when the catalog has no such image; store.ErrExists and
// store.ErrInvalid as the store says.
func (s *Service) Create(ctx context.Context, p store.Pool) (*store.Pool, error) {
	if p.Image == "" || !store.ValidName(p.Image) {
		return nil, ErrNoImage
	}
	switch p.Mode {
	case "":
		p.Mode = ModeRunning
	case ModeRunning, ModeSnapshot:
	default:
		return nil, fmt.Errorf("%w: mode %q is not one of running, snapshot", store.ErrInvalid, p.Mode)
	}
	im, err := s.st.GetImage(ctx, p.Image)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNoImage
	}
	if err != nil {
		return nil, storeErr("read image "+p.Image, err)
	}
	p.Image, p.GuestOS, p.CreatedAt = im.Name, im.GuestOS, s.now().UTC()
	if p.VCPUs == 0 {
		p.VCPUs = im.VCPUs
	}
	if p.MemoryMiB == 0 {
		p.MemoryMiB = im.MemoryMiB
	}
	if p.GuestOS == "" {
		p.GuestOS = store.GuestLinux
	}
	if p.Mode == ModeSnapshot && p.GuestOS != store.GuestLinux {
		return nil, fmt.Errorf("%w: snapshot mode keeps Linux guests only (a saved guest is resumed by the QEMU driver); image %s is %s", store.ErrInvalid, p.Image, p.GuestOS)
	}
	if p.MaxSize == 0 {
		p.MaxSize = p.Size
	}
	if err := s.st.CreatePool(ctx, &p); err != nil {
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrInvalid) {
			return nil, err
		}
		return nil, storeErr("store the pool", err)
	}
	s.Kick()
	return &p, nil
}

// Resize sets a pool's size and max_size (nil: unchanged); the loop boots
// or retires members to match. A pool that did not grow (max_size ==
// size) keeps not growing when only its size changes. store.ErrNotFound
// when the pool is gone or being deleted; store.ErrInvalid for sizes out
// of range.
func (s *Service) Resize(ctx context.Context, pool *store.Pool, size, maxSize *int) (*store.Pool, error) {
	out, err := s.st.UpdatePool(ctx, pool.Tenant, pool.Name, func(p *store.Pool) error {
		if p.Deleting {
			return fmt.Errorf("pool %s is being deleted: %w", p.Name, store.ErrNotFound)
		}
		grew := p.MaxSize == p.Size
		if size != nil {
			p.Size = *size
			if grew && maxSize == nil || p.MaxSize < p.Size {
				p.MaxSize = p.Size
			}
		}
		if maxSize != nil {
			p.MaxSize = *maxSize
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalid):
		return nil, err
	case err != nil:
		return nil, storeErr("update the pool", err)
	}
	s.Kick()
	return out, nil
}

// Delete deletes a pool: it stops handing out VMs at once (claims compare
// the pool record), its VMs not handed out are deleted and then the pool.
// VMs already handed out are the claimers' and stay. done is false when
// the delete was cut short (a node that does not answer, a VM still being
// created): the pool loop finishes it. It runs on past ctx's end, for up to
// nodecall.CreateTimeout.
func (s *Service) Delete(ctx context.Context, pool *store.Pool) (done bool, err error) {
	marked, err := s.st.UpdatePool(ctx, pool.Tenant, pool.Name, func(p *store.Pool) error {
		p.Deleting = true
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, err
	}
	if err != nil {
		return false, storeErr("mark the pool deleted", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodecall.CreateTimeout)
	defer cancel()
	done, err = s.finishDelete(ctx, marked)
	if err != nil {
		s.log.Warn("delete pool; the pool loop finishes it", "pool", pool.Name, "error", err)
	}
	return done && err == nil, nil
}

// Status is what a pool holds now and what the loop keeps it at.
type Status struct {
	// Target is what the loop keeps now: size, or more (up to max_size)
	// when more were claimed within DemandWindow.
	Target       int
	RecentClaims int
	Growing      bool
	// Warm, Booting (or being created) and Retiring count the members.
	Warm, Booting, Retiring int
	// Members are those not handed out, and those handed out within the
	// demand window (state claimed).
	Members []store.PoolMember
}

// Status reads a pool's members and counts them.
func (s *Service) Status(ctx context.Context, pool *store.Pool) (*Status, error) {
	ms, err := s.st.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return nil, storeErr("read the pool's members", err)
	}
	recent := recentClaims(ms, s.now())
	out := &Status{Target: target(pool, recent), RecentClaims: recent, Members: ms}
	out.Growing = out.Target > pool.Size
	if pool.Mode == ModeSnapshot {
		out.Target, out.Growing = snapshotTarget(pool), false
	}
	for _, m := range ms {
		switch m.State {
		case store.MemberWarm:
			out.Warm++
		case store.MemberCreating, store.MemberBooting:
			out.Booting++
		case store.MemberRetiring:
			out.Retiring++
		}
	}
	return out, nil
}

// recentClaims counts the members handed out within the demand window.
func recentClaims(ms []store.PoolMember, now time.Time) int {
	n := 0
	for _, m := range ms {
		if m.State == store.MemberClaimed && now.Sub(m.ClaimedAt) < DemandWindow {
			n++
		}
	}
	return n
}

// target is how many warm (or booting) VMs the pool keeps now: its size,
// grown toward the recent claims up to max_size.
func target(p *store.Pool, recent int) int {
	return min(max(p.Size, recent), max(p.MaxSize, p.Size))
}

// ClaimRequest is a launch that a warm VM may serve.
type ClaimRequest struct {
	// Tenant launches ("" the operator).
	Tenant string
	// SharedClaims: a tenant may take from shared pools (the policy's
	// allow_shared_pool_claims); the operator always may.
	SharedClaims bool
	// Pool, when set, is the only pool to take from; else the caller's own
	// pools first, then shared ones.
	Pool string
	// Image (the catalog image's name), GuestOS, VCPUs and MemoryMiB are
	// what the launch asks for; a pool serves only its exact kind.
	Image     string
	GuestOS   string
	VCPUs     int64
	MemoryMiB int64
}

// Claimed is a warm VM handed out.
type Claimed struct {
	Pool   store.Pool
	Member store.PoolMember
	// VM is the VM as its node shows it now (or as the pool knew it, if
	// the node is slow to answer).
	VM *sdk.VM
}

// Claim takes a warm VM for a launch, or returns nil (and no error) when
// no pool can serve it now: the launch boots a VM instead (and a quota it
// breaks is reported then). With req.Pool set, store.ErrNotFound says the
// caller may not use that pool and *MismatchError that it keeps VMs of
// another kind.
func (s *Service) Claim(ctx context.Context, req ClaimRequest) (*Claimed, error) {
	var cands []store.Pool
	if req.Pool != "" {
		pool, ok := s.Usable(ctx, req.Tenant, req.Pool)
		if !ok {
			return nil, store.ErrNotFound
		}
		if pool.Image != req.Image || pool.VCPUs != req.VCPUs || pool.MemoryMiB != req.MemoryMiB {
			return nil, &MismatchError{Pool: *pool}
		}
		cands = []store.Pool{*pool}
	} else {
		all, err := s.st.ListPools(ctx)
		if err != nil {
			s.log.Warn("list pools for a launch; booting instead", "error", err)
			return nil, nil
		}
		shared := req.Tenant == "" || req.SharedClaims
		sort.SliceStable(all, func(i, j int) bool { return all[i].Tenant != "" && all[j].Tenant == "" }) // own pools first
		for _, pl := range all {
			mine := pl.Tenant != "" && pl.Tenant == req.Tenant
			if (mine || pl.Tenant == "" && shared) && !pl.Deleting && pl.Image == req.Image &&
				pl.VCPUs == req.VCPUs && pl.MemoryMiB == req.MemoryMiB && pl.GuestOS == req.GuestOS {
				cands = append(cands, pl)
			}
		}
	}
	for _, pl := range cands {
		if pl.Mode == ModeSnapshot {
			if c := s.claimSnapshot(ctx, pl, req); c != nil {
				return c, nil
			}
			continue
		}
		c, err := s.st.ClaimMember(ctx, store.ClaimRequest{PoolTenant: pl.Tenant, Pool: pl.Name, Tenant: req.Tenant, Now: s.now()})
		var qe *store.QuotaError
		switch {
		case err == nil:
		case errors.Is(err, store.ErrNoWarm), errors.Is(err, store.ErrNotFound), errors.As(err, &qe):
			continue // the next pool, or a cold launch (which says which quota)
		default:
			s.log.Warn("claim from pool; booting instead", "pool", pl.Name, "error", err)
			continue
		}
		s.Kick()
		return &Claimed{Pool: pl, Member: c.Member, VM: s.claimedVM(ctx, &pl, c)}, nil
	}
	return nil, nil
}

// claimedVM is a claimed member's VM as its node shows it now (or as the
// pool knew it, if the node is slow to answer).
func (s *Service) claimedVM(ctx context.Context, pool *store.Pool, c *store.Claim) *sdk.VM {
	m := c.Member
	vm := &sdk.VM{ID: m.VMID, Name: m.ID, GuestOS: pool.GuestOS, Image: c.Entry.Image, VCPUs: c.Entry.VCPUs, MemoryMiB: c.Entry.MemoryMiB,
		Network: "user", State: sdk.StateRunning, AgentReady: true, CreatedAt: m.CreatedAt, Labels: map[string]string{Label: pool.Name}}
	if n, err := s.st.GetNode(ctx, m.Node); err == nil {
		if nc, err := s.nodes.Client(n); err == nil {
			ctx, cancel := context.WithTimeout(ctx, nodecall.ListTimeout)
			if got, err := nc.GetVM(ctx, m.VMID); err == nil {
				vm = got
			}
			cancel()
		}
	}
	return vm
}

// InPool reports whether VM vmID is a member of the pool (tenant "": a
// shared pool) that was not handed out: warm, booting or retiring. A pool
// that cannot be read counts as not holding it.
func (s *Service) InPool(ctx context.Context, tenant, pool, vmID string) bool {
	ms, err := s.st.ListMembers(ctx, tenant, pool)
	if err != nil {
		return false
	}
	for _, m := range ms {
		if m.VMID == vmID && m.State != store.MemberClaimed {
			return true
		}
	}
	return false
}

// Checkout is a macOS VM checked out of the shared macOS pools.
type Checkout struct {
	Claimed
	// Node is where the VM runs; IdleOnNode is how many warm macOS VMs it
	// had before this one was taken.
	Node       string
	IdleOnNode int
}

// CheckoutMacOS takes, for the operator, a warm VM of the shared macOS
// pools (only of pool and of catalog image, when set) from the Mac with
// the most idle ones, so that load spreads over the Macs' two slots.
// ErrNoMacOSPool when no pool matches; ErrNoIdle when none has a warm VM.
func (s *Service) CheckoutMacOS(ctx context.Context, pool, image string) (*Checkout, error) {
	all, err := s.st.ListPools(ctx)
	if err != nil {
		return nil, storeErr("list pools", err)
	}
	// The shared macOS pools that match, and their warm members by node.
	byName := map[string]store.Pool{}
	idle := map[string]int{}
	perNode := map[string][]string{} // node -> pools with a warm member there
	for _, p := range all {
		if p.Tenant != "" || p.Deleting || p.GuestOS != store.GuestMacOS || pool != "" && p.Name != pool || image != "" && p.Image != image {
			continue
		}
		byName[p.Name] = p
		ms, err := s.st.ListMembers(ctx, "", p.Name)
		if err != nil {
			return nil, storeErr("list pool members", err)
		}
		for _, m := range ms {
			if m.State == store.MemberWarm {
				if idle[m.Node] == 0 || perNode[m.Node][len(perNode[m.Node])-1] != p.Name {
					perNode[m.Node] = append(perNode[m.Node], p.Name)
				}
				idle[m.Node]++
			}
		}
	}
	if len(byName) == 0 {
		return nil, ErrNoMacOSPool
	}
	nodes := make([]string, 0, len(idle))
	for n := range idle {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool {
		if idle[nodes[i]] != idle[nodes[j]] {
			return idle[nodes[i]] > idle[nodes[j]]
		}
		return nodes[i] < nodes[j]
	})
	for _, node := range nodes {
		for _, name := range perNode[node] {
			c, err := s.st.ClaimMember(ctx, store.ClaimRequest{Pool: name, Node: node, Now: s.now()})
			switch {
			case err == nil:
			case errors.Is(err, store.ErrNoWarm), errors.Is(err, store.ErrNotFound):
				continue // taken meanwhile: the next pool or node
			default:
				return nil, storeErr("check out a macOS vm", err)
			}
			s.Kick()
			p := byName[name]
			return &Checkout{Claimed: Claimed{Pool: p, Member: c.Member, VM: s.claimedVM(ctx, &p, c)}, Node: node, IdleOnNode: idle[node]}, nil
		}
	}
	return nil, ErrNoIdle
}
