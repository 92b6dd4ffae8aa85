package sdk_test

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/websocket"
)

// unixServer serves h on a unix socket and returns the socket's path.
func unixServer(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdkunix")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "api.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return path
}

func TestNodeClientCallsANodeAPIOnAUnixSocket(t *testing.T) {
	path := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer node-admin" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if websocket.IsWebSocketUpgrade(r) {
			ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer ws.Close()
			_ = ws.WriteMessage(websocket.BinaryMessage, []byte("bytes over the socket"))
			_ = ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"node": "sock-node", "version": "test", "drivers": []}`)
	}))
	nc, err := sdk.NewNodeClient("unix://"+path, sdk.WithToken("node-admin"))
	if err != nil {
		t.Fatal(err)
	}
	if nc.URL() != "unix://"+path {
		t.Errorf("URL() = %q, want unix://%s", nc.URL(), path)
	}
	h, err := nc.Health(t.Context())
	if err != nil || h.Node != "sock-node" {
		t.Fatalf("health over the socket: %+v, %v", h, err)
	}
	conn, err := nc.DialWebSocket(t.Context(), "/v1/vms/x/tunnel")
	if err != nil {
		t.Fatalf("websocket over the socket: %v", err)
	}
	defer conn.Close()
	b, err := io.ReadAll(conn)
	if err != nil || string(b) != "bytes over the socket" {
		t.Errorf("read %q, %v", b, err)
	}
}

func TestNodeClientUnixSocketErrorsNameTheSocket(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone.sock")
	nc, err := sdk.NewNodeClient("unix://" + missing)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nc.Health(t.Context())
	var ce *sdk.ConnectError
	if !errors.As(err, &ce) || ce.URL != "unix://"+missing || !strings.Contains(err.Error(), missing) {
		t.Errorf("err = %v (%T), want a *ConnectError naming unix://%s", err, err, missing)
	}
	for _, bad := range []string{"unix://relative/api.sock", "unix:api.sock", "unix://host/api.sock"} {
		if _, err := sdk.NewNodeClient(bad); err == nil || !strings.Contains(err.Error(), "unix:///") {
			t.Errorf("NewNodeClient(%q) = %v, want an error showing unix:///PATH", bad, err)
		}
	}
	if _, err := sdk.NewFleetClient("unix:///run/central.sock"); err == nil {
		t.Error("a fleet client took a unix socket; only node APIs listen on one")
	}
}
