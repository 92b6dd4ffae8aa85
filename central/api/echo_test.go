package api

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/jsonapi"
)

// TestNoAnswerRepeatsLongInput walks the access table with long values in
// every place a caller can put one (path variables, query parameters, body
// fields, label keys, unknown field names), as the operator and as a tenant,
// and holds every refusal, and central's log, to repeating at most
// jsonapi.MaxEcho bytes of it.
func TestNoAnswerRepeatsLongInput(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("alpha", "")
	e.must(req{method: "PUT", path: "/fleet/images/deb", token: testFleetToken, body: `{"guest_os": "linux", "image": "/d.raw"}`}, 201)
	long := strings.Repeat("x", 10_000)
	echo := long[:jsonapi.MaxEcho+1]
	q := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	var policy map[string]any
	e.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &policy)
	withPolicy := func(k string, v any) string {
		p := map[string]any{}
		for k, v := range policy {
			p[k] = v
		}
		p[k] = v
		return q(p)
	}
	bodies := []string{
		q(map[string]any{long: 1}),
		q(map[string]any{"labels": map[string]any{long: 1}}),
		withPolicy("operator_emails", []string{long}),
		withPolicy("tenant_subnet_prefix", long),
		withPolicy("tunnels", map[string]any{"enabled": true, "ports": []string{long}, "idle_timeout_minutes": 60,
			"max_lifetime_minutes": 480, "max_per_tenant": 20}),
	}
	for _, f := range []string{"name", "id", "image", "image_path", "node", "tenant", "pool", "guest_os", "network", "url", "display_name"} {
		bodies = append(bodies, q(map[string]any{f: long}), q(map[string]any{"name": "ok-1", "image": "deb", f: long}),
			q(map[string]any{"name": "ok-1", "image": "deb", "size": 1, f: long}))
	}
	for _, m := range []string{"labels", "node_selector"} {
		bodies = append(bodies, q(map[string]any{"name": "ok-1", "image": "deb", m: map[string]string{long: "v"}}),
			q(map[string]any{"name": "ok-1", "image": "deb", "size": 1, m: map[string]string{"k": long}}))
	}
	params := []string{"tenant", "limit", "dry_run", "force", "mode", "format", "from", "to", "month", "active", "history"}

	check := func(method, path, token, body string) {
		t.Helper()
		r, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		r.Header.Set("Authorization", "Bearer "+token)
		if body != "" {
			r.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatalf("%s %.100s: %v", method, path, err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		// Only refusals: a change that is accepted answers with what was
		// stored (bounding what may be stored is the request validator's).
		if res.StatusCode >= 400 && strings.Contains(string(got), echo) {
			t.Fatalf("%s %.100s %.100s -> %d repeats the long input: %.400s", method, path, body, res.StatusCode, got)
		}
	}
	sent := 0
	for _, rt := range Routes() {
		if rt.Path == "/fleet/vms/{node}/{id}/screen" {
			continue // a WebSocket upgrade
		}
		vars := []string{}
		for _, v := range []string{"{name}", "{id}", "{node}", "{key}"} {
			if strings.Contains(rt.Path, v) {
				vars = append(vars, v)
			}
		}
		paths := []string{}
		for _, v := range vars {
			p := strings.ReplaceAll(rt.Path, v, url.PathEscape(long))
			for _, other := range vars {
				p = strings.ReplaceAll(p, other, "x1")
			}
			paths = append(paths, p)
		}
		plain := strings.NewReplacer("{name}", "x1", "{id}", "x1", "{node}", "x1", "{key}", "x1").Replace(rt.Path)
		for _, p := range params {
			paths = append(paths, plain+"?"+p+"="+long)
		}
		for _, tok := range []string{testFleetToken, token} {
			for _, p := range paths {
				check(rt.Method, p, tok, "")
				sent++
			}
			if rt.Method == "POST" || rt.Method == "PUT" || rt.Method == "PATCH" {
				for _, body := range bodies {
					check(rt.Method, plain, tok, body)
					sent++
				}
			}
		}
	}
	check("GET", "/fleet/"+long, token, "")
	check(long[:100], "/fleet/vms", token, "")
	if strings.Contains(e.logs.String(), echo) {
		t.Fatalf("central's log repeats the long input")
	}
	t.Logf("%d requests", sent+2)
}
