package api

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
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
	var got sdk.EventList
	e.must(req{method: "GET", path: "/fleet/events", token: testFleetToken}, 200).decode(t, &got)
	if len(got.Events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got.Events), len(want), got.Events)
	}
	for i, w := range want {
		if g := got.Events[i]; g.Who != w.who || g.Method != w.method || g.Path != w.path {
			t.Errorf("event %d: %+v, want %+v", i, g, w)
		}
	}
	// Every field but the time (whose digits could hold any number) must be
	// free of the amounts and of the bodies' keys.
	file := e.auditFile()
	for _, line := range strings.Split(strings.TrimSpace(file), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("activity line %q: %v", line, err)
		}
		delete(fields, "time")
		rest, _ := json.Marshal(fields)
		for _, s := range []string{"0.123457", "777.5", "888", "monthly", "vm_per_hour"} {
			if strings.Contains(string(rest), s) {
				t.Fatalf("the activity log holds %q:\n%s", s, file)
			}
		}
	}
}
