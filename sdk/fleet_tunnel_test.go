package sdk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
)

// tunnelCentral is a test server for the SDK's tunnel calls, not a stand-in
// for something that could run here instead: it answers the three tunnel
// routes as central documents them (docs/tunnels.md, the OpenAPI spec), with
// a real WebSocket upgrade (gorilla/websocket) and a real TCP connection to
// a "guest port" on loopback, so the client is tested against the wire
// protocol it will meet. Its rules: VM n1/vm1 is the caller's (any other is
// 404), vm-stopped is 409, ports 22 and 8000-8999 are allowed (others 403),
// and at most max tunnels are open at once (429).
type tunnelCentral struct {
	t     *testing.T
	token string
	guest string // host:port the tunnels of port 22 and 8000-8999 reach
	max   int

	mu     sync.Mutex
	open   map[string]*openTunnel
	ports  []int // the port of every tunnel asked for, in order
	nextID int
}

type openTunnel struct {
	info sdk.Tunnel
	ws   *wsconn.Conn
}

func newTunnelCentral(t *testing.T, guest string, max int) (*tunnelCentral, *sdk.FleetClient) {
	tc := &tunnelCentral{t: t, token: "fvt_tunnel", guest: guest, max: max, open: map[string]*openTunnel{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fleet/vms/{node}/{id}/tunnel", tc.tunnel)
	mux.HandleFunc("GET /fleet/tunnels", tc.list)
	mux.HandleFunc("DELETE /fleet/tunnels/{id}", tc.close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+tc.token {
			refuse(w, http.StatusUnauthorized, "invalid token", "set FLUXVM_AGENT_TOKEN")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		for _, o := range tc.open {
			o.ws.Close()
		}
	})
	fc, err := sdk.NewFleetClient(srv.URL, sdk.WithToken(tc.token))
	if err != nil {
		t.Fatal(err)
	}
	return tc, fc
}

func refuse(w http.ResponseWriter, status int, msg, hint string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg, "hint": hint})
}

func (tc *tunnelCentral) tunnel(w http.ResponseWriter, r *http.Request) {
	port := 22
	if p := r.URL.Query().Get("port"); p != "" {
		var err error
		if port, err = strconv.Atoi(p); err != nil {
			refuse(w, http.StatusBadRequest, "port is not a number", "give ?port=1-65535")
			return
		}
	}
	tc.mu.Lock()
	tc.ports = append(tc.ports, port)
	n := len(tc.open)
	tc.mu.Unlock()
	switch {
	case r.PathValue("node") != "n1" || (r.PathValue("id") != "vm1" && r.PathValue("id") != "vm-stopped"):
		refuse(w, http.StatusNotFound, "no such vm", "fluxctl fleet vms lists yours")
		return
	case r.PathValue("id") == "vm-stopped":
		refuse(w, http.StatusConflict, "vm is stopped", "start it first")
		return
	case port != 22 && (port < 8000 || port > 8999):
		refuse(w, http.StatusForbidden, fmt.Sprintf("port %d is not open to tunnels", port), "the policy allows 22, 8000-8999")
		return
	case n >= tc.max:
		refuse(w, http.StatusTooManyRequests, fmt.Sprintf("%d tunnels open, the most allowed", n), "close one (fluxctl fleet tunnels)")
		return
	}
	guest, err := net.Dial("tcp", tc.guest)
	if err != nil {
		refuse(w, http.StatusBadGateway, "guest port does not answer", "")
		return
	}
	up := websocket.Upgrader{}
	ws, err := up.Upgrade(w, r, nil)
	if err != nil {
		guest.Close()
		return
	}
	c := wsconn.New(ws)
	tc.mu.Lock()
	tc.nextID++
	id := fmt.Sprintf("tun_%04d", tc.nextID)
	o := &openTunnel{info: sdk.Tunnel{ID: id, Node: "n1", VM: r.PathValue("id"), VMName: "web-1", Kind: sdk.TunnelPort, Port: port,
		OpenedAt: time.Now(), LastActive: time.Now()}, ws: c}
	tc.open[id] = o
	tc.mu.Unlock()
	defer func() {
		tc.mu.Lock()
		delete(tc.open, id)
		tc.mu.Unlock()
	}()
	count := func(n int64, to bool) {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		if to {
			o.info.BytesToVM += n
		} else {
			o.info.BytesFromVM += n
		}
	}
	done := make(chan struct{}, 2)
	go func() {
		n, _ := io.Copy(guest, c)
		count(n, true)
		guest.Close()
		done <- struct{}{}
	}()
	go func() {
		n, _ := io.Copy(c, guest)
		count(n, false)
		c.Close()
		done <- struct{}{}
	}()
	<-done
	<-done
}

func (tc *tunnelCentral) list(w http.ResponseWriter, r *http.Request) {
	tc.mu.Lock()
	out := sdk.TunnelList{Tunnels: []sdk.Tunnel{}}
	for _, o := range tc.open {
		out.Tunnels = append(out.Tunnels, o.info)
	}
	tc.mu.Unlock()
	out.Limits.MaxPerTenant = tc.max
	_ = json.NewEncoder(w).Encode(out)
}

func (tc *tunnelCentral) close(w http.ResponseWriter, r *http.Request) {
	tc.mu.Lock()
	o := tc.open[r.PathValue("id")]
	tc.mu.Unlock()
	if o == nil {
		refuse(w, http.StatusNotFound, "no open tunnel "+r.PathValue("id"), "fluxctl fleet tunnels lists the open ones")
		return
	}
	o.ws.Close()
	w.WriteHeader(http.StatusNoContent)
}

func (tc *tunnelCentral) openCount() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.open)
}

// echoGuest is a TCP echo server on loopback: the guest port the tunnels reach.
func echoGuest(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

// roundTrip writes data on c and reads as many bytes back.
func roundTrip(t *testing.T, c io.ReadWriter, data []byte) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { _, err := c.Write(data); errc <- err }()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read back %d bytes: %v", len(data), err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the bytes that came back differ from those sent")
	}
}

func TestDialTunnelCarriesBytesBothWaysAndDefaultsToPort22(t *testing.T) {
	tc, fc := newTunnelCentral(t, echoGuest(t), 5)
	c, err := fc.DialTunnel(t.Context(), "n1", "vm1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 3<<20) // many WebSocket messages (wsconn.MaxMessage each)
	_, _ = rand.Read(data)
	roundTrip(t, c, data)
	roundTrip(t, c, []byte("small"))
	c2, err := fc.DialTunnel(t.Context(), "n1", "vm1", 8080)
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if fmt.Sprint(tc.ports) != "[22 8080]" {
		t.Errorf("central was asked for ports %v; want [22 8080] (0 means 22)", tc.ports)
	}
}

func TestDialTunnelRefusalsAreAPIErrorsTheIsHelpersReport(t *testing.T) {
	_, fc := newTunnelCentral(t, echoGuest(t), 1)
	held, err := fc.DialTunnel(t.Context(), "n1", "vm1", 22)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	bad, _ := sdk.NewFleetClient(fc.URL(), sdk.WithToken("fvt_wrong"))
	for _, tc := range []struct {
		name     string
		fc       *sdk.FleetClient
		node, vm string
		port     int
		is       func(error) bool
		status   int
	}{
		{"another tenant's or no VM", fc, "n1", "vm9", 22, sdk.IsNotFound, 404},
		{"unknown node", fc, "n2", "vm1", 22, sdk.IsNotFound, 404},
		{"port outside the policy", fc, "n1", "vm1", 25, sdk.IsForbidden, 403},
		{"every tunnel in use", fc, "n1", "vm1", 22, sdk.IsQuota, 429},
		{"stopped VM", fc, "n1", "vm-stopped", 22, sdk.IsConflict, 409},
		{"wrong token", bad, "n1", "vm1", 22, sdk.IsUnauthorized, 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := tc.fc.DialTunnel(t.Context(), tc.node, tc.vm, tc.port)
			if err == nil {
				c.Close()
				t.Fatal("tunnel opened; want a refusal")
			}
			var ae *sdk.APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || !tc.is(err) {
				t.Fatalf("err = %#v; want an *APIError of status %d", err, tc.status)
			}
			if ae.Message == "" || ae.Hint == "" {
				t.Errorf("refusal lost central's message or hint: %+v", ae)
			}
		})
	}
}

func TestDialTunnelRefusesBadArgumentsBeforeCallingCentral(t *testing.T) {
	tc, fc := newTunnelCentral(t, echoGuest(t), 5)
	for _, a := range []struct {
		node, vm string
		port     int
	}{{"n1", "vm1", -1}, {"n1", "vm1", 65536}, {"", "vm1", 22}, {"n1", "", 22}} {
		if c, err := fc.DialTunnel(t.Context(), a.node, a.vm, a.port); err == nil {
			c.Close()
			t.Errorf("DialTunnel(%q, %q, %d) opened a tunnel", a.node, a.vm, a.port)
		}
	}
	if len(tc.ports) != 0 {
		t.Errorf("central was called for bad arguments: %v", tc.ports)
	}
}

func TestDialTunnelToAnUnreachableCentralIsAConnectError(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	fc, _ := sdk.NewFleetClient("http://"+addr, sdk.WithToken("x"))
	_, err := fc.DialTunnel(t.Context(), "n1", "vm1", 22)
	var ce *sdk.ConnectError
	if !errors.As(err, &ce) || !sdk.IsUnavailable(err) {
		t.Fatalf("err = %v; want a *sdk.ConnectError", err)
	}
}

func TestPortForwardRelaysEachConnectionAndOneRefusalDoesNotStopTheOthers(t *testing.T) {
	tc, fc := newTunnelCentral(t, echoGuest(t), 2)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 10)
	done := make(chan error, 1)
	go func() {
		done <- fc.PortForwardNotify(ctx, "n1", "vm1", 8080, ln, func(err error) { errs <- err })
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := dial(), dial()
	roundTrip(t, a, []byte("first"))
	roundTrip(t, b, bytes.Repeat([]byte("second"), 50000))
	// A third connection finds both tunnels in use: it is closed, the error
	// says why, and the other two carry on.
	c := dial()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the connection over the limit read %d bytes; want it closed", n)
	}
	c.Close()
	select {
	case err := <-errs:
		if !sdk.IsQuota(err) {
			t.Errorf("error of the refused connection = %v; want a 429 (IsQuota)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refused connection's error was not reported")
	}
	roundTrip(t, a, []byte("still there"))
	// When a local connection ends, its tunnel ends and frees its slot.
	b.Close()
	deadline := time.Now().Add(10 * time.Second)
	for tc.openCount() != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := tc.openCount(); n != 1 {
		t.Fatalf("%d tunnels open after one of two local connections closed; want 1", n)
	}
	d := dial()
	roundTrip(t, d, []byte("a new one"))

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("PortForward returned %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("PortForward did not return after its context ended")
	}
	// Everything it had open is closed: the local connections and the listener.
	_ = a.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.Read(make([]byte, 1)); err == nil {
		t.Error("a local connection is still open after PortForward returned")
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("the listener still accepts after PortForward returned")
	}
}

func TestListTunnelsShowsOpenOnesAndCloseTunnelEndsOne(t *testing.T) {
	_, fc := newTunnelCentral(t, echoGuest(t), 5)
	c, err := fc.DialTunnel(t.Context(), "n1", "vm1", 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("hello"))
	list, err := fc.ListTunnels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Tunnels) != 1 || list.Tunnels[0].Port != 8080 || list.Tunnels[0].VMName != "web-1" || list.Limits.MaxPerTenant != 5 {
		t.Fatalf("ListTunnels = %+v; want the one tunnel to port 8080 and the limit 5", list)
	}
	if err := fc.CloseTunnel(t.Context(), list.Tunnels[0].ID); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the tunnel still reads after CloseTunnel")
	}
	err = fc.CloseTunnel(t.Context(), list.Tunnels[0].ID)
	if !sdk.IsNotFound(err) {
		t.Errorf("closing a closed tunnel = %v; want IsNotFound", err)
	}
	if err := fc.CloseTunnel(t.Context(), ""); err == nil || sdk.IsNotFound(err) {
		t.Errorf("CloseTunnel(\"\") = %v; want an argument error", err)
	}
}

func TestCheckSSHAuthorizedKeysBoundsKeysAndLogins(t *testing.T) {
	const k = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0b3Bz me@laptop"
	many := make([]string, sdk.MaxSSHAuthorizedKeys+1)
	for i := range many {
		many[i] = k
	}
	for _, tc := range []struct {
		name string
		keys []string
		user string
		ok   bool
	}{
		{"one key", []string{k}, "admin", true},
		{"no keys", nil, "", true},
		{"the most keys", many[1:], "debian", true},
		{"too many keys", many, "admin", false},
		{"a key too long", []string{"ssh-rsa " + string(bytes.Repeat([]byte("A"), sdk.MaxSSHKeyBytes))}, "admin", false},
		{"two lines in one", []string{k + "\n" + k}, "admin", false},
		{"not a key", []string{"hello world"}, "admin", false},
		{"options before the key", []string{`command="rm -rf /" ` + k}, "admin", false},
		{"a private key", []string{"-----BEGIN OPENSSH PRIVATE KEY-----"}, "admin", false},
		{"bad login", []string{k}, "../root", false},
		{"uppercase login", []string{k}, "Admin", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := sdk.CheckSSHAuthorizedKeys(tc.keys, tc.user)
			if (err == nil) != tc.ok {
				t.Fatalf("CheckSSHAuthorizedKeys = %v; want ok=%v", err, tc.ok)
			}
			var ae *sdk.APIError
			if err != nil && (!errors.As(err, &ae) || ae.Status != 400 || ae.Hint == "") {
				t.Errorf("refusal %#v is not a 400 with a hint", err)
			}
		})
	}
}
