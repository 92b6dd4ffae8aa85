package previews_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/previews"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/gorilla/websocket"
)

// guest is a loopback HTTP server standing where a guest's dev server
// listens (the sim node forwards its port 8080 here). It records each
// request's raw header lines as they arrived, answers /ws as a WebSocket
// echo, and /hold until released.
type guest struct {
	srv *httptest.Server

	mu   sync.Mutex
	last *http.Request
	body []byte

	hold    chan struct{}
	holding chan struct{}
}

func newGuest(t *testing.T) *guest {
	g := &guest{hold: make(chan struct{}), holding: make(chan struct{}, 64)}
	up := websocket.Upgrader{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.last, g.body = r, b
		g.mu.Unlock()
		switch r.URL.Path {
		case "/ws":
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
				if err := c.WriteMessage(typ, append([]byte("echo:"), msg...)); err != nil {
					return
				}
			}
		case "/hold":
			g.holding <- struct{}{}
			<-g.hold
		case "/redirect":
			http.Redirect(w, r, "/login", http.StatusFound)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: "fluxvm_session", Value: "planted-by-the-guest"})
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "hello from %s", r.URL.Path)
	}))
	t.Cleanup(func() {
		select {
		case <-g.hold:
		default:
			close(g.hold)
		}
		g.srv.Close()
	})
	return g
}

func (g *guest) lastRequest() (*http.Request, []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last, g.body
}

// fixture is a store on a real embedded etcd, a real node agent (sim
// driver) whose guest port 8080 is the guest server, one running VM of
// tenant acme, and the service serving previews on a test server whose
// callers name themselves in a header (the API's authentication is
// central/api's; its tests cover it).
type fixture struct {
	t     *testing.T
	st    *store.Store
	nc    *sdk.NodeClient
	svc   *previews.Service
	srv   *httptest.Server
	guest *guest
	image string
	vm    *sdk.VM
	acme  previews.Caller
	other previews.Caller
}

const testToken = "fvt_acme-secret-token-0123456789"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	g := newGuest(t)
	// 8081 is forwarded to a port nothing listens on; 8082 not at all.
	node := nodetest.Start(t, nodetest.WithSimPortForwards(map[string]string{"8080": strings.TrimPrefix(g.srv.URL, "http://"),
		"8081": "127.0.0.1:1"}))
	st := storetest.Open(t)
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: node.URL, State: store.NodeUp,
		LastHeartbeat: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(node.URL, sdk.WithToken(node.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, st: st, nc: nc, guest: g, image: node.Image,
		acme:  previews.Caller{TenantID: "t-acme", TenantName: "acme", Label: "primary token", Credential: testToken},
		other: previews.Caller{TenantID: "t-other", TenantName: "other", Label: "primary token", Credential: "fvt_other"}}
	f.svc = previews.New(previews.Options{Store: st, Client: func(n *store.Node) (*sdk.NodeClient, error) {
		return sdk.NewNodeClient(n.URL, sdk.WithToken(node.AdminToken))
	}})
	f.vm = f.runVM("web")
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := f.acme
		if r.Header.Get("X-Test-Caller") == "other" {
			c = f.other
		}
		rest, _ := strings.CutPrefix(r.URL.EscapedPath(), sdk.PreviewPathPrefix)
		id, rest, _ := strings.Cut(rest, "/")
		f.svc.Serve(w, r, c, id, "/"+rest)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// runVM creates a VM on the node and waits until it runs.
func (f *fixture) runVM(name string) *sdk.VM {
	f.t.Helper()
	ctx := context.Background()
	vm, err := f.nc.CreateVM(ctx, sdk.CreateVMRequest{Name: name, Image: f.image, VCPUs: 1, MemoryMiB: 64, Tenant: "t-acme"})
	if err != nil {
		f.t.Fatalf("create vm %s: %v", name, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for vm.State != sdk.StateRunning {
		if time.Now().After(deadline) {
			f.t.Fatalf("vm %s is %s after 30 s", name, vm.State)
		}
		time.Sleep(50 * time.Millisecond)
		if vm, err = f.nc.GetVM(ctx, vm.ID); err != nil {
			f.t.Fatal(err)
		}
	}
	return vm
}

func (f *fixture) target(vm *sdk.VM) previews.Target {
	return previews.Target{Node: "n1", ID: vm.ID, Name: vm.Name, Tenant: "t-acme", TenantName: "acme"}
}

func (f *fixture) open(port int) sdk.Preview {
	f.t.Helper()
	p, created, err := f.svc.Open(context.Background(), f.acme, f.target(f.vm), port)
	if err != nil || !created {
		f.t.Fatalf("open a preview of port %d: %v (created %v)", port, err, created)
	}
	return p
}

// do sends a request to the preview server and returns status and body.
func (f *fixture) do(method, path string, body io.Reader, header http.Header) (int, http.Header, string) {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func errorOf(t *testing.T, body string) sdk.ErrorBody {
	t.Helper()
	var e sdk.ErrorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
		t.Fatalf("not a JSON error: %q", body)
	}
	return e
}

// TestPreviewReachesTheGuestWithoutAnyCredentialOfTheCaller: a request
// through a preview arrives at the guest's server (through the real node's
// tunnel route) with its method, escaped path, query and body, and without
// Authorization, Proxy-Authorization, cookies, any X-FluxVM-* header, any
// other header or query parameter carrying the token; the guest's
// Set-Cookie never reaches the caller and its redirect to /login points
// below the preview.
func TestPreviewReachesTheGuestWithoutAnyCredentialOfTheCaller(t *testing.T) {
	f := newFixture(t)
	p := f.open(8080)
	if p.Path != "/fleet/previews/"+p.ID+"/" || p.VMName != "web" || p.Port != 8080 || p.OpenedBy != "primary token" {
		t.Fatalf("preview %+v", p)
	}
	h := http.Header{
		"Authorization":       {"Bearer " + testToken},
		"Proxy-Authorization": {"Basic eDp5"},
		"Cookie":              {"fluxvm_session=abc; other=1"},
		"X-Fluxvm-Console":    {"1"},
		"X-FluxVM-Tenant":     {"acme"},
		"X-Api-Key":           {testToken},
		"X-Keep":              {"kept"},
		"Content-Type":        {"application/json"},
	}
	status, hdr, body := f.do("POST", "/fleet/previews/"+p.ID+"/api/a%2Fb?keep=1&token="+testToken+"&t2="+url.QueryEscape("x "+testToken)+"&"+testToken, strings.NewReader(`{"x":1}`), h)
	if status != http.StatusOK || body != "hello from /api/a/b" {
		t.Fatalf("POST through the preview: %d %q", status, body)
	}
	if hdr.Get("Set-Cookie") != "" {
		t.Errorf("the guest's Set-Cookie reached the caller: %q", hdr.Get("Set-Cookie"))
	}
	got, gotBody := f.guest.lastRequest()
	for k, vs := range got.Header {
		for _, v := range vs {
			if strings.Contains(v, testToken) || strings.Contains(v, "fluxvm_session") {
				t.Errorf("the guest saw the credential in %s: %q", k, v)
			}
		}
		if strings.HasPrefix(strings.ToLower(k), "x-fluxvm") || k == "Authorization" || k == "Cookie" || k == "Proxy-Authorization" {
			t.Errorf("the guest saw header %s", k)
		}
	}
	if got.Method != "POST" || got.URL.RawPath != "/api/a%2Fb" || string(gotBody) != `{"x":1}` || got.Header.Get("X-Keep") != "kept" {
		t.Errorf("the guest saw %s %s (raw %s) %q, X-Keep %q", got.Method, got.URL.Path, got.URL.RawPath, gotBody, got.Header.Get("X-Keep"))
	}
	if q := got.URL.RawQuery; q != "keep=1" {
		t.Errorf("the guest saw the query %q, want keep=1 alone", q)
	}
	if got.Host != "localhost:8080" || got.Header.Get("X-Forwarded-Prefix") != "/fleet/previews/"+p.ID {
		t.Errorf("the guest saw Host %q, X-Forwarded-Prefix %q", got.Host, got.Header.Get("X-Forwarded-Prefix"))
	}

	for _, m := range []string{"GET", "PUT", "PATCH", "DELETE"} {
		if status, _, body := f.do(m, "/fleet/previews/"+p.ID+"/m", nil, nil); status != 200 || body != "hello from /m" {
			t.Errorf("%s through the preview: %d %q", m, status, body)
		}
		if got, _ := f.guest.lastRequest(); got.Method != m {
			t.Errorf("%s arrived as %s", m, got.Method)
		}
	}
	status, hdr, _ = f.do("GET", "/fleet/previews/"+p.ID+"/redirect", nil, nil)
	if status != http.StatusFound || hdr.Get("Location") != "/fleet/previews/"+p.ID+"/login" {
		t.Errorf("the guest's redirect: %d to %q", status, hdr.Get("Location"))
	}
}

// TestPreviewCarriesAWebSocketUpgradeBothWays: a WebSocket opened through
// the preview reaches the guest's server and messages go both ways; closing
// the preview ends it.
func TestPreviewCarriesAWebSocketUpgradeBothWays(t *testing.T) {
	f := newFixture(t)
	p := f.open(8080)
	url := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/fleet/previews/" + p.ID + "/ws"
	c, resp, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatalf("dial the guest's WebSocket through the preview: %v (%v)", err, resp)
	}
	defer c.Close()
	for _, msg := range []string{"one", strings.Repeat("x", 100000)} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, got, err := c.ReadMessage()
		if err != nil || string(got) != "echo:"+msg {
			t.Fatalf("echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	if got, _ := f.guest.lastRequest(); got.Header.Get("Authorization") != "" {
		t.Error("the guest's WebSocket saw the token")
	}
	if n := f.svc.InFlight(p.ID); n != 1 {
		t.Errorf("in flight while the WebSocket is open: %d, want 1", n)
	}
	if _, err := f.svc.Close(context.Background(), f.acme, f.target(f.vm), 0); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := c.ReadMessage(); err == nil {
		t.Fatal("the WebSocket still reads after its preview was closed")
	}
}

// TestPreviewIs404OnceItsVMStopsAndStaysGoneWhenItStartsAgain: the
// request after a stop is a 404 and the record is dropped; the VM started
// again is another boot, whose port the old preview never reaches.
func TestPreviewIs404OnceItsVMStopsAndStaysGoneWhenItStartsAgain(t *testing.T) {
	f := newFixture(t)
	p := f.open(8080)
	if status, _, _ := f.do("GET", "/fleet/previews/"+p.ID+"/", nil, nil); status != 200 {
		t.Fatalf("before the stop: %d", status)
	}
	ctx := context.Background()
	if _, err := f.nc.StopVM(ctx, f.vm.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	status, _, body := f.do("GET", "/fleet/previews/"+p.ID+"/", nil, nil)
	if status != http.StatusNotFound || !strings.Contains(errorOf(t, body).Error, "stopped") {
		t.Fatalf("after the stop: %d %s", status, body)
	}
	if recs, _ := f.st.OwnerPreviews(ctx, "t-acme"); len(recs) != 0 {
		t.Errorf("the record outlived the stop: %+v", recs)
	}
	if _, err := f.nc.StartVM(ctx, f.vm.ID); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := f.do("GET", "/fleet/previews/"+p.ID+"/", nil, nil); status != http.StatusNotFound {
		t.Fatalf("after a new start: %d, want 404", status)
	}

	// A preview of the new boot works; deleting the VM ends it.
	vm, _ := f.nc.GetVM(ctx, f.vm.ID)
	for vm.State != sdk.StateRunning {
		time.Sleep(50 * time.Millisecond)
		vm, _ = f.nc.GetVM(ctx, f.vm.ID)
	}
	q := f.open(8080)
	if status, _, _ := f.do("GET", "/fleet/previews/"+q.ID+"/", nil, nil); status != 200 {
		t.Fatalf("a preview of the new boot: %d", status)
	}
	if err := f.nc.DeleteVM(ctx, f.vm.ID); err != nil {
		t.Fatal(err)
	}
	status, _, body = f.do("GET", "/fleet/previews/"+q.ID+"/", nil, nil)
	if status != http.StatusNotFound || !strings.Contains(errorOf(t, body).Error, "deleted") {
		t.Fatalf("after the delete: %d %s", status, body)
	}
}

// TestOpenRefusesEveryBadInput: ports out of range, tunnels off, a port
// outside the policy, a VM that does not run or does not exist, the fifth
// port of a VM and the twenty-first preview of a tenant; opening the same
// port again hands back the same preview.
func TestOpenRefusesEveryBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, port := range []int{-1, 0, 65536, 1 << 40} {
		if _, _, err := f.svc.Open(ctx, f.acme, f.target(f.vm), port); !errors.Is(err, previews.ErrBadPort) {
			t.Errorf("port %d: %v, want ErrBadPort", port, err)
		}
	}
	pol, _ := f.st.GetPolicy(ctx)
	pol.Tunnels.Ports = []string{"8000-8100"}
	if _, err := f.st.PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, f.target(f.vm), 22); !errors.Is(err, previews.ErrPort) {
		t.Errorf("port 22 outside 8000-8100: %v, want ErrPort", err)
	}
	pol.Tunnels.Enabled = false
	if _, err := f.st.PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, f.target(f.vm), 8080); !errors.Is(err, previews.ErrDisabled) {
		t.Errorf("tunnels off: %v, want ErrDisabled", err)
	}
	pol.Tunnels.Enabled = true
	if _, err := f.st.PutPolicy(ctx, pol); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, previews.Target{Node: "n1", ID: "vm-none", Name: "none"}, 8080); !errors.Is(err, previews.ErrVMGone) {
		t.Errorf("no such vm: %v, want ErrVMGone", err)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, previews.Target{Node: "no-node", ID: f.vm.ID, Name: "web"}, 8080); !errors.Is(err, previews.ErrVMGone) {
		t.Errorf("no such node: %v, want ErrVMGone", err)
	}
	stopped := f.runVM("stopped")
	if _, err := f.nc.StopVM(ctx, stopped.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, f.target(stopped), 8080); !errors.Is(err, previews.ErrNotRunning) {
		t.Errorf("a stopped vm: %v, want ErrNotRunning", err)
	}

	first := f.open(8080)
	again, created, err := f.svc.Open(ctx, f.acme, f.target(f.vm), 8080)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("the same port again: %+v created %v %v, want %s", again, created, err, first.ID)
	}
	for port := 8081; port < 8080+previews.MaxPerVM; port++ {
		f.open(port)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, f.target(f.vm), 8099); !errors.Is(err, previews.ErrLimit) {
		t.Fatalf("preview %d of one vm: %v, want ErrLimit", previews.MaxPerVM+1, err)
	}
	open := previews.MaxPerVM
	for i := 0; open < previews.MaxPerOwner; i++ {
		vm := f.runVM(fmt.Sprintf("more-%d", i))
		for port := 8080; port < 8080+previews.MaxPerVM && open < previews.MaxPerOwner; port++ {
			if _, _, err := f.svc.Open(ctx, f.acme, f.target(vm), port); err != nil {
				t.Fatalf("preview %d: %v", open+1, err)
			}
			open++
		}
	}
	last := f.runVM("one-too-many")
	if _, _, err := f.svc.Open(ctx, f.acme, f.target(last), 8080); !errors.Is(err, previews.ErrLimit) {
		t.Fatalf("preview %d of a tenant: %v, want ErrLimit", previews.MaxPerOwner+1, err)
	}
	// A VM whose boot is over gives its places back at the limit.
	if _, err := f.nc.StopVM(ctx, f.vm.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.svc.Open(ctx, f.acme, f.target(last), 8080); err != nil {
		t.Fatalf("at the limit, with a stopped vm's previews to prune: %v", err)
	}
	if status, _ := previews.Status(previews.ErrLimit); status != http.StatusTooManyRequests {
		t.Errorf("ErrLimit answers %d", status)
	}
}

// TestAnotherTenantsPreviewIsNotFound: another tenant can neither use,
// list nor close acme's preview, and learns nothing of it; a read-only
// key is refused; the operator reaches it; VMDeleted drops it.
func TestAnotherTenantsPreviewIsNotFound(t *testing.T) {
	f := newFixture(t)
	p := f.open(8080)
	status, _, body := f.do("GET", "/fleet/previews/"+p.ID+"/", nil, http.Header{"X-Test-Caller": {"other"}})
	if status != http.StatusNotFound || strings.Contains(body, "web") {
		t.Fatalf("another tenant using acme's preview: %d %s", status, body)
	}
	ctx := context.Background()
	if list, _ := f.svc.List(ctx, f.other); len(list) != 0 {
		t.Errorf("another tenant lists %+v", list)
	}
	if _, err := f.svc.Close(ctx, f.other, f.target(f.vm), 0); !errors.Is(err, previews.ErrNotFound) {
		t.Errorf("another tenant closing it: %v", err)
	}
	for _, id := range []string{"prv_0000000000000000", "../../etc", strings.Repeat("a", 300), ""} {
		if status, _, _ := f.do("GET", "/fleet/previews/"+id+"/", nil, nil); status != http.StatusNotFound && status != http.StatusMovedPermanently {
			t.Errorf("preview id %.20q: %d, want 404", id, status)
		}
	}
	ro := f.acme
	ro.ReadOnly = true
	rec := httptest.NewRecorder()
	f.svc.Serve(rec, httptest.NewRequest("GET", "/fleet/previews/"+p.ID+"/", nil), ro, p.ID, "/")
	if rec.Code != http.StatusForbidden {
		t.Errorf("a read-only key: %d, want 403", rec.Code)
	}
	op := previews.Caller{Operator: true, Label: "operator", Credential: "operator-token"}
	rec = httptest.NewRecorder()
	f.svc.Serve(rec, httptest.NewRequest("GET", "/fleet/previews/"+p.ID+"/", nil), op, p.ID, "/")
	if rec.Code != http.StatusOK {
		t.Errorf("the operator: %d %s, want 200", rec.Code, rec.Body)
	}
	if list, _ := f.svc.List(ctx, op); len(list) != 1 {
		t.Errorf("the operator lists %d previews, want 1", len(list))
	}
	// Central deleting the VM drops its previews at once.
	f.svc.VMDeleted(ctx, "n1", f.vm.ID)
	if list, _ := f.svc.List(ctx, op); len(list) != 0 {
		t.Errorf("after VMDeleted the operator lists %+v", list)
	}
}

// TestPreviewBoundsBodiesAndRequestsInFlight: a body declared over 16 MiB
// is a 413 before anything is sent; the 33rd request at once is a 429;
// a port nothing listens on is a 502 that says so.
func TestPreviewBoundsBodiesAndRequestsInFlight(t *testing.T) {
	f := newFixture(t)
	p := f.open(8080)
	req, _ := http.NewRequest("POST", f.srv.URL+"/fleet/previews/"+p.ID+"/big", io.LimitReader(zeros{}, previews.MaxRequestBody+1))
	req.ContentLength = previews.MaxRequestBody + 1
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if err == nil && resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of 16 MiB + 1: %d, want 413", resp.StatusCode)
	}
	var wg sync.WaitGroup
	for range previews.MaxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(f.srv.URL + "/fleet/previews/" + p.ID + "/hold")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	for range previews.MaxInFlight {
		select {
		case <-f.guest.holding:
		case <-time.After(30 * time.Second):
			t.Fatal("the held requests did not all reach the guest")
		}
	}
	if status, _, body := f.do("GET", "/fleet/previews/"+p.ID+"/", nil, nil); status != http.StatusTooManyRequests {
		t.Errorf("request %d at once: %d %s, want 429", previews.MaxInFlight+1, status, body)
	}
	close(f.guest.hold)
	wg.Wait()
	if status, _, _ := f.do("GET", "/fleet/previews/"+p.ID+"/", nil, nil); status != http.StatusOK {
		t.Errorf("once they finished: %d", status)
	}

	// Nothing listens where port 8081 goes: 502. Port 8082 the driver
	// cannot forward at all: the node's 409, passed on.
	for _, c := range []struct {
		port, status int
		says         string
	}{{8081, http.StatusBadGateway, "nothing answers on port 8081"}, {8082, http.StatusConflict, "port_forwards"}} {
		q, _, err := f.svc.Open(context.Background(), f.acme, f.target(f.vm), c.port)
		if err != nil {
			t.Fatal(err)
		}
		status, _, body := f.do("GET", "/fleet/previews/"+q.ID+"/", nil, nil)
		if status != c.status || !strings.Contains(errorOf(t, body).Error, c.says) {
			t.Errorf("port %d: %d %s, want %d saying %q", c.port, status, body, c.status, c.says)
		}
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestStripRemovesEveryCopyOfTheCredential holds StripHeaders and
// StripQuery to what they promise, case by case.
func TestStripRemovesEveryCopyOfTheCredential(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer x"}, "authorization": {"lower"}, "Cookie": {"a=b"}, "X-Fluxvm-Anything": {"1"},
		"X-Other": {"has fvt_tok inside"}, "Accept": {"text/html"}}
	previews.StripHeaders(h, "fvt_tok")
	if len(h) != 1 || h.Get("Accept") != "text/html" {
		t.Errorf("left %v", h)
	}
	for _, c := range []struct{ in, want string }{
		{"a=1&token=fvt_tok&b=2", "a=1&b=2"},
		{"fvt_tok", ""},
		{"x=fvt%5Ftok", ""},
		{"a=1", "a=1"},
		{"", ""},
		{"a=%zz&k=fvt_tok", "a=%zz"},
	} {
		if got := previews.StripQuery(c.in, "fvt_tok"); got != c.want {
			t.Errorf("StripQuery(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got := previews.StripQuery("token=abc", ""); got != "token=abc" {
		t.Errorf("without a credential: %q", got)
	}
}

// FuzzStripQuery: whatever the query, the credential never survives in it,
// raw or unescaped.
func FuzzStripQuery(f *testing.F) {
	for _, s := range []string{"a=1&token=fvt_tok", "fvt%5ftok", "%", "a=%66vt_tok", "&&&", "x=fvt_to&k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out := previews.StripQuery(q, "fvt_tok")
		for _, part := range strings.Split(out, "&") {
			plain, err := url.QueryUnescape(part)
			if strings.Contains(part, "fvt_tok") || (err == nil && strings.Contains(plain, "fvt_tok")) {
				t.Fatalf("StripQuery(%q) = %q keeps the credential", q, out)
			}
		}
		if len(out) > len(q) {
			t.Fatalf("StripQuery grew %q to %q", q, out)
		}
	})
}
