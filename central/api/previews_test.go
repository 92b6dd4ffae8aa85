package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/websocket"
)

// pvGuest is a host HTTP server standing for a guest's dev server (a sim
// node forwards the guest's port to it): it keeps the headers of the last
// request and echoes WebSocket messages on /ws.
type pvGuest struct {
	base   string
	mu     sync.Mutex
	header http.Header
	url    string
}

func newPvGuest(t *testing.T) *pvGuest {
	g := &pvGuest{}
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.header, g.url = r.Header.Clone(), r.URL.String()
		g.mu.Unlock()
		if r.URL.Path == "/ws" {
			c, err := up.Upgrade(w, r, nil)
			if err != nil {
				return
			}
			defer c.Close()
			for {
				typ, msg, err := c.ReadMessage()
				if err != nil {
					return
				}
				_ = c.WriteMessage(typ, append([]byte("guest:"), msg...))
			}
		}
		w.Header().Set("Content-Type", "text/plain")
		if r.URL.Path == "/len" {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d bytes", n)
			return
		}
		fmt.Fprintf(w, "dev server at %s", r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	g.base = srv.URL
	return g
}

func (g *pvGuest) last() (http.Header, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.header, g.url
}

// pvDo sends a raw request to central and holds the answer to the spec.
func pvDo(t *testing.T, method, url string, body io.Reader, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fxCheckSpec(t, req, resp, b)
	return resp.StatusCode, string(b)
}

// TestPreviewThroughCentralAndTheNodeChannel: a tenant opens a preview of
// port 8080 of its VM (sim node, whose port 8080 is a host server) and
// requests through central and the node's channel reach the guest with
// every method, without the token, cookies or X-FluxVM-* headers; a
// WebSocket goes both ways through it; the listing shows it to its tenant
// only; another tenant gets 404 for using, opening on, or closing acme's
// VM; bad ports are 400 and 403; a stopped VM makes it 404 at once; a
// closed preview is 404; deleting the VM drops its previews.
func TestPreviewThroughCentralAndTheNodeChannel(t *testing.T) {
	url, _ := tnCentral(t)
	images, img := fxImages(t)
	g := newPvGuest(t)
	startFxNode(t, "sim-1", url, images, 8, 8192, fmt.Sprintf(`    port_forwards = { "8080" = %q }`, strings.TrimPrefix(g.base, "http://")))
	fxWaitUp(t, url, "sim-1")
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	_, tokA := fxTenant(t, url, "acme", nil)
	_, tokB := fxTenant(t, url, "bravo", nil)
	var vm sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "web-1", "image": "tiny"}, http.StatusCreated, &vm)
	vmPath := url + "/fleet/vms/sim-1/" + vm.VM.ID + "/preview"
	fxWait(t, "web-1 running", 30*time.Second, func() bool {
		var list sdk.FleetVMList
		fxMust(t, "GET", url+"/fleet/vms", tokA, nil, http.StatusOK, &list)
		return len(list.VMs) == 1 && list.VMs[0].State == sdk.StateRunning
	})

	// Bad input first: each is refused and opens nothing.
	for _, c := range []struct {
		body any
		want int
	}{
		{map[string]any{"port": 0}, http.StatusBadRequest},
		{map[string]any{"port": 65536}, http.StatusBadRequest},
		{map[string]any{"port": "8080"}, http.StatusBadRequest},
		{map[string]any{}, http.StatusBadRequest},
		{map[string]any{"port": 8080, "extra": 1}, http.StatusBadRequest},
		{`{"port": 80`, http.StatusBadRequest},
		{map[string]any{"port": 80}, http.StatusForbidden}, // outside the policy's tunnel ports
	} {
		if code, body := fxCall(t, "POST", vmPath, tokA, c.body); code != c.want {
			t.Errorf("open with %v: %d %s, want %d", c.body, code, body, c.want)
		}
	}
	fxMust(t, "POST", url+"/fleet/vms/sim-1/"+vm.VM.ID+"/preview", tokB, map[string]any{"port": 8080}, http.StatusNotFound, nil)
	fxMust(t, "DELETE", vmPath+"?port=70000", tokA, nil, http.StatusBadRequest, nil)
	fxMust(t, "DELETE", vmPath, tokA, nil, http.StatusNotFound, nil)

	fc, err := sdk.NewFleetClient(url, sdk.WithToken(tokA))
	if err != nil {
		t.Fatal(err)
	}
	p, err := fc.OpenPreview(t.Context(), "sim-1", vm.VM.ID, 8080)
	if err != nil {
		t.Fatalf("open the preview: %v", err)
	}
	var again sdk.Preview
	fxMust(t, "POST", vmPath, tokA, map[string]any{"port": 8080}, http.StatusOK, &again)
	if again.ID != p.ID {
		t.Fatalf("opening port 8080 again gave %s, want %s", again.ID, p.ID)
	}

	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		code, body := pvDo(t, m, url+p.Path+"app/page?x=1&access="+tokA, strings.NewReader("data"), http.Header{
			"Authorization": {"Bearer " + tokA}, "Cookie": {"fluxvm_session=s3cret"}, "X-Fluxvm-Console": {"1"}, "X-Custom": {"kept"}})
		if code != http.StatusOK || body != "dev server at /app/page" {
			t.Fatalf("%s through the preview: %d %q", m, code, body)
		}
		h, u := g.last()
		if h.Get("Authorization") != "" || h.Get("Cookie") != "" || h.Get("X-Fluxvm-Console") != "" || h.Get("X-Custom") != "kept" || u != "/app/page?x=1" {
			t.Fatalf("%s: the guest saw %s with %v", m, u, h)
		}
	}
	// A body of unknown length over central's 1 MiB for JSON bodies
	// reaches the guest whole: previews' bodies are not read on the way.
	big := strings.Repeat("b", 3<<20)
	if code, body := pvDo(t, "PUT", url+p.Path+"len", io.MultiReader(strings.NewReader(big)), http.Header{"Authorization": {"Bearer " + tokA}}); code != 200 || body != fmt.Sprintf("%d bytes", len(big)) {
		t.Fatalf("a 3 MiB body of unknown length: %d %q", code, body)
	}
	resp, err := fc.DoPreview(t.Context(), p.ID, "GET", "/sdk", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "dev server at /sdk" {
		t.Fatalf("DoPreview: %d %q", resp.StatusCode, b)
	}

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(url, "http")+p.Path+"ws", http.Header{"Authorization": {"Bearer " + tokA}})
	if err != nil {
		t.Fatalf("a WebSocket through the preview: %v", err)
	}
	for _, msg := range []string{"hello", strings.Repeat("z", 70000)} {
		if err := ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, got, err := ws.ReadMessage(); err != nil || string(got) != "guest:"+msg {
			t.Fatalf("the guest's echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	ws.Close()
	if h, _ := g.last(); h.Get("Authorization") != "" {
		t.Fatal("the guest's WebSocket saw the token")
	}

	var list sdk.PreviewList
	fxMust(t, "GET", url+"/fleet/previews", tokA, nil, http.StatusOK, &list)
	if len(list.Previews) != 1 || list.Previews[0].ID != p.ID || list.Previews[0].VMName != "web-1" || list.Previews[0].TenantName != "acme" {
		t.Fatalf("acme lists %+v", list.Previews)
	}
	fxMust(t, "GET", url+"/fleet/previews", tokB, nil, http.StatusOK, &list)
	if len(list.Previews) != 0 {
		t.Fatalf("bravo lists %+v", list.Previews)
	}
	if code, body := pvDo(t, "GET", url+p.Path, nil, http.Header{"Authorization": {"Bearer " + tokB}}); code != http.StatusNotFound || strings.Contains(body, "web-1") {
		t.Fatalf("bravo using acme's preview: %d %s", code, body)
	}
	if code, _ := pvDo(t, "GET", url+p.Path, nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("without a token: %d, want 401", code)
	}
	fxMust(t, "DELETE", url+"/fleet/vms/sim-1/"+vm.VM.ID+"/preview", tokB, nil, http.StatusNotFound, nil)

	// A stopped VM: 404 from the next request on.
	fxMust(t, "POST", url+"/fleet/vms/sim-1/"+vm.VM.ID+"/stop", tokA, nil, http.StatusOK, nil)
	code, body := pvDo(t, "GET", url+p.Path, nil, http.Header{"Authorization": {"Bearer " + tokA}})
	if code != http.StatusNotFound || !strings.Contains(body, "stopped") {
		t.Fatalf("after the stop: %d %s", code, body)
	}
	fxMust(t, "GET", url+"/fleet/previews", tokA, nil, http.StatusOK, &list)
	if len(list.Previews) != 0 {
		t.Fatalf("the stopped VM's preview is still listed: %+v", list.Previews)
	}
	fxMust(t, "POST", vmPath, tokA, map[string]any{"port": 8080}, http.StatusConflict, nil)

	// Started again: a new preview works, and closing it makes it 404.
	fxMust(t, "POST", url+"/fleet/vms/sim-1/"+vm.VM.ID+"/start", tokA, nil, http.StatusOK, nil)
	var q sdk.Preview
	fxWait(t, "a preview of the started VM", 30*time.Second, func() bool {
		code, _ := fxCall(t, "POST", vmPath, tokA, map[string]any{"port": 8080})
		return code == http.StatusCreated
	})
	fxMust(t, "GET", url+"/fleet/previews", tokA, nil, http.StatusOK, &list)
	if len(list.Previews) != 1 {
		t.Fatalf("after the start: %+v", list.Previews)
	}
	q = list.Previews[0]
	if code, _ := pvDo(t, "GET", url+q.Path, nil, http.Header{"Authorization": {"Bearer " + tokA}}); code != http.StatusOK {
		t.Fatalf("the new preview: %d", code)
	}
	if code, _ := pvDo(t, "GET", url+p.Path, nil, http.Header{"Authorization": {"Bearer " + tokA}}); code != http.StatusNotFound {
		t.Fatalf("the old preview after a new start: %d, want 404", code)
	}
	if err := fc.ClosePreview(t.Context(), "sim-1", vm.VM.ID, 8080); err != nil {
		t.Fatal(err)
	}
	if code, _ := pvDo(t, "GET", url+q.Path, nil, http.Header{"Authorization": {"Bearer " + tokA}}); code != http.StatusNotFound {
		t.Fatalf("a closed preview: %d, want 404", code)
	}

	// Deleting the VM through central drops its previews with it.
	fxMust(t, "POST", vmPath, tokA, map[string]any{"port": 8080}, http.StatusCreated, nil)
	fxMust(t, "DELETE", url+"/fleet/vms/sim-1/"+vm.VM.ID, tokA, nil, http.StatusNoContent, nil)
	fxMust(t, "GET", url+"/fleet/previews", tokA, nil, http.StatusOK, &list)
	if len(list.Previews) != 0 {
		t.Fatalf("the deleted VM's previews are still listed: %+v", list.Previews)
	}
}
