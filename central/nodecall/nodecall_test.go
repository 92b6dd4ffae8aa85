package nodecall_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/agent/link"
	"github.com/fluxvm/fluxvm/central/channel"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"
)

// nodeAPI answers GET /v1/health naming where it was reached, and upgrades
// /v1/echo to a WebSocket that writes the same.
func nodeAPI(where string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer fleet-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path == "/v1/echo" {
			ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer ws.Close()
			_ = ws.WriteMessage(websocket.BinaryMessage, []byte(where))
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"node": "`+where+`", "version": "test", "drivers": []}`)
	})
}

// openChannel runs the node agent's end of node's channel (link.RunChannel,
// serving nodeAPI("channel")) against a registry behind a real WebSocket
// server, as central's route does.
func openChannel(t *testing.T, reg *channel.Registry, node string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		_ = reg.Serve(r.Context(), node, wsconn.New(ws), hclog.NewNullLogger())
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = link.RunChannel(ctx, link.ChannelOptions{CentralURL: srv.URL, Token: "fleet-token", Node: node, Handler: nodeAPI("channel")})
	}()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	for !reg.Has(node) {
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClientPrefersTheChannelThenTheURL(t *testing.T) {
	direct := httptest.NewServer(nodeAPI("direct"))
	defer direct.Close()
	reg := channel.New(channel.Options{Wait: 300 * time.Millisecond})
	defer reg.Close()
	c := nodecall.NewWithChannels("fleet-token", reg)
	ctx := context.Background()
	health := func(n *store.Node) (string, error) {
		nc, err := c.Client(n)
		if err != nil {
			return "", err
		}
		h, err := nc.Health(ctx)
		if err != nil {
			return "", err
		}
		return h.Node, nil
	}
	node := func(name, url string) *store.Node { return &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: url}} }

	// A URL and no channel: dialled directly, at once.
	if got, err := health(node("n1", direct.URL)); got != "direct" || err != nil {
		t.Errorf("with a url and no channel: %q, %v; want the direct answer", got, err)
	}
	// A channel: through it, URL or not.
	openChannel(t, reg, "n1")
	if got, err := health(node("n1", direct.URL)); got != "channel" || err != nil {
		t.Errorf("with a channel and a url: %q, %v; want the channel's answer", got, err)
	}
	if got, err := health(node("n1", "")); got != "channel" || err != nil {
		t.Errorf("with a channel and no url: %q, %v", got, err)
	}
	// A WebSocket of a channel-backed client goes through the channel too.
	nc, err := c.Client(node("n1", direct.URL))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := nc.DialWebSocket(ctx, "/v1/echo")
	if err != nil {
		t.Fatalf("websocket through the channel: %v", err)
	}
	b, _ := io.ReadAll(conn)
	conn.Close()
	if string(b) != "channel" {
		t.Errorf("the WebSocket reached %q, want the channel", b)
	}
	// Neither: ErrNoChannel after the registry's wait.
	began := time.Now()
	_, err = health(node("n2", ""))
	if !errors.Is(err, channel.ErrNoChannel) || !sdk.IsUnavailable(err) || time.Since(began) < 300*time.Millisecond {
		t.Errorf("no channel, no url: %v after %v; want ErrNoChannel (unavailable) after the wait", err, time.Since(began))
	}
}
