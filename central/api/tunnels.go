package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/tunnels"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/mux"
	"github.com/gorilla/websocket"
)

// Tunnels and screens (docs/tunnels.md): the mechanism is central/tunnels;
// these handlers check access, find the VM, ask the node and hand both
// connections to the relay.

// tunnelUpgrader upgrades the client's side. Its default origin check
// (the Origin header, when a browser sends one, must name this host)
// keeps another site from opening a tunnel with a console session's
// cookie; programs send no Origin.
var tunnelUpgrader = websocket.Upgrader{ReadBufferSize: wsconn.MaxMessage, WriteBufferSize: wsconn.MaxMessage}

// TunnelLoop ends idle, old and revoked tunnels until ctx ends, then ends
// them all. It runs on every central: each relays its own tunnels.
func (s *Server) TunnelLoop(ctx context.Context) { s.tunnels.Run(ctx) }

// openerOf is who opens a tunnel, as the relay re-checks it.
func openerOf(p Principal) tunnels.Opener {
	o := tunnels.Opener{Operator: p.Operator, User: p.User}
	if p.Tenant != nil {
		o.TenantID, o.TenantName = p.Tenant.ID, p.Tenant.Name
	}
	if p.Key != nil {
		o.KeyID, o.KeyName = p.Key.ID, p.Key.Name
	}
	return o
}

// vmName is what people read for a target: its name, else its id.
func vmName(t *vms.Target) string {
	if t.Name != "" {
		return t.Name
	}
	return t.ID
}

// refuseReadOnlyKey answers 403 for a read-only API key on a stream that
// reaches into a VM (its method is GET, so the guard let it pass).
func (s *Server) refuseReadOnlyKey(w http.ResponseWriter, p Principal, req tunnels.Request) bool {
	if p.Key == nil || !p.Key.ReadOnly {
		return false
	}
	s.tunnels.Refused(req, http.StatusForbidden)
	jsonapi.WriteError(w, http.StatusForbidden, "API key "+p.Key.Name+" is read-only: it cannot open a tunnel or a screen",
		"use a full key or the tenant's primary token")
	return true
}

// admitError answers a refused admission.
func (s *Server) admitError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, tunnels.ErrDisabled):
		jsonapi.WriteError(w, http.StatusForbidden, "tunnels are turned off on this cloud",
			"the operator turns them on in the policy (tunnels.enabled, GET/PUT /fleet/policy)")
	case errors.Is(err, tunnels.ErrPort):
		jsonapi.WriteError(w, http.StatusForbidden, err.Error(), "the operator sets the allowed ports in the policy (tunnels.ports)")
	case errors.Is(err, tunnels.ErrAccess):
		jsonapi.WriteError(w, http.StatusForbidden, "the access this was asked with is gone: "+strings.TrimPrefix(err.Error(), tunnels.ErrAccess.Error()+": "),
			"ask again with a credential that still works")
	case errors.Is(err, tunnels.ErrLimit):
		jsonapi.WriteError(w, http.StatusTooManyRequests, "too many open tunnels: "+err.Error(),
			"close one (GET /fleet/tunnels lists them, DELETE /fleet/tunnels/{id} closes one) or wait for one to end")
	default:
		s.storeError(w, "read the policy", err)
	}
}

// relayTo upgrades the client's request and relays it to the node's
// stream until the tunnel ends; a node that refuses gives back the slot.
func (s *Server) relayTo(w http.ResponseWriter, r *http.Request, tun *tunnels.Tunnel, n *store.Node, what string,
	dial func(ctx context.Context) (*wsconn.Conn, error)) {
	ctx, cancel := context.WithTimeout(r.Context(), nodecall.CallTimeout)
	defer cancel()
	node, err := dial(ctx)
	if err != nil {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		s.nodeError(rec, PrincipalOf(r.Context()), n, what, err)
		tun.Abort(rec.status)
		return
	}
	client, err := tunnelUpgrader.Upgrade(w, r, nil)
	if err != nil {
		node.Close()
		tun.Abort(http.StatusBadRequest) // the upgrader answered
		return
	}
	tun.Relay(wsconn.New(client), node)
}

// openTunnel is GET /fleet/vms/{node}/{id}/tunnel?port=N (default 22): a
// WebSocket relayed to the guest port through the node.
func (s *Server) openTunnel(w http.ResponseWriter, r *http.Request) {
	port, ok := jsonapi.IntParam(w, r, "port", 22, 1, 65535)
	if !ok {
		return
	}
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	p := PrincipalOf(r.Context())
	req := tunnels.Request{Opener: openerOf(p), Node: t.Node.Name, VMID: t.ID, VMName: vmName(t), Kind: sdk.TunnelPort, Port: port,
		Path: r.URL.EscapedPath()}
	if s.refuseReadOnlyKey(w, p, req) {
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		jsonapi.WriteError(w, http.StatusBadRequest, "this route is a WebSocket: send an upgrade request",
			"fluxctl fleet port-forward and fleet ssh open it; the SDK's FleetClient.DialWebSocket too")
		return
	}
	tun, err := s.tunnels.Admit(r.Context(), req)
	if err != nil {
		s.admitError(w, err)
		return
	}
	nc, ok := s.nodeClient(w, t)
	if !ok {
		tun.Abort(http.StatusServiceUnavailable)
		return
	}
	s.relayTo(w, r, tun, t.Node, "open a tunnel", func(ctx context.Context) (*wsconn.Conn, error) {
		return nc.DialTunnel(ctx, t.ID, port)
	})
}

// listTunnels is GET /fleet/tunnels: the caller's open tunnels (all of
// them for the operator) and the policy's limits.
func (s *Server) listTunnels(w http.ResponseWriter, r *http.Request) {
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.TunnelList{Tunnels: s.tunnels.List(tenantID(PrincipalOf(r.Context()))), Limits: pol.Tunnels})
}

// closeTunnel is DELETE /fleet/tunnels/{id}: the tunnel ends at once.
// Another tenant's is 404.
func (s *Server) closeTunnel(w http.ResponseWriter, r *http.Request) {
	id := mux.Vars(r)["id"]
	closed, err := s.tunnels.Close(id, tenantID(PrincipalOf(r.Context())))
	if err != nil {
		jsonapi.WriteError(w, http.StatusNotFound, "no open tunnel "+jsonapi.Echo(id),
			"GET /fleet/tunnels lists the open tunnels; a tunnel lives on the central that relays it")
		return
	}
	nameTarget(r, closed.VMName)
	w.WriteHeader(http.StatusNoContent)
}

// wsTicket is POST /fleet/vms/{node}/{id}/ws-ticket {"kind":"vnc"}: a
// one-use ticket, valid 30 s, for GET /fleet/ws/{ticket} (the VM's screen
// as raw RFB). A browser's WebSocket cannot send a bearer token, so this
// authenticated request stands in for it.
func (s *Server) wsTicket(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	var body sdk.WSTicketRequest
	if e := jsonapi.ReadBody(w, r, &body, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if body.Kind != "vnc" {
		jsonapi.WriteError(w, http.StatusBadRequest, "ticket kind "+jsonapi.Echo(body.Kind)+" is not known", `ask for {"kind": "vnc"}`)
		return
	}
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	if !pol.Tunnels.Enabled {
		s.admitError(w, tunnels.ErrDisabled)
		return
	}
	req := tunnels.Request{Opener: openerOf(PrincipalOf(r.Context())), Node: t.Node.Name, VMID: t.ID, VMName: vmName(t),
		Kind: sdk.TunnelScreen, Path: "/fleet/ws/{ticket}"}
	id, err := s.tunnels.IssueTicket(req)
	if err != nil {
		jsonapi.WriteError(w, http.StatusTooManyRequests, err.Error(), "a ticket is valid 30 seconds: use the ones asked for, or wait")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	jsonapi.Write(w, http.StatusCreated, sdk.WSTicket{Ticket: id, ExpiresIn: int(tunnels.TicketTTL / time.Second), Path: "/fleet/ws/" + id})
}

// redeemTicket is GET /fleet/ws/{ticket}: the ticket is the credential.
// It takes a tunnel slot; central asks the VM's node for a ticket of its
// own and relays the node's VNC stream (raw RFB) both ways.
func (s *Server) redeemTicket(w http.ResponseWriter, r *http.Request) {
	req, ok := s.tunnels.Redeem(mux.Vars(r)["ticket"])
	if !ok {
		jsonapi.WriteError(w, http.StatusNotFound, "no such ticket: it was used already, has expired or never existed",
			"ask for a new one (POST /fleet/vms/{node}/{id}/ws-ticket); a ticket works once, within 30 seconds")
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		jsonapi.WriteError(w, http.StatusBadRequest, "this route is a WebSocket: send an upgrade request (the ticket is now used)",
			"ask for a new ticket and open it with a WebSocket")
		return
	}
	n, err := s.opts.Store.GetNode(r.Context(), req.Node)
	if errors.Is(err, store.ErrNotFound) {
		s.tunnels.Refused(req, http.StatusNotFound)
		jsonapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("node %s is gone", req.Node), "GET /fleet/vms lists your VMs")
		return
	}
	if err != nil {
		s.storeError(w, "read the node", err)
		return
	}
	tun, err := s.tunnels.Admit(r.Context(), req)
	if err != nil {
		s.admitError(w, err)
		return
	}
	nc, ok := s.nodeClient(w, &vms.Target{Node: n})
	if !ok {
		tun.Abort(http.StatusServiceUnavailable)
		return
	}
	s.relayTo(w, r, tun, n, "open the screen", func(ctx context.Context) (*wsconn.Conn, error) {
		nt, err := nc.ScreenTicket(ctx, req.VMID)
		if err != nil {
			return nil, err
		}
		return nc.DialWebSocket(ctx, nt.Path)
	})
}

// vmInput is POST /fleet/vms/{node}/{id}/input: keyboard and pointer
// actions passed to the node (capability "input"). The body is passed on
// and never logged.
func (s *Server) vmInput(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	var req sdk.InputRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	nc, ok := s.nodeClient(w, t)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), nodecall.CallTimeout)
	defer cancel()
	if err := nc.Input(ctx, t.ID, req.Actions); err != nil {
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, "send input", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// vmGone is the re-check's question to a tunnel's node: why its VM can no
// longer be reached ("" while it runs, or while its node cannot say: a
// node that is down ends nothing, its VMs are not lost).
func (s *Server) vmGone(ctx context.Context, node, vmID string) (string, error) {
	n, err := s.opts.Store.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return "the VM's node was removed", nil
	}
	if err != nil {
		return "", err
	}
	if n.State != store.NodeUp {
		return "", nil
	}
	nc, err := s.nodes.Client(n)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, nodecall.CallTimeout)
	defer cancel()
	vm, err := nc.GetVM(ctx, vmID)
	switch {
	case sdk.IsNotFound(err):
		return "the VM was deleted", nil
	case err != nil:
		return "", err
	case vm.State == sdk.StateRunning, vm.State == sdk.StatePaused:
		return "", nil
	}
	return "the VM is " + vm.State, nil
}
