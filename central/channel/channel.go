// Package channel keeps the node channels central holds: one long-lived,
// authenticated WebSocket per node, which the node opened, carrying
// hashicorp/yamux streams that central opens, each one HTTP/1.1 connection
// to the node's API. Central reaches a node behind NAT this way, with no
// inbound port on the node (decision 10, docs/design/008-node-channel.md).
package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/yamux"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of the registry and of both ends of a channel.
const (
	// DefaultWait is how long DialContext waits for a node that has no
	// channel yet: a node's heartbeat can arrive just before its channel,
	// and a node whose channel just dropped redials within a few seconds.
	DefaultWait = 5 * time.Second
	// KeepAliveInterval is how often each end pings the other, so a peer
	// that vanished without closing the connection is noticed within
	// KeepAliveInterval + WriteTimeout.
	KeepAliveInterval = 2 * time.Second
	// WriteTimeout bounds a write to the connection and a ping's answer.
	WriteTimeout = 5 * time.Second
)

// ErrNoChannel is a dial to a node that holds no channel to this central
// (and opened none within the wait).
var ErrNoChannel = errors.New("no channel")

// ErrReplaced ends a channel that a newer one from the same node replaced.
var ErrReplaced = errors.New("replaced by a newer channel from the same node")

// ErrClosed ends every channel when the registry is closed (central stops).
var ErrClosed = errors.New("central is shutting down")

// YamuxConfig is the multiplexer's configuration for both ends of a channel:
// keepalive on and short, and yamux's logs into log.
func YamuxConfig(log hclog.Logger) *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = true
	cfg.KeepAliveInterval = KeepAliveInterval
	cfg.ConnectionWriteTimeout = WriteTimeout
	cfg.StreamOpenTimeout = 10 * time.Second
	cfg.LogOutput = nil
	cfg.Logger = stdlog.New(yamuxLog{log}, "", 0)
	return cfg
}

// yamuxLog carries yamux's log lines into an hclog.Logger at their level
// ("[ERR]", "[WARN]"), but for the lines that say the connection under the
// channel broke: yamux calls those errors, and for a channel they are a
// peer that went away without a close message (a crash, a cut network),
// which each end reports itself (central's disconnect line, the node's
// outage line). They are warnings.
type yamuxLog struct{ log hclog.Logger }

func (y yamuxLog) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := hclog.Info
	if msg, ok := strings.CutPrefix(line, "[ERR] "); ok {
		level, line = hclog.Error, msg
		for _, broke := range []string{"yamux: Failed to read header:", "yamux: Failed to write header:", "yamux: keepalive failed:"} {
			if strings.HasPrefix(msg, broke) {
				level = hclog.Warn
			}
		}
	} else if msg, ok := strings.CutPrefix(line, "[WARN] "); ok {
		level, line = hclog.Warn, msg
	}
	y.log.Log(level, line)
	return len(p), nil
}

// Options configure a Registry.
type Options struct {
	// Wait is how long DialContext waits for a missing channel (DefaultWait
	// when zero).
	Wait time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Registry holds the channels of the nodes connected to this central. It is
// safe for concurrent use, and a prometheus.Collector of its gauges.
type Registry struct {
	wait time.Duration
	now  func() time.Time

	mu       sync.Mutex
	sessions map[string]*session
	// arrived is closed (and replaced) whenever a channel is added, to wake
	// the dials waiting for one.
	arrived chan struct{}
	closed  bool
	// connects counts the channels each node opened, for the metrics.
	connects map[string]float64

	connectedDesc, connectsDesc *prometheus.Desc
}

type session struct {
	node  string
	mux   *yamux.Session
	conn  net.Conn
	since time.Time
	// reason is why central ended the channel (nil: the channel ended by
	// itself); set under the registry's lock before mux is closed.
	reason error
}

// end closes the channel from central's side, first telling the node why
// in a WebSocket close message (going away, with the reason), so that the
// node reads an orderly end, not a broken connection.
func (s *session) end(why error) {
	if c, ok := s.conn.(closeWither); ok {
		_ = c.CloseWith(websocket.CloseGoingAway, why.Error())
	}
	s.mux.Close()
}

// closeWither is a connection that can say why it ends: a *wsconn.Conn.
type closeWither interface {
	CloseWith(code int, reason string) error
}

// New makes an empty Registry.
func New(opts Options) *Registry {
	if opts.Wait <= 0 {
		opts.Wait = DefaultWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Registry{wait: opts.Wait, now: opts.Now, sessions: map[string]*session{}, arrived: make(chan struct{}),
		connects: map[string]float64{},
		connectedDesc: prometheus.NewDesc("fluxvm_node_channel_connected",
			"1 while the node holds a channel to this central.", []string{"node"}, nil),
		connectsDesc: prometheus.NewDesc("fluxvm_node_channel_connects_total",
			"Channels the node opened to this central since it started.", []string{"node"}, nil)}
}

// Serve runs node's channel over conn (the node's WebSocket as a byte
// stream) until it ends: the node goes away, its keepalive fails, a newer
// channel from the node replaces it, ctx ends or the registry closes. It
// logs the connect and the disconnect with the node's name and why, and
// closes conn before it returns.
func (r *Registry) Serve(ctx context.Context, node string, conn net.Conn, log hclog.Logger) error {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	mux, err := yamux.Client(conn, YamuxConfig(log.Named("yamux").With("node", node)))
	if err != nil {
		conn.Close()
		return fmt.Errorf("node %s channel: %w", node, err)
	}
	s := &session{node: node, mux: mux, conn: conn, since: r.now()}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		mux.Close()
		return fmt.Errorf("node %s channel: %w", node, ErrClosed)
	}
	old := r.sessions[node]
	if old != nil {
		old.reason = ErrReplaced
	}
	r.sessions[node] = s
	r.connects[node]++
	close(r.arrived)
	r.arrived = make(chan struct{})
	r.mu.Unlock()
	if old != nil {
		old.end(ErrReplaced)
	}
	log.Info("node channel connected", "node", node, "remote", conn.RemoteAddr().String(), "replaced_older", old != nil)

	select {
	case <-mux.CloseChan():
	case <-ctx.Done():
	}
	r.mu.Lock()
	if r.sessions[node] == s {
		delete(r.sessions, node)
	}
	reason := s.reason
	r.mu.Unlock()
	if reason == nil && ctx.Err() != nil {
		reason = ctx.Err()
		s.end(ErrClosed) // the request ended: central is going away
	}
	mux.Close()
	why := "the node closed it or stopped answering"
	if reason != nil {
		why = reason.Error()
	}
	log.Info("node channel disconnected", "node", node, "reason", why, "lasted", r.now().Sub(s.since).Round(time.Millisecond).String())
	return nil
}

// Has reports whether node holds a channel to this central now.
func (r *Registry) Has(node string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[node]
	return s != nil && !s.mux.IsClosed()
}

// Nodes lists the nodes holding a channel now, with when each connected.
func (r *Registry) Nodes() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Time, len(r.sessions))
	for name, s := range r.sessions {
		out[name] = s.since
	}
	return out
}

// DialContext opens a stream to node's API over its channel: a net.Conn
// that carries one HTTP connection. A node without a channel is waited for
// (at most the registry's Wait, and ctx); then the error is ErrNoChannel,
// wrapped with the node's name.
func (r *Registry) DialContext(ctx context.Context, node string) (net.Conn, error) {
	var timeout <-chan time.Time
	for {
		r.mu.Lock()
		s, arrived, closed := r.sessions[node], r.arrived, r.closed
		r.mu.Unlock()
		if closed {
			return nil, fmt.Errorf("node %s: %w", node, ErrClosed)
		}
		if s != nil {
			c, err := s.mux.OpenStream()
			if err == nil {
				return c, nil
			}
			if !errors.Is(err, yamux.ErrSessionShutdown) && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("node %s: open a stream on its channel: %w", node, err)
			}
			// The channel is ending; the node will open another.
			r.mu.Lock()
			if r.sessions[node] == s {
				delete(r.sessions, node)
			}
			r.mu.Unlock()
			continue
		}
		if timeout == nil {
			t := time.NewTimer(r.wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-arrived:
		case <-timeout:
			return nil, fmt.Errorf("node %s has %w to this central (waited %v for it to connect)", node, ErrNoChannel, r.wait)
		case <-ctx.Done():
			return nil, fmt.Errorf("node %s: wait for its channel: %w", node, ctx.Err())
		}
	}
}

// Drop ends node's channel now (the node was removed from the fleet); the
// node's next dial is refused by the access checks, not here.
func (r *Registry) Drop(node string) {
	r.mu.Lock()
	s := r.sessions[node]
	if s != nil {
		s.reason = errors.New("the node was removed from the fleet")
		delete(r.sessions, node)
	}
	r.mu.Unlock()
	if s != nil {
		s.mux.Close()
	}
}

// Close ends every channel and refuses new ones: central is stopping.
// Hijacked connections outlive http.Server.Shutdown, so central calls this.
func (r *Registry) Close() {
	r.mu.Lock()
	r.closed = true
	var all []*session
	for _, s := range r.sessions {
		s.reason = ErrClosed
		all = append(all, s)
	}
	close(r.arrived)
	r.arrived = make(chan struct{})
	r.mu.Unlock()
	// All at once: a close message to a node that stopped reading can take
	// up to its write deadline (a second).
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(func() { s.end(ErrClosed) })
	}
	wg.Wait()
}

// Describe implements prometheus.Collector.
func (r *Registry) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.connectedDesc
	ch <- r.connectsDesc
}

// Collect implements prometheus.Collector: per node, whether it is
// connected and how many channels it opened.
func (r *Registry) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for node, n := range r.connects {
		up := 0.0
		if s := r.sessions[node]; s != nil && !s.mux.IsClosed() {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(r.connectedDesc, prometheus.GaugeValue, up, node)
		ch <- prometheus.MustNewConstMetric(r.connectsDesc, prometheus.CounterValue, n, node)
	}
}
