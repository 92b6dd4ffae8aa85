package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/agent/images"
	"github.com/fluxvm/fluxvm/agent/pluginhost"
	"github.com/fluxvm/fluxvm/agent/store"
	"github.com/fluxvm/fluxvm/agent/vmm"
	"github.com/fluxvm/fluxvm/jsonapi"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/schemas"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

const (
	adminToken    = "admin-token-0123456789abcdef"
	readOnlyToken = "readonly-token-0123456789abcd"
)

// clock is the manager's injected clock; tests move it forward.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// env is a node API on a real stack: bbolt store, plugin host running the
// real sim driver plugin process, VM manager, HTTP server.
type env struct {
	t        *testing.T
	srv      *httptest.Server
	manager  *vmm.Manager
	clock    *clock
	imageDir string
	image    string
	logs     *syncBuffer
	spec     *schemas.Spec
	// stateDir is the agent's state directory (plugins' state under drivers/).
	stateDir string
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// newEnv builds the stack with the sim driver; extra, if set, adds routes
// before the server is wrapped (to test the middleware with a handler that
// panics).
func newEnv(t *testing.T, extra func(s *server)) *env {
	t.Helper()
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	return newEnvWith(t, extra, []pluginhost.Plugin{{
		Name:    "sim",
		Command: func() *exec.Cmd { return exec.Command(bin, "plugin", "sim") },
		Config:  func(*basepb.ConfigSchemaResponse) ([]byte, error) { return []byte(`{}`), nil },
	}})
}

// newEnvWith builds the stack with the given driver plugins, the first one
// the default.
func newEnvWith(t *testing.T, extra func(s *server), plugins []pluginhost.Plugin) *env {
	t.Helper()
	var order []string
	for _, p := range plugins {
		order = append(order, p.Name)
	}
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	imageDir := t.TempDir()
	image := filepath.Join(imageDir, "disk.img")
	if err := os.WriteFile(image, []byte("not really a disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	logger := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: logs})
	clk := &clock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}

	var mgr *vmm.Manager
	host := pluginhost.New(pluginhost.Options{
		StateDir: filepath.Join(dir, "state"), NodeName: "node-test", Logger: logger.Named("plugins"),
		Ready: func(ctx context.Context, name string, d driver.Driver) { mgr.Recover(ctx, name, d) },
	})
	mgr = vmm.New(vmm.Options{
		Store: st, Drivers: host, DriverOrder: order, AllowedImageDirs: []string{imageDir},
		NodeName: "node-test", Version: "test", Logger: logger.Named("vmm"), Now: clk.Now,
	})
	ctx, cancel := context.WithCancel(context.Background())
	err = host.Start(ctx, plugins)
	if err != nil {
		cancel()
		t.Fatal(err)
	}

	s := newServer(Options{Manager: mgr, Images: images.New(images.Options{Dir: imageDir}), AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken},
		Logger: logger.Named("api"), Version: "test"})
	s.routes()
	if extra != nil {
		extra(s)
	}
	srv := httptest.NewServer(s.handler())

	spec, err := schemas.Load(schemas.Node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		cancel()
		host.Close()
		host.Wait()
		_ = st.Close()
	})
	return &env{t: t, srv: srv, manager: mgr, clock: clk, imageDir: imageDir, image: image, logs: logs, spec: spec,
		stateDir: filepath.Join(dir, "state")}
}

// req is one API call.
type req struct {
	method, path string
	token        string // "" for none
	ctype        string // defaults to application/json when there is a body
	body         []byte
}

// resp is a response, already checked against the spec.
type resp struct {
	status int
	header http.Header
	body   []byte
	// specErr is what the spec says of the request (nil: a valid request).
	specErr error
}

func (r resp) errorBody(t *testing.T) sdk.ErrorBody {
	t.Helper()
	var e sdk.ErrorBody
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return e
}

// call sends a request and validates it and its response against
// schemas/node-openapi.yaml. The response must match the spec (status
// listed, body matching its schema) or the test fails; whether the request
// matched is returned, since tests send invalid requests on purpose.
func (e *env) call(r req) resp {
	e.t.Helper()
	newRequest := func() *http.Request {
		var body io.Reader
		if r.body != nil {
			body = bytes.NewReader(r.body)
		}
		hr, err := http.NewRequest(r.method, e.srv.URL+r.path, body)
		if err != nil {
			e.t.Fatal(err)
		}
		if r.token != "" {
			hr.Header.Set("Authorization", "Bearer "+r.token)
		}
		if r.body != nil {
			ct := r.ctype
			if ct == "" {
				ct = "application/json"
			}
			hr.Header.Set("Content-Type", ct)
		}
		return hr
	}

	hr, err := http.DefaultClient.Do(newRequest())
	if err != nil {
		e.t.Fatalf("%s %s: %v", r.method, r.path, err)
	}
	body, err := io.ReadAll(hr.Body)
	_ = hr.Body.Close()
	if err != nil {
		e.t.Fatal(err)
	}
	specErr, respErr := e.spec.Check(newRequest(), r.body, hr.StatusCode, hr.Header, body)
	if respErr != nil {
		e.t.Fatalf("%s %s -> %d %s\ndoes not match schemas/node-openapi.yaml: %v", r.method, r.path, hr.StatusCode, body, respErr)
	}
	out := resp{status: hr.StatusCode, header: hr.Header, body: body, specErr: specErr}
	return out
}

// must sends a request the spec accepts and expects the status.
func (e *env) must(r req, status int) resp {
	e.t.Helper()
	out := e.call(r)
	if out.specErr != nil {
		e.t.Fatalf("%s %s: the spec refuses this request: %v", r.method, r.path, out.specErr)
	}
	if out.status != status {
		e.t.Fatalf("%s %s -> %d %s, want %d", r.method, r.path, out.status, out.body, status)
	}
	return out
}

func (e *env) vm(r req, status int) *sdk.VM {
	e.t.Helper()
	out := e.must(r, status)
	var vm sdk.VM
	if err := json.Unmarshal(out.body, &vm); err != nil {
		e.t.Fatal(err)
	}
	return &vm
}

func (e *env) list() []sdk.VM {
	e.t.Helper()
	out := e.must(req{method: "GET", path: "/v1/vms", token: readOnlyToken}, 200)
	var l sdk.VMList
	if err := json.Unmarshal(out.body, &l); err != nil {
		e.t.Fatal(err)
	}
	return l.VMs
}

func (e *env) create(name string, extra string) *sdk.VM {
	e.t.Helper()
	body := fmt.Sprintf(`{"name": %q, "image": %q, "vcpus": 2, "memory_mib": 512%s}`, name, e.image, extra)
	return e.vm(req{method: "POST", path: "/v1/vms", token: adminToken, body: []byte(body)}, 201)
}

func jsonBody(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func TestVMLifecycleThroughTheAPI(t *testing.T) {
	e := newEnv(t, nil)

	var h sdk.NodeHealth
	_ = json.Unmarshal(e.must(req{method: "GET", path: "/v1/health", token: readOnlyToken}, 200).body, &h)
	if len(h.Drivers) != 1 || h.Drivers[0].Name != "sim" || h.Drivers[0].Health != "healthy" || !h.Drivers[0].Simulated {
		t.Fatalf("health drivers = %+v", h.Drivers)
	}
	if h.Capacity.Total.VCPUs <= 0 || h.Capacity.Free.VCPUs != h.Capacity.Total.VCPUs {
		t.Fatalf("capacity = %+v", h.Capacity)
	}

	created := e.create("web-1", `, "display": true, "labels": {"app": "web"}`)
	if created.State != sdk.StateRunning || created.Driver != "sim" || created.Labels["app"] != "web" || !strings.HasPrefix(created.ID, "vm-") {
		t.Fatalf("created = %+v", created)
	}
	id := created.ID

	byID := e.vm(req{method: "GET", path: "/v1/vms/" + id, token: readOnlyToken}, 200)
	byName := e.vm(req{method: "GET", path: "/v1/vms/web-1", token: adminToken}, 200)
	if byID.ID != id || byName.ID != id {
		t.Fatalf("get by id = %s, by name = %s, want %s", byID.ID, byName.ID, id)
	}
	if vms := e.list(); len(vms) != 1 || vms[0].ID != id {
		t.Fatalf("list = %+v", vms)
	}

	steps := []struct {
		path  string
		body  []byte
		state string
	}{
		{"pause", nil, sdk.StatePaused},
		{"resume", nil, sdk.StateRunning},
		{"stop", []byte(`{"timeout_seconds": 5}`), sdk.StateStopped},
		{"start", nil, sdk.StateRunning},
		{"restart", nil, sdk.StateRunning},
		{"stop", nil, sdk.StateStopped},
		{"start", []byte(`{}`), sdk.StateRunning},
	}
	for _, s := range steps {
		vm := e.vm(req{method: "POST", path: "/v1/vms/" + id + "/" + s.path, token: adminToken, body: s.body}, 200)
		if vm.State != s.state {
			t.Fatalf("after %s: state %s, want %s", s.path, vm.State, s.state)
		}
	}
	// Starting a running VM is a state conflict.
	conflict := e.call(req{method: "POST", path: "/v1/vms/" + id + "/start", token: adminToken})
	if conflict.status != 409 {
		t.Fatalf("start of a running VM -> %d %s", conflict.status, conflict.body)
	}

	logs := e.must(req{method: "GET", path: "/v1/vms/" + id + "/logs?lines=2", token: readOnlyToken}, 200)
	if ct := logs.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("logs content type %q", ct)
	}
	if n := strings.Count(string(logs.body), "\n"); n != 2 {
		t.Fatalf("lines=2 gave %d lines: %q", n, logs.body)
	}
	all := e.must(req{method: "GET", path: "/v1/vms/" + id + "/logs", token: readOnlyToken}, 200)
	if n := strings.Count(string(all.body), "\n"); n <= 2 || !strings.Contains(string(all.body), "simulated") {
		t.Fatalf("default logs (%d lines): %q", n, all.body)
	}

	shot := e.must(req{method: "GET", path: "/v1/vms/" + id + "/screenshot", token: readOnlyToken}, 200)
	img, err := png.Decode(bytes.NewReader(shot.body))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	w := img.Bounds().Dx()
	small := e.must(req{method: "GET", path: fmt.Sprintf("/v1/vms/%s/screenshot?max_width=%d", id, w/2), token: readOnlyToken}, 200)
	simg, err := png.Decode(bytes.NewReader(small.body))
	if err != nil {
		t.Fatalf("scaled screenshot is not a PNG: %v", err)
	}
	if simg.Bounds().Dx() != w/2 || simg.Bounds().Dy() >= img.Bounds().Dy() {
		t.Fatalf("max_width=%d gave %v from %v", w/2, simg.Bounds(), img.Bounds())
	}

	e.must(req{method: "POST", path: "/v1/vms/" + id + "/input", token: adminToken,
		body: []byte(`{"actions": [{"kind": "text", "text": "hello"}, {"kind": "key", "keys": ["enter"]}]}`)}, 204)

	e.must(req{method: "DELETE", path: "/v1/vms/web-1", token: adminToken}, 204)
	notFound := e.must(req{method: "GET", path: "/v1/vms/" + id, token: adminToken}, 404)
	if eb := notFound.errorBody(t); !strings.Contains(eb.Error, id) || eb.Hint == "" {
		t.Fatalf("404 body = %+v", eb)
	}
	if vms := e.list(); len(vms) != 0 {
		t.Fatalf("list after delete = %+v", vms)
	}
}

// TestListShowsEachVMAsGetDoes: GET /v1/vms asks the driver once for every
// VM (ListVMs) where GET /v1/vms/{id} asks about one (InspectVM); both must
// show the same live state, readiness and attributes, for running, paused
// and stopped VMs.
func TestListShowsEachVMAsGetDoes(t *testing.T) {
	e := newEnv(t, nil)
	for _, name := range []string{"run-1", "paused-1", "stopped-1"} {
		e.create(name, "")
	}
	e.must(req{method: "POST", path: "/v1/vms/paused-1/pause", token: adminToken}, 200)
	e.must(req{method: "POST", path: "/v1/vms/stopped-1/stop", token: adminToken, body: []byte(`{"timeout_seconds": 5}`)}, 200)
	listed := e.list()
	if len(listed) != 3 {
		t.Fatalf("list = %+v, want 3 VMs", listed)
	}
	states := map[string]string{}
	for _, l := range listed {
		got := e.vm(req{method: "GET", path: "/v1/vms/" + l.ID, token: readOnlyToken}, 200)
		if l.State != got.State || l.AgentReady != got.AgentReady || fmt.Sprint(l.Attributes) != fmt.Sprint(got.Attributes) || l.LastError != got.LastError {
			t.Errorf("vm %s: list says state %s ready %v attributes %v error %q; get says %s %v %v %q",
				l.Name, l.State, l.AgentReady, l.Attributes, l.LastError, got.State, got.AgentReady, got.Attributes, got.LastError)
		}
		if len(l.Attributes) == 0 {
			t.Errorf("vm %s: list shows no attributes from the driver", l.Name)
		}
		states[l.Name] = l.State
	}
	if states["run-1"] != sdk.StateRunning || states["paused-1"] != sdk.StatePaused || states["stopped-1"] != sdk.StateStopped {
		t.Fatalf("list states = %v", states)
	}
}

// TestWorkspacesShowWhatIsLeftOnDisk: the node lists its VM folders, owned
// or not; cleaning destroys only those no VM owns (admin only); a node whose
// VMs are all deleted lists none.
func TestWorkspacesShowWhatIsLeftOnDisk(t *testing.T) {
	e := newEnv(t, nil)
	list := func() []sdk.Workspace {
		t.Helper()
		var l sdk.WorkspaceList
		if err := json.Unmarshal(e.must(req{method: "GET", path: "/v1/workspaces", token: readOnlyToken}, 200).body, &l); err != nil {
			t.Fatal(err)
		}
		return l.Workspaces
	}
	if ws := list(); len(ws) != 0 {
		t.Fatalf("a fresh node lists %+v", ws)
	}
	vm := e.create("web-1", "")
	if ws := list(); len(ws) != 1 || ws[0] != (sdk.Workspace{Driver: "sim", ID: vm.ID, Owned: true}) {
		t.Fatalf("workspaces with one VM: %+v", ws)
	}
	// A folder no record owns: a create cut short by a crash.
	orphan := filepath.Join(e.stateDir, "drivers", "sim", "vms", "vm-orphan")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(orphan, "disk"), []byte("left over"), 0o600); err != nil {
		t.Fatal(err)
	}
	ws := list()
	want := []sdk.Workspace{{Driver: "sim", ID: vm.ID, Owned: true}, {Driver: "sim", ID: "vm-orphan"}}
	if want[1].ID < want[0].ID { // listed by driver, then id
		want[0], want[1] = want[1], want[0]
	}
	if !slices.Equal(ws, want) {
		t.Fatalf("workspaces with an orphan: %+v, want %+v", ws, want)
	}
	e.must(req{method: "POST", path: "/v1/workspaces/clean", token: readOnlyToken}, 403)
	var removed sdk.WorkspaceList
	if err := json.Unmarshal(e.must(req{method: "POST", path: "/v1/workspaces/clean", token: adminToken}, 200).body, &removed); err != nil {
		t.Fatal(err)
	}
	if len(removed.Workspaces) != 1 || removed.Workspaces[0].ID != "vm-orphan" {
		t.Fatalf("clean removed %+v", removed.Workspaces)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("the orphan's folder is still there: %v", err)
	}
	if ws = list(); len(ws) != 1 || ws[0].ID != vm.ID {
		t.Fatalf("clean touched a VM's workspace: %+v", ws)
	}
	e.must(req{method: "DELETE", path: "/v1/vms/web-1", token: adminToken}, 204)
	if ws := list(); len(ws) != 0 {
		t.Fatalf("workspaces after the last delete: %+v", ws)
	}
}

func TestBadRequestsAreRefusedWithHintsAndChangeNothing(t *testing.T) {
	e := newEnv(t, nil)
	base := e.create("base", `, "display": false`)
	outside := filepath.Join(t.TempDir(), "elsewhere.img")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	create := func(fields string) []byte {
		return []byte(fmt.Sprintf(`{"name": "new-vm", "image": %q, "vcpus": 1, "memory_mib": 128%s}`, e.image, fields))
	}
	createWith := func(m map[string]any) []byte {
		r := map[string]any{"name": "new-vm", "image": e.image, "vcpus": 1, "memory_mib": 128}
		for k, v := range m {
			r[k] = v
		}
		return jsonBody(r)
	}
	big := []byte(`{"name": "` + strings.Repeat("a", 2<<20) + `"}`)

	cases := []struct {
		name      string
		r         req
		status    int
		errHas    string // in the error message
		hintHas   string // in the hint
		specValid bool   // the spec accepts the request (the server alone refuses it)
	}{
		{"malformed JSON", req{method: "POST", path: "/v1/vms", token: adminToken, body: []byte(`{"name": "x",`)}, 400, "JSON", "", false},
		{"invalid JSON syntax", req{method: "POST", path: "/v1/vms", token: adminToken, body: []byte(`{"name" "x"}`)}, 400, "not valid JSON", "syntax", false},
		{"unknown field", req{method: "POST", path: "/v1/vms", token: adminToken, body: create(`, "colour": "red"`)}, 400, `"colour"`, "memory_mib", false},
		{"wrong type", req{method: "POST", path: "/v1/vms", token: adminToken, body: create(`, "display": "yes"`)}, 400, `"display"`, "", false},
		{"wrong content type", req{method: "POST", path: "/v1/vms", token: adminToken, ctype: "text/plain", body: create("")}, 415, "JSON", "application/json", false},
		{"body too large", req{method: "POST", path: "/v1/vms", token: adminToken, body: big}, 413, "larger", "1 MiB", false},
		{"trailing data", req{method: "POST", path: "/v1/vms", token: adminToken, body: append(create(""), []byte(` {}`)...)}, 400, "more than one", "", true},
		{"empty body", req{method: "POST", path: "/v1/vms", token: adminToken, body: []byte{}}, 400, "required", "application/json", false},
		{"array instead of object", req{method: "POST", path: "/v1/vms", token: adminToken, body: []byte(`[1]`)}, 400, "object", "", false},
		{"negative vcpus", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"vcpus": -1})}, 400, "vcpus", "vCPU", false},
		{"memory bigger than the node", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"memory_mib": 10 << 20})}, 400, "memory_mib", "at most", true},
		{"vcpus more than free", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"vcpus": 64})}, 409, "free vCPUs", "free now", true},
		{"zero memory", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"memory_mib": 0})}, 400, "memory_mib", "64", false},
		{"image outside allowed dirs", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"image": outside})}, 403, "outside", e.imageDir, true},
		{"relative image path", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"image": "images/disk.img"})}, 400, "absolute", "absolute", false},
		{"missing image", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"image": filepath.Join(e.imageDir, "nope.img")})}, 400, "does not exist", e.imageDir, true},
		{"duplicate name", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"name": "base"})}, 409, "already exists", "another name", true},
		{"bad name", req{method: "POST", path: "/v1/vms", token: adminToken, body: createWith(map[string]any{"name": "no spaces"})}, 400, "name", "letters", false},
		{"no token", req{method: "GET", path: "/v1/vms"}, 401, "missing or invalid token", "tokens { admin = [...] }", false},
		{"bad token", req{method: "GET", path: "/v1/vms", token: "not-a-known-token-at-all"}, 401, "missing or invalid token", "Authorization: Bearer", true},
		{"no token on metrics", req{method: "GET", path: "/metrics"}, 401, "missing or invalid token", "Bearer", false},
		{"read-only token on POST", req{method: "POST", path: "/v1/vms", token: readOnlyToken, body: create("")}, 403, "read-only", "admin token", true},
		{"read-only token on DELETE", req{method: "DELETE", path: "/v1/vms/base", token: readOnlyToken}, 403, "read-only", "admin token", true},
		{"read-only token on GET", req{method: "GET", path: "/v1/vms/base", token: readOnlyToken}, 200, "", "", true},
		{"unknown VM", req{method: "GET", path: "/v1/vms/vm-nosuchvm", token: adminToken}, 404, "vm-nosuchvm", "GET /v1/vms", true},
		{"wait_ready too long", req{method: "GET", path: "/v1/vms/base?wait_ready=61", token: adminToken}, 400, "wait_ready", "wait_ready=", false},
		{"wait_ready negative", req{method: "GET", path: "/v1/vms/base?wait_ready=-1", token: adminToken}, 400, "wait_ready", "", false},
		{"wait_ready not a number", req{method: "GET", path: "/v1/vms/base?wait_ready=soon", token: adminToken}, 400, "from 0 to 60", "", false},
		{"stop unknown VM", req{method: "POST", path: "/v1/vms/nosuch/stop", token: adminToken}, 404, "nosuch", "", true},
		{"overlay on a node without a network plugin", req{method: "PUT", path: "/v1/overlays/ov-0123456789ab", token: adminToken,
			body: []byte(`{"subnet": "10.231.0.0/24", "local_subnet": "10.231.0.0/28", "listen_port": 51820, "peers": []}`)}, 400, "no network plugin", "", true},
		{"overlay port out of range", req{method: "PUT", path: "/v1/overlays/ov-0123456789ab", token: adminToken,
			body: []byte(`{"subnet": "10.231.0.0/24", "local_subnet": "10.231.0.0/28", "listen_port": 80}`)}, 400, "listen port", "1024", false},
		{"overlay bad network id", req{method: "PUT", path: "/v1/overlays/a.b", token: adminToken,
			body: []byte(`{"subnet": "10.231.0.0/24", "local_subnet": "10.231.0.0/28", "listen_port": 51820}`)}, 400, "not a network id", "[A-Za-z0-9_-]", true},
		{"overlay unknown field", req{method: "PUT", path: "/v1/overlays/ov-0123456789ab", token: adminToken, body: []byte(`{"private_key": "x"}`)}, 400, `"private_key"`, "", false},
		{"overlay key on read-only token", req{method: "POST", path: "/v1/overlays/ov-0123456789ab/key", token: readOnlyToken, body: []byte(`{}`)}, 403, "read-only", "admin token", true},
		{"overlays on a node without a network plugin", req{method: "GET", path: "/v1/overlays", token: adminToken}, 400, "no network plugin", "", true},
		{"bad lines", req{method: "GET", path: "/v1/vms/base/logs?lines=abc", token: adminToken}, 400, "lines", "?lines=", false},
		{"zero lines", req{method: "GET", path: "/v1/vms/base/logs?lines=0", token: adminToken}, 400, "lines", "", false},
		{"bad max_width", req{method: "GET", path: "/v1/vms/base/screenshot?max_width=-1", token: adminToken}, 400, "max_width", "", false},
		{"exec on sim", req{method: "POST", path: "/v1/vms/base/exec", token: adminToken, body: []byte(`{"command": ["uname", "-a"], "timeout_seconds": 5}`)}, 501, "cannot run commands", "capability", true},
		{"exec with a shell string on sim", req{method: "POST", path: "/v1/vms/base/exec", token: adminToken, body: []byte(`{"command": "uname -a"}`)}, 501, "exec", "capabilities", true},
		{"exec command of the wrong type", req{method: "POST", path: "/v1/vms/base/exec", token: adminToken, body: []byte(`{"command": {"secret": "s3cr3t-cmd"}}`)}, 400, `"command"`, "", false},
		{"exec without command", req{method: "POST", path: "/v1/vms/base/exec", token: adminToken, body: []byte(`{}`)}, 400, "command", "uname", false},
		{"screenshot without display", req{method: "GET", path: "/v1/vms/base/screenshot", token: adminToken}, 409, "display", "", true},
		{"input without display", req{method: "POST", path: "/v1/vms/base/input", token: adminToken, body: []byte(`{"actions": [{"kind": "text", "text": "hi"}]}`)}, 409, "display", "", true},
		{"input without actions", req{method: "POST", path: "/v1/vms/base/input", token: adminToken, body: []byte(`{"actions": []}`)}, 400, "actions", "kind", false},
		{"stop with negative timeout", req{method: "POST", path: "/v1/vms/base/stop", token: adminToken, body: []byte(`{"timeout_seconds": -1}`)}, 400, "timeout_seconds", "", false},
		{"stop with unknown field", req{method: "POST", path: "/v1/vms/base/stop", token: adminToken, body: []byte(`{"force": true}`)}, 400, `"force"`, "timeout_seconds", false},
		{"pause with a body", req{method: "POST", path: "/v1/vms/base/pause", token: adminToken, body: []byte(`{"x": 1}`)}, 400, `"x"`, "no fields", true},
		{"unknown route", req{method: "GET", path: "/v1/nothing", token: adminToken}, 404, "no such endpoint", "/v1", false},
		{"wrong method", req{method: "PUT", path: "/v1/vms", token: adminToken, body: []byte(`{}`)}, 405, "PUT", "GET, POST", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			out := e.call(c.r)
			if out.status != c.status {
				t.Fatalf("status %d, want %d; body %s", out.status, c.status, out.body)
			}
			if (out.specErr == nil) != c.specValid {
				t.Fatalf("the spec says of this request: %v; want valid=%v", out.specErr, c.specValid)
			}
			if c.status >= 400 {
				eb := out.errorBody(t)
				if !strings.Contains(eb.Error, c.errHas) || !strings.Contains(eb.Hint, c.hintHas) {
					t.Fatalf("error body %+v, want error with %q and hint with %q", eb, c.errHas, c.hintHas)
				}
				if c.status != 500 && eb.Hint == "" {
					t.Fatalf("error without a hint: %+v", eb)
				}
				if strings.Contains(string(out.body), "s3cr3t-cmd") {
					t.Fatalf("error body quotes the request's command: %s", out.body)
				}
			}
			if c.status == 405 {
				if allow := out.header.Get("Allow"); allow != "GET, POST" {
					t.Fatalf("Allow = %q", allow)
				}
			}
			// The server still serves, and nothing was created.
			e.must(req{method: "GET", path: "/v1/health", token: readOnlyToken}, 200)
			if vms := e.list(); len(vms) != 1 || vms[0].ID != base.ID {
				t.Fatalf("VMs after the bad request: %+v", vms)
			}
		})
	}
	e.t = t

	// Tokens and bodies never reach the log.
	logs := e.logs.String()
	for _, secret := range []string{adminToken, readOnlyToken, "not-a-known-token-at-all", "s3cr3t-cmd", "colour"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, logs)
		}
	}
	if !strings.Contains(logs, "route=/v1/vms/{id}/exec") || !strings.Contains(logs, "status=501") {
		t.Fatalf("request log lines missing:\n%s", logs)
	}
}

func TestTTLDeletesVMWhenTheClockPassesIt(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.create("short-lived", `, "ttl_seconds": 1`)
	if vm.ExpiresAt == nil || !vm.ExpiresAt.Equal(e.clock.Now().Add(time.Second)) {
		t.Fatalf("expires_at = %v, want clock + 1s", vm.ExpiresAt)
	}
	keeper := e.create("keeper", "")
	if n := e.manager.ExpireOnce(context.Background()); n != 0 {
		t.Fatalf("ExpireOnce before the TTL deleted %d", n)
	}
	e.must(req{method: "GET", path: "/v1/vms/short-lived", token: adminToken}, 200)
	e.clock.Add(2 * time.Second)
	if n := e.manager.ExpireOnce(context.Background()); n != 1 {
		t.Fatalf("ExpireOnce after the TTL deleted %d, want 1", n)
	}
	e.must(req{method: "GET", path: "/v1/vms/" + vm.ID, token: adminToken}, 404)
	if vms := e.list(); len(vms) != 1 || vms[0].ID != keeper.ID {
		t.Fatalf("left after expiry: %+v", vms)
	}
}

func TestMetricsNeedATokenAndNameTheNode(t *testing.T) {
	e := newEnv(t, nil)
	e.create("m-1", "")
	e.create("m-2", "")
	e.must(req{method: "POST", path: "/v1/vms/m-2/stop", token: adminToken}, 200)
	e.call(req{method: "GET", path: "/v1/vms/nope", token: adminToken})

	out := e.must(req{method: "GET", path: "/metrics", token: readOnlyToken}, 200)
	text := string(out.body)
	for _, want := range []string{
		`fluxvm_node_vms{state="running"} 1`,
		`fluxvm_node_vms{state="stopped"} 1`,
		`fluxvm_node_capacity_vcpus{kind="total"}`,
		`fluxvm_node_capacity_vcpus{kind="free"}`,
		`fluxvm_node_capacity_vcpus{kind="reserved"} 0`,
		`fluxvm_node_capacity_memory_mib{kind="total"}`,
		`fluxvm_driver_up{driver="sim"} 1`,
		`fluxvm_driver_restarts_total{driver="sim"} 0`,
		`fluxvm_api_requests_total{code="201",route="POST /v1/vms"} 2`,
		`fluxvm_api_requests_total{code="404",route="GET /v1/vms/{id}"} 1`,
		`fluxvm_api_request_duration_seconds_bucket{route="POST /v1/vms/{id}/stop",le=`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", text)
	}
}

func TestPanicInHandlerIsA500AndTheServerKeepsServing(t *testing.T) {
	e := newEnv(t, func(s *server) {
		s.router.HandleFunc("/v1/vms/{id}/boom", func(http.ResponseWriter, *http.Request) {
			panic("boom: internal detail")
		}).Methods(http.MethodGet)
	})
	hr, err := http.NewRequest("GET", e.srv.URL+"/v1/vms/x/boom", nil)
	if err != nil {
		t.Fatal(err)
	}
	hr.Header.Set("Authorization", "Bearer "+adminToken)
	res, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	var eb sdk.ErrorBody
	if res.StatusCode != 500 || json.Unmarshal(body, &eb) != nil || eb.Error != "internal error" || strings.Contains(string(body), "boom") {
		t.Fatalf("panic -> %d %s", res.StatusCode, body)
	}
	if !strings.Contains(e.logs.String(), "boom: internal detail") {
		t.Fatal("the panic was not logged")
	}
	e.must(req{method: "GET", path: "/v1/health", token: adminToken}, 200)
}

func TestTokensAreKeptOnlyAsDigests(t *testing.T) {
	s := newServer(Options{AdminTokens: []string{adminToken}, ReadOnlyTokens: []string{readOnlyToken}})
	if fmt.Sprintf("%+v", s.opts) != fmt.Sprintf("%+v", Options{Logger: s.opts.Logger}) {
		t.Fatalf("options keep tokens: %+v", s.opts)
	}
	for _, c := range []struct {
		header string
		want   role
	}{
		{"Bearer " + adminToken, roleAdmin},
		{"bearer " + readOnlyToken, roleReadOnly},
		{"Bearer " + adminToken + "x", roleNone},
		{"Basic " + adminToken, roleNone},
		{adminToken, roleNone},
		{"Bearer ", roleNone},
		{"", roleNone},
	} {
		if got := s.roleOf(c.header); got != c.want {
			t.Errorf("roleOf(%q) = %v, want %v", c.header, got, c.want)
		}
	}
}

// FuzzDecodeCreateRequest feeds arbitrary bodies to the create request's
// decoder: it must never panic, and every refusal is a 400 (or 413 for a
// body over the limit).
func FuzzDecodeCreateRequest(f *testing.F) {
	for _, seed := range []string{
		`{"name": "a", "image": "/i", "vcpus": 1, "memory_mib": 64}`,
		`{"name": "a", "labels": {"k": "v"}, "driver_config": {"x": [1, 2]}}`,
		`{"name": 1}`, `{"vcpus": 1e99}`, `{"unknown": 1}`, `[]`, `null`, `{} {}`, `{"name": "\u0000"}`,
		`{"driver_config": }`, `{"labels": {"a": 1}}`, `"str"`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var req sdk.CreateVMRequest
		if err := jsonapi.Decode(body, &req, specHint); err != nil {
			if err.Status != http.StatusBadRequest || err.Msg == "" || err.Hint == "" {
				t.Fatalf("Decode(%q) = %+v", body, err)
			}
		}
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/v1/vms", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var again sdk.CreateVMRequest
		if err := jsonapi.ReadBody(w, r, &again, true, specHint); err != nil && err.Status != http.StatusBadRequest && err.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("ReadBody(%q) = %+v", body, err)
		}
		var exec sdk.ExecRequest
		if err := jsonapi.Decode(body, &exec, specHint); err != nil && err.Status != http.StatusBadRequest {
			t.Fatalf("Decode(%q) into an exec request = %+v", body, err)
		}
	})
}

// TestGetWaitReadyHoldsTheAnswerUntilTheGuestAnswers: ?wait_ready=N answers
// as soon as the guest agent is ready (no polling needed), answers a VM that
// is still coming up when N seconds pass, and without it the answer comes at
// once.
func TestGetWaitReadyHoldsTheAnswerUntilTheGuestAnswers(t *testing.T) {
	e := newEnv(t, nil)
	slow := e.create("slow", `, "driver_config": {"boot_delay_ms": 1500}`)
	if now := e.vm(req{method: "GET", path: "/v1/vms/" + slow.ID, token: readOnlyToken}, 200); now.AgentReady {
		t.Fatal("ready at once despite a 1.5 s boot")
	}
	start := time.Now()
	got := e.vm(req{method: "GET", path: "/v1/vms/" + slow.ID + "?wait_ready=30", token: readOnlyToken}, 200)
	took := time.Since(start)
	if !got.AgentReady || got.State != sdk.StateRunning {
		t.Fatalf("after wait_ready: %+v, want running and ready", got)
	}
	if took < 700*time.Millisecond || took > 10*time.Second {
		t.Fatalf("wait_ready answered after %v: want about the 1.5 s boot", took)
	}
	// Ready already: at once.
	start = time.Now()
	if again := e.vm(req{method: "GET", path: "/v1/vms/slow?wait_ready=30", token: readOnlyToken}, 200); !again.AgentReady || time.Since(start) > 2*time.Second {
		t.Fatalf("a ready VM: %+v after %v", again, time.Since(start))
	}
	// Not ready within N: the VM as it is, after N.
	never := e.create("never", `, "driver_config": {"boot_delay_ms": 60000}`)
	start = time.Now()
	got = e.vm(req{method: "GET", path: "/v1/vms/" + never.ID + "?wait_ready=1", token: readOnlyToken}, 200)
	if got.AgentReady || time.Since(start) < 900*time.Millisecond {
		t.Fatalf("wait_ready=1 on a guest that needs a minute: %+v after %v", got, time.Since(start))
	}
	// A VM that stops while one waits: the answer comes as the stop begins
	// (the VM reads running or stopped then), not after the 30 s.
	go func() {
		time.Sleep(300 * time.Millisecond)
		e.call(req{method: "POST", path: "/v1/vms/never/stop", token: adminToken, body: []byte(`{"timeout_seconds": 1}`)})
	}()
	start = time.Now()
	got = e.vm(req{method: "GET", path: "/v1/vms/" + never.ID + "?wait_ready=30", token: readOnlyToken}, 200)
	if got.AgentReady || time.Since(start) > 10*time.Second {
		t.Fatalf("a VM stopped while waited for: %+v after %v", got, time.Since(start))
	}
}
