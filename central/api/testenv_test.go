package api

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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/webhooks/netguard"
	"github.com/fluxvm/fluxvm/schemas"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// testFleetToken is the operator's token in tests.
const testFleetToken = "fleet-token-0123456789abcdef"

// etcdHost is the one embedded etcd of this test binary (starting one costs
// a few hundred milliseconds); every env gets its own key prefix on it.
var (
	etcdHost   *store.Store
	envCounter atomic.Int64
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "central-api-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	etcdHost, err = store.Open(context.Background(), store.Options{DataDir: dir, UnsafeNoFsync: true,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "etcd", Level: hclog.Error, Output: os.Stderr})})
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the embedded etcd:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	etcdHost.Close()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is a fleet API on a real etcd (its own prefix), with a real activity
// log, and the spec to check every answer against.
type env struct {
	t     *testing.T
	srv   *httptest.Server
	api   *Server
	store *store.Store
	audit *audit.Log
	dir   string // the state directory (the activity log's)
	logs  *syncBuffer
	spec  *schemas.Spec
}

// newEnv starts a fleet API. configure may change the options (FleetToken
// is testFleetToken unless it says otherwise).
func newEnv(t *testing.T, configure func(*Options)) *env {
	t.Helper()
	prefix := fmt.Sprintf("/test-%d-%d/", os.Getpid(), envCounter.Add(1))
	st, err := store.Open(context.Background(), store.Options{Endpoints: etcdHost.Endpoints(), Prefix: prefix,
		ID: "central-" + prefix[1:len(prefix)-1], SessionTTL: 5})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	dir := t.TempDir()
	al, err := audit.Open(audit.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	opts := Options{Store: st, FleetToken: testFleetToken, Version: "test", Activity: al,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "api", Level: hclog.Info, Output: logs})}
	// No test resolves a name through the system's DNS: a tenant's webhook
	// here is refused at delivery unless the test gives its own guard.
	opts.WebhookGuard = &netguard.Guard{Resolver: noDNS{}}
	if configure != nil {
		configure(&opts)
	}
	s := New(opts)
	srv := httptest.NewServer(s)

	spec, err := schemas.Load(schemas.Fleet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Close()
		al.Close()
		st.Close()
	})
	return &env{t: t, srv: srv, api: s, store: st, audit: al, dir: dir, logs: logs, spec: spec}
}

// syncBuffer collects the server's log lines.
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

// req is one API call.
type req struct {
	method, path string
	token        string // "" for none
	body         string // "" for none
	ctype        string // application/json when there is a body, unless set
	header       http.Header
}

// resp is an answer, already checked against the spec.
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

func (r resp) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("body %q: %v", r.body, err)
	}
}

// call sends a request and holds the answer to schemas/fleet-openapi.yaml:
// its status must be listed for the route and its body must match. Whether
// the request itself matched the spec is returned (tests send bad ones on
// purpose).
func (e *env) call(r req) resp {
	e.t.Helper()
	newRequest := func() *http.Request {
		var body io.Reader
		if r.body != "" {
			body = strings.NewReader(r.body)
		}
		hr, err := http.NewRequest(r.method, e.srv.URL+r.path, body)
		if err != nil {
			e.t.Fatal(err)
		}
		if r.token != "" {
			hr.Header.Set("Authorization", "Bearer "+r.token)
		}
		for k, vs := range r.header {
			hr.Header[k] = vs
		}
		if r.body != "" {
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
	specErr, respErr := e.spec.Check(newRequest(), []byte(r.body), hr.StatusCode, hr.Header, body)
	if respErr != nil {
		e.t.Fatalf("%s %s -> %d %s\ndoes not match schemas/fleet-openapi.yaml: %v", r.method, r.path, hr.StatusCode, body, respErr)
	}
	out := resp{status: hr.StatusCode, header: hr.Header, body: body, specErr: specErr}
	if hr.StatusCode >= 400 && r.path != "/healthz" { // a sick healthz answers its own body
		if eb := out.errorBody(e.t); eb.Error == "" {
			e.t.Fatalf("%s %s -> %d with an empty error", r.method, r.path, hr.StatusCode)
		}
	}
	return out
}

// must sends a request the spec accepts and expects the status. A request
// without a token is outside the spec (which requires one everywhere but
// /healthz) and is sent anyway: lab mode and 401s are tested with them.
func (e *env) must(r req, status int) resp {
	e.t.Helper()
	out := e.call(r)
	if out.specErr != nil && r.token != "" {
		e.t.Fatalf("%s %s: the spec refuses this request: %v", r.method, r.path, out.specErr)
	}
	if out.status != status {
		e.t.Fatalf("%s %s -> %d %s, want %d", r.method, r.path, out.status, out.body, status)
	}
	return out
}

// createTenant makes a tenant through the API and returns it with its token.
func (e *env) createTenant(name, quota string) (sdk.Tenant, string) {
	e.t.Helper()
	body := fmt.Sprintf(`{"name": %q}`, name)
	if quota != "" {
		body = fmt.Sprintf(`{"name": %q, "quota": %s}`, name, quota)
	}
	var out sdk.TenantWithToken
	e.must(req{method: "POST", path: "/fleet/tenants", token: testFleetToken, body: body}, 201).decode(e.t, &out)
	return out.Tenant, out.Token
}

// createKey makes an API key with a tenant's primary token and returns the
// key itself.
func (e *env) createKey(tenantToken, name string, readOnly bool) string {
	e.t.Helper()
	var out sdk.APIKeyWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/me/keys", token: tenantToken,
		body: fmt.Sprintf(`{"name": %q, "read_only": %v}`, name, readOnly)}, 201).decode(e.t, &out)
	return out.Token
}

// dump is every key and value under the env's prefix: what "nothing was
// written" is checked against.
func (e *env) dump() map[string]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.store.Client().Get(ctx, e.store.Prefix(), clientv3.WithPrefix())
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		// The marker of the ledger index's migration is the store's own,
		// written when it opens on an empty ledger.
		if strings.HasPrefix(string(kv.Key), e.store.Prefix()+"migrations/") {
			continue
		}
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// auditFile is the content of the activity log's files: the changes, then
// the refusals (which the log keeps apart).
func (e *env) auditFile() string {
	e.t.Helper()
	var out []byte
	for _, p := range []string{e.audit.Path(), e.audit.RefusedPath()} {
		b, err := os.ReadFile(p)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, b...)
	}
	return string(out)
}

// noDNS answers every lookup "no such host", without asking anyone.
type noDNS struct{}

func (noDNS) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	return nil, &net.DNSError{Err: "no such host (tests resolve nothing)", Name: host, IsNotFound: true}
}
