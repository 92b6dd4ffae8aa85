package channel_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/channel"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Real parts on loopback: central's end is a Registry behind an HTTP server
// that upgrades to a WebSocket; a node's end dials it with gorilla, runs the
// yamux server and serves an http.Handler on the streams, as the node agent
// does (agent/link).

type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) { l.mu.Lock(); defer l.mu.Unlock(); return l.b.Write(p) }
func (l *logBuf) String() string              { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

type central struct {
	reg  *channel.Registry
	srv  *httptest.Server
	logs *logBuf
}

func startCentral(t *testing.T, opts channel.Options) *central {
	t.Helper()
	c := &central{reg: channel.New(opts), logs: &logBuf{}}
	log := hclog.New(&hclog.LoggerOptions{Name: "central", Output: c.logs, Level: hclog.Info})
	up := websocket.Upgrader{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = c.reg.Serve(r.Context(), strings.TrimPrefix(r.URL.Path, "/"), wsconn.New(ws), log)
	}))
	t.Cleanup(func() { c.reg.Close(); c.srv.Close() })
	return c
}

// node is a node's end of a channel.
type node struct {
	session *yamux.Session
	conn    *wsconn.Conn
	logs    *logBuf // what its yamux logged
}

// connect opens node name's channel to c, through dial (nil: straight to
// c's server), serving the answer "NAME/TAG" on every request.
func connect(t *testing.T, c *central, name, tag string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *node {
	t.Helper()
	d := websocket.Dialer{NetDialContext: dial}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(c.srv.URL, "http")+"/"+name, nil)
	if err != nil {
		t.Fatalf("dial the channel: %v", err)
	}
	conn, logs := wsconn.New(ws), &logBuf{}
	s, err := yamux.Server(conn, channel.YamuxConfig(hclog.New(&hclog.LoggerOptions{Name: name, Output: logs, Level: hclog.Info})))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = http.Serve(s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s/%s %s %d", name, tag, r.URL.Path, len(body))
		}))
	}()
	t.Cleanup(func() { s.Close() })
	waitFor(t, "channel of "+name, 5*time.Second, func() bool { return c.reg.Has(name) })
	return &node{session: s, conn: conn, logs: logs}
}

func waitFor(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// client is an HTTP client whose connections are streams on node's channel.
func client(reg *channel.Registry, node string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return reg.DialContext(ctx, node)
	}}}
}

func get(t *testing.T, hc *http.Client, path string) string {
	t.Helper()
	resp, err := hc.Get("http://node.fluxvm" + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestRequestsReachTheNodeThroughItsChannel(t *testing.T) {
	c := startCentral(t, channel.Options{})
	connect(t, c, "n1", "a", nil)
	connect(t, c, "n2", "a", nil)
	if got := get(t, client(c.reg, "n1"), "/v1/health"); got != "n1/a /v1/health 0" {
		t.Errorf("n1 answered %q", got)
	}
	if got := get(t, client(c.reg, "n2"), "/v1/vms"); got != "n2/a /v1/vms 0" {
		t.Errorf("n2 answered %q", got)
	}
	// Many requests at once, each big enough to take several messages.
	hc := client(c.reg, "n1")
	body := strings.Repeat("x", 300<<10)
	var wg sync.WaitGroup
	var bad atomic.Int32
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Post("http://node.fluxvm/v1/vms", "text/plain", strings.NewReader(body))
			if err != nil {
				bad.Add(1)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != fmt.Sprintf("n1/a /v1/vms %d", len(body)) {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d of 20 concurrent requests failed", bad.Load())
	}
	if !strings.Contains(c.logs.String(), "node channel connected: node=n1") {
		t.Errorf("no connect log naming the node:\n%s", c.logs)
	}
}

func TestDialWaitsForAChannelThatArrivesLate(t *testing.T) {
	c := startCentral(t, channel.Options{Wait: 5 * time.Second})
	errc := make(chan error, 1)
	go func() {
		conn, err := c.reg.DialContext(context.Background(), "late")
		if err == nil {
			conn.Close()
		}
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond)
	connect(t, c, "late", "a", nil)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dial did not return once the channel arrived")
	}
}

func TestDialWithoutChannelGivesUpAfterTheWait(t *testing.T) {
	c := startCentral(t, channel.Options{Wait: 300 * time.Millisecond})
	began := time.Now()
	_, err := c.reg.DialContext(context.Background(), "absent")
	took := time.Since(began)
	if !errors.Is(err, channel.ErrNoChannel) || !strings.Contains(err.Error(), "absent") {
		t.Errorf("err = %v, want ErrNoChannel naming the node", err)
	}
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("gave up after %v, want about 300ms", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c2 := startCentral(t, channel.Options{Wait: time.Hour})
	if _, err := c2.reg.DialContext(ctx, "absent"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
}

func TestNewerChannelReplacesTheOlder(t *testing.T) {
	c := startCentral(t, channel.Options{})
	old := connect(t, c, "n1", "old", nil)
	connect(t, c, "n1", "new", nil)
	select {
	case <-old.session.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("the older channel is still open")
	}
	if got := get(t, client(c.reg, "n1"), "/x"); got != "n1/new /x 0" {
		t.Errorf("answered by %q, want the newer channel", got)
	}
	waitFor(t, "the disconnect log", 2*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "node channel disconnected: node=n1 reason=\"replaced by a newer channel")
	})
	want := `
# HELP fluxvm_node_channel_connected 1 while the node holds a channel to this central.
# TYPE fluxvm_node_channel_connected gauge
fluxvm_node_channel_connected{node="n1"} 1
# HELP fluxvm_node_channel_connects_total Channels the node opened to this central since it started.
# TYPE fluxvm_node_channel_connects_total counter
fluxvm_node_channel_connects_total{node="n1"} 2
`
	if err := testutil.CollectAndCompare(c.reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestNodeGoneIsNoticedAndItsRedialServes(t *testing.T) {
	c := startCentral(t, channel.Options{})
	n := connect(t, c, "n1", "first", nil)
	n.session.Close()
	waitFor(t, "central to drop the closed channel", 5*time.Second, func() bool { return !c.reg.Has("n1") })
	connect(t, c, "n1", "second", nil)
	if got := get(t, client(c.reg, "n1"), "/y"); got != "n1/second /y 0" {
		t.Errorf("answered %q", got)
	}
}

// blackhole forwards a TCP connection until cut, then drops every byte
// without closing anything: a peer that vanished (power loss, a dead NAT
// mapping), which only the keepalive can notice.
type blackhole struct{ cut atomic.Bool }

func (b *blackhole) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	up, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	here, there := net.Pipe()
	pump := func(dst io.Writer, src io.Reader) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 && !b.cut.Load() {
				if _, err := dst.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pump(up, there)
	go pump(there, up)
	return here, nil
}

func TestVanishedNodeIsNoticedByTheKeepalive(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a keepalive to fail")
	}
	c := startCentral(t, channel.Options{})
	bh := &blackhole{}
	connect(t, c, "n1", "a", bh.dial)
	bh.cut.Store(true)
	began := time.Now()
	limit := channel.KeepAliveInterval + channel.WriteTimeout + 5*time.Second
	waitFor(t, "central to notice the vanished node", limit, func() bool { return !c.reg.Has("n1") })
	t.Logf("noticed after %v", time.Since(began).Round(time.Millisecond))
	waitFor(t, "the disconnect log", 2*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "node channel disconnected: node=n1")
	})
}

func TestCloseEndsEveryChannelAndRefusesDials(t *testing.T) {
	c := startCentral(t, channel.Options{})
	n := connect(t, c, "n1", "a", nil)
	c.reg.Close()
	select {
	case <-n.session.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("the node's channel is still open after Close")
	}
	if _, err := c.reg.DialContext(context.Background(), "n1"); !errors.Is(err, channel.ErrClosed) {
		t.Errorf("dial after Close: %v, want ErrClosed", err)
	}
}

// TestOrderlyEndsLogNoErrorOnEitherSide: a channel that one side ends on
// purpose (the node stopping, a newer channel from the node, central
// closing) ends with a WebSocket close message, which the other side reads
// as the end of the stream. Neither side logs yamux's "Failed to read
// header" error, as both did when the connection dropped without one.
func TestOrderlyEndsLogNoErrorOnEitherSide(t *testing.T) {
	c := startCentral(t, channel.Options{})
	closed := func(n *node, what string) {
		t.Helper()
		select {
		case <-n.session.CloseChan():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the node's end is still open", what)
		}
	}

	// The node stops, saying so as the node agent does (agent/link).
	stopping := connect(t, c, "n1", "a", nil)
	if err := stopping.conn.CloseWith(websocket.CloseGoingAway, "the node agent is stopping"); err != nil {
		t.Fatal(err)
	}
	stopping.session.Close()
	waitFor(t, "central's disconnect log of n1", 5*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "node channel disconnected: node=n1")
	})

	// A newer channel replaces an older one: central tells the older why.
	older := connect(t, c, "n2", "old", nil)
	connect(t, c, "n2", "new", nil)
	closed(older, "the replaced channel")

	// Central closes: every node is told.
	last := connect(t, c, "n3", "a", nil)
	c.reg.Close()
	closed(last, "a channel after Close")
	waitFor(t, "central's disconnect log of n3", 5*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "node channel disconnected: node=n3")
	})

	for who, logs := range map[string]*logBuf{"central": c.logs, "the stopping node": stopping.logs,
		"the replaced node": older.logs, "a node of the closed central": last.logs} {
		if out := logs.String(); strings.Contains(out, "Failed to read header") || strings.Contains(out, "[ERROR]") {
			t.Errorf("%s logged an error for an orderly end:\n%s", who, out)
		}
	}
}

// TestABrokenChannelIsAWarningAndYamuxErrorsStayErrors: a node whose
// connection drops without a close message (a crash) makes central's yamux
// log that it could not read, which is logged as a warning beside central's
// own disconnect line; yamux's other errors keep their level.
func TestABrokenChannelIsAWarningAndYamuxErrorsStayErrors(t *testing.T) {
	c := startCentral(t, channel.Options{})
	n := connect(t, c, "n1", "a", nil)
	_ = n.conn.WebSocket().NetConn().Close() // no close message: the node crashed
	waitFor(t, "central's disconnect log", 5*time.Second, func() bool {
		return strings.Contains(c.logs.String(), "node channel disconnected: node=n1")
	})
	out := c.logs.String()
	if !strings.Contains(out, "[WARN]  central.yamux: yamux: Failed to read header:") || strings.Contains(out, "[ERROR]") {
		t.Errorf("a dropped channel: want yamux's read failure as a warning and no error:\n%s", out)
	}

	logs := &logBuf{}
	cfg := channel.YamuxConfig(hclog.New(&hclog.LoggerOptions{Name: "y", Output: logs, Level: hclog.Debug}))
	cfg.Logger.Printf("[ERR] yamux: duplicate stream declared")
	cfg.Logger.Printf("[WARN] yamux: frame for missing stream: %v", 7)
	cfg.Logger.Printf("[ERR] yamux: keepalive failed: %v", "i/o deadline reached")
	got := logs.String()
	for _, want := range []string{"[ERROR] y: yamux: duplicate stream declared", "[WARN]  y: yamux: frame for missing stream: 7",
		"[WARN]  y: yamux: keepalive failed: i/o deadline reached"} {
		if !strings.Contains(got, want) {
			t.Errorf("yamux's lines logged as\n%s\nwant a line %q", got, want)
		}
	}
}
