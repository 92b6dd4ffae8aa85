package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/fluxvm/fluxvm/billing"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/gorilla/mux"
)

// leaseRequest is POST /fleet/leases.
type leaseRequest struct {
	// Node names the node to lease; empty picks the smallest eligible one.
	Node string `json:"node,omitempty"`
	// Hours sets an end (at least min_lease_hours); 0 is open-ended.
	Hours        int               `json:"hours,omitempty"`
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	Nested       bool              `json:"nested,omitempty"`
	MinMemoryMiB int64             `json:"min_memory_mib,omitempty"`
	MinVCPUs     int64             `json:"min_vcpus,omitempty"`
	// Tenant (id or name), AllowBusy and AnyNode are the operator's.
	Tenant    string `json:"tenant,omitempty"`
	AllowBusy bool   `json:"allow_busy,omitempty"`
	AnyNode   bool   `json:"any_node,omitempty"`
}

// leaseView is a lease as the API shows it.
type leaseView struct {
	store.Lease
	Active bool `json:"active"`
}

func viewLease(l store.Lease) leaseView { return leaseView{Lease: l, Active: l.Active()} }

type leaseList struct {
	Leases []leaseView `json:"leases"`
}

// leaseCandidate is a node judged for a lease.
type leaseCandidate struct {
	node   *store.Node
	reason string // "" when it may be leased
}

// judgeLease says why n cannot be leased for req ("" when it can). used is
// what central runs and reserves there.
func judgeLease(n *store.Node, used store.Usage, req *leaseRequest) string {
	healthy := false
	for _, d := range n.Drivers {
		healthy = healthy || d.Health == "healthy"
	}
	switch {
	case n.State != store.NodeUp:
		return "not reporting"
	case !healthy:
		return "unhealthy"
	case !req.AnyNode && !slices.Contains(n.GuestOS, store.GuestMacOS):
		return "not a Mac"
	case n.Cordoned:
		return "cordoned"
	case n.Draining:
		return "draining"
	case n.LeasedBy != "":
		return "leased"
	case n.ScrubPending:
		return "waiting for a scrub"
	case !req.AllowBusy && (used.VMs > 0 || len(n.VMs) > 0):
		return "running VMs"
	case n.Capacity.Total.MemoryMiB < req.MinMemoryMiB:
		return "too little memory"
	case n.Capacity.Total.VCPUs < req.MinVCPUs:
		return "too few vCPUs"
	case req.Nested && !n.Nested:
		return "no nested virtualisation"
	}
	for k, v := range req.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return "node_selector does not match"
		}
	}
	return ""
}

// createLease is POST /fleet/leases: a tenant (or the operator, for a
// tenant) takes a whole node for at least min_lease_hours.
func (s *Server) createLease(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	dryRun, ok := boolParam(w, r, "dry_run")
	if !ok {
		return
	}
	var req leaseRequest
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
	switch {
	case req.Node != "" && !store.ValidName(req.Node):
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("node %q is not a valid node name", jsonapi.Echo(req.Node)), "leave node out to get the smallest eligible Mac")
		return
	case req.MinMemoryMiB < 0 || req.MinVCPUs < 0 || req.Hours < 0:
		jsonapi.WriteError(w, http.StatusBadRequest, "hours, min_memory_mib and min_vcpus must not be negative", specHint)
		return
	case len(req.NodeSelector) > maxLabels:
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("at most %d node_selector entries", maxLabels), "trim them")
		return
	}
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	minHours := max(pol.MinLeaseHours, store.MinLeaseHoursFloor)
	if req.Hours > 0 && req.Hours < minHours {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("hours %d is below the minimum lease of %d hours", req.Hours, minHours),
			fmt.Sprintf("ask for at least %d hours (min_lease_hours; Apple's licence asks for 24 hours of sole use), or leave hours out for an open-ended lease", minHours))
		return
	}

	ns, err := s.opts.Store.ListNodes(r.Context())
	if err != nil {
		s.storeError(w, "list nodes", err)
		return
	}
	var cands []leaseCandidate
	for i := range ns {
		n := &ns[i]
		if req.Node != "" && n.Name != req.Node {
			continue
		}
		u, err := s.opts.Store.NodeUsage(r.Context(), n.Name)
		if err != nil {
			s.storeError(w, "read the fleet", err)
			return
		}
		cands = append(cands, leaseCandidate{node: n, reason: judgeLease(n, u.Total(), &req)})
	}
	if req.Node != "" && len(cands) == 0 {
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+req.Node, "leave node out to get the smallest eligible Mac")
		return
	}
	// Smallest first: whole big hosts stay free for those who need them.
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i].node.Capacity.Total, cands[j].node.Capacity.Total
		return cmp.Or(cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.VCPUs, b.VCPUs),
			strings.Compare(cands[i].node.Name, cands[j].node.Name)) < 0
	})
	now := s.opts.Now().UTC()
	prices, err := s.opts.Store.CurrentPrices(r.Context())
	if err != nil {
		s.storeError(w, "read the prices", err)
		return
	}
	for i := range cands {
		c := &cands[i]
		if c.reason != "" {
			continue
		}
		size := c.node.Capacity.Total
		if dryRun {
			s.leaseEstimate(w, r, tenant, c.node, &prices.Prices, int64(minHours), req.Hours, now)
			return
		}
		perHour, class := prices.LeasePrice(size.VCPUs, size.MemoryMiB)
		l, err := s.opts.Store.CreateLease(r.Context(), store.CreateLeaseRequest{Tenant: tenant.ID, Node: c.node.Name,
			Start: now, MinHours: minHours, Hours: req.Hours, AllowBusy: req.AllowBusy,
			PricePerHour: perHour, PriceClass: class, Currency: prices.Currency})
		var qe *store.QuotaError
		var lr *store.LeaseRefusal
		switch {
		case err == nil:
			s.log.Info("lease created", "lease", l.ID, "tenant", tenant.ID, "node", l.Node, "ends_at", l.EndsAt)
			w.Header().Set("Location", "/fleet/leases/"+l.ID)
			jsonapi.Write(w, http.StatusCreated, viewLease(*l))
			return
		case errors.As(err, &qe):
			jsonapi.WriteError(w, http.StatusTooManyRequests,
				fmt.Sprintf("quota max_leased_hosts of tenant %s exceeded: %d leases active of %d", tenant.Name, qe.Used, qe.Limit),
				"release a lease you no longer need (POST /fleet/leases/{id}/release), or ask the operator to raise max_leased_hosts")
			return
		case errors.As(err, &lr):
			c.reason = lr.Reason // taken since the snapshot: try the next one
		case errors.Is(err, store.ErrInvalid) && p.Tenant != nil:
			jsonapi.WriteError(w, http.StatusForbidden, "tenant "+tenant.Name+" is disabled", "ask the operator to enable it")
			return
		case errors.Is(err, store.ErrNotFound):
			c.reason = "gone"
		default:
			s.storeError(w, "create the lease", err)
			return
		}
	}
	kind := "Mac"
	if req.AnyNode {
		kind = "node"
	}
	if req.Node != "" {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s cannot be leased: %s", req.Node, cands[0].reason),
			"leave node out to get the smallest eligible "+kind+"; a lease needs a healthy node that is not cordoned, draining, leased or waiting for a scrub, and runs no VMs")
		return
	}
	jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("no %s can be leased now: %s", kind, leaseBreakdown(cands, kind)),
		"a lease needs a healthy "+kind+" that is not cordoned, draining, leased or waiting for a scrub, runs no VMs and matches the size, node_selector and nested asked for; relax them or ask the operator")
}

// leaseBreakdown counts the refused nodes by reason, most common first.
func leaseBreakdown(cands []leaseCandidate, kind string) string {
	if len(cands) == 0 {
		return "no node is registered"
	}
	counts := map[string]int{}
	for _, c := range cands {
		counts[c.reason]++
	}
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		return cmp.Or(counts[reasons[j]]-counts[reasons[i]], strings.Compare(reasons[i], reasons[j])) < 0
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d %s", counts[r], r)
	}
	return fmt.Sprintf("of %d nodes, %s", len(cands), strings.Join(parts, ", "))
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
	ls, err := s.opts.Store.ListLeases(r.Context(), func(l *store.Lease) bool {
		return (tenant == "" || l.Tenant == tenant) && (!onlyActive || l.Active())
	})
	if err != nil {
		s.storeError(w, "list leases", err)
		return
	}
	out := leaseList{Leases: make([]leaseView, len(ls))}
	for i, l := range ls {
		out.Leases[i] = viewLease(l)
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// leaseFromPath finds the route's lease; another tenant's is a 404.
func (s *Server) leaseFromPath(w http.ResponseWriter, r *http.Request) (*store.Lease, bool) {
	id := mux.Vars(r)["id"]
	p := PrincipalOf(r.Context())
	l, err := s.opts.Store.GetLease(r.Context(), id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.Tenant != nil && l.Tenant != p.Tenant.ID) {
		jsonapi.WriteError(w, http.StatusNotFound, "no lease "+jsonapi.Echo(id), "GET /fleet/leases lists your leases")
		return nil, false
	}
	if err != nil {
		s.storeError(w, "read lease "+jsonapi.Echo(id), err)
		return nil, false
	}
	return l, true
}

func (s *Server) getLease(w http.ResponseWriter, r *http.Request) {
	if l, ok := s.leaseFromPath(w, r); ok {
		jsonapi.Write(w, http.StatusOK, viewLease(*l))
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
	l, ok := s.leaseFromPath(w, r)
	if !ok {
		return
	}
	now := s.opts.Now().UTC()
	if !l.Active() {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("lease %s already ended at %s (%s)", l.ID, l.ReleasedAt.Format(time.RFC3339), l.EndReason),
			"GET /fleet/leases?active=true lists the leases still running")
		return
	}
	reason := "released"
	if now.Before(l.MinEnd) {
		if !force {
			jsonapi.WriteError(w, http.StatusConflict,
				fmt.Sprintf("lease %s cannot be released before %s (in %s): a lease lasts at least its minimum (min_lease_hours)",
					l.ID, l.MinEnd.Format(time.RFC3339), l.MinEnd.Sub(now).Round(time.Minute)),
				"release it after "+l.MinEnd.Format(time.RFC3339)+"; the operator can force an early release, which is still billed to the minimum")
			return
		}
		reason = "released-forced"
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	ended, endedNow, err := s.opts.Store.EndLease(ctx, l.ID, reason, now)
	if err != nil {
		s.storeError(w, "end lease "+l.ID, err)
		return
	}
	if !endedNow {
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("lease %s already ended at %s (%s)", l.ID, ended.ReleasedAt.Format(time.RFC3339), ended.EndReason),
			"GET /fleet/leases?active=true lists the leases still running")
		return
	}
	s.log.Info("lease ended", "lease", l.ID, "tenant", l.Tenant, "node", l.Node, "reason", reason)
	if _, err := s.removeLeaseVMs(ctx, ended); err != nil {
		s.log.Warn("delete the lessee's VMs after a release; the reconciler retries", "lease", l.ID, "error", err)
	} else {
		ended.VMsRemoved = true
	}
	jsonapi.Write(w, http.StatusOK, viewLease(*ended))
}

// removeLeaseVMs deletes the lessee's VMs on the node of an ended lease
// (ending their ledger entries) and records that it did. It returns the
// deleted VMs' ids. A node that is down or does not answer is an error: the
// reconciler tries again.
func (s *Server) removeLeaseVMs(ctx context.Context, l *store.Lease) ([]string, error) {
	if l.VMsRemoved {
		return nil, nil
	}
	n, err := s.opts.Store.GetNode(ctx, l.Node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.opts.Store.MarkLeaseVMsRemoved(ctx, l.ID) // no node, no VMs
	}
	if err != nil {
		return nil, err
	}
	if !n.ScrubPending || (n.LeaseID != "" && n.LeaseID != l.ID) {
		// Scrubbed since (which removed every VM), and maybe leased again:
		// what runs there now is not this lease's.
		return nil, s.opts.Store.MarkLeaseVMsRemoved(ctx, l.ID)
	}
	deleted, err := s.vms.DeleteMatching(ctx, n, func(tenant string) bool { return tenant == l.Tenant }, "lease-ended")
	if err != nil {
		return deleted, err
	}
	return deleted, s.opts.Store.MarkLeaseVMsRemoved(ctx, l.ID)
}

// EndExpiredLeases ends every active lease whose end time has passed, and
// finishes ended leases whose VMs were not all deleted yet (a central that
// died mid-end, a node that did not answer). It returns the ids of the
// leases it ended. The leader runs it with each reconcile pass; two at once
// are harmless (only one EndLease ends a lease).
func (s *Server) EndExpiredLeases(ctx context.Context) (ended []string, err error) {
	now := s.opts.Now().UTC()
	ls, err := s.opts.Store.ListLeases(ctx, func(l *store.Lease) bool {
		return (l.Active() && !l.EndsAt.IsZero() && !now.Before(l.EndsAt)) || (!l.Active() && !l.VMsRemoved)
	})
	if err != nil {
		return nil, err
	}
	ended = []string{}
	var errs []error
	for i := range ls {
		l := &ls[i]
		if l.Active() {
			e, endedNow, err := s.opts.Store.EndLease(ctx, l.ID, "expired", l.EndsAt)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if endedNow {
				s.log.Info("lease expired", "lease", l.ID, "tenant", l.Tenant, "node", l.Node)
				ended = append(ended, l.ID)
			}
			l = e
		}
		if _, err := s.removeLeaseVMs(ctx, l); err != nil {
			s.log.Warn("delete the VMs of an ended lease; retrying next pass", "lease", l.ID, "node", l.Node, "error", err)
		}
	}
	return ended, errors.Join(errs...)
}

// leaseDryRun answers POST /fleet/leases?dry_run=true: the node a lease
// would take now and what it would cost, without leasing anything.
type leaseDryRun struct {
	DryRun   bool             `json:"dry_run"`
	Tenant   string           `json:"tenant"`
	Node     string           `json:"node"`
	Estimate billing.Estimate `json:"estimate"`
	// EndsAt is when a lease with hours would end; MinEnd the earliest
	// release.
	EndsAt *time.Time `json:"ends_at,omitempty"`
	MinEnd time.Time  `json:"min_end"`
	// Quota says whether max_leased_hosts leaves room now ("" when it does).
	Quota string `json:"quota,omitempty"`
}

func (s *Server) leaseEstimate(w http.ResponseWriter, r *http.Request, t *store.Tenant, n *store.Node, p *billing.Prices, minHours int64, hours int, now time.Time) {
	size := n.Capacity.Total
	out := leaseDryRun{DryRun: true, Tenant: t.ID, Node: n.Name, Estimate: p.LeaseEstimate(size.VCPUs, size.MemoryMiB, minHours),
		MinEnd: now.Add(time.Duration(minHours) * time.Hour)}
	if hours > 0 {
		end := now.Add(time.Duration(hours) * time.Hour)
		out.EndsAt = &end
	}
	if q := t.Quota.MaxLeasedHosts; q > 0 {
		active, err := s.opts.Store.ListLeases(r.Context(), func(l *store.Lease) bool { return l.Tenant == t.ID && l.Active() })
		if err != nil {
			s.storeError(w, "read the leases", err)
			return
		}
		if int64(len(active)) >= q {
			out.Quota = fmt.Sprintf("max_leased_hosts is %d and %d leases are active: a real request would be refused", q, len(active))
		}
	}
	jsonapi.Write(w, http.StatusOK, out)
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
