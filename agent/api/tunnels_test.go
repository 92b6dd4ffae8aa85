package api

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/agent/pluginhost"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// echoServer is a host TCP server standing in for a guest port: it echoes
// what it reads.
func echoServer(t *testing.T) string {
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
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// newTunnelEnv is a node whose sim driver serves guest port 22 of every
// VM from an echo server on the host, and port 23 from a closed port.
func newTunnelEnv(t *testing.T) *env {
	t.Helper()
	echo := echoServer(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	cfg := `{"port_forwards": {"22": "` + echo + `", "23": "` + closedAddr + `"}}`
	return newEnvWith(t, nil, []pluginhost.Plugin{{
		Name:    "sim",
		Command: func() *exec.Cmd { return exec.Command(bin, "plugin", "sim") },
		Config:  func(*basepb.ConfigSchemaResponse) ([]byte, error) { return []byte(cfg), nil },
	}})
}

// TestNodeTunnelRelaysToTheGuestPortTheDriverForwards: bytes go through
// the node's WebSocket to the guest port and back; the refusals come
// before the upgrade, as JSON with the right status.
func TestNodeTunnelRelaysToTheGuestPortTheDriverForwards(t *testing.T) {
	e := newTunnelEnv(t)
	vm := e.create("tun-1", "")
	admin, err := sdk.NewNodeClient(e.srv.URL, sdk.WithToken(adminToken))
	if err != nil {
		t.Fatal(err)
	}
	c, err := admin.DialTunnel(t.Context(), "tun-1", 22)
	if err != nil {
		t.Fatalf("DialTunnel: %v", err)
	}
	msg := bytes.Repeat([]byte("fluxvm "), 20000)
	go func() { _, _ = c.Write(msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo through the tunnel: %v (equal %v)", err, bytes.Equal(got, msg))
	}
	c.Close()

	ro, _ := sdk.NewNodeClient(e.srv.URL, sdk.WithToken(readOnlyToken))
	for _, tc := range []struct {
		name   string
		client *sdk.NodeClient
		vm     string
		port   int
		status int
	}{
		{"read-only token", ro, vm.ID, 22, 403},
		{"unknown VM", admin, "no-such-vm", 22, 404},
		{"port 0", admin, vm.ID, 0, 400},
		{"port 70000", admin, vm.ID, 70000, 400},
		{"port the driver does not forward", admin, vm.ID, 80, 409},
		{"nothing listens on the port", admin, vm.ID, 23, 502},
	} {
		_, err := tc.client.DialTunnel(t.Context(), tc.vm, tc.port)
		var ae *sdk.APIError
		if !errors.As(err, &ae) || ae.Status != tc.status {
			t.Errorf("%s: DialTunnel(%s, %d) = %v, want %d", tc.name, tc.vm, tc.port, err, tc.status)
		}
	}

	e.must(req{method: "POST", path: "/v1/vms/tun-1/stop", token: adminToken, body: []byte(`{}`)}, 200)
	if _, err := admin.DialTunnel(t.Context(), "tun-1", 22); !sdk.IsConflict(err) {
		t.Errorf("tunnel to a stopped VM = %v, want 409", err)
	}
	// A plain GET (no upgrade) is told what the route is.
	e.must(req{method: "GET", path: "/v1/vms/" + vm.ID + "/tunnel?port=" + strconv.Itoa(22), token: adminToken}, 400)
}

// TestNodeScreenTicketNeedsAVNCConsole: a VM without a VNC console (the
// simulator has none) is 409 with the reason; an unknown ticket is 404
// without a token.
func TestNodeScreenTicketNeedsAVNCConsole(t *testing.T) {
	e := newTunnelEnv(t)
	e.create("scr-1", `, "display": true`)
	r := e.must(req{method: "POST", path: "/v1/vms/scr-1/ws-ticket", token: adminToken, body: []byte(`{"kind": "vnc"}`)}, 409)
	if b := r.errorBody(t); !bytes.Contains([]byte(b.Error), []byte("no graphical console")) {
		t.Errorf("409 says %q, want the reason", b.Error)
	}
	if r := e.call(req{method: "POST", path: "/v1/vms/scr-1/ws-ticket", token: adminToken, body: []byte(`{"kind": "rdp"}`)}); r.status != 400 || r.specErr == nil {
		t.Errorf("kind rdp -> %d (spec refuses it: %v), want 400 and a request the spec refuses", r.status, r.specErr)
	}
	e.must(req{method: "GET", path: "/v1/ws/no-such-ticket"}, 404)
}

// TestNodeTicketsWorkOnceWithinTheirTTL drives the ticket clock.
func TestNodeTicketsWorkOnceWithinTheirTTL(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tk := &tickets{now: func() time.Time { return now }, m: map[string]ticket{}}
	a, _ := tk.issue("vm-a")
	if vm, ok := tk.redeem(a); !ok || vm != "vm-a" {
		t.Fatalf("first redemption = %q, %v", vm, ok)
	}
	if _, ok := tk.redeem(a); ok {
		t.Fatal("a ticket worked twice")
	}
	b, _ := tk.issue("vm-b")
	now = now.Add(TicketTTL)
	if _, ok := tk.redeem(b); ok {
		t.Fatal("a ticket worked after its TTL")
	}
}
