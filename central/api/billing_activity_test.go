package api

import (
	"strings"
	"testing"
)

// TestBillingChangesAreActivity: publishing prices and setting a budget are
// in the activity log (the amounts are not: bodies never are); reading
// statements, usage and prices is not, and neither is a dry run, which
// changes nothing.
func TestBillingChangesAreActivity(t *testing.T) {
	e := newEnv(t, nil)
	a, tokenA := e.createTenant("alpha", "")
	e.must(req{method: "PUT", path: "/fleet/prices", token: testFleetToken, body: `{"currency": "USD", "vm_per_hour": 0.123457}`}, 200)
	e.must(req{method: "PUT", path: "/fleet/tenants/me/budget", token: tokenA, body: `{"monthly": 777.5}`}, 200)
	e.must(req{method: "PUT", path: "/fleet/tenants/alpha/budget", token: testFleetToken, body: `{"monthly": 888}`}, 200)
	for _, path := range []string{"/fleet/prices", "/fleet/billing", "/fleet/usage"} {
		e.must(req{method: "GET", path: path, token: tokenA}, 200)
	}
	e.call(req{method: "POST", path: "/fleet/leases?dry_run=true", token: tokenA, body: `{}`})
	e.call(req{method: "POST", path: "/fleet/vms?dry_run=true", token: tokenA, body: `{"name": "x", "image": "nope"}`})

	type ev struct{ who, method, path string }
	want := []ev{
		{"operator", "PUT", "/fleet/tenants/alpha/budget"},
		{"tenant:" + a.ID, "PUT", "/fleet/tenants/me/budget"},
		{"operator", "PUT", "/fleet/prices"},
		{"operator", "POST", "/fleet/tenants"},
	}
	var got eventList
	e.must(req{method: "GET", path: "/fleet/events", token: testFleetToken}, 200).decode(t, &got)
	if len(got.Events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got.Events), len(want), got.Events)
	}
	for i, w := range want {
		if g := got.Events[i]; g.Who != w.who || g.Method != w.method || g.Path != w.path {
			t.Errorf("event %d: %+v, want %+v", i, g, w)
		}
	}
	file := e.auditFile()
	for _, s := range []string{"0.123457", "777.5", "888"} {
		if strings.Contains(file, s) {
			t.Fatalf("the activity log holds the amount %q:\n%s", s, file)
		}
	}
}
