package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/leases"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// leaseOf is a lease as the API answers it: the one conversion of a
// store record to sdk.Lease, which adds whether it is still active.
func leaseOf(l *store.Lease) sdk.Lease {
	out := l.Lease
	out.Active = l.Active()
	return out
}

// createLease is POST /fleet/leases: a tenant (or the operator, for a
// tenant) takes a whole node for at least min_lease_hours.
func (s *Server) createLease(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	dryRun, ok := boolParam(w, r, "dry_run")
	if !ok {
		return
	}
	var req sdk.CreateLeaseRequest
	if e := jsonapi.ReadBody(w, r, &req, false, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	tenant := p.Tenant
	if p.Tenant != nil {
		if req.Tenant != "" || req.AllowBusy || req.AnyNode {
			jsonapi.WriteError(w, http.StatusForbidden, "tenant, allow_busy and any_node are for the operator",
				"leave them out: a tenant leases Macs for itself that run no VMs")
			return
		}
	} else {
		if req.Tenant == "" {
			jsonapi.WriteError(w, http.StatusBadRequest, "tenant is required: the operator leases a node for a tenant",
				`give "tenant": the tenant's id or name (GET /fleet/tenants)`)
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
		tenant = t
	}
	if msg, hint := checkLeaseRequest(&req); msg != "" {
		jsonapi.WriteError(w, http.StatusBadRequest, msg, hint)
		return
	}
	lr := leases.Request{Tenant: tenant, Node: req.Node, Hours: req.Hours, NodeSelector: req.NodeSelector, Nested: req.Nested,
		MinMemoryMiB: req.MinMemoryMiB, MinVCPUs: req.MinVCPUs, AllowBusy: req.AllowBusy, AnyNode: req.AnyNode}
	if dryRun {
		est, err := s.leases.Estimate(r.Context(), lr)
		if err != nil {
			s.leaseError(w, p, &lr, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, est)
		return
	}
	l, err := s.leases.Create(r.Context(), lr)
	if err != nil {
		s.leaseError(w, p, &lr, err)
		return
	}
	nameTarget(r, l.Node)
	w.Header().Set("Location", "/fleet/leases/"+l.ID)
	jsonapi.Write(w, http.StatusCreated, leaseOf(l))
}

// checkLeaseRequest validates what the lease service does not judge: the
// node's name and sizes. It returns a message and a hint, or "" when req is
// fine.
func checkLeaseRequest(req *sdk.CreateLeaseRequest) (msg, hint string) {
	switch {
	case req.Node != "" && !store.ValidName(req.Node):
		return fmt.Sprintf("node %q is not a valid node name", jsonapi.Echo(req.Node)), "leave node out to get the smallest eligible Mac"
	case req.MinMemoryMiB < 0 || req.MinVCPUs < 0 || req.Hours < 0:
		return "hours, min_memory_mib and min_vcpus must not be negative", specHint
	case len(req.NodeSelector) > maxLabels:
		return fmt.Sprintf("at most %d node_selector entries", maxLabels), "trim them"
	}
	return "", ""
}

// leaseError answers a refused POST /fleet/leases.
func (s *Server) leaseError(w http.ResponseWriter, p Principal, req *leases.Request, err error) {
	var short *leases.ShortError
	var qe *store.QuotaError
	var refused *leases.RefusedError
	switch {
	case errors.Is(err, leases.ErrNoNode):
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+jsonapi.Echo(req.Node), "leave node out to get the smallest eligible Mac")
	case errors.As(err, &short):
		jsonapi.WriteError(w, http.StatusBadRequest, short.Error(),
			fmt.Sprintf("ask for at least %d hours (min_lease_hours; Apple's licence asks for 24 hours of sole use), or leave hours out for an open-ended lease", short.Min))
	case errors.As(err, &qe):
		jsonapi.WriteError(w, http.StatusTooManyRequests,
			fmt.Sprintf("quota max_leased_hosts of tenant %s exceeded: %d leases active of %d", req.Tenant.Name, qe.Used, qe.Limit),
			"release a lease you no longer need (POST /fleet/leases/{id}/release), or ask the operator to raise max_leased_hosts")
	case errors.Is(err, leases.ErrDisabled) && p.Tenant != nil:
		jsonapi.WriteError(w, http.StatusForbidden, "tenant "+req.Tenant.Name+" is disabled", "ask the operator to enable it")
	case errors.As(err, &refused) && refused.Node != "":
		jsonapi.WriteError(w, http.StatusConflict, refused.Error(),
			"leave node out to get the smallest eligible "+refused.Kind+"; a lease needs a healthy node that is not cordoned, draining, leased or waiting for a scrub, and runs no VMs")
	case refused != nil:
		jsonapi.WriteError(w, http.StatusConflict, refused.Error(),
			"a lease needs a healthy "+refused.Kind+" that is not cordoned, draining, leased or waiting for a scrub, runs no VMs and matches the size, node_selector and nested asked for; relax them or ask the operator")
	default:
		s.storeError(w, "read the leases", err)
	}
}

// listLeases is GET /fleet/leases: a tenant's own, or every lease for the
// operator (?tenant= narrows it), newest first; ?active=true leaves out
// ended ones.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	q := r.URL.Query()
	onlyActive := q.Get("active") == "true" || q.Get("active") == "1"
	tenant := tenantID(p)
	if ref := q.Get("tenant"); ref != "" && p.Operator {
		t, err := s.findTenant(r.Context(), ref)
		if errors.Is(err, store.ErrNotFound) {
			jsonapi.WriteError(w, http.StatusBadRequest, "no tenant "+jsonapi.Echo(ref), "GET /fleet/tenants lists the tenants")
			return
		}
		if err != nil {
			s.storeError(w, "read tenant "+jsonapi.Echo(ref), err)
			return
		}
		tenant = t.ID
	}
	ls, err := s.leases.List(r.Context(), tenant, onlyActive)
	if err != nil {
		s.storeError(w, "read the leases", err)
		return
	}
	out := sdk.LeaseList{Leases: make([]sdk.Lease, len(ls))}
	for i := range ls {
		out.Leases[i] = leaseOf(&ls[i])
	}
	jsonapi.Write(w, http.StatusOK, out)
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	l, err := s.leases.Get(r.Context(), id, tenantID(PrincipalOf(r.Context())))
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no lease "+jsonapi.Echo(id), "GET /fleet/leases lists your leases")
	case err != nil:
		s.storeError(w, "read the leases", err)
	default:
		jsonapi.Write(w, http.StatusOK, leaseOf(l))
	}
}

// releaseLease is POST /fleet/leases/{id}/release[?force=true]. Before the
// lease's minimum it is refused, unless the operator forces it (billing
// still counts the minimum). The lease ends at once: the node is scrub
// pending, and the lessee's VMs on it are deleted.
func (s *Server) releaseLease(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	if force && !p.Operator {
		jsonapi.WriteError(w, http.StatusForbidden, "force is for the operator",
			"a lease can be released once its minimum is over; ask the operator for an early release")
		return
	}
	id := mux.Vars(r)["id"]
	l, err := s.leases.Release(r.Context(), id, tenantID(p), force)
	var ended *leases.EndedError
	var early *leases.EarlyError
	var oe *store.OpError
	switch {
	case err == nil:
		jsonapi.Write(w, http.StatusOK, leaseOf(l))
	case errors.As(err, &ended):
		jsonapi.WriteError(w, http.StatusConflict, ended.Error(), "GET /fleet/leases?active=true lists the leases still running")
	case errors.As(err, &early):
		jsonapi.WriteError(w, http.StatusConflict, early.Error(),
			"release it after "+early.Lease.MinEnd.Format(time.RFC3339)+"; the operator can force an early release, which is still billed to the minimum")
	case errors.As(err, &oe):
		s.storeError(w, oe.Op, oe.Err)
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no lease "+jsonapi.Echo(id), "GET /fleet/leases lists your leases")
	default:
		s.storeError(w, "release lease "+jsonapi.Echo(id), err)
	}
}

// EndExpiredLeases ends the leases whose end time passed (see
// leases.Service.EndExpired); the reconciler runs it with each pass.
func (s *Server) EndExpiredLeases(ctx context.Context) ([]string, error) {
	return s.leases.EndExpired(ctx)
}

// boolParam reads an optional true/false query parameter.
func boolParam(w http.ResponseWriter, r *http.Request, name string) (bool, bool) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false", "0":
		return false, true
	case "true", "1":
		return true, true
	default:
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s=%q: want true or false", name, jsonapi.Echo(v)), specHint)
		return false, false
	}
}
