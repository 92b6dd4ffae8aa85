package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
)

type rbPlan struct {
	HighWater float64 `json:"high_water"`
	MaxMoves  int     `json:"max_moves"`
	Moves     []struct {
		VM, Name, Tenant, From, To, Reason string
	} `json:"moves"`
	NodesSkipped []struct{ Node, Reason string } `json:"nodes_skipped"`
}

// TestRebalancePlan: an overloaded node with a reschedulable, an ephemeral
// and a plain VM gets moves for the first two to the roomy node, never to
// the (emptier) host another tenant leases, and nothing changes.
func TestRebalancePlan(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	st := fxStore(t, nil)
	c := newLxCentral(t, st, clock)
	images, img := fxImages(t)
	var busy, roomy, leased *fxNode
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); busy = startLxNode(t, "busy", c.url, images, 4, 4096, "linux") }()
	go func() { defer wg.Done(); roomy = startLxNode(t, "roomy", c.url, images, 16, 16384, "linux") }()
	go func() { defer wg.Done(); leased = startLxNode(t, "leased", c.url, images, 32, 32768, "linux") }()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fxWaitUp(t, c.url, "busy", "roomy", "leased")
	fxMust(t, "PUT", c.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	acmeID, acme := fxTenant(t, c.url, "acme", nil)
	otherID, _ := fxTenant(t, c.url, "other", nil)
	ctx := context.Background()
	if _, err := st.CreateLease(ctx, store.CreateLeaseRequest{Tenant: otherID, Node: "leased"}); err != nil {
		t.Fatal(err)
	}
	for _, body := range []map[string]any{
		{"name": "mover", "reschedulable": true, "vcpus": 2},
		{"name": "eph", "labels": map[string]string{"fluxvm.dev/ephemeral": "true"}},
		{"name": "plain"},
	} {
		body["image"], body["node"] = "linux", "busy"
		fxMust(t, "POST", c.url+"/fleet/vms", acme, body, http.StatusCreated, nil)
	}
	entriesBefore, err := st.ListEntries(ctx, func(e *store.LedgerEntry) bool { return true })
	if err != nil {
		t.Fatal(err)
	}

	// Bad parameters are refused by name.
	for _, q := range []string{"high_water=abc", "high_water=0", "high_water=1.5", "high_water=NaN", "max_moves=0", "max_moves=x", "max_moves=2&max_moves=3"} {
		code, body := fxCall(t, "GET", c.url+"/fleet/rebalance/plan?"+q, fxToken, nil)
		name := q[:strings.Index(q, "=")]
		if code != http.StatusBadRequest || !strings.Contains(string(body), name) {
			t.Errorf("?%s: %d %s, want 400 naming %s", q, code, body, name)
		}
	}

	// busy is at 100% of its vCPUs: at 0.85 the smallest VM that alone is
	// enough moves (the ephemeral one, 1 vCPU: 75% after).
	var plan rbPlan
	fxMust(t, "GET", c.url+"/fleet/rebalance/plan", fxToken, nil, http.StatusOK, &plan)
	if plan.HighWater != 0.85 || plan.MaxMoves != 10 || len(plan.Moves) != 1 || plan.Moves[0].Name != "eph" ||
		plan.Moves[0].To != "roomy" || plan.Moves[0].From != "busy" || plan.Moves[0].Tenant != acmeID {
		t.Fatalf("default plan: %+v", plan)
	}
	// At 0.3 both movable VMs go, largest first, to roomy; plain stays.
	fxMust(t, "GET", c.url+"/fleet/rebalance/plan?high_water=0.3&max_moves=10", fxToken, nil, http.StatusOK, &plan)
	var got []string
	for _, m := range plan.Moves {
		if m.From != "busy" || m.To != "roomy" || m.VM == "" || m.Tenant != acmeID || m.Reason == "" {
			t.Errorf("move %+v", m)
		}
		got = append(got, m.Name)
	}
	if !slices.Equal(got, []string{"mover", "eph"}) || len(plan.NodesSkipped) != 0 {
		t.Fatalf("plan at 0.3: %+v", plan)
	}
	if !strings.Contains(plan.Moves[0].Reason, "reschedulable") || !strings.Contains(plan.Moves[1].Reason, "ephemeral") {
		t.Errorf("reasons: %q, %q", plan.Moves[0].Reason, plan.Moves[1].Reason)
	}
	// max_moves caps the plan.
	fxMust(t, "GET", c.url+"/fleet/rebalance/plan?high_water=0.3&max_moves=1", fxToken, nil, http.StatusOK, &plan)
	if len(plan.Moves) != 1 || plan.Moves[0].Name != "mover" {
		t.Fatalf("plan capped at 1: %+v", plan)
	}

	// A dry run: every VM stays where it was, the ledger is unchanged.
	if got := dxNames(nodeVMs(t, busy)); !slices.Equal(got, []string{"eph", "mover", "plain"}) {
		t.Errorf("busy runs %v", got)
	}
	if n := len(nodeVMs(t, roomy)) + len(nodeVMs(t, leased)); n != 0 {
		t.Errorf("%d vms appeared on roomy or leased", n)
	}
	entriesAfter, err := st.ListEntries(ctx, func(e *store.LedgerEntry) bool { return true })
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(entriesBefore)
	b, _ := json.Marshal(entriesAfter)
	if string(a) != string(b) {
		t.Errorf("the ledger changed:\n%s\n%s", a, b)
	}
	if d, err := st.GetDrain(ctx, "busy"); err == nil {
		t.Errorf("a drain appeared: %+v", d)
	}
	if n := fxNodeState(t, c.url, "busy"); n.Cordoned || n.Draining {
		t.Errorf("busy is cordoned or draining: %+v", n)
	}
}
