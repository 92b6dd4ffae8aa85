package api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/sdk"
)

// rfbFrame is what a minimal RFB client saw: the server's screen size and
// how many distinct colours one full framebuffer update carried.
type rfbFrame struct {
	width, height int
	colours       int
}

// rfbSession speaks RFB 3.8 over rw as a client: version, security type
// None, ClientInit (shared), ServerInit, then asks for 32-bit true colour
// in Raw encoding, requests the whole framebuffer and reads updates until
// every pixel arrived. Written here, small, so the test depends on nothing
// but the protocol (RFC 6143).
func rfbSession(rw io.ReadWriter) (rfbFrame, error) {
	var f rfbFrame
	be := binary.BigEndian
	version := make([]byte, 12)
	if _, err := io.ReadFull(rw, version); err != nil {
		return f, fmt.Errorf("read ProtocolVersion: %w", err)
	}
	if string(version[:4]) != "RFB " {
		return f, fmt.Errorf("ProtocolVersion %q is not RFB", version)
	}
	if _, err := rw.Write([]byte("RFB 003.008\n")); err != nil {
		return f, err
	}
	var n [1]byte
	if _, err := io.ReadFull(rw, n[:]); err != nil {
		return f, fmt.Errorf("read security types: %w", err)
	}
	if n[0] == 0 {
		return f, errors.New("the server offers no security type")
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(rw, types); err != nil {
		return f, err
	}
	none := false
	for _, t := range types {
		none = none || t == 1
	}
	if !none {
		return f, fmt.Errorf("security types %v lack None (1)", types)
	}
	if _, err := rw.Write([]byte{1}); err != nil {
		return f, err
	}
	var result [4]byte
	if _, err := io.ReadFull(rw, result[:]); err != nil {
		return f, fmt.Errorf("read SecurityResult: %w", err)
	}
	if be.Uint32(result[:]) != 0 {
		return f, fmt.Errorf("SecurityResult %d, want 0 (OK)", be.Uint32(result[:]))
	}
	if _, err := rw.Write([]byte{1}); err != nil { // ClientInit: shared
		return f, err
	}
	init := make([]byte, 24)
	if _, err := io.ReadFull(rw, init); err != nil {
		return f, fmt.Errorf("read ServerInit: %w", err)
	}
	f.width, f.height = int(be.Uint16(init[0:2])), int(be.Uint16(init[2:4]))
	if _, err := io.CopyN(io.Discard, rw, int64(be.Uint32(init[20:24]))); err != nil { // the desktop's name
		return f, err
	}
	if f.width == 0 || f.height == 0 {
		return f, fmt.Errorf("ServerInit says the screen is %dx%d", f.width, f.height)
	}
	// SetPixelFormat: 32 bpp, depth 24, little-endian, true colour, 8 bits a channel.
	spf := []byte{0, 0, 0, 0, 32, 24, 0, 1, 0, 255, 0, 255, 0, 255, 16, 8, 0, 0, 0, 0}
	// SetEncodings: Raw (0) only.
	enc := []byte{2, 0, 0, 1, 0, 0, 0, 0}
	// FramebufferUpdateRequest, not incremental, the whole screen.
	req := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	be.PutUint16(req[6:], uint16(f.width))
	be.PutUint16(req[8:], uint16(f.height))
	for _, m := range [][]byte{spf, enc, req} {
		if _, err := rw.Write(m); err != nil {
			return f, err
		}
	}
	colours := map[uint32]bool{}
	pixels := 0
	for pixels < f.width*f.height {
		var typ [1]byte
		if _, err := io.ReadFull(rw, typ[:]); err != nil {
			return f, fmt.Errorf("read a server message: %w", err)
		}
		switch typ[0] {
		case 0: // FramebufferUpdate
			hdr := make([]byte, 3)
			if _, err := io.ReadFull(rw, hdr); err != nil {
				return f, err
			}
			for range be.Uint16(hdr[1:3]) {
				rect := make([]byte, 12)
				if _, err := io.ReadFull(rw, rect); err != nil {
					return f, err
				}
				w, h, encoding := int(be.Uint16(rect[4:6])), int(be.Uint16(rect[6:8])), int32(be.Uint32(rect[8:12]))
				if encoding != 0 {
					return f, fmt.Errorf("a rectangle in encoding %d, asked for Raw only", encoding)
				}
				data := make([]byte, w*h*4)
				if _, err := io.ReadFull(rw, data); err != nil {
					return f, fmt.Errorf("read a %dx%d rectangle: %w", w, h, err)
				}
				for i := 0; i < len(data); i += 4 {
					colours[binary.LittleEndian.Uint32(data[i:])&0xffffff] = true
				}
				pixels += w * h
			}
		case 2: // Bell
		case 3: // ServerCutText
			hdr := make([]byte, 7)
			if _, err := io.ReadFull(rw, hdr); err != nil {
				return f, err
			}
			if _, err := io.CopyN(io.Discard, rw, int64(be.Uint32(hdr[3:7]))); err != nil {
				return f, err
			}
		default:
			return f, fmt.Errorf("server message type %d, not asked for", typ[0])
		}
	}
	f.colours = len(colours)
	return f, nil
}

// TestScreenTicketRelaysRFBFromARealQEMUVM: a tenant asks central for a
// screen ticket of its display VM (QEMU, TCG here), redeems it as a
// WebSocket, and a Go RFB client completes the handshake with the VM's
// VNC server through central and the node, and gets a framebuffer that is
// not one colour (the guest's console text). The ticket works once; one
// left past its 30 seconds (central's clock moved) is refused; while open
// the screen is listed as a tunnel of kind screen.
func TestScreenTicketRelaysRFBFromARealQEMUVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	img := image.DefaultDir()
	if _, err := image.Load(img); err != nil {
		t.Fatalf("guest image in %s: %v (run make guest-image)", img, err)
	}
	clock := newLxClock(time.Now().UTC())
	srv := api.New(api.Options{Store: fxStore(t, nil), FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second, Now: clock.now})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	url := hs.URL
	node := startQemuFxNode(t, "qemu-1", url, img)
	t.Cleanup(func() {
		var list sdk.VMList
		if code, body := fxCall(t, "GET", node.url+"/v1/vms", node.admin, nil); code == http.StatusOK && json.Unmarshal(body, &list) == nil {
			for _, vm := range list.VMs {
				fxCall(t, "DELETE", node.url+"/v1/vms/"+vm.ID, node.admin, nil)
			}
		}
	})
	fxWaitUp(t, url, "qemu-1")
	fxMust(t, "PUT", url+"/fleet/images/debian-minimal", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	_, tok := fxTenant(t, url, "acme", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tok, map[string]any{"name": "desk", "image": "debian-minimal", "display": true}, http.StatusCreated, &vm)
	fxWait(t, "the guest agent of desk", 3*time.Minute, func() bool {
		var list sdk.FleetVMList
		fxMust(t, "GET", url+"/fleet/vms", tok, nil, http.StatusOK, &list)
		return len(list.VMs) == 1 && list.VMs[0].AgentReady
	})
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	ticketPath := url + "/fleet/vms/qemu-1/" + vm.VM.ID + "/ws-ticket"
	ticket := func() sdk.WSTicket {
		t.Helper()
		var tk sdk.WSTicket
		fxMust(t, "POST", ticketPath, tok, map[string]any{"kind": "vnc"}, http.StatusCreated, &tk)
		if tk.ExpiresIn != 30 || tk.Path != "/fleet/ws/"+tk.Ticket {
			t.Fatalf("ticket %+v", tk)
		}
		return tk
	}

	// The console may still be drawing its first lines: look again, with a
	// new ticket each time, until the frame shows more than one colour.
	var frame rfbFrame
	var used sdk.WSTicket
	fxWait(t, "a framebuffer that is not one colour", 2*time.Minute, func() bool {
		used = ticket()
		c, err := fc.DialWebSocket(t.Context(), used.Path)
		if err != nil {
			t.Fatalf("redeem the ticket: %v", err)
		}
		defer c.Close()
		var list sdk.TunnelList
		fxMust(t, "GET", url+"/fleet/tunnels", tok, nil, http.StatusOK, &list)
		if len(list.Tunnels) != 1 || list.Tunnels[0].Kind != sdk.TunnelScreen || list.Tunnels[0].VMName != "desk" {
			t.Fatalf("while the screen is open, GET /fleet/tunnels = %+v", list.Tunnels)
		}
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		if frame, err = rfbSession(c); err != nil {
			t.Fatalf("RFB through central: %v", err)
		}
		t.Logf("framebuffer %dx%d, %d colours", frame.width, frame.height, frame.colours)
		return frame.colours > 1
	})

	if _, err := fc.DialWebSocket(t.Context(), used.Path); !sdk.IsNotFound(err) {
		t.Fatalf("a second redemption: %v, want 404", err)
	}
	late := ticket()
	clock.advance(31 * time.Second)
	if _, err := fc.DialWebSocket(t.Context(), late.Path); !sdk.IsNotFound(err) {
		t.Fatalf("a ticket redeemed after 31 s: %v, want 404", err)
	}
}

// tcgServersGuest boots a real QEMU guest through a central and a node (a
// tenant's VM "web"), and starts in it busybox httpd on port 8080 (serving
// hello-from-the-guest at /index.html) and an echo server, nc running cat,
// on port 9000. It returns central's URL, the tenant's token, the node and
// the VM's id.
func tcgServersGuest(t testing.TB) (url, tok string, node *fxNode, vmID string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	img := image.DefaultDir()
	if _, err := image.Load(img); err != nil {
		t.Fatalf("guest image in %s: %v (run make guest-image)", img, err)
	}
	url, _ = tnCentral(t)
	node = startQemuFxNode(t, "qemu-1", url, img)
	t.Cleanup(func() {
		var list sdk.VMList
		if code, body := fxCall(t, "GET", node.url+"/v1/vms", node.admin, nil); code == http.StatusOK && json.Unmarshal(body, &list) == nil {
			for _, vm := range list.VMs {
				fxCall(t, "DELETE", node.url+"/v1/vms/"+vm.ID, node.admin, nil)
			}
		}
	})
	fxWaitUp(t, url, "qemu-1")
	fxMust(t, "PUT", url+"/fleet/images/debian-minimal", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	_, tok = fxTenant(t, url, "acme", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tok, map[string]any{"name": "web", "image": "debian-minimal"}, http.StatusCreated, &vm)
	fxWait(t, "the guest agent of web", 3*time.Minute, func() bool {
		var list sdk.FleetVMList
		fxMust(t, "GET", url+"/fleet/vms", tok, nil, http.StatusOK, &list)
		return len(list.VMs) == 1 && list.VMs[0].AgentReady
	})
	var res sdk.ExecResult
	fxMust(t, "POST", url+"/fleet/vms/qemu-1/"+vm.VM.ID+"/exec", tok, map[string]any{"timeout_seconds": 30,
		"command": "mkdir -p /tmp/www && echo hello-from-the-guest > /tmp/www/index.html && httpd -p 8080 -h /tmp/www && " +
			"(setsid nc -ll -p 9000 -e cat </dev/null >/dev/null 2>&1 &) && sleep 1 && echo started"}, http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("start the servers in the guest: %+v", res)
	}
	return url, tok, node, vm.VM.ID
}

// TestTunnelReachesAServerInARealQEMUGuest: an HTTP server started in a
// real QEMU guest (busybox httpd on port 8080, through the guest agent)
// answers through a tunnel client -> central -> node -> the QEMU driver's
// loopback host forward -> the guest; then a byte echo in the guest
// (busybox nc) carries 4 MiB both ways, and the time it takes is logged
// as the throughput through a TCG guest.
func TestTunnelReachesAServerInARealQEMUGuest(t *testing.T) {
	url, tok, _, vmID := tcgServersGuest(t)
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(tok))
	if err != nil {
		t.Fatal(err)
	}
	c, err := fc.DialWebSocket(t.Context(), "/fleet/vms/qemu-1/"+vmID+"/tunnel?port=8080")
	if err != nil {
		t.Fatalf("open a tunnel to port 8080: %v", err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := c.Write([]byte("GET /index.html HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	reply, err := io.ReadAll(c)
	if err != nil || !bytes.Contains(reply, []byte("200 OK")) || !bytes.Contains(reply, []byte("hello-from-the-guest")) {
		t.Fatalf("the guest's httpd through the tunnel answered %q (%v)", reply, err)
	}

	echo, err := fc.DialWebSocket(t.Context(), "/fleet/vms/qemu-1/"+vmID+"/tunnel?port=9000")
	if err != nil {
		t.Fatalf("open a tunnel to port 9000: %v", err)
	}
	defer echo.Close()
	_ = echo.SetDeadline(time.Now().Add(2 * time.Minute))
	data := make([]byte, 4<<20)
	_, _ = rand.Read(data)
	start := time.Now()
	tnEcho(t, echo, data)
	d := time.Since(start)
	t.Logf("4 MiB each way through a TCG guest's nc: %v, %.1f MiB/s", d.Round(time.Millisecond), 4/d.Seconds())
}

// BenchmarkTunnelThroughATCGGuest measures a tunnel to a real QEMU guest's
// echo server (busybox nc running cat, user-mode networking, TCG), where the
// emulated guest sets the pace: 2 MiB each way per round through central
// (client -> central -> node channel -> node -> the driver's host forward ->
// the guest), against the same through the node's own tunnel endpoint alone
// (client -> node -> host forward -> guest), interleaved. It reports both
// rates and central/node round by round, each a median with its p10–p90:
// what central's relay costs when the guest, not the relay, is the limit.
func BenchmarkTunnelThroughATCGGuest(b *testing.B) {
	url, tok, node, vmID := tcgServersGuest(b)
	fc, err := sdk.NewFleetClient(url, sdk.WithToken(tok))
	if err != nil {
		b.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(node.url, sdk.WithToken(node.admin))
	if err != nil {
		b.Fatal(err)
	}
	viaCentral, err := fc.DialWebSocket(b.Context(), "/fleet/vms/qemu-1/"+vmID+"/tunnel?port=9000")
	if err != nil {
		b.Fatalf("a tunnel through central: %v", err)
	}
	defer viaCentral.Close()
	viaNode, err := nc.DialWebSocket(b.Context(), "/v1/vms/"+vmID+"/tunnel?port=9000")
	if err != nil {
		b.Fatalf("a tunnel through the node alone: %v", err)
	}
	defer viaNode.Close()
	const chunk = 2 << 20
	data := make([]byte, chunk)
	_, _ = rand.Read(data)
	var central, direct []float64 // MiB/s of each round
	round := func(c io.ReadWriter) float64 {
		start := time.Now()
		tnEcho(b, c, data)
		return float64(chunk) / time.Since(start).Seconds() / (1 << 20)
	}
	b.SetBytes(chunk)
	b.ResetTimer()
	for i := range b.N {
		benchstat.Interleave(i,
			func() { central = append(central, round(viaCentral)) },
			func() { direct = append(direct, round(viaNode)) })
	}
	b.StopTimer()
	cs, ns, rs := benchstat.Of(central), benchstat.Of(direct), benchstat.Ratios(central, direct)
	benchstat.Report(b, cs, "central-MiB/s")
	benchstat.Report(b, ns, "node-MiB/s")
	benchstat.Report(b, rs, "central/node")
	b.Logf("2 MiB each way per round to a TCG guest's nc: through central, MiB/s: %v; through the node alone, MiB/s: %v; central/node round by round %v", cs, ns, rs)
}
