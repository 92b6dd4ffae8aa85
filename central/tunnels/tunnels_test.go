package tunnels_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/central/tunnels"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
)

// clock is the injected clock the tests move.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// events collects what the manager records.
type events struct {
	mu sync.Mutex
	es []sdk.Event
}

func (e *events) add(ev sdk.Event) { e.mu.Lock(); e.es = append(e.es, ev); e.mu.Unlock() }
func (e *events) all() []sdk.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sdk.Event(nil), e.es...)
}

// rig is a manager on a real store, a "node" that echoes over a real
// WebSocket, and a front that admits and relays, as central's API does.
type rig struct {
	t      *testing.T
	st     *store.Store
	clk    *clock
	ev     *events
	m      *tunnels.Manager
	front  string
	acme   *store.Tenant
	mu     sync.Mutex
	opener map[string]tunnels.Opener // by the front's ?who=
	vmGone string                    // what VMGone answers
}

var upgrader = websocket.Upgrader{}

func newRig(t *testing.T, policy func(*sdk.TunnelPolicy)) *rig {
	t.Helper()
	r := &rig{t: t, st: storetest.Open(t), clk: &clock{now: time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)}, ev: &events{},
		opener: map[string]tunnels.Opener{}}
	ctx := context.Background()
	p := store.DefaultPolicy()
	if policy != nil {
		policy(&p.Tunnels)
	}
	if _, err := r.st.PutPolicy(ctx, p); err != nil {
		t.Fatal(err)
	}
	r.acme = storetest.Tenant(t, r.st, "acme")
	r.opener["acme"] = tunnels.Opener{TenantID: r.acme.ID, TenantName: "acme"}
	r.opener["operator"] = tunnels.Opener{Operator: true}
	r.m = tunnels.New(tunnels.Options{Store: r.st, Record: r.ev.add, Now: r.clk.Now, Poll: 5 * time.Millisecond,
		VMGone: func(context.Context, string, string) (string, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.vmGone, nil
		}})

	node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ws, err := upgrader.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		c := wsconn.New(ws)
		defer c.Close()
		if req.URL.Query().Get("drop") != "" { // the node's connection breaks: no close message
			_, _ = c.Write([]byte("bye"))
			_ = ws.UnderlyingConn().Close()
			return
		}
		if req.URL.Query().Get("hangup") != "" {
			_, _ = c.Write([]byte("bye"))
			_ = c.CloseWith(websocket.CloseNormalClosure, "the VM closed the connection")
			return
		}
		_, _ = io.Copy(c, c)
	}))
	t.Cleanup(node.Close)
	nodeURL := "ws" + strings.TrimPrefix(node.URL, "http")

	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		r.mu.Lock()
		o := r.opener[q.Get("who")]
		r.mu.Unlock()
		port := 22
		if q.Get("port") == "80" {
			port = 80
		}
		kind := sdk.TunnelPort
		if q.Get("screen") != "" {
			kind, port = sdk.TunnelScreen, 0
		}
		tun, err := r.m.Admit(req.Context(), tunnels.Request{Opener: o, Node: "sim-1", VMID: "vm-1", VMName: "web-1", Kind: kind, Port: port, Path: "/fleet/vms/sim-1/vm-1/tunnel"})
		switch {
		case errors.Is(err, tunnels.ErrDisabled), errors.Is(err, tunnels.ErrPort):
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		case errors.Is(err, tunnels.ErrLimit):
			http.Error(w, err.Error(), http.StatusTooManyRequests)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		nws, _, err := websocket.DefaultDialer.Dial(nodeURL+"?"+req.URL.RawQuery, nil)
		if err != nil {
			tun.Abort(http.StatusBadGateway)
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		cws, err := upgrader.Upgrade(w, req, nil)
		if err != nil {
			tun.Abort(http.StatusBadRequest)
			nws.Close()
			return
		}
		tun.Relay(wsconn.New(cws), wsconn.New(nws))
	}))
	t.Cleanup(front.Close)
	r.front = "ws" + strings.TrimPrefix(front.URL, "http")
	return r
}

// dial opens a tunnel through the front; status is the refusal's (0: open).
func (r *rig) dial(query string) (*wsconn.Conn, int) {
	r.t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(r.front+"/?"+query, nil)
	if err != nil {
		if resp != nil {
			return nil, resp.StatusCode
		}
		r.t.Fatalf("dial the front: %v", err)
	}
	c := wsconn.New(ws)
	r.t.Cleanup(func() { c.Close() })
	return c, 0
}

// echo sends data through c and reads it back.
func echo(t *testing.T, c *wsconn.Conn, data []byte) {
	t.Helper()
	go func() { _, _ = c.Write(data) }()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read the echo: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the echo differs from what was sent")
	}
}

// waitClose waits for the event CLOSE of the n-th tunnel to end and
// returns it.
func (r *rig) waitClose(n int) sdk.Event {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var closes []sdk.Event
		for _, e := range r.ev.all() {
			if e.Method == "CLOSE" {
				closes = append(closes, e)
			}
		}
		if len(closes) >= n {
			return closes[n-1]
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.t.Fatalf("no CLOSE number %d in %+v", n, r.ev.all())
	return sdk.Event{}
}

// closeReason reads c until it ends and returns the close message's text.
func closeReason(t *testing.T, c *wsconn.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c)
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Text
	}
	return "no close message (" + errString(err) + ")"
}

func errString(err error) string {
	if err == nil {
		return "EOF"
	}
	return err.Error()
}

// TestRelayCountsBytesEachWayAndRecordsOpenAndClose: a MiB through a real
// WebSocket relay comes back whole; OPEN is 101, CLOSE carries the bytes
// each way, the duration by the clock and why it ended (the client left,
// or the VM hung up).
func TestRelayCountsBytesEachWayAndRecordsOpenAndClose(t *testing.T) {
	r := newRig(t, nil)
	c, status := r.dial("who=acme")
	if status != 0 {
		t.Fatalf("open: %d", status)
	}
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	echo(t, c, data)
	if l := r.m.List(r.acme.ID); len(l) != 1 || l[0].BytesToVM != 1<<20 || l[0].VMName != "web-1" || l[0].OpenedBy != "primary token" || !strings.HasPrefix(l[0].ID, "tun_") {
		t.Fatalf("List = %+v", l)
	}
	r.clk.Add(90 * time.Second)
	_ = c.CloseWith(websocket.CloseNormalClosure, "")
	e := r.waitClose(1)
	if e.Tunnel == nil || e.Tunnel.BytesToVM != 1<<20 || e.Tunnel.BytesFromVM != 1<<20 || e.Tunnel.Reason != tunnels.ReasonClient || e.Tunnel.DurationMS != 90000 {
		t.Fatalf("CLOSE = %+v %+v", e, e.Tunnel)
	}
	if e.Actor != "acme" || e.Target != "web-1" || e.Action != "close tunnel to web-1 port 22" {
		t.Fatalf("CLOSE names %q %q %q", e.Actor, e.Target, e.Action)
	}
	if open := r.ev.all()[0]; open.Method != "OPEN" || open.Status != 101 {
		t.Fatalf("first event %+v, want OPEN 101", open)
	}
	if l := r.m.List(""); len(l) != 0 {
		t.Fatalf("a closed tunnel is still listed: %+v", l)
	}

	c, _ = r.dial("who=acme&hangup=1")
	if got := closeReason(t, c); got != "no close message (EOF)" {
		t.Fatalf("the client read %q, want the end of the stream", got)
	}
	if e := r.waitClose(2); e.Tunnel.Reason != tunnels.ReasonVM || e.Tunnel.BytesFromVM != 3 {
		t.Fatalf("CLOSE = %+v", e.Tunnel)
	}

	c, _ = r.dial("who=acme&drop=1")
	if got := closeReason(t, c); got != tunnels.ReasonNodeLost {
		t.Fatalf("the client was told %q when the node's connection broke, want %q", got, tunnels.ReasonNodeLost)
	}
}

// TestIdleTimeoutAndLifetimeEndTunnelsByTheClock: with the clock moved,
// a silent tunnel ends with "idle timeout" and a busy one with "maximum
// lifetime reached", each told to the client and the activity log.
func TestIdleTimeoutAndLifetimeEndTunnelsByTheClock(t *testing.T) {
	r := newRig(t, func(p *sdk.TunnelPolicy) { p.IdleTimeoutMinutes, p.MaxLifetimeMinutes = 1, 3 })
	ctx := t.Context()
	idle, _ := r.dial("who=acme")
	echo(t, idle, []byte("hi"))
	r.clk.Add(59 * time.Second)
	r.m.Tick(ctx)
	if len(r.m.List("")) != 1 {
		t.Fatal("the tunnel ended before its idle timeout")
	}
	r.clk.Add(time.Second)
	r.m.Tick(ctx)
	if got := closeReason(t, idle); got != tunnels.ReasonIdle {
		t.Fatalf("idle tunnel closed with %q", got)
	}
	if e := r.waitClose(1); e.Tunnel.Reason != tunnels.ReasonIdle {
		t.Fatalf("CLOSE reason %q", e.Tunnel.Reason)
	}

	busy, _ := r.dial("who=acme")
	for range 4 { // 4 x 50 s: never idle for a minute, but past 3 minutes
		echo(t, busy, []byte("keepalive"))
		r.clk.Add(50 * time.Second)
		r.m.Tick(ctx)
	}
	if got := closeReason(t, busy); got != tunnels.ReasonLifetime {
		t.Fatalf("busy tunnel closed with %q", got)
	}
	if e := r.waitClose(2); e.Tunnel.Reason != tunnels.ReasonLifetime || e.Tunnel.DurationMS != 200000 {
		t.Fatalf("CLOSE = %+v", e.Tunnel)
	}
}

// TestPolicyRefusals: the max_per_tenant+1-th tunnel is 429 (the operator
// counts as a tenant of its own), a port outside the policy 403 (not for
// a screen, which reaches no port), tunnels turned off 403; each refusal
// is an OPEN with its status.
func TestPolicyRefusals(t *testing.T) {
	r := newRig(t, func(p *sdk.TunnelPolicy) { p.MaxPerTenant, p.Ports = 2, []string{"22", "1024-65535"} })
	other := storetest.Tenant(t, r.st, "other")
	r.opener["other"] = tunnels.Opener{TenantID: other.ID, TenantName: "other"}
	for i := range 2 {
		if _, status := r.dial("who=acme"); status != 0 {
			t.Fatalf("tunnel %d: %d", i+1, status)
		}
	}
	if _, status := r.dial("who=acme"); status != http.StatusTooManyRequests {
		t.Fatalf("third tunnel of acme: %d, want 429", status)
	}
	if _, status := r.dial("who=other"); status != 0 {
		t.Fatalf("another tenant's first tunnel: %d", status)
	}
	for i := range 2 {
		if _, status := r.dial("who=operator"); status != 0 {
			t.Fatalf("operator's tunnel %d: %d", i+1, status)
		}
	}
	if _, status := r.dial("who=operator"); status != http.StatusTooManyRequests {
		t.Fatalf("operator's third tunnel: %d, want 429", status)
	}
	if _, status := r.dial("who=other&port=80"); status != http.StatusForbidden {
		t.Fatalf("port 80: %d, want 403", status)
	}
	if _, status := r.dial("who=other&screen=1"); status != 0 {
		t.Fatalf("a screen (no port): %d", status)
	}
	if len(r.m.List(r.acme.ID)) != 2 || len(r.m.List("")) != 6 {
		t.Fatalf("open: acme %d, all %d", len(r.m.List(r.acme.ID)), len(r.m.List("")))
	}
	var refused []int
	for _, e := range r.ev.all() {
		if e.Method == "OPEN" && e.Status != 101 {
			refused = append(refused, e.Status)
		}
	}
	if len(refused) != 3 || refused[0] != 429 || refused[1] != 429 || refused[2] != 403 {
		t.Fatalf("refused OPENs %v, want 429 429 403", refused)
	}

	p, _ := r.st.GetPolicy(t.Context())
	p.Tunnels.Enabled = false
	if _, err := r.st.PutPolicy(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	if _, status := r.dial("who=other&screen=1"); status != http.StatusForbidden {
		t.Fatalf("tunnels off: %d, want 403", status)
	}
}

// TestCloseByTenantOrOperator: DELETE ends a tunnel at once, with who
// closed it; another tenant's tunnel is not found.
func TestCloseByTenantOrOperator(t *testing.T) {
	r := newRig(t, nil)
	other := storetest.Tenant(t, r.st, "other")
	a, _ := r.dial("who=acme")
	b, _ := r.dial("who=acme")
	ids := r.m.List(r.acme.ID)
	if _, err := r.m.Close(ids[0].ID, other.ID); !errors.Is(err, tunnels.ErrNotFound) {
		t.Fatalf("another tenant closing it: %v, want ErrNotFound", err)
	}
	if _, err := r.m.Close(ids[0].ID, r.acme.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Close(ids[1].ID, ""); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{closeReason(t, a): true, closeReason(t, b): true}
	if !got[tunnels.ReasonByTenant] || !got[tunnels.ReasonByOperator] {
		t.Fatalf("close reasons %v", got)
	}
	if _, err := r.m.Close(ids[0].ID, ""); !errors.Is(err, tunnels.ErrNotFound) {
		t.Fatalf("closing a closed tunnel: %v", err)
	}
}

// TestRecheckEndsTunnelsWhoseAccessIsGone runs the loop and drives the
// 30 s re-check with the clock: a disabled tenant's tunnel, a revoked
// key's and a member made a viewer end at the next re-check and not
// before; a rotated primary token ends nothing; a stopped VM ends its
// tunnel.
func TestRecheckEndsTunnelsWhoseAccessIsGone(t *testing.T) {
	r := newRig(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go r.m.Run(ctx)
	time.Sleep(20 * time.Millisecond) // the first re-check (none open) is done

	beta := storetest.Tenant(t, r.st, "beta")
	key := &store.APIKey{APIKey: sdk.APIKey{Name: "ci", CreatedAt: r.clk.Now()}, Tenant: r.acme.ID, TokenSHA256: store.HashToken("fvk_ci")}
	if err := r.st.CreateKey(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := r.st.AddTeamMember(ctx, &store.TeamMember{Member: sdk.Member{Email: "ann@example.com", Role: sdk.RoleMember, AddedBy: "token", AddedAt: r.clk.Now()}, Tenant: r.acme.ID}); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.opener["beta"] = tunnels.Opener{TenantID: beta.ID, TenantName: "beta"}
	r.opener["key"] = tunnels.Opener{TenantID: r.acme.ID, TenantName: "acme", KeyID: key.ID, KeyName: "ci"}
	r.opener["ann"] = tunnels.Opener{TenantID: r.acme.ID, TenantName: "acme", User: "ann@example.com"}
	r.mu.Unlock()
	primary, _ := r.dial("who=acme")
	disabled, _ := r.dial("who=beta")
	viaKey, _ := r.dial("who=key")
	ann, _ := r.dial("who=ann")

	if _, err := r.st.UpdateTenant(ctx, beta.ID, func(tn *store.Tenant) error { tn.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := r.st.DeleteKey(ctx, r.acme.ID, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.ChangeTeamMember(ctx, r.acme.ID, "ann@example.com", func(m *store.TeamMember) (bool, error) {
		m.Role = sdk.RoleViewer
		return false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.RotateTenantToken(ctx, r.acme.ID, store.HashToken("fvt_acme-rotated")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // polls, but the re-check is not due by the clock
	if n := len(r.m.List("")); n != 4 {
		t.Fatalf("%d tunnels open before the re-check is due, want 4", n)
	}
	r.clk.Add(tunnels.DefaultRecheckEvery)
	for c, want := range map[*wsconn.Conn]string{disabled: "the tenant was disabled", viaKey: "the API key was revoked", ann: "the member was made a viewer"} {
		if got := closeReason(t, c); got != want {
			t.Errorf("closed with %q, want %q", got, want)
		}
	}
	echo(t, primary, []byte("still here after the token was rotated"))
	r.waitClose(3)
	if l := r.m.List(""); len(l) != 1 || l[0].OpenedBy != "primary token" {
		t.Fatalf("open after the re-check: %+v", l)
	}

	r.mu.Lock()
	r.vmGone = "the VM stopped"
	r.mu.Unlock()
	r.clk.Add(tunnels.DefaultRecheckEvery)
	if got := closeReason(t, primary); got != "the VM stopped" {
		t.Fatalf("closed with %q", got)
	}
}

// TestTicketsWorkOnceWithinTheirTTLAndAdmissionLooksAgain: a screen
// ticket gives back its request once, not after 30 s by the clock, and
// the opener it carries is checked again when it is redeemed: a tenant
// disabled since is refused (ErrAccess, an OPEN 403).
func TestTicketsWorkOnceWithinTheirTTLAndAdmissionLooksAgain(t *testing.T) {
	r := newRig(t, nil)
	req := tunnels.Request{Opener: r.opener["acme"], Node: "sim-1", VMID: "vm-1", VMName: "web-1", Kind: sdk.TunnelScreen, Path: "/fleet/ws/{ticket}"}
	id, err := r.m.IssueTicket(req)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.m.Redeem(id); !ok || got.VMID != "vm-1" {
		t.Fatalf("first redemption = %+v, %v", got, ok)
	}
	if _, ok := r.m.Redeem(id); ok {
		t.Fatal("a ticket worked twice")
	}
	late, _ := r.m.IssueTicket(req)
	r.clk.Add(tunnels.TicketTTL - time.Millisecond)
	soon, _ := r.m.IssueTicket(req)
	r.clk.Add(time.Millisecond)
	if _, ok := r.m.Redeem(late); ok {
		t.Fatal("a ticket worked 30 s after it was issued")
	}
	got, ok := r.m.Redeem(soon)
	if !ok {
		t.Fatal("a fresh ticket was refused")
	}
	if _, err := r.st.UpdateTenant(t.Context(), r.acme.ID, func(tn *store.Tenant) error { tn.Disabled = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := r.m.Admit(t.Context(), got); !errors.Is(err, tunnels.ErrAccess) || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("admitting a disabled tenant's ticket: %v, want ErrAccess naming why", err)
	}
	if e := r.ev.all(); len(e) != 1 || e[0].Method != "OPEN" || e[0].Status != 403 || e[0].Action != "open web-1 screen" {
		t.Fatalf("events %+v, want one OPEN 403 of the screen", e)
	}
}

// TestShutdownEndsEveryTunnelSayingSo: when central stops (the loop's
// context ends) every open tunnel ends, its client told why, and its
// CLOSE is written; nothing is left to list.
func TestShutdownEndsEveryTunnelSayingSo(t *testing.T) {
	r := newRig(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.m.Run(ctx) }()
	a, _ := r.dial("who=acme")
	b, _ := r.dial("who=operator")
	cancel()
	<-stopped
	for _, c := range []*wsconn.Conn{a, b} {
		if got := closeReason(t, c); got != tunnels.ReasonShutdown {
			t.Errorf("closed with %q, want %q", got, tunnels.ReasonShutdown)
		}
	}
	r.waitClose(2)
	if l := r.m.List(""); len(l) != 0 {
		t.Fatalf("open after the shutdown: %+v", l)
	}
}
