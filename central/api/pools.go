package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/pools"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Warm pools (docs/warm-pools.md): the mechanism, the leader's pool loop
// and the claims, is central/pools; here are its routes and the hooks of
// POST /fleet/vms.

// PoolLabel is the label every pool VM carries: the pool's name.
const PoolLabel = pools.Label

// PoolLoop runs the warm pools' loop (pools.Service.Loop) until ctx ends.
// Only the leader runs it, with the fenced context of its loops.
func (s *Server) PoolLoop(ctx context.Context, every time.Duration) { s.pools.Loop(ctx, every) }

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
	pool, err := s.pools.Lookup(r.Context(), owner, name, owner != "" && !p.Operator)
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
	all, err := s.pools.List(r.Context(), tenantID(PrincipalOf(r.Context())))
	if err != nil {
		s.storeError(w, "list pools", err)
		return
	}
	out := sdk.PoolList{Pools: []sdk.Pool{}}
	for _, pl := range all {
		out.Pools = append(out.Pools, pools.Wire(pl))
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// createPool is POST /fleet/pools.
func (s *Server) createPool(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	var req sdk.CreatePoolRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	owner, ok := s.poolOwner(w, r, p, req.Tenant)
	if !ok {
		return
	}
	bad := func(msg, hint string) { jsonapi.WriteError(w, http.StatusBadRequest, msg, hint) }
	switch {
	case !store.ValidName(req.Name) || len(req.Name) > pools.MaxNameLen:
		bad(fmt.Sprintf("name %q is not a valid pool name", jsonapi.Echo(req.Name)),
			fmt.Sprintf("use 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", pools.MaxNameLen))
		return
	case req.Size == nil:
		bad("size is required: how many warm VMs the pool keeps", "e.g. \"size\": 2")
		return
	case len(req.NodeSelector) > maxLabels:
		bad(fmt.Sprintf("at most %d node_selector entries", maxLabels), "trim them")
		return
	}
	pool, err := s.pools.Create(r.Context(), store.Pool{Pool: sdk.Pool{Name: req.Name, Tenant: owner, Image: req.Image,
		VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, Size: *req.Size, MaxSize: req.MaxSize, NodeSelector: req.NodeSelector, Mode: req.Mode}})
	switch {
	case errors.Is(err, pools.ErrNoImage):
		names, err := vms.CatalogNames(r.Context(), s.opts.Store)
		if err != nil {
			jsonapi.WriteError(w, http.StatusServiceUnavailable, "cannot read the image catalog", "retry in a moment")
			return
		}
		bad(fmt.Sprintf("no image %q in the catalog", jsonapi.Echo(req.Image)), "a pool keeps VMs of a catalog image; catalog images: "+names)
		return
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
	w.Header().Set("Location", "/fleet/pools/"+pool.Name)
	jsonapi.Write(w, http.StatusCreated, pools.Wire(*pool))
}

// poolOwner is whose pool a POST /fleet/pools makes: the calling tenant's,
// or for the operator the named tenant's (id or name), else a shared one.
// It answers (and returns false) when that cannot be.
func (s *Server) poolOwner(w http.ResponseWriter, r *http.Request, p Principal, tenant string) (string, bool) {
	if tenant == "" {
		return tenantID(p), true
	}
	if !p.Operator {
		jsonapi.WriteError(w, http.StatusForbidden, "tenant is for the operator", "leave it out: your pools are your own")
		return "", false
	}
	t, err := s.findTenant(r.Context(), tenant)
	if errors.Is(err, store.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusBadRequest, "no tenant "+jsonapi.Echo(tenant), "GET /fleet/tenants lists the tenants, by id and name")
		return "", false
	}
	if err != nil {
		s.storeError(w, "read tenant "+jsonapi.Echo(tenant), err)
		return "", false
	}
	return t.ID, true
}

func (s *Server) getPool(w http.ResponseWriter, r *http.Request) {
	if pool, ok := s.poolOf(w, r); ok {
		jsonapi.Write(w, http.StatusOK, pools.Wire(*pool))
	}
}

// patchPool is PATCH /fleet/pools/{name}: a new size or max_size; the loop
// boots or retires members to match.
func (s *Server) patchPool(w http.ResponseWriter, r *http.Request) {
	pool, ok := s.poolOf(w, r)
	if !ok || !mayChange(w, PrincipalOf(r.Context()), pool) {
		return
	}
	var req sdk.PoolPatch
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	out, err := s.pools.Resize(r.Context(), pool, req.Size, req.MaxSize)
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
	jsonapi.Write(w, http.StatusOK, pools.Wire(*out))
}

// deletePool is DELETE /fleet/pools/{name}: the pool stops handing out VMs
// at once and its unclaimed VMs are deleted, then the pool (see
// pools.Service.Delete): 204 when it is gone, 202 when the pool loop
// finishes it.
func (s *Server) deletePool(w http.ResponseWriter, r *http.Request) {
	pool, ok := s.poolOf(w, r)
	if !ok || !mayChange(w, PrincipalOf(r.Context()), pool) {
		return
	}
	done, err := s.pools.Delete(r.Context(), pool)
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no pool "+pool.Name, "GET /fleet/pools lists the pools you may use")
	case err != nil:
		s.storeError(w, "mark the pool deleted", err)
	case !done:
		w.WriteHeader(http.StatusAccepted)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// poolStatus is GET /fleet/pools/{name}/status.
func (s *Server) poolStatus(w http.ResponseWriter, r *http.Request) {
	pool, ok := s.poolOf(w, r)
	if !ok {
		return
	}
	st, err := s.pools.Status(r.Context(), pool)
	if err != nil {
		s.storeError(w, "read the pool's members", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, pools.WireStatus(pool, st))
}

// ---- claims (the hooks of createVM) ----

// poolDefaults fills a launch that names a pool with the pool's image and
// size where it left them out. It answers (and returns false) when the
// named pool is not one the caller may use.
func (s *Server) poolDefaults(w http.ResponseWriter, r *http.Request, req *sdk.FleetCreateVMRequest) bool {
	if req.Pool == "" {
		return true
	}
	pool, ok := s.pools.Usable(r.Context(), tenantID(PrincipalOf(r.Context())), req.Pool)
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

// claimFromPool serves a launch from a warm pool when one can (see
// pools.Service.Claim). A launch asking what a running VM cannot be given
// afterwards (a TTL, labels, a display, a network, a node, node_selector,
// nested, to be reschedulable, or SSH keys, which are installed as the
// guest first becomes ready) is booted as before; with "pool" it is refused
// instead. It returns whether it answered.
func (s *Server) claimFromPool(w http.ResponseWriter, r *http.Request, req *sdk.FleetCreateVMRequest, spec sdk.CreateVMRequest, image string, pol sdk.Policy) bool {
	plain := !req.Reschedulable && req.ImagePath == "" && req.TTLSeconds == 0 && len(req.Labels) == 0 && !req.Display && req.Network == "" && spec.Network != vms.NetworkTenant &&
		req.Node == "" && len(req.NodeSelector) == 0 && !req.Nested && len(req.SSHAuthorizedKeys) == 0
	if req.Pool != "" && !plain {
		jsonapi.WriteError(w, http.StatusBadRequest, "a launch from a pool takes a VM that is already running",
			"leave out ttl_seconds, labels, display, network, node, node_selector, nested, reschedulable and ssh_authorized_keys, or leave out pool to boot a new VM")
		return true
	}
	if !plain {
		return false
	}
	c, err := s.pools.Claim(r.Context(), pools.ClaimRequest{Tenant: tenantID(PrincipalOf(r.Context())), SharedClaims: pol.AllowSharedPoolClaims,
		Pool: req.Pool, Image: image, GuestOS: spec.GuestOS, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB})
	var mismatch *pools.MismatchError
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no pool "+jsonapi.Echo(req.Pool), "GET /fleet/pools lists the pools you may launch from")
		return true
	case errors.As(err, &mismatch):
		jsonapi.WriteError(w, http.StatusBadRequest, mismatch.Error(), "leave image, vcpus and memory_mib out to take the pool's")
		return true
	case c == nil:
		return false
	}
	m := c.Member
	w.Header().Set("Location", "/fleet/vms/"+m.Node+"/"+m.VMID)
	jsonapi.Write(w, http.StatusCreated, sdk.FleetCreateVMResponse{Node: m.Node, VM: *c.VM,
		Placement: sdk.Placement{Reason: fmt.Sprintf("took warm vm %s of pool %s", m.ID, c.Pool.Name), Considered: []sdk.PlacementVerdict{}},
		FromPool:  c.Pool.Name})
	return true
}
