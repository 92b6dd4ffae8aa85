package api

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestRefusedRequestsWithHugeNamesLeaveEarlierActivityInPlace is issue #12:
// a tenant sends refused creates whose name fills the 1 MiB body, and
// refused actions on a VM whose id fills a long path. Before, each was
// recorded with the whole name as its target and its answer repeated it:
// thirty rotated every earlier record out of the files. Now the earlier
// records (the operator's, another tenant's, and the same tenant's earlier
// 403) stay in the files and in GET /fleet/events, no line is long, the
// flood beyond the tenant's budget is one summary, and no answer repeats the
// name.
func TestRefusedRequestsWithHugeNamesLeaveEarlierActivityInPlace(t *testing.T) {
	e := newEnv(t, nil)
	a, tokenA := e.createTenant("alpha", "")
	b, tokenB := e.createTenant("beta", "")
	e.must(req{method: "PUT", path: "/fleet/images/deb", token: testFleetToken, body: `{"guest_os": "linux", "image": "/d.raw"}`}, 201)
	e.must(req{method: "GET", path: "/fleet/policy", token: tokenB}, 403)
	e.must(req{method: "GET", path: "/fleet/policy", token: tokenA}, 403) // alpha's own earlier 403
	e.must(req{method: "PUT", path: "/fleet/tenants/me/budget", token: tokenB, body: `{"monthly": 5}`}, 200)
	var before sdk.EventList
	e.must(req{method: "GET", path: "/fleet/events", token: testFleetToken}, 200).decode(t, &before)
	if len(before.Events) != 6 {
		t.Fatalf("%d events before the flood: %+v", len(before.Events), before.Events)
	}

	huge := strings.Repeat("n", jsonapi.MaxBodyBytes-64)
	body := `{"name": "` + huge + `", "image": "deb"}`
	longID := strings.Repeat("i", 64<<10)
	const floods = 120 // past alpha's budget of refusals (audit.DefaultRefusalBudget)
	for i := range floods {
		out := e.call(req{method: "POST", path: "/fleet/vms", token: tokenA, body: body})
		if i%2 == 1 {
			out = e.call(req{method: "POST", path: "/fleet/vms/node-1/" + longID + "/start", token: tokenA})
		}
		if out.status/100 != 4 || len(out.body) > 512 || strings.Contains(string(out.body), huge[:jsonapi.MaxEcho+1]) ||
			strings.Contains(string(out.body), longID[:jsonapi.MaxEcho+1]) {
			t.Fatalf("flood request %d -> %d, %d bytes: %.300s", i, out.status, len(out.body), out.body)
		}
	}

	// GET /fleet/events: everything from before, small, and the flood summed up.
	var after sdk.EventList
	resp := e.must(req{method: "GET", path: "/fleet/events?limit=5000", token: testFleetToken}, 200)
	resp.decode(t, &after)
	if len(resp.body) > 200<<10 {
		t.Fatalf("GET /fleet/events is %d bytes", len(resp.body))
	}
	for _, want := range before.Events {
		if !hasEvent(after.Events, want) {
			t.Fatalf("GET /fleet/events lost %+v", want)
		}
	}
	if s := after.Events[0]; s.Suppressed == 0 || s.Tenant != a.ID || s.Until.IsZero() {
		t.Fatalf("the newest event is %+v, want the summary of alpha's flood", s)
	}
	total := 0
	for _, ev := range after.Events {
		if ev.Tenant == a.ID && ev.Time.After(before.Events[0].Time) {
			total += max(ev.Suppressed, 1)
			if ev.Target != "" && ev.Target != "node-1" { // the huge name is no target; the route's node is
				t.Fatalf("a refused request recorded target %.100q", ev.Target)
			}
			if len(ev.Path) > audit.MaxPathBytes {
				t.Fatalf("a path of %d bytes was recorded", len(ev.Path))
			}
		}
	}
	if total != floods+floods/2 {
		t.Fatalf("the events count %d of alpha's %d refused requests", total, floods+floods/2)
	}

	// The tenants still see their own, and only their own.
	var mine sdk.EventList
	e.must(req{method: "GET", path: "/fleet/events?limit=5000", token: tokenB}, 200).decode(t, &mine)
	if len(mine.Events) != 2 || mine.Events[0].Tenant != b.ID || mine.Events[1].Status != 403 {
		t.Fatalf("beta sees %+v", mine.Events)
	}
	e.must(req{method: "GET", path: "/fleet/events?limit=5000", token: tokenA}, 200).decode(t, &mine)
	for _, ev := range mine.Events {
		if ev.Tenant != a.ID {
			t.Fatalf("alpha sees %+v", ev)
		}
	}
	if last := mine.Events[len(mine.Events)-1]; last.Path != "/fleet/policy" || last.Status != 403 {
		t.Fatalf("alpha's earliest event is %+v, want its 403", last)
	}

	// The files: the earlier records in place, nothing rotated, no line long.
	changes, refusals := readEvents(t, e.audit.Path()), readEvents(t, e.audit.RefusedPath())
	for _, p := range []string{e.audit.Path() + ".1", e.audit.RefusedPath() + ".1"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists: the log rotated", p)
		}
	}
	if len(changes) != 4 {
		t.Fatalf("the changes file holds %+v", changes)
	}
	for i, want := range []audit.Event{before.Events[5], before.Events[4], before.Events[3], before.Events[0]} {
		if changes[i] != want {
			t.Fatalf("change %d is %+v, want %+v", i, changes[i], want)
		}
	}
	if refusals[0] != before.Events[2] || refusals[1] != before.Events[1] {
		t.Fatalf("the refusals file begins with %+v", refusals[:2])
	}
	if st, _ := os.Stat(e.audit.RefusedPath()); st.Size() > 100<<10 {
		t.Fatalf("the refusals file is %d bytes", st.Size())
	}
	if strings.Contains(e.logs.String(), huge[:jsonapi.MaxEcho+1]) || strings.Contains(e.logs.String(), longID[:jsonapi.MaxEcho+1]) {
		t.Fatal("central's log repeats the long name")
	}
}

func hasEvent(es []audit.Event, e audit.Event) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// readEvents reads an activity file's lines, failing on a line longer than
// audit.MaxLineBytes.
func readEvents(t *testing.T, path string) []audit.Event {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []audit.Event
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if line == "" {
			continue
		}
		if len(line) > audit.MaxLineBytes {
			t.Fatalf("%s: a line of %d bytes", path, len(line))
		}
		var ev audit.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, ev)
	}
	return out
}
