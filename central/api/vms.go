package api

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/channel"
	"github.com/fluxvm/fluxvm/central/drainer"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// ReservedLabelPrefix starts the labels FluxVM sets itself (central/vms).
const ReservedLabelPrefix = vms.ReservedLabelPrefix

// createVM places a VM: the scheduler picks a node, the tenant's quota and
// the node's capacity are reserved in one etcd transaction, the node creates
// the VM stamped with the tenant, and the reservation becomes a ledger entry
// (or is released when the node fails).
func (s *Server) createVM(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	dryRun, ok := boolParam(w, r, "dry_run")
	if !ok {
		return
	}
	var body sdk.FleetCreateVMRequest
	if e := jsonapi.ReadBody(w, r, &body, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if len(body.Volumes) > 0 && (body.Reschedulable || body.Pool != "") {
		jsonapi.WriteError(w, http.StatusBadRequest, "a VM with volumes cannot be reschedulable or come from a warm pool: its volumes stay on their node",
			`leave "reschedulable" and "pool" out, or launch without volumes`)
		return
	}
	if !s.poolDefaults(w, r, &body) { // warm pools (pools.go): "pool" fills image and size
		return
	}
	req := body
	spec, imageName, err := vms.Resolve(r.Context(), s.opts.Store, tenantID(p), &req)
	if err != nil {
		s.refused(w, r, "check the request", err)
		return
	}
	if len(body.Volumes) > 0 {
		// Volumes pin the VM to their node, before anything is reserved.
		node, ids, err := s.volumes.ForLaunch(r.Context(), volumeCaller(p), body.Volumes, req.Node)
		if err != nil {
			s.refused(w, r, "check the volumes", err)
			return
		}
		req.Node, spec.Volumes = node, ids
	}
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	tenant := tenantID(p)
	placeReq := scheduler.Request{Tenant: tenant, GuestOS: spec.GuestOS, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB,
		NodeSelector: req.NodeSelector, Nested: req.Nested, Node: req.Node}
	if !s.tenantNetwork(w, r, &body, &spec, &placeReq, pol, dryRun) { // networks.go
		return
	}
	if dryRun {
		s.vmEstimate(w, r, placeReq, pol, spec, req.TTLSeconds)
		return
	}
	// A warm VM has no volumes: a launch with volumes always boots its own.
	if len(body.Volumes) == 0 && s.claimFromPool(w, r, &body, spec, imageName, pol) { // warm pools (pools.go): hand out a warm VM if one fits
		return
	}

	// The lease rules are checked again in the reservation's transaction,
	// against the lessee the node record names then.
	macOS := spec.GuestOS == store.GuestMacOS
	launch := vms.Launch{Spec: spec, Image: imageName, Place: placeReq, Policy: pol, Reserve: store.ReserveRequest{Tenant: tenant,
		VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, MacOS: macOS,
		ExclusiveLeases: pol.ExclusiveLeasedHosts && (tenant != "" || req.Node == ""), // the operator may name a leased host
		RequireLease:    pol.RequireLeaseForMacOS && macOS && tenant != ""}}
	if body.Reschedulable {
		// Only a reschedulable VM's spec is kept (in etcd, never logged):
		// create bodies can carry secrets.
		kept := drainer.KeptSpec{Spec: spec, Image: imageName, NodeSelector: req.NodeSelector, Nested: req.Nested}
		launch.Kept = kept.Encode()
	}
	l, err := s.launch.Launch(r.Context(), launch)
	if err != nil {
		s.launchError(w, r, err)
		return
	}
	nameTarget(r, l.VM.Name)
	w.Header().Set("Location", "/fleet/vms/"+l.Node.Name+"/"+l.VM.ID)
	jsonapi.Write(w, http.StatusCreated, sdk.FleetCreateVMResponse{Node: l.Node.Name, VM: *l.VM,
		Placement: sdk.Placement{Reason: l.Decision.Reason, Considered: shortlist(l.Decision.Considered, l.Node.Name)}})
}

// refused answers a mechanism's error: a rule's refusal (*jsonapi.Error)
// as it is, a node's refusal or failure (*nodecall.NodeError) through
// nodeError, anything else as the store's failure to do what.
func (s *Server) refused(w http.ResponseWriter, r *http.Request, what string, err error) {
	var re *jsonapi.Error
	var ne *nodecall.NodeError
	switch {
	case errors.As(err, &re):
		jsonapi.WriteError(w, re.Status, re.Msg, re.Hint)
	case errors.As(err, &ne) && ne.What == "":
		jsonapi.WriteError(w, http.StatusBadGateway, ne.Err.Error(), "the node's heartbeat must carry its API address")
	case errors.As(err, &ne):
		s.nodeError(w, PrincipalOf(r.Context()), ne.Node, ne.What, ne.Err)
	default:
		s.storeError(w, what, err)
	}
}

// launchError answers a launch that did not happen.
func (s *Server) launchError(w http.ResponseWriter, r *http.Request, err error) {
	p := PrincipalOf(r.Context())
	var np *scheduler.NoPlacementError
	var qe *store.QuotaError
	var ne *nodecall.NodeError
	var de *vms.DeletedError
	switch {
	case errors.As(err, &np):
		hint := noPlacementHint(np)
		if note := s.federation.PlacementNote(r.Context()); note != "" && p.Operator {
			hint += "; " + note // the operator's fleet (docs/fleets.md)
		}
		jsonapi.Write(w, http.StatusConflict, sdk.NoPlacementBody{Error: np.Summary, Considered: verdicts(np.Verdicts), Hint: hint})
	case errors.Is(err, scheduler.ErrInvalidRequest):
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), specHint)
	case errors.As(err, &qe):
		jsonapi.WriteError(w, http.StatusTooManyRequests, qe.Error(),
			fmt.Sprintf("%s is a quota of tenant %s (VMs being created count too): fluxctl fleet vms lists its VMs and fluxctl fleet rm NAME frees one; or ask the operator to raise %s",
				qe.Field, p.Tenant.Name, qe.Field))
	case errors.Is(err, store.ErrNotFound) && p.Tenant != nil && s.tenantGone(r.Context(), p.Tenant.ID):
		jsonapi.WriteError(w, http.StatusUnauthorized, "tenant no longer exists", "ask the operator for a new token")
	case errors.Is(err, placement.ErrNoRoom):
		jsonapi.WriteError(w, http.StatusConflict, err.Error(),
			"the fleet is filling up under concurrent creates; GET /fleet/capacity shows what fits now, then retry")
	case errors.Is(err, store.ErrInvalid) && p.Tenant != nil:
		jsonapi.WriteError(w, http.StatusForbidden, "tenant "+p.Tenant.Name+" is disabled", "ask the operator to enable it")
	case errors.As(err, &ne):
		s.nodeError(w, p, ne.Node, ne.What, ne.Err)
	case errors.As(err, &de):
		jsonapi.WriteError(w, http.StatusConflict, de.Error(), "nothing is left of it and nothing is charged; launch it again if you still want it")
	default:
		s.storeError(w, "reserve room for the vm", err)
	}
}

func (s *Server) tenantGone(ctx context.Context, id string) bool {
	_, err := s.opts.Store.GetTenant(ctx, id)
	return errors.Is(err, store.ErrNotFound)
}

// shortlistSize bounds the verdicts a successful launch answers with: the
// scheduler weighs every node, but a body that grew with the fleet (200 kB
// per launch at 2,000 nodes) cost more than the placement itself. A refusal
// still lists every node: that is when "why not there?" is asked.
const shortlistSize = placement.ShortList

// shortlist is the chosen node's verdict and the best-scored other fitting
// nodes, up to shortlistSize in all, in name order.
func shortlist(vs []scheduler.Verdict, chosen string) []sdk.PlacementVerdict {
	if len(vs) <= shortlistSize {
		return verdicts(vs)
	}
	var fit []scheduler.Verdict
	for _, v := range vs {
		if v.Fits || v.Node == chosen {
			fit = append(fit, v)
		}
	}
	slices.SortStableFunc(fit, func(a, b scheduler.Verdict) int {
		switch {
		case a.Node == chosen:
			return -1
		case b.Node == chosen:
			return 1
		}
		return cmp.Compare(b.Score, a.Score)
	})
	fit = fit[:min(len(fit), shortlistSize)]
	slices.SortFunc(fit, func(a, b scheduler.Verdict) int { return strings.Compare(a.Node, b.Node) })
	return verdicts(fit)
}

func verdicts(vs []scheduler.Verdict) []sdk.PlacementVerdict {
	out := make([]sdk.PlacementVerdict, len(vs))
	for i, v := range vs {
		out[i] = sdk.PlacementVerdict{Node: v.Node, Fits: v.Fits, Score: v.Score, Reasons: v.Reasons}
	}
	return out
}

// listVMs merges every node's VM list (central/vms: List).
func (s *Server) listVMs(w http.ResponseWriter, r *http.Request) {
	out, err := s.lister.List(r.Context(), tenantID(PrincipalOf(r.Context())))
	if err != nil {
		s.storeError(w, "list the vms", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// resolve finds the VM of a /fleet/vms/{node}/{id} route for the caller
// (central/vms: Find). A tenant gets 404 for a VM that is not its own,
// exactly as for one that does not exist.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) (*vms.Target, bool) {
	v := mux.Vars(r)
	t, err := s.lister.Find(r.Context(), v["node"], v["id"], tenantID(PrincipalOf(r.Context())))
	var amb *vms.AmbiguousError
	switch {
	case errors.Is(err, vms.ErrNoVM):
		jsonapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no vm %s on node %s", jsonapi.Echo(v["id"]), jsonapi.Echo(v["node"])),
			"GET /fleet/vms lists your VMs with their nodes")
	case errors.As(err, &amb):
		jsonapi.WriteError(w, http.StatusConflict, amb.Error(), "name the VM by its id: GET /fleet/vms lists them with their tenants")
	case err != nil:
		s.storeError(w, "find the vm", err)
	default:
		nameTarget(r, t.Name)
		return t, true
	}
	return nil, false
}

// nodeClient is the client for a target's node, or an answer when the node
// is down.
func (s *Server) nodeClient(w http.ResponseWriter, t *vms.Target) (*sdk.NodeClient, bool) {
	if t.Node.State != store.NodeUp {
		jsonapi.WriteError(w, http.StatusServiceUnavailable,
			fmt.Sprintf("node %s is down: no heartbeat since %s", t.Node.Name, t.Node.LastHeartbeat.Format(time.RFC3339)),
			"its VMs are unreachable, not lost; retry once the node reports again")
		return nil, false
	}
	nc, err := s.nodes.Client(t.Node)
	if err != nil {
		jsonapi.WriteError(w, http.StatusBadGateway, err.Error(), "the node's heartbeat must carry its API address")
		return nil, false
	}
	return nc, true
}

// nodeError answers a failed call to a node. The node's own refusals pass
// through (they are about the caller's VM); a node that refuses central's
// token or does not answer is central's problem, told as such.
func (s *Server) nodeError(w http.ResponseWriter, p Principal, n *store.Node, what string, err error) {
	var ae *sdk.APIError
	var ce *sdk.ConnectError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		// (A 403 is the node's policy refusing the request, passed on below.)
		s.log.Error("node refuses central's fleet token", "node", n.Name)
		jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("node %s refused central's token", n.Name),
			"the operator must list central's fleet token among the node's tokens.admin")
	case errors.As(err, &ae):
		jsonapi.WriteError(w, ae.Status, fmt.Sprintf("node %s: %s", n.Name, ae.Message), ae.Hint)
	case errors.Is(err, channel.ErrNoChannel):
		s.log.Warn("node holds no channel to this central", "node", n.Name, "op", what)
		jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("node %s has no channel to this central: could not %s", n.Name, what),
			"the node's agent opens its channel to the central its config names (central { url }) and advertises no URL to dial instead; retry once it is connected (forwarding between centrals is not built yet)")
	case errors.As(err, &ce), errors.Is(err, context.DeadlineExceeded):
		s.log.Warn("node does not answer", "node", n.Name, "op", what, "error", err)
		msg := fmt.Sprintf("node %s did not answer: could not %s", n.Name, what)
		if p.Operator {
			msg += ": " + err.Error()
		}
		jsonapi.WriteError(w, http.StatusBadGateway, msg, "retry; GET /fleet/vms shows whether the VM is there")
	default:
		s.log.Error("call node", "node", n.Name, "op", what, "error", err)
		jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("node %s: could not %s", n.Name, what), "retry in a moment")
	}
}

// deleteVM deletes a VM on its node and ends its ledger entry (or, for a VM
// whose create has not written one yet, marks it deleted: central/vms).
func (s *Server) deleteVM(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	if _, ok := s.nodeClient(w, t); !ok {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	gone, err := s.vms.Delete(ctx, t.Node, t.ID, t.Entry, "deleted")
	switch {
	case errors.Is(err, vms.ErrNotRecorded):
		// The VM is gone from its node; the reconciler ends its entry.
		s.log.Error("record a deleted vm", "node", t.Node.Name, "vm", t.ID, "error", err)
	case err != nil:
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, "delete the vm", err)
		return
	}
	if gone {
		jsonapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no vm %s on node %s", t.ID, t.Node.Name), "GET /fleet/vms lists your VMs")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// vmEstimate answers POST /fleet/vms?dry_run=true (sdk.VMDryRun): where the
// VM would land now and what an hour of it would cost, without creating
// anything.
func (s *Server) vmEstimate(w http.ResponseWriter, r *http.Request, req scheduler.Request, pol sdk.Policy, spec sdk.CreateVMRequest, ttlSeconds int64) {
	stored, nodes, err := s.place.Snapshot(r.Context())
	if err != nil {
		s.storeError(w, "read the fleet", err)
		return
	}
	d, err := scheduler.Place(nodes, req, placement.SchedulerPolicy(pol), scheduler.BinPack)
	var np *scheduler.NoPlacementError
	switch {
	case errors.As(err, &np):
		jsonapi.Write(w, http.StatusConflict, sdk.NoPlacementBody{Error: np.Summary, Considered: verdicts(np.Verdicts),
			Hint: noPlacementHint(np)})
		return
	case errors.Is(err, scheduler.ErrInvalidRequest):
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), specHint)
		return
	case err != nil:
		s.storeError(w, "place the vm", err)
		return
	}
	prices, err := s.opts.Store.CurrentPrices(r.Context())
	if err != nil {
		s.storeError(w, "read the prices", err)
		return
	}
	onOwnLease := false
	for i := range stored {
		if stored[i].Name == d.Node {
			onOwnLease = req.Tenant != "" && stored[i].LeasedBy == req.Tenant
		}
	}
	out := sdk.VMDryRun{DryRun: true, Node: d.Node, Reason: d.Reason,
		Estimate: prices.VMEstimate(spec.VCPUs, spec.MemoryMiB, spec.GuestOS == store.GuestMacOS, onOwnLease),
		Note:     "nothing was created; quotas are checked when the VM is launched, and a warm pool may serve the launch"}
	if ttlSeconds > 0 {
		cost := billing.Micros(int64(out.Estimate.PerHour) / 3600 * ttlSeconds)
		if per := int64(out.Estimate.PerHour); per <= math.MaxInt64/max(ttlSeconds, 1) {
			cost = billing.Micros(per * ttlSeconds / 3600)
		}
		out.ForTTL, out.ForTTLDisplay = &cost, cost.Cents()
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// execVM runs a command in a VM through its node. The body is passed on and
// never logged.
func (s *Server) execVM(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	var req sdk.ExecRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	nc, ok := s.nodeClient(w, t)
	if !ok {
		return
	}
	timeout := 5 * time.Minute
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds)*time.Second + nodecall.CallTimeout
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	res, err := nc.Exec(ctx, t.ID, req)
	if err != nil {
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, "run the command", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, res)
}

// vmAction serves start, stop, restart, pause and resume.
func vmAction(action string) func(*Server, http.ResponseWriter, *http.Request) {
	return func(s *Server, w http.ResponseWriter, r *http.Request) {
		t, ok := s.resolve(w, r)
		if !ok {
			return
		}
		var stop sdk.StopRequest
		if action == "stop" {
			if e := jsonapi.ReadBody(w, r, &stop, false, specHint); e != nil {
				jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
				return
			}
		} else if e := jsonapi.ReadBody(w, r, &struct{}{}, false, specHint); e != nil {
			jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
			return
		}
		nc, ok := s.nodeClient(w, t)
		if !ok {
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), nodecall.CallTimeout+time.Duration(stop.TimeoutSeconds)*time.Second)
		defer cancel()
		var vm *sdk.VM
		var err error
		switch action {
		case "start":
			vm, err = nc.StartVM(ctx, t.ID)
		case "stop":
			vm, err = nc.StopVM(ctx, t.ID, time.Duration(stop.TimeoutSeconds)*time.Second)
		case "restart":
			vm, err = nc.RestartVM(ctx, t.ID)
		case "pause":
			vm, err = nc.PauseVM(ctx, t.ID)
		case "resume":
			vm, err = nc.ResumeVM(ctx, t.ID)
		default:
			err = fmt.Errorf("unknown action %s", action)
		}
		if err != nil {
			s.nodeError(w, PrincipalOf(r.Context()), t.Node, action+" the vm", err)
			return
		}
		jsonapi.Write(w, http.StatusOK, sdk.FleetVM{Node: t.Node.Name, VM: *vm})
	}
}

// vmLogs is the end of a VM's console log, as its node keeps it.
func (s *Server) vmLogs(w http.ResponseWriter, r *http.Request) {
	lines, ok := jsonapi.IntParam(w, r, "lines", 0, 0, 100000)
	if !ok {
		return
	}
	s.fromNode(w, r, "read the console log", "text/plain; charset=utf-8", func(ctx context.Context, nc *sdk.NodeClient, id string) ([]byte, error) {
		return nc.Logs(ctx, id, lines)
	})
}

// fromNode answers a VM route with what get fetches from the VM's node, as
// contentType (never cached: logs and screens change and may hold secrets).
func (s *Server) fromNode(w http.ResponseWriter, r *http.Request, what, contentType string,
	get func(ctx context.Context, nc *sdk.NodeClient, id string) ([]byte, error)) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	nc, ok := s.nodeClient(w, t)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), nodecall.CallTimeout)
	defer cancel()
	b, err := get(ctx, nc, t.ID)
	if err != nil {
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, what, err)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// vmScreen is GET /fleet/vms/{node}/{id}/screen[?max_width=N]: the VM's
// display as a PNG, from its node's screenshot. A VM without a display is
// the node's refusal (409).
func (s *Server) vmScreen(w http.ResponseWriter, r *http.Request) {
	maxWidth, ok := jsonapi.IntParam(w, r, "max_width", 0, 1, 16384)
	if !ok {
		return
	}
	s.fromNode(w, r, "take a screenshot", "image/png", func(ctx context.Context, nc *sdk.NodeClient, id string) ([]byte, error) {
		return nc.Screenshot(ctx, id, maxWidth)
	})
}
