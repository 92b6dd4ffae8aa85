package link

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/channel"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
)

// centralEnd is central's end of the channel: the real channel registry behind an HTTP server on
// addr that upgrades GET /fleet/nodes/{name}/channel for the right token,
// as central's route does.
type centralEnd struct {
	reg  *channel.Registry
	srv  *http.Server
	addr string // host:port it listens on
	// refused counts the upgrades refused for a wrong token.
	refused atomic.Int32
	// logs is what the registry logged.
	logs *syncBuffer
}

func startCentralEnd(t *testing.T, addr string) *centralEnd {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &centralEnd{reg: channel.New(channel.Options{}), addr: ln.Addr().String(), logs: &syncBuffer{}}
	log := hclog.New(&hclog.LoggerOptions{Output: c.logs, Level: hclog.Info})
	c.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer fleet-token" {
			c.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"invalid token","hint":"check central { token }"}`)
			return
		}
		name := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/fleet/nodes/"), "/channel")
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.reg.Serve(r.Context(), name, wsconn.New(ws), log)
	})}
	go func() { _ = c.srv.Serve(ln) }()
	t.Cleanup(c.stop)
	return c
}

// stop ends this central: every channel is closed (with a close message,
// as central stopping sends) and nothing listens any more.
func (c *centralEnd) stop() {
	c.reg.Close()
	_ = c.srv.Close()
}

func (c *centralEnd) get(t *testing.T, node, path string) string {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return c.reg.DialContext(ctx, node)
	}}}
	resp, err := hc.Get("http://" + node + ".node.fluxvm" + path)
	if err != nil {
		t.Fatalf("GET %s through the channel: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func waitUntil(t *testing.T, what string, timeout time.Duration, ok func() bool) time.Duration {
	t.Helper()
	began := time.Now()
	for !ok() {
		if time.Since(began) > timeout {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(began)
}

// TestChannelServesTheNodeAPIAndIsBackSoonAfterCentralRestarts runs the
// node's end against a central end on a fixed port, stops that central and
// starts another on the same port: the node redials within the backoff's
// cap, well inside the 5 s the acceptance allows, and logs the outage once.
func TestChannelServesTheNodeAPIAndIsBackSoonAfterCentralRestarts(t *testing.T) {
	c := startCentralEnd(t, "127.0.0.1:0")
	logs := &syncBuffer{}
	var connects atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunChannel(ctx, ChannelOptions{CentralURL: "http://" + c.addr, Token: "fleet-token", Node: "n1",
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "node n1: %s %s", r.Method, r.URL.Path)
			}),
			Logger:    hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}),
			Connected: func() { connects.Add(1) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunChannel: %v", err)
		}
	}()
	waitUntil(t, "the first channel", 5*time.Second, func() bool { return c.reg.Has("n1") })
	if got := c.get(t, "n1", "/v1/health"); got != "node n1: GET /v1/health" {
		t.Fatalf("through the channel: %q", got)
	}

	port := c.addr
	c.stop()
	time.Sleep(500 * time.Millisecond) // central is away a moment; the node backs off
	c2 := startCentralEnd(t, port)
	took := waitUntil(t, "the channel to the restarted central", 5*time.Second, func() bool { return c2.reg.Has("n1") })
	t.Logf("channel back %v after central listened again", took.Round(time.Millisecond))
	if took > 3*time.Second {
		t.Errorf("the channel took %v to come back; the backoff caps at %v", took, MaxBackoff)
	}
	if got := c2.get(t, "n1", "/v1/vms"); got != "node n1: GET /v1/vms" {
		t.Fatalf("through the new channel: %q", got)
	}
	out := logs.String()
	if strings.Contains(out, "Failed to read header") {
		t.Errorf("the node logged yamux's read error when central closed its channel in order:\n%s", out)
	}
	if n := strings.Count(out, "no channel to central"); n < 1 || n > 2 {
		t.Errorf("the outage was logged %d times, want once (twice if its error changed):\n%s", n, out)
	}
	if !strings.Contains(out, "channel to central is back") || connects.Load() != 2 {
		t.Errorf("connects = %d, want 2 and a log of the recovery:\n%s", connects.Load(), out)
	}
}

// TestChannelRefusedIsRetriedSlowlyAndLoggedOnce: a central that refuses the
// token is asked again at the backoff's cap, not in a tight loop, and the
// refusal is logged once with central's words.
func TestChannelRefusedIsRetriedSlowlyAndLoggedOnce(t *testing.T) {
	c := startCentralEnd(t, "127.0.0.1:0")
	logs := &syncBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = RunChannel(ctx, ChannelOptions{CentralURL: "http://" + c.addr, Token: "wrong-token", Node: "n1",
		Handler: http.NotFoundHandler(), Logger: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})})
	if n := c.refused.Load(); n < 2 || n > 4 {
		t.Errorf("%d dials in 3 s, want a few (one every %v or so)", n, MaxBackoff)
	}
	out := logs.String()
	if strings.Count(out, "no channel to central") != 1 || !strings.Contains(out, "invalid token") || strings.Contains(out, "wrong-token") {
		t.Errorf("want the refusal logged once, with central's words and without the token:\n%s", out)
	}
}

// TestStoppingTheNodeEndsItsChannelInOrder: when the node agent stops
// (RunChannel's context ends), the channel ends with a WebSocket close
// message, so central logs the disconnect and no read error from yamux.
func TestStoppingTheNodeEndsItsChannelInOrder(t *testing.T) {
	c := startCentralEnd(t, "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunChannel(ctx, ChannelOptions{CentralURL: "http://" + c.addr, Token: "fleet-token", Node: "n1",
			Handler: http.NotFoundHandler(), Logger: hclog.NewNullLogger()})
	}()
	waitUntil(t, "the channel", 5*time.Second, func() bool { return c.reg.Has("n1") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunChannel: %v", err)
	}
	waitUntil(t, "central's disconnect log", 5*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "node channel disconnected: node=n1")
	})
	if out := c.logs.String(); strings.Contains(out, "Failed to read header") || strings.Contains(out, "[ERROR]") {
		t.Errorf("central logged an error for a node that stopped in order:\n%s", out)
	}
}
