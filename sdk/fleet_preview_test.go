package sdk_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestPreviewCallsOpenListServeAndClose: OpenPreview, ListPreviews,
// DoPreview and ClosePreview against a real central and sim node (web-1's
// port 8080 is a server on this host): DoPreview returns the guest's
// answer whatever its status, without the client's token reaching the
// guest; refusals are *APIError values IsNotFound and IsConflict report.
func TestPreviewCallsOpenListServeAndClose(t *testing.T) {
	seen := make(chan string, 8)
	guest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(guest.Close)
	tf := newTunnelFleet(t, strings.TrimPrefix(guest.URL, "http://"), 20)
	ctx := t.Context()

	p, err := tf.fc.OpenPreview(ctx, tf.node, tf.vm, 8080)
	if err != nil {
		t.Fatalf("OpenPreview: %v", err)
	}
	if p.Port != 8080 || p.VMName != "web-1" || p.Path != sdk.PreviewPathPrefix+p.ID+"/" {
		t.Fatalf("OpenPreview = %+v", p)
	}
	resp, err := tf.fc.DoPreview(ctx, p.ID, "PATCH", "x/y", strings.NewReader("z"), http.Header{"X-Fluxvm-Console": {"1"}})
	if err != nil {
		t.Fatalf("DoPreview: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot || string(b) != "PATCH /x/y" {
		t.Fatalf("DoPreview: %d %q, want the guest's 418", resp.StatusCode, b)
	}
	if auth := <-seen; auth != "" {
		t.Fatalf("the guest saw Authorization %q", auth)
	}
	list, err := tf.fc.ListPreviews(ctx)
	if err != nil || len(list.Previews) != 1 || list.Previews[0].ID != p.ID {
		t.Fatalf("ListPreviews = %+v, %v", list, err)
	}
	if _, err := tf.fc.OpenPreview(ctx, tf.node, tf.parked, 8080); !sdk.IsConflict(err) {
		t.Fatalf("a preview of a stopped VM: %v, want a 409", err)
	}
	if err := tf.fc.ClosePreview(ctx, tf.node, tf.vm, 0); err != nil {
		t.Fatalf("ClosePreview: %v", err)
	}
	if err := tf.fc.ClosePreview(ctx, tf.node, tf.vm, 8080); !sdk.IsNotFound(err) {
		t.Fatalf("closing it again: %v, want a 404", err)
	}
	resp, err = tf.fc.DoPreview(ctx, p.ID, "GET", "/", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("DoPreview of a closed preview: %d, want 404", resp.StatusCode)
	}
}
