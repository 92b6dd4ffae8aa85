package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Warm pools (docs/warm-pools.md): a pool keeps VMs of a catalog image
// booted and idle; a launch that a pool can serve takes one of them in one
// etcd transaction (store.ClaimMember) instead of booting a VM, and the
// leader's pool loop boots a replacement.

const (
	// PoolLabel is the label every pool VM carries: the pool's name.
	PoolLabel = "fluxvm.dev/pool"
	// DefaultPoolEvery is how often the pool loop looks at every pool (a
	// claim on the leading central wakes it at once).
	DefaultPoolEvery = 2 * time.Second
	// demandWindow is how far back claims count as recent demand: a pool
	// grows (up to max_size) to as many warm VMs as were claimed in it.
	demandWindow = 15 * time.Minute
	// poolReadyTimeout bounds how long a pool VM may take to answer.
	poolReadyTimeout = 5 * time.Minute
	// maxPoolNameLen keeps pool-<name>-<8 hex> a valid VM name (63).
	maxPoolNameLen = 49
	// poolModeRunning is the only mode built: members are running VMs.
	poolModeRunning = "running"
)

// poolRequest is POST /fleet/pools.
type poolRequest struct {
	Name         string            `json:"name"`
	Image        string            `json:"image"`
	VCPUs        int64             `json:"vcpus,omitempty"`
	MemoryMiB    int64             `json:"memory_mib,omitempty"`
	Size         *int              `json:"size,omitempty"`
	MaxSize      int               `json:"max_size,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// Tenant (id or name) is the operator's: a pool made for a tenant.
	// Without it the operator makes a shared pool.
	Tenant string `json:"tenant,omitempty"`
}

// poolPatch is PATCH /fleet/pools/{name}: size and max_size only (a pool
// of another image or size is another pool).
type poolPatch struct {
	Size    *int `json:"size,omitempty"`
	MaxSize *int `json:"max_size,omitempty"`
}

// poolView is a pool as the API shows it.
type poolView struct {
	store.Pool
	Shared bool   `json:"shared"`
	Mode   string `json:"mode"`
}

func viewPool(p store.Pool) poolView {
	return poolView{Pool: p, Shared: p.Tenant == "", Mode: poolModeRunning}
}

type poolList struct {
	Pools []poolView `json:"pools"`
}

// poolMemberView is one member in a pool's status.
type poolMemberView struct {
	Name      string     `json:"name"`
	Node      string     `json:"node"`
	VMID      string     `json:"vm_id,omitempty"`
	State     string     `json:"state"`
	CreatedAt time.Time  `json:"created_at"`
	ReadyAt   *time.Time `json:"ready_at,omitempty"`
	ClaimedAt *time.Time `json:"claimed_at,omitempty"`
}

// poolStatusView is GET /fleet/pools/{name}/status.
type poolStatusView struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	Shared bool   `json:"shared"`
	// Mode is "running": members are booted, idle VMs holding their memory.
	Mode    string `json:"mode"`
	Size    int    `json:"size"`
	MaxSize int    `json:"max_size"`
	// Target is what the loop keeps now: size, or more (up to max_size)
	// when more were claimed within the demand window.
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
	Members []poolMemberView `json:"members"`
}

// ---- routes ----

// poolOf finds the route's pool for the caller, or answers. A tenant sees
// its own pool of that name, else a shared one when the policy lets tenants
// claim from shared pools (read-only: shared says so); any other is a 404.
// The operator names a tenant's pool with ?tenant=, else a shared pool.
func (s *Server) poolOf(w http.ResponseWriter, r *http.Request) (*store.Pool, bool) {
	p := PrincipalOf(r.Context())
	name := mux.Vars(r)["name"]
	notFound := func() (*store.Pool, bool) {
		jsonapi.WriteError(w, http.StatusNotFound, "no pool "+jsonapi.Echo(name), "GET /fleet/pools lists the pools you may use")
		return nil, false
	}
	if !store.ValidName(name) {
		return notFound()
	}
	owner := tenantID(p)
	if p.Operator {
		if ref := r.URL.Query().Get("tenant"); ref != "" {
			t, err := s.findTenant(r.Context(), ref)
			if errors.Is(err, store.ErrNotFound) {
				return notFound()
			}
			if err != nil {
				s.storeError(w, "read tenant "+jsonapi.Echo(ref), err)
				return nil, false
			}
			owner = t.ID
		}
	}
	pool, err := s.opts.Store.GetPool(r.Context(), owner, name)
	if errors.Is(err, store.ErrNotFound) && owner != "" && !p.Operator {
		pol, perr := s.opts.Store.GetPolicy(r.Context())
		if perr != nil {
			s.storeError(w, "read the policy", perr)
			return nil, false
		}
		if !pol.AllowSharedPoolClaims {
			return notFound()
		}
		pool, err = s.opts.Store.GetPool(r.Context(), "", name)
	}
	if errors.Is(err, store.ErrNotFound) {
		return notFound()
	}
	if err != nil {
		s.storeError(w, "read pool "+name, err)
		return nil, false
	}
	return pool, true
}

// mayChange refuses a tenant's change of a shared pool (it only reads them).
func mayChange(w http.ResponseWriter, p Principal, pool *store.Pool) bool {
	if p.Tenant != nil && pool.Tenant != p.Tenant.ID {
		jsonapi.WriteError(w, http.StatusForbidden, "pool "+pool.Name+" is a shared pool of the operator",
			"tenants launch from shared pools but do not change them; make a pool of your own with POST /fleet/pools")
		return false
	}
	return true
}

// listPools is GET /fleet/pools: a tenant's own pools and the shared pools
// it may claim from; the operator's, every pool.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	all, err := s.opts.Store.ListPools(r.Context())
	if err != nil {
		s.storeError(w, "list pools", err)
		return
	}
	shared := p.Operator
	if !p.Operator {
		pol, err := s.opts.Store.GetPolicy(r.Context())
		if err != nil {
			s.storeError(w, "read the policy", err)
			return
		}
		shared = pol.AllowSharedPoolClaims
	}
	out := poolList{Pools: []poolView{}}
	for _, pl := range all {
		if p.Operator || pl.Tenant == tenantID(p) && pl.Tenant != "" || pl.Tenant == "" && shared {
			out.Pools = append(out.Pools, viewPool(pl))
		}
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// createPool is POST /fleet/pools.
func (s *Server) createPool(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	var req poolRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	owner := tenantID(p)
	if req.Tenant != "" {
		if !p.Operator {
			jsonapi.WriteError(w, http.StatusForbidden, "tenant is for the operator", "leave it out: your pools are your own")
			return
		}
		t, err := s.findTenant(r.Context(), req.Tenant)
		if errors.Is(err, store.ErrNotFound) {
			jsonapi.WriteError(w, http.StatusBadRequest, "no tenant "+jsonapi.Echo(req.Tenant), "GET /fleet/tenants lists the tenants, by id and name")
			return
		}
		if err != nil {
			s.storeError(w, "read tenant "+jsonapi.Echo(req.Tenant), err)
			return
		}
		owner = t.ID
	}
	bad := func(msg, hint string) { jsonapi.WriteError(w, http.StatusBadRequest, msg, hint) }
	switch {
	case !store.ValidName(req.Name) || len(req.Name) > maxPoolNameLen:
		bad(fmt.Sprintf("name %q is not a valid pool name", jsonapi.Echo(req.Name)),
			fmt.Sprintf("use 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", maxPoolNameLen))
		return
	case req.Size == nil:
		bad("size is required: how many warm VMs the pool keeps", "e.g. \"size\": 2")
		return
	case len(req.NodeSelector) > maxLabels:
		bad(fmt.Sprintf("at most %d node_selector entries", maxLabels), "trim them")
		return
	}
	names, err := s.catalogNames(r.Context())
	if err != nil {
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "cannot read the image catalog", "retry in a moment")
		return
	}
	im, err := s.opts.Store.GetImage(r.Context(), req.Image)
	if req.Image == "" || !store.ValidName(req.Image) || errors.Is(err, store.ErrNotFound) {
		bad(fmt.Sprintf("no image %q in the catalog", jsonapi.Echo(req.Image)), "a pool keeps VMs of a catalog image; catalog images: "+names)
		return
	}
	if err != nil {
		s.storeError(w, "read image "+req.Image, err)
		return
	}
	pool := store.Pool{Name: req.Name, Tenant: owner, Image: im.Name, GuestOS: im.GuestOS, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB,
		Size: *req.Size, MaxSize: req.MaxSize, NodeSelector: req.NodeSelector, CreatedAt: s.opts.Now().UTC()}
	if pool.VCPUs == 0 {
		pool.VCPUs = im.VCPUs
	}
	if pool.MemoryMiB == 0 {
		pool.MemoryMiB = im.MemoryMiB
	}
	if pool.GuestOS == "" {
		pool.GuestOS = store.GuestLinux
	}
	if pool.MaxSize == 0 {
		pool.MaxSize = pool.Size
	}
	err = s.opts.Store.CreatePool(r.Context(), &pool)
	switch {
	case errors.Is(err, store.ErrExists):
		jsonapi.WriteError(w, http.StatusConflict, "a pool named "+req.Name+" exists", "PATCH /fleet/pools/"+req.Name+" changes its size")
		return
	case errors.Is(err, store.ErrInvalid):
		invalid(w, err, specHint)
		return
	case err != nil:
		s.storeError(w, "store the pool", err)
		return
	}
	s.kickPools()
	w.Header().Set("Location", "/fleet/pools/"+pool.Name)
	jsonapi.Write(w, http.StatusCreated, viewPool(pool))
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	if pool, ok := s.poolOf(w, r); ok {
		jsonapi.Write(w, http.StatusOK, viewPool(*pool))
	}
}

// patchPool is PATCH /fleet/pools/{name}: a new size or max_size; the loop
// boots or retires members to match.
func (s *Server) patchPool(w http.ResponseWriter, r *http.Request) {
	pool, ok := s.poolOf(w, r)
	if !ok || !mayChange(w, PrincipalOf(r.Context()), pool) {
		return
	}
	var req poolPatch
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	out, err := s.opts.Store.UpdatePool(r.Context(), pool.Tenant, pool.Name, func(p *store.Pool) error {
		if p.Deleting {
			return fmt.Errorf("pool %s is being deleted: %w", p.Name, store.ErrNotFound)
		}
		grew := p.MaxSize == p.Size
		if req.Size != nil {
			p.Size = *req.Size
			if grew && req.MaxSize == nil || p.MaxSize < p.Size {
				p.MaxSize = p.Size
			}
		}
		if req.MaxSize != nil {
			p.MaxSize = *req.MaxSize
		}
		return nil
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no pool "+pool.Name, "GET /fleet/pools lists the pools you may use")
		return
	case errors.Is(err, store.ErrInvalid):
		invalid(w, err, specHint)
		return
	case err != nil:
		s.storeError(w, "update the pool", err)
		return
	}
	s.kickPools()
	jsonapi.Write(w, http.StatusOK, viewPool(*out))
}

// deletePool is DELETE /fleet/pools/{name}: the pool stops handing out VMs
// at once (claims compare the pool record), its unclaimed VMs are deleted
// and then the pool. VMs already handed out are the claimers' and stay. A
// delete cut short (a node that does not answer, a central that dies) is
// finished by the pool loop.
func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) {
	pool, ok := s.poolOf(w, r)
	if !ok || !mayChange(w, PrincipalOf(r.Context()), pool) {
		return
	}
	marked, err := s.opts.Store.UpdatePool(r.Context(), pool.Tenant, pool.Name, func(p *store.Pool) error {
		p.Deleting = true
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "no pool "+pool.Name, "GET /fleet/pools lists the pools you may use")
		return
	}
	if err != nil {
		s.storeError(w, "mark the pool deleted", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), nodecall.CreateTimeout)
	defer cancel()
	if done, err := s.finishPoolDelete(ctx, marked); err != nil || !done {
		if err != nil {
			s.log.Warn("delete pool; the pool loop finishes it", "pool", pool.Name, "error", err)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// poolStatus is GET /fleet/pools/{name}/status.
func (s *Server) poolStatus(w http.ResponseWriter, r *http.Request) {
	pool, ok := s.poolOf(w, r)
	if !ok {
		return
	}
	ms, err := s.opts.Store.ListMembers(r.Context(), pool.Tenant, pool.Name)
	if err != nil {
		s.storeError(w, "read the pool's members", err)
		return
	}
	now := s.opts.Now()
	recent := recentClaims(ms, now)
	out := poolStatusView{Name: pool.Name, Tenant: pool.Tenant, Shared: pool.Tenant == "", Mode: poolModeRunning,
		Size: pool.Size, MaxSize: pool.MaxSize, Target: poolTarget(pool, recent), RecentClaims: recent,
		DemandWindowS: int(demandWindow / time.Second), Deleting: pool.Deleting, Blocked: pool.Blocked, Members: []poolMemberView{}}
	out.Growing = out.Target > pool.Size
	for _, m := range ms {
		switch m.State {
		case store.MemberWarm:
			out.Warm++
		case store.MemberCreating, store.MemberBooting:
			out.Booting++
		case store.MemberRetiring:
			out.Retiring++
		}
		v := poolMemberView{Name: m.ID, Node: m.Node, VMID: m.VMID, State: m.State, CreatedAt: m.CreatedAt}
		if !m.ReadyAt.IsZero() {
			v.ReadyAt = &m.ReadyAt
		}
		if !m.ClaimedAt.IsZero() {
			v.ClaimedAt = &m.ClaimedAt
		}
		out.Members = append(out.Members, v)
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// recentClaims counts the members handed out within the demand window.
func recentClaims(ms []store.PoolMember, now time.Time) int {
	n := 0
	for _, m := range ms {
		if m.State == store.MemberClaimed && now.Sub(m.ClaimedAt) < demandWindow {
			n++
		}
	}
	return n
}

// poolTarget is how many warm (or booting) VMs the pool keeps now: its
// size, grown toward the recent claims up to max_size.
func poolTarget(p *store.Pool, recent int) int {
	return min(max(p.Size, recent), max(p.MaxSize, p.Size))
}

// ---- claims (the hook of createVM) ----

// poolDefaults fills a launch that names a pool with the pool's image and
// size where it left them out. It answers (and returns false) when the
// named pool is not one the caller may use.
func (s *Server) poolDefaults(w http.ResponseWriter, r *http.Request, req *sdk.FleetCreateVMRequest) bool {
	if req.Pool == "" {
		return true
	}
	pool, ok := s.usablePool(r.Context(), PrincipalOf(r.Context()), req.Pool)
	if !ok {
		jsonapi.WriteError(w, http.StatusNotFound, "no pool "+jsonapi.Echo(req.Pool), "GET /fleet/pools lists the pools you may launch from")
		return false
	}
	if req.Image == "" && req.ImagePath == "" {
		req.Image = pool.Image
	}
	if req.VCPUs == 0 {
		req.VCPUs = pool.VCPUs
	}
	if req.MemoryMiB == 0 {
		req.MemoryMiB = pool.MemoryMiB
	}
	return true
}

// usablePool is the caller's own pool of that name, else a shared one it
// may claim from.
func (s *Server) usablePool(ctx context.Context, p Principal, name string) (*store.Pool, bool) {
	if !store.ValidName(name) {
		return nil, false
	}
	if p.Tenant != nil {
		if pool, err := s.opts.Store.GetPool(ctx, p.Tenant.ID, name); err == nil && !pool.Deleting {
			return pool, true
		}
		pol, err := s.opts.Store.GetPolicy(ctx)
		if err != nil || !pol.AllowSharedPoolClaims {
			return nil, false
		}
	}
	pool, err := s.opts.Store.GetPool(ctx, "", name)
	if err != nil || pool.Deleting {
		return nil, false
	}
	return pool, true
}

// claimFromPool serves a launch from a warm pool when one can: the caller's
// own pools first, then shared ones (the operator's always; a tenant's
// under allow_shared_pool_claims), of the launch's catalog image and size.
// A launch asking what a running VM cannot be given afterwards (a TTL,
// labels, a display, a network, a node, node_selector, nested, or to be
// reschedulable) is booted
// as before; with "pool" it is refused instead. It returns whether it
// answered.
func (s *Server) claimFromPool(w http.ResponseWriter, r *http.Request, req *sdk.FleetCreateVMRequest, spec sdk.CreateVMRequest, image string, pol store.Policy) bool {
	p := PrincipalOf(r.Context())
	plain := !req.Reschedulable && req.ImagePath == "" && req.TTLSeconds == 0 && len(req.Labels) == 0 && !req.Display && req.Network == "" &&
		req.Node == "" && len(req.NodeSelector) == 0 && !req.Nested
	if req.Pool != "" && !plain {
		jsonapi.WriteError(w, http.StatusBadRequest, "a launch from a pool takes a VM that is already running",
			"leave out ttl_seconds, labels, display, network, node, node_selector, nested and reschedulable, or leave out pool to boot a new VM")
		return true
	}
	if !plain {
		return false
	}
	ctx := r.Context()
	var cands []store.Pool
	if req.Pool != "" {
		pool, ok := s.usablePool(ctx, p, req.Pool)
		if !ok {
			jsonapi.WriteError(w, http.StatusNotFound, "no pool "+jsonapi.Echo(req.Pool), "GET /fleet/pools lists the pools you may launch from")
			return true
		}
		if pool.Image != image || pool.VCPUs != spec.VCPUs || pool.MemoryMiB != spec.MemoryMiB {
			jsonapi.WriteError(w, http.StatusBadRequest,
				fmt.Sprintf("pool %s keeps %s VMs of %d vCPUs and %d MiB", pool.Name, pool.Image, pool.VCPUs, pool.MemoryMiB),
				"leave image, vcpus and memory_mib out to take the pool's")
			return true
		}
		cands = []store.Pool{*pool}
	} else {
		all, err := s.opts.Store.ListPools(ctx)
		if err != nil {
			s.log.Warn("list pools for a launch; booting instead", "error", err)
			return false
		}
		shared := p.Operator || pol.AllowSharedPoolClaims
		sort.SliceStable(all, func(i, j int) bool { return all[i].Tenant != "" && all[j].Tenant == "" }) // own pools first
		for _, pl := range all {
			mine := pl.Tenant != "" && pl.Tenant == tenantID(p)
			if (mine || pl.Tenant == "" && shared) && !pl.Deleting && pl.Image == image &&
				pl.VCPUs == spec.VCPUs && pl.MemoryMiB == spec.MemoryMiB && pl.GuestOS == spec.GuestOS {
				cands = append(cands, pl)
			}
		}
	}
	for _, pl := range cands {
		c, err := s.opts.Store.ClaimMember(ctx, store.ClaimRequest{PoolTenant: pl.Tenant, Pool: pl.Name, Tenant: tenantID(p), Now: s.opts.Now()})
		var qe *store.QuotaError
		switch {
		case err == nil:
		case errors.Is(err, store.ErrNoWarm), errors.Is(err, store.ErrNotFound), errors.As(err, &qe):
			continue // the next pool, or a cold launch (which says which quota)
		default:
			s.log.Warn("claim from pool; booting instead", "pool", pl.Name, "error", err)
			continue
		}
		s.kickPools()
		s.answerClaim(w, r, &pl, c)
		return true
	}
	return false
}

// answerClaim answers a launch served from a pool: the VM as its node
// shows it now (or as the pool knew it, if the node is slow to answer).
func (s *Server) answerClaim(w http.ResponseWriter, r *http.Request, pool *store.Pool, c *store.Claim) {
	m := c.Member
	vm := s.poolVM(r.Context(), pool, c)
	w.Header().Set("Location", "/fleet/vms/"+m.Node+"/"+m.VMID)
	jsonapi.Write(w, http.StatusCreated, sdk.FleetCreateVMResponse{Node: m.Node, VM: *vm,
		Placement: sdk.Placement{Reason: fmt.Sprintf("took warm vm %s of pool %s", m.ID, pool.Name), Considered: []sdk.PlacementVerdict{}},
		FromPool:  pool.Name})
}

// poolVM is a claimed member's VM as its node shows it now (or as the pool
// knew it, if the node is slow to answer).
func (s *Server) poolVM(ctx context.Context, pool *store.Pool, c *store.Claim) *sdk.VM {
	m := c.Member
	vm := &sdk.VM{ID: m.VMID, Name: m.ID, GuestOS: pool.GuestOS, Image: c.Entry.Image, VCPUs: c.Entry.VCPUs, MemoryMiB: c.Entry.MemoryMiB,
		Network: "user", State: sdk.StateRunning, AgentReady: true, CreatedAt: m.CreatedAt, Labels: map[string]string{PoolLabel: pool.Name}}
	if n, err := s.opts.Store.GetNode(ctx, m.Node); err == nil {
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

// ---- the pool loop (leader only) ----

// poolRun is the pool loop's state in this process: the members it is
// creating (so a pass does not count them twice or clean them up) and the
// channel that wakes it.
type poolRun struct {
	mu       sync.Mutex
	inflight map[string]string // member id -> its pool's key (inflightKey)
	kick     chan struct{}
}

func newPoolRun() *poolRun {
	return &poolRun{inflight: map[string]string{}, kick: make(chan struct{}, 1)}
}

// inflightKey names a pool in poolRun.inflight.
func inflightKey(tenant, pool string) string {
	return tenant + "/" + pool
}

func (s *Server) poolRun() *poolRun { return s.pools }

// kickPools wakes this central's pool loop (a no-op when it does not lead:
// the leader's next tick sees the change).
func (s *Server) kickPools() {
	select {
	case s.poolRun().kick <- struct{}{}:
	default:
	}
}

// PoolLoop keeps every pool at its target until ctx ends: a pass every
// interval (DefaultPoolEvery when 0) and at once after a claim or a change
// made through this central. Only the leader runs it.
func (s *Server) PoolLoop(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultPoolEvery
	}
	run := s.poolRun()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.ReconcilePools(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("pool loop", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-run.kick:
		}
	}
}

// ReconcilePools is one pass of the pool loop over every pool: members that
// answered become warm, stale ones go, pools being deleted are finished, and
// missing members are started (their creation runs on in the background).
func (s *Server) ReconcilePools(ctx context.Context) error {
	pools, err := s.opts.Store.ListPools(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range pools {
		if err := s.reconcilePool(ctx, &pools[i]); err != nil {
			errs = append(errs, fmt.Errorf("pool %s: %w", pools[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Server) reconcilePool(ctx context.Context, pool *store.Pool) error {
	if pool.Deleting {
		_, err := s.finishPoolDelete(ctx, pool)
		return err
	}
	ms, err := s.opts.Store.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return err
	}
	run := s.poolRun()
	now := s.opts.Now()
	live := 0 // warm, booting or being created
	var warm []store.PoolMember
	for _, m := range ms {
		run.mu.Lock()
		_, mine := run.inflight[m.ID]
		run.mu.Unlock()
		switch {
		case mine:
			live++
		case m.State == store.MemberClaimed:
			if now.Sub(m.ClaimedAt) >= demandWindow {
				_ = s.opts.Store.DeleteMember(ctx, pool.Tenant, pool.Name, m.ID)
			}
		case m.State == store.MemberRetiring:
			s.retireMember(ctx, &m)
		case m.State == store.MemberCreating && time.Since(m.CreatedAt) > nodecall.CreateTimeout:
			// A central that led before us died creating it.
			s.markRetiring(ctx, &m, []string{store.MemberCreating})
		case m.State == store.MemberCreating:
			live++
		case m.State == store.MemberBooting:
			// Created by an earlier leader: watch it here.
			live++
			s.watchBooting(ctx, pool, m)
		case m.State == store.MemberWarm:
			if e, err := s.opts.Store.GetEntry(ctx, m.EntryID); err == nil && !e.Running() {
				// The VM went (deleted on its node, or by its owner).
				s.markRetiring(ctx, &m, []string{store.MemberWarm})
				continue
			}
			live++
			warm = append(warm, m)
		}
	}
	// Members this central started creating whose record is not written
	// yet are live too: without them a pass racing a create would start
	// another.
	listed := make(map[string]bool, len(ms))
	for _, m := range ms {
		listed[m.ID] = true
	}
	key := inflightKey(pool.Tenant, pool.Name)
	run.mu.Lock()
	for id, k := range run.inflight {
		if k == key && !listed[id] {
			live++
		}
	}
	run.mu.Unlock()
	target := poolTarget(pool, recentClaims(ms, now))
	for i := 0; live > target && i < len(warm); i++ {
		// Shrink: retire the youngest warm members.
		m := warm[len(warm)-1-i]
		if s.markRetiring(ctx, &m, []string{store.MemberWarm}) {
			live--
		}
	}
	for ; live < target; live++ {
		id := "pool-" + pool.Name + "-" + randHex(4)
		run.mu.Lock()
		run.inflight[id] = key
		run.mu.Unlock()
		go s.createMember(context.WithoutCancel(ctx), *pool, id)
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// markRetiring moves a member from one of the states in from to retiring
// and deletes its VM; false when a claim (or another pass) got there first.
func (s *Server) markRetiring(ctx context.Context, m *store.PoolMember, from []string) bool {
	got, err := s.opts.Store.UpdateMember(ctx, m.Tenant, m.Pool, m.ID, from, func(x *store.PoolMember) { x.State = store.MemberRetiring })
	if err != nil {
		return false
	}
	s.retireMember(ctx, got)
	return true
}

// retireMember deletes a retiring member's VM on its node, ends its ledger
// entry and forgets it. A node that does not answer keeps it retiring for
// the next pass.
func (s *Server) retireMember(ctx context.Context, m *store.PoolMember) {
	if m.Node != "" {
		n, err := s.opts.Store.GetNode(ctx, m.Node)
		if err == nil {
			nc, err := s.nodes.Client(n)
			if err != nil {
				return
			}
			id := m.VMID
			if id == "" {
				id = m.ID // created under its name; its id was never recorded
			}
			dctx, cancel := context.WithTimeout(ctx, nodecall.CallTimeout)
			err = nc.DeleteVM(dctx, id)
			cancel()
			if err != nil && !sdk.IsNotFound(err) {
				s.log.Warn("delete a retired pool vm; retrying next pass", "pool", m.Pool, "vm", id, "node", m.Node, "error", err)
				return
			}
		} else if !errors.Is(err, store.ErrNotFound) {
			return
		}
	}
	if m.EntryID != "" {
		if _, err := s.opts.Store.EndEntry(ctx, m.EntryID, "deleted", s.opts.Now()); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("end the ledger entry of a retired pool vm", "entry", m.EntryID, "error", err)
			return
		}
	}
	_ = s.opts.Store.DeleteMember(ctx, m.Tenant, m.Pool, m.ID)
}

// finishPoolDelete retires every member not handed out and removes the
// pool once none is left; done reports whether it is gone.
func (s *Server) finishPoolDelete(ctx context.Context, pool *store.Pool) (bool, error) {
	ms, err := s.opts.Store.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return false, err
	}
	left := 0
	for _, m := range ms {
		switch m.State {
		case store.MemberClaimed:
			continue
		case store.MemberRetiring:
			s.retireMember(ctx, &m)
		default:
			run := s.poolRun()
			run.mu.Lock()
			_, mine := run.inflight[m.ID]
			run.mu.Unlock()
			if mine {
				left++ // a later pass retires it once its creation ends
				continue
			}
			s.markRetiring(ctx, &m, []string{store.MemberCreating, store.MemberBooting, store.MemberWarm})
		}
	}
	rest, err := s.opts.Store.ListMembers(ctx, pool.Tenant, pool.Name)
	if err != nil {
		return false, err
	}
	for _, m := range rest {
		if m.State != store.MemberClaimed {
			left++
		}
	}
	if left > 0 {
		return false, nil
	}
	return true, s.opts.Store.RemovePool(ctx, pool.Tenant, pool.Name)
}

// createMember boots one member: placement on the pool's kind of node,
// reservation, the node's create, the ledger entry, then waiting for the
// guest agent. Failures are written to the pool (blocked) for its status.
func (s *Server) createMember(ctx context.Context, pool store.Pool, id string) {
	run := s.poolRun()
	defer func() {
		run.mu.Lock()
		delete(run.inflight, id)
		run.mu.Unlock()
	}()
	blocked := func(why string) {
		if pool.Blocked == why {
			return
		}
		_, _ = s.opts.Store.UpdatePool(ctx, pool.Tenant, pool.Name, func(p *store.Pool) error {
			if p.Blocked != why {
				p.Blocked, p.BlockedSince = why, s.opts.Now().UTC()
			}
			return nil
		})
	}
	node, res, why := s.reserveForPool(ctx, &pool)
	if res == nil {
		blocked(why)
		return
	}
	release := func() { _ = s.opts.Store.Release(ctx, res) }
	m := &store.PoolMember{ID: id, Pool: pool.Name, Tenant: pool.Tenant, Node: node.Name, State: store.MemberCreating,
		CreatedAt: s.opts.Now().UTC(), Central: s.opts.Store.ID()}
	if err := s.opts.Store.CreateMember(ctx, m); err != nil {
		release()
		s.log.Warn("record a pool member", "pool", pool.Name, "error", err)
		return
	}
	im, err := s.opts.Store.GetImage(ctx, pool.Image)
	if err != nil {
		release()
		s.markRetiring(ctx, m, []string{store.MemberCreating})
		blocked(fmt.Sprintf("image %s: %v", pool.Image, err))
		return
	}
	spec := sdk.CreateVMRequest{Name: id, Image: im.Image, GuestOS: pool.GuestOS, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB,
		Tenant: pool.Tenant, Labels: map[string]string{PoolLabel: pool.Name}}
	cctx, cancel := context.WithTimeout(ctx, nodecall.CreateTimeout)
	vm, err := s.nodes.Create(cctx, node, spec)
	cancel()
	if err != nil {
		release()
		s.markRetiring(ctx, m, []string{store.MemberCreating})
		blocked(fmt.Sprintf("node %s could not create a vm: %v", node.Name, err))
		return
	}
	entry, err := s.opts.Store.Commit(ctx, res, store.LedgerEntry{VMID: vm.ID, Name: vm.Name, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB,
		GuestOS: pool.GuestOS, Image: pool.Image, StartedAt: s.opts.Now().UTC()})
	if err != nil {
		release()
		m.VMID = vm.ID
		s.markRetiring(ctx, m, []string{store.MemberCreating})
		s.log.Warn("record the ledger entry of a pool vm; deleting it", "pool", pool.Name, "vm", vm.ID, "error", err)
		return
	}
	got, err := s.opts.Store.UpdateMember(ctx, pool.Tenant, pool.Name, id, []string{store.MemberCreating}, func(x *store.PoolMember) {
		x.VMID, x.EntryID, x.State = vm.ID, entry.ID, store.MemberBooting
	})
	if err != nil {
		// The pool is being deleted (or the member was retired): the VM goes.
		m.VMID, m.EntryID, m.State = vm.ID, entry.ID, store.MemberRetiring
		s.retireMember(ctx, m)
		return
	}
	if pool.Blocked != "" {
		blocked("")
	}
	s.waitWarm(ctx, node, got)
}

// watchBooting takes over a booting member this central did not create.
func (s *Server) watchBooting(ctx context.Context, pool *store.Pool, m store.PoolMember) {
	run := s.poolRun()
	run.mu.Lock()
	if _, ok := run.inflight[m.ID]; ok {
		run.mu.Unlock()
		return
	}
	run.inflight[m.ID] = inflightKey(pool.Tenant, pool.Name)
	run.mu.Unlock()
	go func() {
		defer func() {
			run.mu.Lock()
			delete(run.inflight, m.ID)
			run.mu.Unlock()
		}()
		n, err := s.opts.Store.GetNode(ctx, m.Node)
		if err != nil {
			return
		}
		s.waitWarm(context.WithoutCancel(ctx), n, &m)
	}()
}

// waitWarm waits for a booting member's guest agent and makes it warm; one
// that does not answer in poolReadyTimeout (or stops) is retired.
func (s *Server) waitWarm(ctx context.Context, node *store.Node, m *store.PoolMember) {
	nc, err := s.nodes.Client(node)
	if err != nil {
		return
	}
	left := poolReadyTimeout - time.Since(m.CreatedAt)
	wctx, cancel := context.WithTimeout(ctx, max(left, time.Second))
	_, err = nc.WaitReady(wctx, m.VMID, 50*time.Millisecond)
	cancel()
	if err != nil {
		s.log.Warn("pool vm did not become ready; deleting it", "pool", m.Pool, "vm", m.ID, "error", err)
		s.markRetiring(ctx, m, []string{store.MemberBooting})
		return
	}
	if _, err := s.opts.Store.UpdateMember(ctx, m.Tenant, m.Pool, m.ID, []string{store.MemberBooting}, func(x *store.PoolMember) {
		x.State, x.ReadyAt = store.MemberWarm, s.opts.Now().UTC()
	}); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("mark a pool vm warm", "pool", m.Pool, "vm", m.ID, "error", err)
	}
}

// reserveForPool places one member and reserves room for it: a tenant's
// pool on the hosts it leases (if it leases any, else on unleased nodes),
// against its quota; a shared pool on unleased nodes, as the operator. It
// returns why not when nothing could be reserved.
func (s *Server) reserveForPool(ctx context.Context, pool *store.Pool) (*store.Node, *store.Reservation, string) {
	pol, err := s.opts.Store.GetPolicy(ctx)
	if err != nil {
		return nil, nil, "cannot read the policy"
	}
	macOS := pool.GuestOS == store.GuestMacOS
	req := scheduler.Request{Tenant: pool.Tenant, GuestOS: pool.GuestOS, VCPUs: pool.VCPUs, MemoryMiB: pool.MemoryMiB, NodeSelector: pool.NodeSelector}
	// A tenant that leases hosts keeps its pool on them; otherwise pools
	// live on unleased nodes.
	stored, _, err := s.place.Snapshot(ctx)
	if err != nil {
		return nil, nil, "cannot read the fleet"
	}
	leases := false
	for i := range stored {
		leases = leases || pool.Tenant != "" && stored[i].LeasedBy == pool.Tenant
	}
	keep := func(n *store.Node) bool {
		if leases {
			return n.LeasedBy == pool.Tenant
		}
		return n.LeasedBy == ""
	}
	_, node, res, err := s.place.PlaceAndReserve(ctx, req, pol, store.ReserveRequest{Tenant: pool.Tenant, VCPUs: pool.VCPUs,
		MemoryMiB: pool.MemoryMiB, MacOS: macOS, ExclusiveLeases: pol.ExclusiveLeasedHosts,
		RequireLease: pol.RequireLeaseForMacOS && macOS && pool.Tenant != ""}, keep)
	var np *scheduler.NoPlacementError
	var qe *store.QuotaError
	switch {
	case err == nil:
		return node, res, ""
	case errors.As(err, &np):
		return nil, nil, np.Summary
	case errors.As(err, &qe):
		return nil, nil, "tenant quota: " + qe.Error()
	default:
		return nil, nil, err.Error()
	}
}
