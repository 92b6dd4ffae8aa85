package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/internal/benchstat"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/schemas"
	"github.com/hashicorp/go-hclog"
)

// Helpers of the fleet tests: real etcd (embedded), real centrals (api.New
// behind an httptest server, or central.Run), real node agents with the sim
// driver heartbeating to them. Names start with fx so they stay apart from
// the other tests of this package.

// fxToken is the fleet token of the test centrals; the nodes list it among
// their admin tokens so central can call them.
const fxToken = "fleet-token-0123456789abcdef"

// fxTempDir is a short temporary directory: VM workspaces hold unix sockets,
// whose paths must fit in 107 bytes, which t.TempDir's long names break.
func fxTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func fxLogger(name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: os.Stderr})
}

// fxStore opens a store: with no endpoints an embedded etcd, else a peer
// on those endpoints (another central on the same etcd). A test's etcd
// skips fsync (its data is thrown away, and the tests run faster); a
// benchmark's fsyncs, as central runs it, since fsync decides its figures.
func fxStore(t testing.TB, endpoints []string) *store.Store {
	t.Helper()
	_, bench := t.(*testing.B)
	opts := store.Options{Endpoints: endpoints, Logger: fxLogger("store"), UnsafeNoFsync: !bench}
	if len(endpoints) == 0 {
		opts.DataDir = filepath.Join(fxTempDir(t), "etcd")
	}
	st, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// fxCentral is one central: the fleet API on a store, served over HTTP.
type fxCentral struct {
	st  *store.Store
	srv *api.Server
	url string
}

func newFxCentral(t testing.TB, st *store.Store) *fxCentral {
	t.Helper()
	srv := api.New(api.Options{Store: st, FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &fxCentral{st: st, srv: srv, url: hs.URL}
}

// fxCall sends a JSON request and returns the status and body. A string
// body is sent as is (for malformed JSON); anything else is marshalled.
func fxCall(t testing.TB, method, url, token string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	fxCheckSpec(t, req, resp, data)
	return resp.StatusCode, data
}

var fxSpec = sync.OnceValues(func() (*schemas.Spec, error) { return schemas.Load(schemas.Fleet) })

// fxCheckSpec holds every answer of a central to schemas/fleet-openapi.yaml,
// as the package's own tests do (env.call): the status must be listed for
// the route and the body must match its schema; a path outside the spec must
// answer the spec's error body. Answers of nodes (/v1/...) are the node
// spec's business. It reports with Errorf, so it may run in goroutines.
func fxCheckSpec(t testing.TB, req *http.Request, resp *http.Response, body []byte) {
	t.Helper()
	p := req.URL.Path
	if p != "/healthz" && p != "/metrics" && !strings.HasPrefix(p, "/fleet/") {
		return
	}
	spec, err := fxSpec()
	if err != nil {
		t.Errorf("schemas/fleet-openapi.yaml: %v", err)
		return
	}
	if _, err := spec.Check(req, nil, resp.StatusCode, resp.Header, body); err != nil {
		t.Errorf("%s %s -> %d %s\ndoes not match schemas/fleet-openapi.yaml: %v", req.Method, p, resp.StatusCode, body, err)
	}
}

// fxMust calls and decodes, failing on another status.
func fxMust(t testing.TB, method, url, token string, body any, want int, out any) {
	t.Helper()
	code, data := fxCall(t, method, url, token, body)
	if code != want {
		t.Fatalf("%s %s = %d %s, want %d", method, url, code, data, want)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, data)
		}
	}
}

// fxTenant creates a tenant through the API and returns its id and token.
func fxTenant(t testing.TB, centralURL, name string, quota map[string]int64) (id, token string) {
	t.Helper()
	var out struct {
		Tenant struct {
			ID string `json:"id"`
		} `json:"tenant"`
		Token string `json:"token"`
	}
	fxMust(t, "POST", centralURL+"/fleet/tenants", fxToken, map[string]any{"name": name, "quota": quota}, http.StatusCreated, &out)
	return out.Tenant.ID, out.Token
}

// fxImages makes a directory with a sim image in it, which every node allows.
func fxImages(t testing.TB) (dir, image string) {
	dir = filepath.Join(fxTempDir(t), "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	image = filepath.Join(dir, "sim.img")
	if err := os.WriteFile(image, []byte("sim image"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, image
}

// fxNode is a real `fluxvm-agent node` process with the sim driver that
// heartbeats to a central.
type fxNode struct {
	t      testing.TB
	name   string
	url    string
	admin  string
	bin    string
	config string
	log    string
	cmd    *exec.Cmd
}

// startFxNode runs a node agent with the sim driver; simExtra lines go
// into the sim's config block (port_forwards, say).
func startFxNode(t testing.TB, name, centralURL, imagesDir string, vcpus, memoryMiB int64, simExtra ...string) *fxNode {
	t.Helper()
	dir := fxTempDir(t)
	n := &fxNode{t: t, name: name, admin: "node-admin-" + strconv.FormatInt(time.Now().UnixNano(), 16),
		bin: drivertest.Build(t, "../..", "./cmd/fluxvm-agent"), config: filepath.Join(dir, "node.hcl"), log: filepath.Join(dir, "node.log")}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n.url = "http://" + addr
	hcl := fmt.Sprintf(`name = %q
state_dir = %q
listen = %q
tokens {
  # central calls the node with its fleet token
  admin = [%q, %q]
}
policy { allowed_image_dirs = [%q] }
plugin "sim" {
  config {
    boot_delay_ms = 100
    vcpus         = %d
    memory_mib    = %d
%s
  }
}
central {
  url   = %q
  token = %q
}
`, name, filepath.Join(dir, "state"), addr, n.admin, fxToken, imagesDir, vcpus, memoryMiB, strings.Join(simExtra, "\n"), centralURL, fxToken)
	if err := os.WriteFile(n.config, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			b, _ := os.ReadFile(n.log)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("node %s log:\n%s", name, b)
		}
	})
	n.start()
	return n
}

// start runs the agent and waits for its API.
func (n *fxNode) start() {
	n.t.Helper()
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	n.cmd = exec.Command(n.bin, "node", "-config", n.config, "-log-level", "debug")
	n.cmd.Stdout, n.cmd.Stderr = f, f
	if err := n.cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	fxWait(n.t, "node "+n.name+" api", 60*time.Second, func() bool {
		code, _ := fxCall(n.t, "GET", n.url+"/v1/health", n.admin, nil)
		return code == http.StatusOK
	})
}

// stop ends the agent with SIGTERM, which stops its plugins too. A test
// may have left it SIGSTOPped (a node that does not answer), so it is
// continued first; one that has not ended 30 s after SIGTERM is killed, so
// a failed test ends instead of waiting for ever.
func (n *fxNode) stop() {
	if n.cmd == nil || n.cmd.ProcessState != nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT)
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = n.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		n.t.Errorf("node %s did not stop within 30 s of SIGTERM; killing it", n.name)
		_ = n.cmd.Process.Kill()
		<-done
	}
}

// kill SIGKILLs the agent and its plugin process, as a host losing power
// would; the sim driver's VMs come back from their handles on restart.
func (n *fxNode) kill() {
	n.t.Helper()
	plugins := childrenOf(n.cmd.Process.Pid)
	if err := n.cmd.Process.Kill(); err != nil {
		n.t.Fatal(err)
	}
	_ = n.cmd.Wait()
	for _, pid := range plugins {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) []int {
	out, _ := benchstat.Children(pid)
	return out
}

func fxWait(t testing.TB, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fxNodeState reads a node's record through the API.
func fxNodeState(t testing.TB, centralURL, name string) store.Node {
	t.Helper()
	var n store.Node
	code, data := fxCall(t, "GET", centralURL+"/fleet/nodes/"+name, fxToken, nil)
	if code == http.StatusOK {
		_ = json.Unmarshal(data, &n)
	}
	return n
}

// fxWaitUp waits until central sees each node up with a healthy driver.
func fxWaitUp(t testing.TB, centralURL string, names ...string) {
	t.Helper()
	for _, name := range names {
		fxWait(t, "node "+name+" up in central", 30*time.Second, func() bool {
			n := fxNodeState(t, centralURL, name)
			return n.State == store.NodeUp && len(n.GuestOS) > 0 && n.Capacity.Total.VCPUs > 0
		})
	}
}

// fxMetrics scrapes a central's /metrics into "name{labels}" -> value, as
// the text format writes them.
func fxMetrics(t testing.TB, centralURL string) map[string]float64 {
	t.Helper()
	code, body := fxCall(t, "GET", centralURL+"/metrics", fxToken, nil)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", code, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// startFxCentral runs a whole central (central.Run on an embedded etcd) on
// a free loopback port until the test ends, with opts' listen address,
// state dir, token and logger filled, and returns its URL.
func startFxCentral(t testing.TB, opts central.Options) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	opts.Listen, opts.StateDir, opts.FleetToken = "127.0.0.1:0", fxTempDir(t), fxToken
	opts.Logger = fxLogger("central")
	opts.Listening = func(a string) { addr <- a }
	go func() { done <- central.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("central.Run: %v", err)
		}
	})
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		t.Fatalf("central.Run: %v", err)
	}
	return ""
}
