package schemas

import (
	"net/http"
	"testing"
)

// TestCheckCatchesAnswersOffTheSpec makes sure Check can fail: a body of the
// wrong shape, a status the route does not list, and a non-error answer on a
// path outside the spec are all refused; a right answer passes.
func TestCheckCatchesAnswersOffTheSpec(t *testing.T) {
	for _, name := range []string{Node, Fleet} {
		if _, err := Load(name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	spec, err := Load(Node)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) *http.Request {
		r, _ := http.NewRequest("GET", "http://127.0.0.1:9/"+path, nil)
		r.Header.Set("Authorization", "Bearer x")
		return r
	}
	json := http.Header{"Content-Type": []string{"application/json"}}
	cases := []struct {
		name   string
		req    *http.Request
		status int
		body   string
		ok     bool
	}{
		{"error body on a listed status", get("v1/vms/nope"), 404, `{"error":"no vm","hint":"list them"}`, true},
		{"wrong shape", get("v1/vms/nope"), 404, `{"oops":1}`, false},
		{"unlisted status", get("v1/vms/nope"), 418, `{"error":"teapot"}`, false},
		{"outside the spec, error body", get("nowhere"), 404, `{"error":"no such endpoint"}`, true},
		{"outside the spec, success", get("nowhere"), 200, `{}`, false},
	}
	for _, c := range cases {
		_, respErr := spec.Check(c.req, nil, c.status, json, []byte(c.body))
		if (respErr == nil) != c.ok {
			t.Errorf("%s: Check = %v, want ok=%v", c.name, respErr, c.ok)
		}
	}
}
