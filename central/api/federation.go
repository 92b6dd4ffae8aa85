package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/fleet"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Fleets (docs/fleets.md): pairing centrals and enrolling nodes. The
// mechanism is central/fleet's; here are its routes.

const fleetHint = "docs/fleets.md walks through pairing: fluxctl fleet invite, join, requests, approve, confirm"

// fleetError answers an error of package fleet.
func (s *Server) fleetError(w http.ResponseWriter, what string, err error) {
	switch {
	case errors.Is(err, fleet.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, err.Error(), fleetHint)
	case errors.Is(err, fleet.ErrInvalid):
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), fleetHint)
	case errors.Is(err, fleet.ErrConflict):
		jsonapi.WriteError(w, http.StatusConflict, err.Error(), fleetHint)
	case errors.Is(err, fleet.ErrLimit):
		jsonapi.WriteError(w, http.StatusTooManyRequests, err.Error(), fleetHint)
	case errors.Is(err, fleet.ErrOwner):
		jsonapi.WriteError(w, http.StatusBadGateway, err.Error(), "check the owner's URL from this central, and that the owner central runs")
	default:
		s.log.Error("fleet", "op", what, "error", err)
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "could not "+what+": central's store does not answer", "retry; if it persists, check central's etcd")
	}
}

// localSite is this central's nodes and VM counts, for the fleet view.
func (s *Server) localSite(ctx context.Context) (sdk.FleetSite, error) {
	ns, err := s.opts.Store.ListNodes(ctx)
	if err != nil {
		return sdk.FleetSite{}, err
	}
	site := sdk.FleetSite{Nodes: make([]sdk.FleetSiteNode, 0, len(ns))}
	for _, n := range ns {
		site.Nodes = append(site.Nodes, sdk.FleetSiteNode{Name: n.Name, State: n.State, VMs: int64(len(n.VMs))})
		site.VMs += int64(len(n.VMs))
	}
	return site, nil
}

// FederationLoop reports to the fleet's owner every interval when this
// central is a member (on the leader; fleet.PollInterval when 0).
func (s *Server) FederationLoop(ctx context.Context, every time.Duration) {
	s.federation.Run(ctx, every)
}

// createInvite is POST /fleet/federation/invites (operator).
func (s *Server) createInvite(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetCreateInviteRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	inv, err := s.federation.CreateInvite(r.Context(), req.Kind)
	if err != nil {
		s.fleetError(w, "mint an invite", err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, inv)
}

// redeemInvite is POST /fleet/pairing/redeem: public, the invite is the
// credential. Invalid, expired and used invites are one 404.
func (s *Server) redeemInvite(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetRedeemRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	out, err := s.federation.Redeem(r.Context(), req)
	if errors.Is(err, fleet.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "no such invite: it is wrong, expired or used",
			"ask the owner's operator for a new invite (fluxctl fleet invite); an invite works once, for 15 minutes")
		return
	}
	if err != nil {
		s.fleetError(w, "redeem an invite", err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, out)
}

// confirmPairing is POST /fleet/pairing/confirm: public, the joiner's
// nonce is the credential. 202 while the owner has not approved.
func (s *Server) confirmPairing(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetPairingConfirm
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	out, err := s.federation.Confirm(r.Context(), req.Nonce, req.PollToken)
	if errors.Is(err, fleet.ErrNotFound) {
		jsonapi.WriteError(w, http.StatusNotFound, "no such pairing: it was rejected, expired or never made",
			"ask the owner's operator for a new invite and pair again")
		return
	}
	if err != nil {
		s.fleetError(w, "confirm a pairing", err)
		return
	}
	status := http.StatusOK
	if out.State == sdk.PairingPending {
		status = http.StatusAccepted
	}
	jsonapi.Write(w, status, out)
}

// listPairingRequests is GET /fleet/federation/requests (operator).
func (s *Server) listPairingRequests(w http.ResponseWriter, r *http.Request) {
	rs, err := s.federation.Requests(r.Context())
	if err != nil {
		s.fleetError(w, "list pairing requests", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.FleetRequestList{Requests: rs})
}

// approvePairing is POST /fleet/federation/requests/{id}/approve (operator).
func (s *Server) approvePairing(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetApproveRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	q, err := s.federation.Approve(r.Context(), mux.Vars(r)["id"], req.Code)
	if err != nil {
		s.fleetError(w, "approve a pairing", err)
		return
	}
	setTarget(r, q.Name)
	jsonapi.Write(w, http.StatusOK, q)
}

// rejectPairing is POST /fleet/federation/requests/{id}/reject (operator).
func (s *Server) rejectPairing(w http.ResponseWriter, r *http.Request) {
	if err := s.federation.Reject(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fleetError(w, "reject a pairing", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// getFederation is GET /fleet/federation (operator).
func (s *Server) getFederation(w http.ResponseWriter, r *http.Request) {
	states := map[string]string{}
	if ns, err := s.opts.Store.ListNodes(r.Context()); err == nil {
		for _, n := range ns {
			states[n.Name] = n.State
		}
	}
	v, err := s.federation.View(r.Context(), func(name string) string { return states[name] })
	if err != nil {
		s.fleetError(w, "read the fleet", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}

// removeFleetMember is DELETE /fleet/federation/members/{id} (operator):
// a member central or an enrolled node, by id or name.
func (s *Server) removeFleetMember(w http.ResponseWriter, r *http.Request) {
	m, err := s.federation.Remove(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.fleetError(w, "remove a member", err)
		return
	}
	setTarget(r, m.Name)
	if m.Kind == sdk.PairNode {
		// Its channel goes now; its next heartbeat or dial reads 403.
		s.nodes.Channels().Drop(m.Name)
	}
	w.WriteHeader(http.StatusNoContent)
}

// joinFleet is POST /fleet/federation/join (operator of the joining central).
func (s *Server) joinFleet(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetJoinRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	m, err := s.federation.Join(r.Context(), req)
	if err != nil {
		s.fleetError(w, "join the fleet", err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, m)
}

// confirmJoin is POST /fleet/federation/confirm (operator of the joining
// central): 202 while the owner has not approved.
func (s *Server) confirmJoin(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetConfirmJoinRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	m, err := s.federation.ConfirmJoin(r.Context(), req.Code)
	switch {
	case errors.Is(err, fleet.ErrPending):
		jsonapi.Write(w, http.StatusAccepted, m)
	case err != nil:
		s.fleetError(w, "confirm the join", err)
	default:
		jsonapi.Write(w, http.StatusOK, m)
	}
}

// leaveFleet is DELETE /fleet/federation/membership (operator of a member).
func (s *Server) leaveFleet(w http.ResponseWriter, r *http.Request) {
	_, err := s.federation.LeaveFleet(r.Context())
	switch {
	case errors.Is(err, fleet.ErrOwner):
		// Left here; the owner did not hear it.
		jsonapi.WriteError(w, http.StatusBadGateway, "left the fleet here, but "+err.Error(),
			"the owner's operator can remove this central (fluxctl fleet remove)")
	case err != nil:
		s.fleetError(w, "leave the fleet", err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// memberReport is POST /fleet/federation/report (a member's fleet token).
func (s *Server) memberReport(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetReport
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	sites, err := s.federation.Report(r.Context(), PrincipalOf(r.Context()).Member.ID, req.Site)
	if err != nil {
		s.fleetError(w, "record a member's report", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.FleetView{Sites: sites})
}

// memberLeave is POST /fleet/federation/leave (a member's fleet token):
// no tombstone is left.
func (s *Server) memberLeave(w http.ResponseWriter, r *http.Request) {
	m, err := s.federation.Leave(r.Context(), PrincipalOf(r.Context()).Member.ID)
	if err != nil {
		s.fleetError(w, "let a member leave", err)
		return
	}
	setTarget(r, m.Name)
	w.WriteHeader(http.StatusNoContent)
}

// memberSite is GET /fleet/federation/site: this member central's nodes and
// VM counts, for its owner's poll (the poll token it gave the owner).
func (s *Server) memberSite(w http.ResponseWriter, r *http.Request) {
	site, err := s.federation.Site(r.Context())
	if err != nil {
		s.fleetError(w, "read this central's site", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, site)
}

// memberRefresh is POST /fleet/federation/refresh (a member's fleet token).
func (s *Server) memberRefresh(w http.ResponseWriter, r *http.Request) {
	cred, err := s.federation.Refresh(r.Context(), PrincipalOf(r.Context()).Member.ID)
	if err != nil {
		s.fleetError(w, "refresh a fleet token", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.FleetRefreshReply{Credential: cred})
}

// ownerFloor is GET /fleet/federation/policy (a member's fleet token): the
// egress floor this owner holds its members' tenant networks to, its own
// effective one.
func (s *Server) ownerFloor(w http.ResponseWriter, r *http.Request) {
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	floor, _, err := s.overlays.Floor(r.Context(), pol)
	if err != nil {
		s.storeError(w, "read the egress floor", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.FleetFloor{Egress: floor})
}

// fleetPrincipal authenticates a fleet-scoped token or a node credential.
func (s *Server) fleetPrincipal(r *http.Request, token string) (p Principal, status int, msg, hint string) {
	m, err := s.federation.Authenticate(r.Context(), token)
	switch {
	case errors.Is(err, fleet.ErrRemoved):
		return p, http.StatusForbidden, "removed from the fleet",
			"the owner's operator removed this member: pair again with a new invite (fluxctl fleet join, or fluxvm-agent node enroll)"
	case errors.Is(err, fleet.ErrUnknown):
		return p, http.StatusUnauthorized, "invalid token", "this fleet credential is unknown, or its member left: pair again"
	case err != nil:
		s.log.Error("look up a fleet credential", "error", err)
		return p, http.StatusServiceUnavailable, "cannot check the token now", "central's store does not answer; retry"
	}
	return Principal{Member: m}, 0, "", ""
}

// memberRefusal says why a fleet credential may not call rt ("" when it
// may): a member central's token calls only the member routes; a node's
// credential only its own node's heartbeat and channel.
func memberRefusal(rt Route, r *http.Request, p Principal) (msg, hint string) {
	switch {
	case p.Member == nil:
		if rt.Access == FleetMember {
			return "this route is for fleet members: " + r.Method + " " + rt.Path, "a member central calls it with its fleet token"
		}
		return "", ""
	case p.Member.Kind == sdk.PairNode:
		if rt.NodeOwn && mux.Vars(r)["name"] == p.Member.Name {
			return "", ""
		}
		return "the credential of node " + p.Member.Name + " calls only that node's heartbeat and channel, not " + r.Method + " " + rt.Path,
			"the operator's and tenants' routes take their own tokens"
	case p.Member.Kind == fleet.KindOwner:
		if rt.OwnerPoll {
			return "", ""
		}
		return "the owner's poll token reads only this central's site, not " + r.Method + " " + rt.Path, "GET /fleet/federation/site"
	case rt.Access != FleetMember:
		return "this token is scoped to the fleet: it may not call " + r.Method + " " + rt.Path,
			"a member's fleet token calls only the fleet routes (report, leave, refresh)"
	}
	return "", ""
}

// markEnrolled notes on a node's record that it authenticates with its own
// credential, so central calls it only through its channel and never
// sends it the operator's token.
func markEnrolled(n *store.Node, p Principal) {
	n.Enrolled = p.Member != nil && p.Member.Kind == sdk.PairNode
}
