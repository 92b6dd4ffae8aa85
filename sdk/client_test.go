package sdk_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
)

// These tests stand in for what a FluxVM node never sends (HTML from a
// proxy, bare text, a hung server); the real node is in node_test.go.

func TestErrorRepliesThatAreNotFluxVMJSONStillBecomeAPIErrors(t *testing.T) {
	cases := []struct {
		name        string
		status      int
		contentType string
		body        string
		wantMsg     string
		unavailable bool
	}{
		{"json error with hint", 409, "application/json", `{"error":"vm web-1 is stopped","hint":"start it first"}`, "vm web-1 is stopped", false},
		{"plain text from a proxy", 502, "text/plain", "upstream connect error\nmore detail", "node answered 502 Bad Gateway: upstream connect error", true},
		{"html error page", 500, "text/html; charset=utf-8", "<html><body><h1>Internal Server Error</h1></body></html>", "node answered 500 Internal Server Error", false},
		{"html without content type", 503, "", "<!DOCTYPE html><p>down for maintenance</p>", "node answered 503 Service Unavailable", true},
		{"empty body", 504, "", "", "node answered 504 Gateway Timeout", true},
		{"json without error field", 404, "application/json", `{"message":"nope"}`, "node answered 404 Not Found", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.contentType != "" {
					w.Header().Set("Content-Type", c.contentType)
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, c.body)
			}))
			defer srv.Close()
			nc, err := sdk.NewNodeClient(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			_, err = nc.GetVM(t.Context(), "web-1")
			var apiErr *sdk.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("error %v (%T), want *sdk.APIError", err, err)
			}
			if apiErr.Status != c.status || !strings.HasPrefix(apiErr.Message, c.wantMsg) {
				t.Fatalf("got %+v, want status %d and message starting %q", apiErr, c.status, c.wantMsg)
			}
			if strings.Contains(apiErr.Message, "<") || strings.Contains(apiErr.Message, "\n") {
				t.Fatalf("message carries markup or several lines: %q", apiErr.Message)
			}
			if apiErr.Hint == "" {
				t.Fatal("no hint")
			}
			if sdk.IsUnavailable(err) != c.unavailable {
				t.Fatalf("IsUnavailable = %v, want %v", !c.unavailable, c.unavailable)
			}
			if sdk.IsNotFound(err) != (c.status == 404) || sdk.IsConflict(err) != (c.status == 409) {
				t.Fatal("IsNotFound or IsConflict disagrees with the status")
			}
		})
	}
}

func TestSuccessThatIsNotJSONIsAnErrorNamingTheReply(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html>welcome to nginx</html>")
	}))
	defer srv.Close()
	nc, _ := sdk.NewNodeClient(srv.URL)
	_, err := nc.ListVMs(t.Context())
	if err == nil || !strings.Contains(err.Error(), "text/html") {
		t.Fatalf("ListVMs from a web server: %v, want a decode error naming text/html", err)
	}
}

func TestRefusedConnectionIsAConnectError(t *testing.T) {
	url := nodetest.ClosedURL(t)
	nc, err := sdk.NewNodeClient(url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nc.Health(t.Context())
	var ce *sdk.ConnectError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want *sdk.ConnectError", err, err)
	}
	if ce.URL != url || !strings.Contains(err.Error(), "node at "+url+" is unreachable") {
		t.Fatalf("message %q does not say the node at %s is unreachable", err, url)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%v does not wrap ECONNREFUSED", err)
	}
	if !sdk.IsUnavailable(err) || sdk.IsNotFound(err) {
		t.Fatal("a refused connection should be unavailable and nothing else")
	}
}

func TestCallerCancellationIsNotBlamedOnTheNode(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	nc, _ := sdk.NewNodeClient(srv.URL)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := nc.GetVM(ctx, "web-1")
	var ce *sdk.ConnectError
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ce) {
		t.Fatalf("error %v (%T), want context.DeadlineExceeded and no ConnectError", err, err)
	}
}

func TestRequestsCarryTokenUserAgentAndEscapedPaths(t *testing.T) {
	type seen struct{ method, rawPath, query, auth, ua, ctype, body string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"),
			r.Header.Get("User-Agent"), r.Header.Get("Content-Type"), string(b)}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"vm-1","name":"a/b","state":"stopped"}`)
	}))
	defer srv.Close()
	// A base URL with a path prefix (a node behind a reverse proxy) and a
	// trailing slash.
	nc, err := sdk.NewNodeClient(srv.URL+"/node-7/", sdk.WithToken("s3cret"), sdk.WithUserAgent("test/1"), sdk.WithHTTPClient(srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.StopVM(t.Context(), "a/b c?", 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	s := <-got
	want := seen{"POST", "/node-7/v1/vms/a%2Fb%20c%3F/stop", "", "Bearer s3cret", "test/1", "application/json", `{"timeout_seconds":2}`}
	if s != want {
		t.Fatalf("request\n got %+v\nwant %+v", s, want)
	}
	if _, err := nc.StartVM(t.Context(), "web-1"); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.body != "" || s.ctype != "" {
		t.Fatalf("start sent a body %q (%s); the API takes none", s.body, s.ctype)
	}
}

func TestNewNodeClientRefusesURLsItCannotUse(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7777", "ftp://node:21", "http://", "http://node:7777/?x=1", "://bad"} {
		if _, err := sdk.NewNodeClient(u); err == nil {
			t.Errorf("NewNodeClient(%q) accepted it", u)
		}
	}
	for _, u := range []string{"http://127.0.0.1:7777", "https://node.example:443/", "http://[::1]:7777"} {
		if _, err := sdk.NewNodeClient(u); err != nil {
			t.Errorf("NewNodeClient(%q): %v", u, err)
		}
	}
}
