package api

import (
	"net/http"
	"strings"
	"testing"
)

// TestAStaleIfMatchIsRefused: two operators GET the policy (and the price
// list) with one ETag and both PUT back their edit with it in If-Match: the
// first lands, the second is 412 and changes nothing; a PUT with the new
// ETag, or without If-Match, lands; a malformed If-Match is 400.
func TestAStaleIfMatchIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	for _, doc := range []struct{ path, first, second string }{
		{"/fleet/policy", `{"ledger_retention_days": 30}`, `{"ledger_retention_days": 90}`},
		{"/fleet/prices", `{"currency": "EUR", "vm_per_hour": 0.01}`, `{"currency": "EUR", "vm_per_hour": 0.02}`},
	} {
		t.Run(doc.path, func(t *testing.T) {
			got := e.must(req{method: "GET", path: doc.path, token: testFleetToken}, 200)
			etag := got.header.Get("ETag")
			if etag == "" {
				t.Fatalf("GET %s answered no ETag", doc.path)
			}
			put := func(body, ifMatch string) resp {
				r := req{method: "PUT", path: doc.path, token: testFleetToken, body: body}
				if ifMatch != "" {
					r.header = http.Header{"If-Match": {ifMatch}}
				}
				return e.call(r)
			}
			first := put(doc.first, etag)
			if first.status != 200 || first.header.Get("ETag") == "" || first.header.Get("ETag") == etag {
				t.Fatalf("first PUT = %d %s (ETag %q), want 200 with a new ETag", first.status, first.body, first.header.Get("ETag"))
			}
			before := e.dump()
			second := put(doc.second, etag)
			if second.status != http.StatusPreconditionFailed || !strings.Contains(second.errorBody(t).Hint, "If-Match") {
				t.Fatalf("second PUT with the stale ETag = %d %s, want 412 saying what to do", second.status, second.body)
			}
			if after := e.dump(); len(after) != len(before) {
				t.Fatalf("the refused PUT changed the store")
			} else {
				for k, v := range before {
					if after[k] != v {
						t.Fatalf("the refused PUT changed %s", k)
					}
				}
			}
			if r := put(doc.second, first.header.Get("ETag")); r.status != 200 {
				t.Fatalf("PUT with the new ETag = %d %s", r.status, r.body)
			}
			if r := put(doc.first, ""); r.status != 200 {
				t.Fatalf("PUT without If-Match = %d %s", r.status, r.body)
			}
			for _, bad := range []string{"42", `"x"`, `W/"1"`, `"-1"`} {
				if r := put(doc.first, bad); r.status != 400 {
					t.Errorf("If-Match %s = %d %s, want 400", bad, r.status, r.body)
				}
			}
		})
	}
}
