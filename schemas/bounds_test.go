package schemas

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestBoundsAnswersOnlyForValuesOutOfRange holds requests of the fleet API
// to its description's ranges: values past a bound are named with what is
// allowed (each spelling and each repeat of a key counts, as encoding/json
// would use any of them), and everything else wrong with a request is left
// to the handler.
func TestBoundsAnswersOnlyForValuesOutOfRange(t *testing.T) {
	spec, err := FleetSpec()
	if err != nil {
		t.Fatal(err)
	}
	const max63 = "9223372036854775807"
	cases := []struct {
		name, method, route, query, body string
		want                             string // "" for no answer
	}{
		{"lease hours in range", "POST", "/fleet/leases", "", `{"hours": 48}`, ""},
		{"lease hours 2^63-1", "POST", "/fleet/leases", "", `{"hours": ` + max63 + `}`, `field "hours" must be from 0 to 26280`},
		{"lease hours -1", "POST", "/fleet/leases", "", `{"hours": -1}`, `field "hours" must be from 0 to 26280`},
		{"lease hours past float64", "POST", "/fleet/leases", "", `{"hours": 1e999}`, `field "hours" must be from 0 to 26280`},
		{"a key in another case", "POST", "/fleet/leases", "", `{"HoUrS": ` + max63 + `}`, `field "hours" must be from 0 to 26280`},
		{"a key given twice", "POST", "/fleet/leases", "", `{"hours": ` + max63 + `, "hours": 48}`, `field "hours" must be from 0 to 26280`},
		{"a key spelt with a long s", "POST", "/fleet/leases", "", "{\"hour\u017f\": " + max63 + "}", `field "hours" must be from 0 to 26280`},
		{"policy retention", "PUT", "/fleet/policy", "", `{"ledger_retention_days": ` + max63 + `}`, `field "ledger_retention_days" must be from 0 to 3650`},
		{"policy min lease", "PUT", "/fleet/policy", "", `{"min_lease_hours": ` + max63 + `}`, `field "min_lease_hours" must be from 0 to 8760`},
		{"nested", "PUT", "/fleet/policy", "", `{"tunnels": {"max_per_tenant": 0}}`, `field "tunnels.max_per_tenant" must be from 1 to 1000`},
		{"in a list", "PUT", "/fleet/prices", "", `{"currency": "USD", "mac_classes": [{"name": "a", "min_vcpus": 1, "min_memory_gib": 1, "per_hour": 1}, {"name": "b", "min_vcpus": 1, "min_memory_gib": 1, "per_hour": 10000000000}]}`,
			`field "mac_classes[1].per_hour" must be from 0 to 1000000000`},
		{"money at the bound", "PUT", "/fleet/tenants/me/budget", "", `{"monthly": 1000000000}`, ""},
		{"money a millionth past it", "PUT", "/fleet/tenants/me/budget", "", `{"monthly": 1000000000.000001}`, `field "monthly" must be from 0 to 1000000000`},
		{"null where null is allowed", "PUT", "/fleet/tenants/me/budget", "", `{"monthly": null}`, ""},
		{"quota", "POST", "/fleet/tenants", "", `{"name": "a", "quota": {"max_vcpus": ` + max63 + `}}`, `field "quota.max_vcpus" must be from 0 to 16777216`},
		{"pool size", "POST", "/fleet/pools", "", `{"name": "p", "image": "i", "size": 1, "vcpus": ` + max63 + `}`, `field "vcpus" must be from 0 to 1024`},
		{"stop timeout", "POST", "/fleet/vms/{node}/{id}/stop", "", `{"timeout_seconds": -1}`, `field "timeout_seconds" must be from 0 to 3600`},
		{"heartbeat free below zero", "POST", "/fleet/nodes/{name}/heartbeat", "", `{"url": "http://x", "capacity": {"total": {"vcpus": 4, "memory_mib": 4096, "macos_slots": 0}, "free": {"vcpus": -2, "memory_mib": 0, "macos_slots": 0}}}`, ""},
		{"heartbeat total below zero", "POST", "/fleet/nodes/{name}/heartbeat", "", `{"url": "http://x", "capacity": {"total": {"vcpus": -1, "memory_mib": 4096, "macos_slots": 0}}}`, `field "capacity.total.vcpus" must be from 0 to 1048576`},
		{"a map's value names no key", "POST", "/fleet/vms", "", `{"name": "x", "labels": {"my-secret-key": "` + strings.Repeat("v", 257) + `"}}`, `field "labels.*" must be at most 256 characters`},
		{"too many map entries", "POST", "/fleet/vms", "", `{"name": "x", "node_selector": {` + manyMembers(65) + `}}`, `field "node_selector" must be an object of at most 64 entries`},
		{"too many list entries", "PUT", "/fleet/policy", "", `{"tunnels": {"ports": [` + strings.TrimSuffix(strings.Repeat(`"22",`, 65), ",") + `]}}`, `field "tunnels.ports" must be a list of at most 64 entries`},
		{"exec timeout, command kept out", "POST", "/fleet/vms/{node}/{id}/exec", "", `{"command": "echo hunter2", "timeout_seconds": 86401}`, `field "timeout_seconds" must be from 0 to 86400`},
		{"exec command of either kind", "POST", "/fleet/vms/{node}/{id}/exec", "", `{"command": ["echo", "hunter2"]}`, ""},
		{"query parameter", "GET", "/fleet/events", "limit=0", "", `query parameter "limit" must be from 1 to 5000`},
		{"query parameter given twice", "GET", "/fleet/events", "limit=5&limit=5001", "", `query parameter "limit" must be from 1 to 5000`},
		{"query parameter NaN", "GET", "/fleet/rebalance/plan", "high_water=NaN", "", `query parameter "high_water" must be from 0.01 to 1`},
		{"query parameter huge", "GET", "/fleet/vms/{node}/{id}/logs", "lines=1" + strings.Repeat("0", 400), "", `query parameter "lines" must be from 0 to 100000`},

		// Left to the handler.
		{"not a number", "POST", "/fleet/leases", "", `{"hours": "ten"}`, ""},
		{"a fraction in range", "POST", "/fleet/leases", "", `{"hours": 48.5}`, ""},
		{"unknown field", "POST", "/fleet/leases", "", `{"days": ` + max63 + `}`, ""},
		{"malformed", "POST", "/fleet/leases", "", `{"hours": ` + max63, ""},
		{"not JSON", "POST", "/fleet/leases", "", `hours=` + max63, ""},
		{"not an object", "POST", "/fleet/leases", "", `[` + max63 + `]`, ""},
		{"query not a number", "GET", "/fleet/events", "limit=ten", "", ""},
		{"route without a body", "POST", "/fleet/vms/{node}/{id}/start", "", `{"timeout_seconds": -1}`, ""},
		{"route outside the description", "POST", "/nowhere", "", `{"hours": -1}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q, _ := url.ParseQuery(c.query)
			var body []byte
			if c.body != "" {
				body = []byte(c.body)
			}
			got := spec.Bounds(c.method, c.route, q, body)
			switch {
			case c.want == "" && got != nil:
				t.Fatalf("answered %q; the handler should", got)
			case c.want != "" && got == nil:
				t.Fatalf("no answer, want %q", c.want)
			case got != nil && got.Error() != c.want:
				t.Fatalf("%q, want %q", got, c.want)
			case got != nil && (strings.Contains(got.Error(), "hunter2") || strings.Contains(got.Error(), "secret")):
				t.Fatalf("%q repeats the request", got)
			}
		})
	}
}

func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `": "v"`)
	}
	return b.String()
}

// fieldPath is what OutOfRange.Field may be: the description's own names,
// list indexes and "*" for a map's values; nothing the caller typed.
var fieldPath = regexp.MustCompile(`^[a-z_]+(\[[0-9]+\]|\.[a-z_]+|\.\*)*$`)

// FuzzBounds feeds arbitrary bodies and queries to the fleet API's bounds
// check on every operation that takes a JSON body: it must not panic, and
// an answer names a field by the description's names with a short message,
// never the caller's text.
func FuzzBounds(f *testing.F) {
	spec, err := FleetSpec()
	if err != nil {
		f.Fatal(err)
	}
	type op struct{ method, route string }
	var ops []op
	for route, item := range spec.Doc.Paths.Map() {
		for method, o := range item.Operations() {
			if o.RequestBody != nil || len(o.Parameters) > 0 {
				ops = append(ops, op{method, route})
			}
		}
	}
	for _, seed := range []string{
		`{"hours": 9223372036854775807}`, `{"HOURS": -1, "hours": 1}`, `{"quota": {"max_vms": 1e999}}`,
		`{"tunnels": {"ports": ["22"], "max_per_tenant": 0}}`, `{"mac_classes": [{"per_hour": 1e10}]}`,
		`{"labels": {"k": "v"}, "node_selector": {}}`, `{"command": ["x"], "timeout_seconds": -1}`,
		`{"capacity": {"total": {"vcpus": -1}}, "vms": [{"vcpus": 2000}]}`, `[[[[[[[[]]]]]]]]`, `{"a":`, `"x"`, `null`,
	} {
		f.Add(seed, "limit=0&lines=-1&max_width=99999&high_water=NaN&max_moves=1e9")
	}
	f.Fuzz(func(t *testing.T, body, query string) {
		q, _ := url.ParseQuery(query)
		for _, o := range ops {
			e := spec.Bounds(o.method, o.route, q, []byte(body))
			if e == nil {
				continue
			}
			msg := e.Error()
			if len(msg) > 200 || (!e.Query && !fieldPath.MatchString(e.Field)) {
				t.Fatalf("%s %s: answer %q names more than the description's fields", o.method, o.route, msg)
			}
		}
	})
}
