package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/websocket"
)

// No FluxVM route streams yet, so these tests stand in for one with a
// WebSocket server of their own.

// wsServer accepts a WebSocket on any path and hands it to serve, which
// owns the connection until it returns. tls serves https (and wss).
func wsServer(t *testing.T, tls bool, serve func(r *http.Request, c *websocket.Conn)) *httptest.Server {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			t.Errorf("accept: %v", err)
			return
		}
		defer c.Close()
		serve(r, c)
	})
	srv := httptest.NewUnstartedServer(h)
	if tls {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv
}

// closeWith sends a close message with code and reason; the server's
// handler then returns and the connection closes.
func closeWith(c *websocket.Conn, code int, reason string) {
	_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
}

// openStream opens path on srv with a FleetClient made with opts.
func openStream(t *testing.T, srv *httptest.Server, path string, opts ...sdk.Option) *sdk.Stream {
	t.Helper()
	fc, err := sdk.NewFleetClient(srv.URL, append([]sdk.Option{sdk.WithHTTPClient(srv.Client())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fc.Stream(t.Context(), path)
	if err != nil {
		t.Fatalf("stream %s: %v", path, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestStreamCarriesJSONTextAndBinaryMessagesBothWays(t *testing.T) {
	closed := make(chan int, 1)
	srv := wsServer(t, false, func(r *http.Request, c *websocket.Conn) {
		for {
			typ, b, err := c.ReadMessage()
			if err != nil {
				code := -1
				if ce, ok := err.(*websocket.CloseError); ok {
					code = ce.Code
				}
				closed <- code
				return
			}
			if err := c.WriteMessage(typ, b); err != nil {
				return
			}
		}
	})
	s := openStream(t, srv, "/echo")
	ctx := t.Context()

	type cmd struct {
		Op   string            `json:"op"`
		Cols int               `json:"cols"`
		Env  map[string]string `json:"env"`
	}
	sent := cmd{Op: "resize", Cols: 120, Env: map[string]string{"TERM": "xterm"}}
	if err := s.WriteJSON(ctx, sent); err != nil {
		t.Fatal(err)
	}
	var got cmd
	if err := s.ReadJSON(ctx, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, sent) {
		t.Fatalf("JSON echoed as %+v, want %+v", got, sent)
	}

	for _, m := range []sdk.Message{
		{Binary: true, Data: []byte{0x1b, '[', 'H', 0x00, 0xff}},
		{Data: []byte("login: ")},
	} {
		if err := s.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
		back, err := s.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if back.Binary != m.Binary || !bytes.Equal(back.Data, m.Data) {
			t.Fatalf("echoed %+v, want %+v", back, m)
		}
	}

	// A binary message is no JSON, and reading it so leaves the stream open.
	if err := s.Send(ctx, sdk.Message{Binary: true, Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReadJSON(ctx, &got); err == nil || !strings.Contains(err.Error(), "binary") {
		t.Fatalf("ReadJSON of a binary message: %v, want an error naming it binary", err)
	}
	if err := s.WriteJSON(ctx, sent); err != nil {
		t.Fatalf("write after a refused binary message: %v", err)
	}
	if err := s.ReadJSON(ctx, &got); err != nil || !reflect.DeepEqual(got, sent) {
		t.Fatalf("read after a refused binary message: %+v, %v", got, err)
	}

	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case code := <-closed:
		if code != websocket.CloseNormalClosure {
			t.Fatalf("the server saw close status %d, want %d (normal closure)", code, websocket.CloseNormalClosure)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server never saw the stream close")
	}
}

func TestStreamUpgradeCarriesTheClientsTokenUserAgentAndPath(t *testing.T) {
	const path = "/fleet/vms/node-1/web%2F1/console?lines=10"
	for _, c := range []struct {
		name     string
		tls      bool
		node     bool
		token    string
		wantAuth string
	}{
		{"fleet client over ws", false, false, "fvt_secret", "Bearer fvt_secret"},
		{"fleet client over wss through WithHTTPClient", true, false, "fvt_secret", "Bearer fvt_secret"},
		{"node client over ws", false, true, "node-admin", "Bearer node-admin"},
		{"no token, no header", false, false, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			type seen struct{ auth, ua, uri string }
			got := make(chan seen, 1)
			srv := wsServer(t, c.tls, func(r *http.Request, conn *websocket.Conn) {
				got <- seen{r.Header.Get("Authorization"), r.Header.Get("User-Agent"), r.URL.RequestURI()}
				closeWith(conn, websocket.CloseNormalClosure, "")
			})
			opts := []sdk.Option{sdk.WithToken(c.token), sdk.WithUserAgent("fluxctl/test"), sdk.WithHTTPClient(srv.Client())}
			open := func(ctx context.Context) (*sdk.Stream, error) {
				fc, err := sdk.NewFleetClient(srv.URL, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return fc.Stream(ctx, path)
			}
			if c.node {
				open = func(ctx context.Context) (*sdk.Stream, error) {
					nc, err := sdk.NewNodeClient(srv.URL, opts...)
					if err != nil {
						t.Fatal(err)
					}
					return nc.Stream(ctx, path)
				}
			}
			s, err := open(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			want := seen{c.wantAuth, "fluxctl/test", path}
			if g := <-got; g != want {
				t.Fatalf("the server saw %+v, want %+v", g, want)
			}
			if _, err := s.Next(t.Context()); err != io.EOF {
				t.Fatalf("after the server closed: %v, want io.EOF", err)
			}
		})
	}
}

func TestStreamRefusedUpgradesAreAPIErrorsLikeAnyCall(t *testing.T) {
	for _, c := range []struct {
		name        string
		status      int
		contentType string
		body        string
		is          func(error) bool
		msg, hint   string
	}{
		{"401 unknown token", 401, "application/json", `{"error":"invalid token","hint":"check the token"}`,
			sdk.IsUnauthorized, "invalid token", "check the token"},
		{"403 not the operator", 403, "application/json", `{"error":"this route is for the operator"}`,
			sdk.IsForbidden, "this route is for the operator", ""},
		{"404 no such VM", 404, "application/json", `{"error":"no vm \"web-9\"","hint":"GET /fleet/vms lists your VMs"}`,
			sdk.IsNotFound, `no vm "web-9"`, "GET /fleet/vms lists your VMs"},
		{"502 plain text from a proxy", 502, "text/plain", "upstream connect error",
			sdk.IsUnavailable, "central answered 502 Bad Gateway: upstream connect error", "the reply was not FluxVM's JSON error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.contentType)
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			defer srv.Close()
			fc, _ := sdk.NewFleetClient(srv.URL)
			s, err := fc.Stream(t.Context(), "/fleet/vms/node-1/web-9/console")
			var apiErr *sdk.APIError
			if s != nil || !errors.As(err, &apiErr) {
				t.Fatalf("got stream %v, error %v (%T); want an *sdk.APIError", s, err, err)
			}
			if apiErr.Status != c.status || apiErr.Message != c.msg || !strings.HasPrefix(apiErr.Hint, c.hint) || !c.is(err) {
				t.Fatalf("got %+v, want status %d, message %q, hint starting %q and its Is* helper true", apiErr, c.status, c.msg, c.hint)
			}
		})
	}

	// A route that answers 200 is no streaming route: an error that says
	// so, not an *APIError with a success status.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"vms":[]}`)
	}))
	defer srv.Close()
	fc, _ := sdk.NewFleetClient(srv.URL)
	_, err := fc.Stream(t.Context(), "/fleet/vms")
	var apiErr *sdk.APIError
	if err == nil || errors.As(err, &apiErr) || !strings.Contains(err.Error(), "answered 200 OK without upgrading") {
		t.Fatalf("stream on a plain JSON route: %v (%T), want an error saying it did not upgrade", err, err)
	}
}

func TestStreamToAnUnreachableServerIsAConnectError(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there any more
	nc, _ := sdk.NewNodeClient(srv.URL)
	_, err := nc.Stream(t.Context(), "/v1/vms/web-1/console")
	var ce *sdk.ConnectError
	if !errors.As(err, &ce) || ce.Service != "node" || ce.URL != srv.URL || !sdk.IsUnavailable(err) {
		t.Fatalf("got %v (%T), want an *sdk.ConnectError for node at %s", err, err, srv.URL)
	}
}

func TestStreamReadsEndTheWayTheServerEndedTheStream(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(*websocket.Conn)
		// check judges the error of the read after the last message.
		check func(error) string
	}{
		{"normal closure is io.EOF", func(c *websocket.Conn) { closeWith(c, websocket.CloseNormalClosure, "bye") },
			func(err error) string {
				if err != io.EOF {
					return "want io.EOF itself"
				}
				return ""
			}},
		{"another status is a StreamClosedError with the reason", func(c *websocket.Conn) { closeWith(c, websocket.CloseInternalServerErr, "vm deleted") },
			func(err error) string {
				var sc *sdk.StreamClosedError
				if !errors.As(err, &sc) || sc.Code != 1011 || sc.Reason != "vm deleted" || sc.Service != "central" || sc.Path != "/end" {
					return "want a *sdk.StreamClosedError of status 1011, reason \"vm deleted\", central, /end"
				}
				return ""
			}},
		{"a dropped connection is an error, not io.EOF", func(c *websocket.Conn) { _ = c.Close() },
			func(err error) string {
				var sc *sdk.StreamClosedError
				if err == nil || errors.Is(err, io.EOF) || errors.As(err, &sc) {
					return "want an error that is neither io.EOF nor a close status"
				}
				return ""
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := wsServer(t, false, func(r *http.Request, conn *websocket.Conn) {
				if err := conn.WriteMessage(websocket.TextMessage, []byte("last words")); err != nil {
					t.Errorf("write: %v", err)
				}
				c.end(conn)
			})
			s := openStream(t, srv, "/end")
			if m, err := s.Next(t.Context()); err != nil || string(m.Data) != "last words" {
				t.Fatalf("first read: %q, %v", m.Data, err)
			}
			_, err := s.Next(t.Context())
			if why := c.check(err); why != "" {
				t.Fatalf("read after the server ended the stream: %v (%T); %s", err, err, why)
			}
			if _, again := s.Next(t.Context()); again != err {
				t.Fatalf("a second read: %v, want the same error as the first: %v", again, err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("close after the server ended the stream: %v", err)
			}
		})
	}
}

func TestCancellingTheContextEndsABlockedRead(t *testing.T) {
	srv := wsServer(t, false, func(r *http.Request, c *websocket.Conn) {
		_, _, _ = c.ReadMessage() // sends nothing; waits for the client to go
	})
	s := openStream(t, srv, "/quiet")
	ctx, cancel := context.WithCancel(t.Context())
	const after = 100 * time.Millisecond
	time.AfterFunc(after, cancel)
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Next(ctx)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("read ended with %v, want context.Canceled", err)
		}
		if waited := time.Since(start); waited < after {
			t.Fatalf("read returned after %v, before the cancel at %v: it was not blocked", waited, after)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a read was still blocked 5s after its context was cancelled")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close after a cancelled read: %v", err)
	}
}

func TestStreamReadsMessagesUpToOneMiB(t *testing.T) {
	srv := wsServer(t, false, func(r *http.Request, c *websocket.Conn) {
		for _, n := range []int{sdk.MaxStreamMessage, sdk.MaxStreamMessage + 1} {
			if err := c.WriteMessage(websocket.BinaryMessage, bytes.Repeat([]byte{'x'}, n)); err != nil {
				return
			}
		}
		_, _, _ = c.ReadMessage()
	})
	s := openStream(t, srv, "/console")
	m, err := s.Next(t.Context())
	if err != nil || len(m.Data) != sdk.MaxStreamMessage {
		t.Fatalf("a message of MaxStreamMessage bytes: %d bytes, %v", len(m.Data), err)
	}
	if _, err := s.Next(t.Context()); err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Fatalf("a message of MaxStreamMessage+1 bytes: %v, want an error naming the limit", err)
	}
}

// Reading a stream until the server ends it. No central route streams yet
// (the VM console, screens and events will), so a stand-in server plays
// one: it sends two lines of console output as JSON and closes.
func ExampleFleetClient_Stream() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for _, msg := range []string{`{"line": "Debian GNU/Linux 13 web-1 ttyS0"}`, `{"line": "web-1 login:"}`} {
			_ = c.WriteMessage(websocket.TextMessage, []byte(msg))
		}
		_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	}))
	defer srv.Close()

	ctx := context.Background()
	fc, _ := sdk.NewFleetClient(srv.URL, sdk.WithToken("fvt_example"))
	s, err := fc.Stream(ctx, "/fleet/vms/node-1/web-1/console")
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	for {
		var m struct {
			Line string `json:"line"`
		}
		err := s.ReadJSON(ctx, &m)
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(m.Line)
	}
	// Output:
	// Debian GNU/Linux 13 web-1 ttyS0
	// web-1 login:
}
