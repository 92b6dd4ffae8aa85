package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// The fleet's egress floor (docs/fleets.md): the owner's floor reaches its
// member centrals with their fleet tokens, is kept in the member's etcd,
// and a member's operator may tighten it only.

// setFloor puts the operator's egress floor on e (the rest of the policy
// at its defaults).
func setFloor(t *testing.T, e *env, p *sdk.EgressPolicy) {
	t.Helper()
	e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: egressDoc(t, p)}, 200)
}

// egressDoc is a policy document with egress p (nil: none) and every
// other field at its default.
func egressDoc(t *testing.T, p *sdk.EgressPolicy) string {
	if p == nil {
		return `{}`
	}
	return jsonBody(t, map[string]any{"egress": p})
}

// memberPolicy is GET /fleet/policy on a member.
func memberPolicy(t *testing.T, e *env) sdk.Policy {
	t.Helper()
	var p sdk.Policy
	e.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &p)
	return p
}

func samePolicy(a sdk.EgressPolicy, b *sdk.EgressPolicy) bool {
	return b != nil && a.Mode == b.Mode && slices.Equal(a.Allow, b.Allow) && slices.Equal(a.Block, b.Block)
}

// TestOwnersAllowlistFloorReachesTheMemberAndTheMemberMayOnlyTightenIt:
// two centrals, each on its own etcd, paired; the owner's allowlist floor
// reaches the member on its poll and is what the member's tenant networks
// get; the member's operator may narrow the allowlist and add blocks (the
// effective floor is both), and a policy that would loosen the owner's
// floor is 409 with the reasons and a hint. A policy read with its
// fleet_egress can be put back; fleet_egress is never stored.
func TestOwnersAllowlistFloorReachesTheMemberAndTheMemberMayOnlyTightenIt(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	ctx := context.Background()
	if p := memberPolicy(t, member); p.FleetEgress != nil {
		t.Fatalf("a fleet floor on a central in no fleet: %+v", p.FleetEgress)
	}
	floor := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.0/24"}, Block: []string{"198.51.100.66"}}
	setFloor(t, owner, &floor)
	// Joining fetches the floor at once (no poll has run).
	pairCentrals(t, owner, member, "site-b")
	fe := memberPolicy(t, member).FleetEgress
	if fe == nil || fe.OwnerURL != owner.srv.URL || !samePolicy(floor, fe.Floor) || !samePolicy(floor, &fe.Effective) ||
		fe.FetchedAt == nil || fe.LastError != "" || len(fe.Overridden) != 0 {
		t.Fatalf("the member's fleet_egress: %+v", fe)
	}
	// The owner's own policy shows no fleet_egress: it is in nobody's fleet.
	var op sdk.Policy
	owner.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &op)
	if op.FleetEgress != nil {
		t.Errorf("the owner's policy has a fleet_egress: %+v", op.FleetEgress)
	}

	// Loosening is refused, with each reason and what applies.
	for _, c := range []struct {
		what   string
		egress sdk.EgressPolicy
		says   []string
	}{
		{"open under the owner's allowlist", sdk.EgressPolicy{Mode: "open"}, []string{"mode open would loosen"}},
		{"an allow entry outside the owner's", sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.0/25", "203.0.113.0/24", "10.0.0.0/8"}},
			[]string{"allow 203.0.113.0/24 is outside", "allow 10.0.0.0/8 is outside"}},
	} {
		r := member.call(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: egressDoc(t, &c.egress)})
		if r.status != http.StatusConflict {
			t.Fatalf("%s: %d %s, want 409", c.what, r.status, r.body)
		}
		eb := r.errorBody(t)
		for _, s := range c.says {
			if !strings.Contains(eb.Error, s) {
				t.Errorf("%s: error %q does not say %q", c.what, eb.Error, s)
			}
		}
		if strings.Contains(eb.Error, "198.51.100.0/25") || !strings.Contains(eb.Hint, "owner's egress floor applies") || !strings.Contains(eb.Hint, "tighten") {
			t.Errorf("%s: %q (hint %q)", c.what, eb.Error, eb.Hint)
		}
	}
	if p, _ := member.api.opts.Store.GetPolicy(ctx); p.Egress != nil {
		t.Fatalf("a refused policy was stored: %+v", p.Egress)
	}

	// Tightening is taken: a narrower allowlist and another block.
	own := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.0/25"}, Block: []string{"198.51.100.7"}}
	var put sdk.Policy
	member.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: egressDoc(t, &own)}, 200).decode(t, &put)
	want := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.0/25"}, Block: []string{"198.51.100.66", "198.51.100.7"}}
	if put.FleetEgress == nil || !samePolicy(want, &put.FleetEgress.Effective) {
		t.Fatalf("effective floor after tightening: %+v", put.FleetEgress)
	}
	got, _, err := member.api.overlays.Floor(ctx, put)
	if err != nil || !samePolicy(want, &got) {
		t.Fatalf("the floor tenant networks get: %+v %v, want %+v", got, err, want)
	}

	// GET, then PUT the document back as read (fleet_egress and all): taken,
	// and fleet_egress is not stored.
	r := member.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200)
	if !strings.Contains(string(r.body), `"fleet_egress"`) {
		t.Fatalf("GET /fleet/policy on the member: %s", r.body)
	}
	member.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: string(r.body)}, 200)
	raw, err := member.api.opts.Store.Client().Get(ctx, member.api.opts.Store.Prefix()+"policy")
	if err != nil || len(raw.Kvs) != 1 || strings.Contains(string(raw.Kvs[0].Value), "fleet_egress") {
		t.Fatalf("the stored policy: %v %v", raw, err)
	}

	// The owner changes its floor: the next fetch brings it, and the
	// member's own egress is held to the new one.
	floor2 := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.0/24"}, Block: []string{"198.51.100.66", "198.51.100.99"}}
	setFloor(t, owner, &floor2)
	if err := member.api.federation.PollFloor(ctx); err != nil {
		t.Fatal(err)
	}
	fe = memberPolicy(t, member).FleetEgress
	want.Block = []string{"198.51.100.66", "198.51.100.99", "198.51.100.7"}
	if fe == nil || !samePolicy(floor2, fe.Floor) || !samePolicy(want, &fe.Effective) {
		t.Fatalf("after the owner's change: %+v", fe)
	}
}

// TestOwnerUnreachableKeepsTheCachedFloorWithItsAge: with the owner gone,
// a fetch fails, the floor fetched before stays in force (in GET
// /fleet/policy and for tenant networks) with its age and the error; it is
// in etcd, so a new central process on the same store has it too.
func TestOwnerUnreachableKeepsTheCachedFloorWithItsAge(t *testing.T) {
	c := &clock{t: time.Now().UTC()}
	owner, member := fedEnv(t, nil), fedEnv(t, c)
	ctx := context.Background()
	pairCentrals(t, owner, member, "site-b")
	floor := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}}
	setFloor(t, owner, &floor)
	if err := member.api.federation.PollFloor(ctx); err != nil {
		t.Fatal(err)
	}
	fetched := c.now()
	owner.srv.Close()
	c.add(10 * time.Minute)
	err := member.api.federation.PollFloor(ctx)
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("a fetch with the owner gone: %v", err)
	}
	fe := memberPolicy(t, member).FleetEgress
	if fe == nil || !samePolicy(floor, fe.Floor) || !samePolicy(floor, &fe.Effective) || fe.FetchedAt == nil || !fe.FetchedAt.Equal(fetched) ||
		fe.AgeSeconds != 600 || !strings.Contains(fe.LastError, "did not answer") || fe.LastTry == nil || !fe.LastTry.Equal(c.now()) {
		t.Fatalf("the cached floor with the owner gone: %+v", fe)
	}
	// Still what tenant networks get, with this central's own egress open.
	if got, _, err := member.api.overlays.Floor(ctx, sdk.Policy{Egress: &sdk.EgressPolicy{Mode: "open"}}); err != nil || !samePolicy(floor, &got) {
		t.Fatalf("the floor for tenant networks with the owner gone: %+v %v", got, err)
	}

	// Another central process on the member's etcd (a restart) has it.
	again := New(Options{Store: member.api.opts.Store, FleetToken: testFleetToken, Now: c.now})
	rec := httptest.NewRecorder()
	hr := httptest.NewRequest("GET", "/fleet/policy", nil)
	hr.Header.Set("Authorization", "Bearer "+testFleetToken)
	again.ServeHTTP(rec, hr)
	var p sdk.Policy
	resp{status: rec.Code, body: rec.Body.Bytes()}.decode(t, &p)
	if rec.Code != 200 || p.FleetEgress == nil || !samePolicy(floor, p.FleetEgress.Floor) || p.FleetEgress.AgeSeconds != 600 {
		t.Fatalf("after a restart: %d %s", rec.Code, rec.Body)
	}
}

// TestRemovedMemberStopsReceivingTheFloorAndLeavingLiftsIt: a member the
// owner removed gets 403 "removed from the fleet" for the floor, and its
// floor is lifted at that answer; a member that leaves lifts it at once.
func TestRemovedMemberStopsReceivingTheFloorAndLeavingLiftsIt(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	ctx := context.Background()
	floor := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}}
	setFloor(t, owner, &floor)
	pairCentrals(t, owner, member, "site-b")
	if err := member.api.federation.PollFloor(ctx); err != nil {
		t.Fatal(err)
	}
	if fe := memberPolicy(t, member).FleetEgress; fe == nil || !samePolicy(floor, fe.Floor) {
		t.Fatalf("before the removal: %+v", fe)
	}
	owner.must(req{method: "DELETE", path: "/fleet/federation/members/site-b", token: testFleetToken}, 204)
	if err := member.api.federation.PollFloor(ctx); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("a removed member's fetch: %v", err)
	}
	if fe := memberPolicy(t, member).FleetEgress; fe != nil {
		t.Fatalf("a removed member keeps the floor: %+v", fe)
	}
	if got, _, err := member.api.overlays.Floor(ctx, sdk.Policy{}); err != nil || got.Mode != "open" {
		t.Fatalf("a removed member's tenant networks get %+v %v, want open", got, err)
	}
	// Its operator's own egress is its own again.
	setFloor(t, member, &sdk.EgressPolicy{Mode: "open", Block: []string{"203.0.113.9"}})

	// The removed member's token, held by hand: 403 "removed from the fleet".
	cred, _ := pairByHand(t, owner, sdk.PairCentral, "site-c")
	var got sdk.FleetFloor
	owner.must(req{method: "GET", path: "/fleet/federation/policy", token: cred}, 200).decode(t, &got)
	if !samePolicy(floor, &got.Egress) {
		t.Fatalf("the owner's floor: %+v", got)
	}
	owner.must(req{method: "DELETE", path: "/fleet/federation/members/site-c", token: testFleetToken}, 204)
	if eb := owner.must(req{method: "GET", path: "/fleet/federation/policy", token: cred}, 403).errorBody(t); eb.Error != "removed from the fleet" {
		t.Fatalf("a removed member's fetch: %+v", eb)
	}

	// Leave (the removed membership), join again, fetch, then leave: lifted.
	member.must(req{method: "DELETE", path: "/fleet/federation/membership", token: testFleetToken}, 204)
	setFloor(t, member, nil)
	pairCentrals(t, owner, member, "site-b")
	if err := member.api.federation.PollFloor(ctx); err != nil {
		t.Fatal(err)
	}
	if fe := memberPolicy(t, member).FleetEgress; fe == nil || !samePolicy(floor, fe.Floor) {
		t.Fatalf("after joining again: %+v", fe)
	}
	member.must(req{method: "DELETE", path: "/fleet/federation/membership", token: testFleetToken}, 204)
	if fe := memberPolicy(t, member).FleetEgress; fe != nil {
		t.Fatalf("after leaving: %+v", fe)
	}
	if err := member.api.federation.PollFloor(ctx); err != nil {
		t.Fatalf("a fetch in no fleet: %v", err)
	}
	if fp, err := member.api.federation.FloorPolicy(ctx); fp != nil || err != nil {
		t.Fatalf("a central in no fleet fetched a floor: %+v %v", fp, err)
	}
}

// TestOwnerFloorRouteAdmitsOnlyAMemberCentralsFleetToken: the owner's floor
// goes to a member central's fleet token only; every other credential is
// refused with the status its kind gets.
func TestOwnerFloorRouteAdmitsOnlyAMemberCentralsFleetToken(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	_, tenant := owner.createTenant("acme", "")
	key := owner.createKey(tenant, "k", false)
	nodeCred, _ := pairByHand(t, owner, sdk.PairNode, "node-1")
	left, _ := pairByHand(t, owner, sdk.PairCentral, "site-left")
	owner.must(req{method: "POST", path: "/fleet/federation/leave", token: left}, 204)
	// The owner's poll token opens only the member's site, on the member.
	pairCentralsWithURL(t, owner, member, "site-b", member.srv.URL)
	pm, err := owner.api.federation.Member(context.Background(), "site-b")
	if err != nil || pm.PollToken == "" {
		t.Fatalf("site-b's poll token: %+v %v", pm, err)
	}
	for _, c := range []struct {
		who   string
		on    *env
		token string
		want  int
		says  string
	}{
		{"no token", owner, "", 401, ""},
		{"a forged fleet token", owner, sdk.FleetTokenPrefix + strings.Repeat("x", 43), 401, "invalid token"},
		{"a member that left", owner, left, 401, "invalid token"},
		{"a tenant's token", owner, tenant, 403, "for fleet members"},
		{"a tenant's API key", owner, key, 403, "for fleet members"},
		{"the operator's token", owner, testFleetToken, 403, "for fleet members"},
		{"an enrolled node's credential", owner, nodeCred, 403, "node node-1"},
		{"the owner's poll token, on the member", member, pm.PollToken, 403, "poll token reads only"},
	} {
		r := c.on.call(req{method: "GET", path: "/fleet/federation/policy", token: c.token})
		if r.status != c.want {
			t.Errorf("%s: %d %s, want %d", c.who, r.status, r.body, c.want)
			continue
		}
		if eb := r.errorBody(t); !strings.Contains(eb.Error, c.says) || eb.Hint == "" {
			t.Errorf("%s: %+v, want it to say %q with a hint", c.who, eb, c.says)
		}
	}
}
