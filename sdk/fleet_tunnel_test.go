package sdk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/tunneltest"
)

// newTunnelCentral serves central's tunnel routes (package tunneltest: a
// real WebSocket upgrade and a real TCP connection to guest) with these
// rules: VM n1/vm1 is the caller's (any other is 404), vm-stopped is 409,
// ports 22 and 8000-8999 are allowed (others 403), and at most max tunnels
// are open at once (429).
func newTunnelCentral(t *testing.T, guest string, max int) (*tunneltest.Server, *sdk.FleetClient) {
	const token = "fvt_tunnel"
	srv := tunneltest.Start(t, tunneltest.Options{Token: token, Max: max, Route: func(node, id string, port int) tunneltest.Target {
		switch {
		case node != "n1" || (id != "vm1" && id != "vm-stopped"):
			return tunneltest.Target{Refusal: &sdk.APIError{Status: 404, Message: "no such vm", Hint: "fluxctl fleet vms lists yours"}}
		case id == "vm-stopped":
			return tunneltest.Target{Refusal: &sdk.APIError{Status: 409, Message: "vm is stopped", Hint: "start it first"}}
		case port != 22 && (port < 8000 || port > 8999):
			return tunneltest.Target{Refusal: &sdk.APIError{Status: 403, Message: fmt.Sprintf("port %d is not open to tunnels", port), Hint: "the policy allows 22, 8000-8999"}}
		}
		return tunneltest.Target{Addr: guest, VMName: "web-1"}
	}})
	fc, err := sdk.NewFleetClient(srv.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	return srv, fc
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
	if got := fmt.Sprint(tc.Asked()); got != "[22 8080]" {
		t.Errorf("central was asked for ports %s; want [22 8080] (0 means 22)", got)
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
	if asked := tc.Asked(); len(asked) != 0 {
		t.Errorf("central was called for bad arguments: %v", asked)
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
	for tc.Open() != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := tc.Open(); n != 1 {
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
	if len(list.Tunnels) != 1 || list.Tunnels[0].Port != 8080 || list.Tunnels[0].VMName != "web-1" || list.Limits.MaxPerTenant != 5 ||
		list.Tunnels[0].BytesToVM != 5 || list.Tunnels[0].BytesFromVM != 5 {
		t.Fatalf("ListTunnels = %+v; want the one tunnel to port 8080, 5 bytes each way, and the limit 5", list)
	}
	if err := fc.CloseTunnel(t.Context(), list.Tunnels[0].ID); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if reason, ok := sdk.TunnelEndedReason(err); !ok || reason != "closed by the tenant" {
		t.Errorf("reading after CloseTunnel: %v; want central's ending with the reason \"closed by the tenant\"", err)
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
