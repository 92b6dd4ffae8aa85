package api

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/mux"
	"github.com/gorilla/websocket"
)

// TicketTTL is how long a screen ticket (POST /v1/vms/{id}/ws-ticket) may
// wait for its one redemption.
const TicketTTL = 30 * time.Second

// maxTickets bounds the tickets waiting at once, so that a caller asking
// for many cannot grow the node's memory.
const maxTickets = 1024

// ticketRoute redeems a screen ticket; it is the one route without a token.
const ticketRoute = "/v1/ws/{ticket}"

// dialTimeout bounds connecting to a guest port or a VNC socket.
const dialTimeout = 10 * time.Second

// upgrader upgrades the node's byte-stream routes. Their callers are
// central and the SDK, which send no Origin a browser would; a browser
// never holds a node token.
var upgrader = websocket.Upgrader{
	ReadBufferSize:  wsconn.MaxMessage,
	WriteBufferSize: wsconn.MaxMessage,
	CheckOrigin:     func(*http.Request) bool { return true },
}

// tickets are the node's one-use screen tickets, in memory: a restarted
// node has none.
type tickets struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]ticket
}

type ticket struct {
	vm      string
	expires time.Time
}

// issue returns a new ticket for vm; false when too many wait.
func (t *tickets) issue(vm string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for k, v := range t.m {
		if !now.Before(v.expires) {
			delete(t.m, k)
		}
	}
	if len(t.m) >= maxTickets {
		return "", false
	}
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	id := base64.RawURLEncoding.EncodeToString(b)
	t.m[id] = ticket{vm: vm, expires: now.Add(TicketTTL)}
	return id, true
}

// redeem takes a ticket: it works once, before it expires.
func (t *tickets) redeem(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tk, ok := t.m[id]
	delete(t.m, id)
	if !ok || !t.now().Before(tk.expires) {
		return "", false
	}
	return tk.vm, true
}

// requireAdmin answers 403 for a read-only token on a route that GETs
// but acts: a tunnel reaches into a guest.
func (s *server) requireAdmin(w http.ResponseWriter, r *http.Request) bool {
	if s.roleOf(r.Header.Get("Authorization")) == roleAdmin {
		return true
	}
	jsonapi.WriteError(w, http.StatusForbidden, "this token is read-only: it cannot open a tunnel or a screen",
		"use an admin token (tokens { admin = [...] } in the node's config)")
	return false
}

// tunnel relays a WebSocket to a guest TCP port, through the address the
// VM's driver forwards it to (GET /v1/vms/{id}/tunnel?port=N).
func (s *server) tunnel(w http.ResponseWriter, r *http.Request) {
	if !s.requireAdmin(w, r) {
		return
	}
	port, ok := jsonapi.IntParam(w, r, "port", 22, 1, 65535)
	if !ok {
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		jsonapi.WriteError(w, http.StatusBadRequest, "this route is a WebSocket: send an upgrade request",
			"sdk.NodeClient.DialTunnel opens it; with curl, it cannot be used")
		return
	}
	t, err := s.opts.Manager.ForwardPort(r.Context(), mux.Vars(r)["id"], port)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	guest, err := net.DialTimeout("tcp", t.Address, dialTimeout)
	if err != nil {
		s.log.Info("tunnel: guest port refused", "vm", t.VMName, "port", port, "error", err)
		jsonapi.WriteError(w, http.StatusBadGateway, "port "+strconv.Itoa(port)+" of vm "+jsonapi.Echo(t.VMName)+" does not accept connections",
			"is a server listening on that port in the guest? (for SSH: is sshd running?)")
		return
	}
	s.relay(w, r, guest, "tunnel", t.VMName)
}

// wsTicket issues a one-use ticket for the VM's screen
// (POST /v1/vms/{id}/ws-ticket {"kind":"vnc"}).
func (s *server) wsTicket(w http.ResponseWriter, r *http.Request) {
	var req sdk.WSTicketRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	if req.Kind != "vnc" {
		jsonapi.WriteError(w, http.StatusBadRequest, "ticket kind "+jsonapi.Echo(req.Kind)+" is not known", `ask for {"kind": "vnc"}`)
		return
	}
	t, err := s.opts.Manager.VNCSocket(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	id, ok := s.tickets.issue(t.VMID)
	if !ok {
		jsonapi.WriteError(w, http.StatusTooManyRequests, "too many screen tickets wait to be used",
			"a ticket is valid 30 seconds: redeem the ones asked for, or wait")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	jsonapi.Write(w, http.StatusCreated, sdk.WSTicket{Ticket: id, ExpiresIn: int(TicketTTL / time.Second), Path: "/v1/ws/" + id})
}

// redeemTicket relays raw RFB between a WebSocket and the VNC socket of
// the ticket's VM (GET /v1/ws/{ticket}). The ticket is the credential.
func (s *server) redeemTicket(w http.ResponseWriter, r *http.Request) {
	vm, ok := s.tickets.redeem(mux.Vars(r)["ticket"])
	if !ok {
		jsonapi.WriteError(w, http.StatusNotFound, "no such ticket: it was used already, has expired or never existed",
			"ask for a new one (POST /v1/vms/{id}/ws-ticket); a ticket works once, within 30 seconds")
		return
	}
	t, err := s.opts.Manager.VNCSocket(r.Context(), vm)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	vnc, err := net.DialTimeout("unix", t.Address, dialTimeout)
	if err != nil {
		s.log.Warn("screen: cannot connect to the vnc socket", "vm", t.VMName, "error", err)
		jsonapi.WriteError(w, http.StatusBadGateway, "the screen of vm "+jsonapi.Echo(t.VMName)+" cannot be reached",
			"the VM's hypervisor does not answer on its VNC socket; GET /v1/vms/{id} shows its state")
		return
	}
	s.relay(w, r, vnc, "screen", t.VMName)
}

// relay upgrades the request and copies bytes both ways between the
// WebSocket and conn until either side ends. Each direction writes what
// it read before it reads again, so a slow side holds the other back and
// memory stays at one buffer per direction.
func (s *server) relay(w http.ResponseWriter, r *http.Request, conn net.Conn, what, vmName string) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		conn.Close()
		return // the upgrader answered
	}
	c := wsconn.New(ws)
	start := time.Now()
	var up, down int64
	done := make(chan struct{})
	go func() {
		up, _ = io.CopyBuffer(conn, c, make([]byte, wsconn.MaxMessage))
		// The other side ended: closing the connection ends the copy below.
		conn.Close()
		close(done)
	}()
	var copyErr error
	down, copyErr = io.CopyBuffer(c, conn, make([]byte, wsconn.MaxMessage))
	reason := "the VM closed the connection"
	if copyErr != nil && !errors.Is(copyErr, net.ErrClosed) {
		reason = "the connection to the VM failed"
	}
	select {
	case <-done:
		reason = "the client closed the connection"
	default:
	}
	_ = c.CloseWith(websocket.CloseNormalClosure, reason)
	conn.Close()
	<-done
	s.log.Info(what+" closed", "vm", vmName, "bytes_to_vm", up, "bytes_from_vm", down, "duration", time.Since(start).Round(time.Millisecond), "reason", reason)
}
