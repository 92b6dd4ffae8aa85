package sdk_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// tunnelFleet is a real central with one sim node whose API is on a unix
// socket (so every tunnel goes through the node's channel) and whose
// guest ports 22 and 8080 are served by guest, a server on this host. The
// policy lets tunnels reach ports 22 and 8000-8999 and max of them be open
// per tenant. Tenant acme has VM web-1 (running) and VM idle-1 (stopped).
type tunnelFleet struct {
	f          *fleettest.Fleet
	op, fc     *sdk.FleetClient
	node       string
	vm, parked string // web-1's and idle-1's IDs
}

func newTunnelFleet(t *testing.T, guest string, max int) *tunnelFleet {
	t.Helper()
	f := fleettest.Start(t, fleettest.WithSimPortForwards(map[string]string{"22": guest, "8080": guest}))
	ctx := t.Context()
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := op.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pol.Tunnels.Enabled, pol.Tunnels.Ports, pol.Tunnels.MaxPerTenant = true, []string{"22", "8000-8999"}, max
	if _, err := op.PutPolicy(ctx, *pol); err != nil {
		t.Fatalf("put the tunnels policy: %v", err)
	}
	f.CatalogImage(t, "tiny")
	_, token := f.Tenant(t, "acme", nil)
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	tf := &tunnelFleet{f: f, op: op, fc: fc, node: f.Node}
	for _, name := range []string{"web-1", "idle-1"} {
		vm, err := fc.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: name, Image: "tiny"})
		if err != nil {
			t.Fatalf("launch %s: %v", name, err)
		}
		if name == "web-1" {
			tf.vm = vm.VM.ID
		} else {
			tf.parked = vm.VM.ID
			if _, err := fc.StopVM(ctx, vm.Node, vm.VM.ID, 0); err != nil {
				t.Fatalf("stop %s: %v", name, err)
			}
		}
	}
	return tf
}

// openTunnels is how many tunnels central lists open for the tenant.
func (tf *tunnelFleet) openTunnels(t *testing.T) int {
	t.Helper()
	l, err := tf.fc.ListTunnels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Tunnels)
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

// TestDialTunnelCarriesBytesBothWaysAndDefaultsToPort22: through a real
// central, the node's channel and the sim's port_forwards to an echo
// server, 3 MiB come back whole; port 0 is port 22, as central lists it.
func TestDialTunnelCarriesBytesBothWaysAndDefaultsToPort22(t *testing.T) {
	tf := newTunnelFleet(t, echoGuest(t), 5)
	c, err := tf.fc.DialTunnel(t.Context(), tf.node, tf.vm, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	data := make([]byte, 3<<20) // many WebSocket messages (wsconn.MaxMessage each)
	_, _ = rand.Read(data)
	roundTrip(t, c, data)
	roundTrip(t, c, []byte("small"))
	c2, err := tf.fc.DialTunnel(t.Context(), tf.node, tf.vm, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	roundTrip(t, c2, []byte("to 8080"))
	list, err := tf.fc.ListTunnels(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]int{}
	for _, tn := range list.Tunnels {
		ports[tn.Port]++
	}
	if len(list.Tunnels) != 2 || ports[22] != 1 || ports[8080] != 1 {
		t.Errorf("central lists %+v; want one tunnel to port 22 (0 means 22) and one to 8080", list.Tunnels)
	}
}

// TestDialTunnelRefusalsAreAPIErrorsTheIsHelpersReport: the real central's
// refusals (its policy, its tenancy, the node's 409 for a stopped VM) reach
// the caller as *APIError values with central's message and hint.
func TestDialTunnelRefusalsAreAPIErrorsTheIsHelpersReport(t *testing.T) {
	tf := newTunnelFleet(t, echoGuest(t), 1)
	fc := tf.fc
	// The node's 409, while the one tunnel the policy allows is free (the
	// slot is counted before the VM is asked for).
	_, err := fc.DialTunnel(t.Context(), tf.node, tf.parked, 22)
	var ae *sdk.APIError
	if !errors.As(err, &ae) || ae.Status != 409 || !sdk.IsConflict(err) || ae.Message == "" {
		t.Fatalf("a tunnel to a stopped VM: %#v; want an *APIError of status 409", err)
	}
	held, err := fc.DialTunnel(t.Context(), tf.node, tf.vm, 22)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	bad, _ := sdk.NewFleetClient(fc.URL(), sdk.WithToken("fvt_wrong"))
	_, other := tf.f.Tenant(t, "bravo", nil)
	bravo, _ := sdk.NewFleetClient(fc.URL(), sdk.WithToken(other))
	for _, tc := range []struct {
		name     string
		fc       *sdk.FleetClient
		node, vm string
		port     int
		is       func(error) bool
		status   int
	}{
		{"no such VM", fc, tf.node, "vm9", 22, sdk.IsNotFound, 404},
		{"another tenant's VM", bravo, tf.node, tf.vm, 22, sdk.IsNotFound, 404},
		{"unknown node", fc, "n2", tf.vm, 22, sdk.IsNotFound, 404},
		{"port outside the policy", fc, tf.node, tf.vm, 25, sdk.IsForbidden, 403},
		{"every tunnel in use", fc, tf.node, tf.vm, 22, sdk.IsQuota, 429},
		{"wrong token", bad, tf.node, tf.vm, 22, sdk.IsUnauthorized, 401},
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

// TestDialTunnelRefusesBadArgumentsBeforeCallingCentral: central's address
// here answers nothing, so an error that is not a *ConnectError was
// decided before dialling.
func TestDialTunnelRefusesBadArgumentsBeforeCallingCentral(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	fc, _ := sdk.NewFleetClient("http://"+addr, sdk.WithToken("x"))
	for _, a := range []struct {
		node, vm string
		port     int
	}{{"n1", "vm1", -1}, {"n1", "vm1", 65536}, {"", "vm1", 22}, {"n1", "", 22}} {
		c, err := fc.DialTunnel(t.Context(), a.node, a.vm, a.port)
		var ce *sdk.ConnectError
		switch {
		case err == nil:
			c.Close()
			t.Errorf("DialTunnel(%q, %q, %d) opened a tunnel", a.node, a.vm, a.port)
		case errors.As(err, &ce):
			t.Errorf("DialTunnel(%q, %q, %d) dialled central: %v", a.node, a.vm, a.port, err)
		}
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

// TestPortForwardRelaysEachConnectionAndOneRefusalDoesNotStopTheOthers: with
// the policy's max_per_tenant at 2, a third local connection is refused
// (429, reported) and closed while the other two carry on; a local
// connection that ends frees its tunnel in central.
func TestPortForwardRelaysEachConnectionAndOneRefusalDoesNotStopTheOthers(t *testing.T) {
	tf := newTunnelFleet(t, echoGuest(t), 2)
	fc := tf.fc
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	errs := make(chan error, 10)
	done := make(chan error, 1)
	go func() {
		done <- fc.PortForwardNotify(ctx, tf.node, tf.vm, 8080, ln, func(err error) { errs <- err })
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
	for tf.openTunnels(t) != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := tf.openTunnels(t); n != 1 {
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

// TestListTunnelsShowsOpenOnesAndCloseTunnelEndsOne: central lists the
// tunnel with its traffic and the policy's limit; closing it ends the
// client's read with central's reason (close code 4000).
func TestListTunnelsShowsOpenOnesAndCloseTunnelEndsOne(t *testing.T) {
	tf := newTunnelFleet(t, echoGuest(t), 5)
	fc := tf.fc
	c, err := fc.DialTunnel(t.Context(), tf.node, tf.vm, 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("hello"))
	// Central counts the bytes each way once it has written them on: the
	// echo may reach the client a moment before either count is taken.
	var list *sdk.TunnelList
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if list, err = fc.ListTunnels(t.Context()); err != nil {
			t.Fatal(err)
		}
		if len(list.Tunnels) != 1 || list.Tunnels[0].BytesFromVM == 5 && list.Tunnels[0].BytesToVM == 5 || time.Now().After(deadline) {
			break
		}
	}
	if len(list.Tunnels) != 1 || list.Tunnels[0].Port != 8080 || list.Tunnels[0].VMName != "web-1" || list.Tunnels[0].VM != tf.vm ||
		list.Tunnels[0].Node != tf.node || list.Limits.MaxPerTenant != 5 || list.Tunnels[0].BytesToVM != 5 || list.Tunnels[0].BytesFromVM != 5 {
		t.Fatalf("ListTunnels = %+v; want the one tunnel to web-1 port 8080, 5 bytes each way, and the limit 5", list)
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

// TestATunnelWhoseCentralWasKilledReadsAsDropped: SIGKILLed, central sends
// no close message; the open tunnel's read ends at once with an error that
// TunnelDropped reports (and TunnelEndedReason does not), while a tunnel
// this side closed is not dropped.
func TestATunnelWhoseCentralWasKilledReadsAsDropped(t *testing.T) {
	tf := newTunnelFleet(t, echoGuest(t), 5)
	c, err := tf.fc.DialTunnel(t.Context(), tf.node, tf.vm, 22)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	roundTrip(t, c, []byte("before"))
	mine, err := tf.fc.DialTunnel(t.Context(), tf.node, tf.vm, 22)
	if err != nil {
		t.Fatal(err)
	}
	mine.Close()
	if _, err := mine.Read(make([]byte, 1)); err == nil || sdk.TunnelDropped(err) {
		t.Errorf("reading a tunnel closed here: %v; want an error TunnelDropped does not report", err)
	}
	tf.f.KillCentral(t)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if _, ended := sdk.TunnelEndedReason(err); !sdk.TunnelDropped(err) || ended {
		t.Fatalf("reading a tunnel whose central was killed: %v; want TunnelDropped, without a reason", err)
	}
	t.Logf("the read's error: %v", err)
	if sdk.TunnelDropped(nil) || sdk.TunnelDropped(io.EOF) || sdk.TunnelDropped(os.ErrDeadlineExceeded) {
		t.Error("TunnelDropped reports nil, io.EOF (the guest's orderly end) or this side's deadline")
	}
}
