package wsconn_test

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
)

// echoServer echoes every byte it reads back through a Conn.
func echoServer(t *testing.T) string {
	t.Helper()
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c := wsconn.New(ws)
		defer c.Close()
		_, _ = io.Copy(c, c)
		_ = c.CloseWith(websocket.CloseNormalClosure, "done")
	}))
	t.Cleanup(srv.Close)
	return "ws" + strings.TrimPrefix(srv.URL, "http")
}

func dial(t *testing.T, url string) *wsconn.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := wsconn.New(ws)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestBytesRoundTripAcrossMessageSplits sends more than several messages'
// worth and reads back the same bytes, in reads of odd sizes.
func TestBytesRoundTripAcrossMessageSplits(t *testing.T) {
	c := dial(t, echoServer(t))
	data := make([]byte, 5*wsconn.MaxMessage+1234)
	_, _ = rand.Read(data)
	go func() {
		_, _ = c.Write(data)
	}()
	got := make([]byte, 0, len(data))
	buf := make([]byte, 777)
	for len(got) < len(data) {
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("read after %d bytes: %v", len(got), err)
		}
		got = append(got, buf[:n]...)
	}
	if sha256.Sum256(got) != sha256.Sum256(data) {
		t.Fatal("the echoed bytes differ from those sent")
	}
}

// TestPeerCloseReadsAsEOF: a normal closure ends reading with io.EOF, not
// an error a caller would report.
func TestPeerCloseReadsAsEOF(t *testing.T) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		c := wsconn.New(ws)
		_, _ = c.Write([]byte("bye"))
		_ = c.CloseWith(websocket.CloseNormalClosure, "done")
	}))
	defer srv.Close()
	c := dial(t, "ws"+strings.TrimPrefix(srv.URL, "http"))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("ReadAll: %v, want EOF at the close", err)
	}
	if !bytes.Equal(got, []byte("bye")) {
		t.Fatalf("read %q, want bye", got)
	}
}

// TestOversizedMessageIsRefused: a peer that sends a message over
// MaxMessage ends the connection instead of making the reader buffer it.
func TestOversizedMessageIsRefused(t *testing.T) {
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		_ = ws.WriteMessage(websocket.BinaryMessage, make([]byte, wsconn.MaxMessage+1))
		_, _, _ = ws.ReadMessage()
	}))
	defer srv.Close()
	c := dial(t, "ws"+strings.TrimPrefix(srv.URL, "http"))
	if _, err := io.ReadAll(c); err == nil {
		t.Fatal("a message over MaxMessage was read without error")
	}
}
