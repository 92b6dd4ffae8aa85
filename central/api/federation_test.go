package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/fleet"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
)

// fedEnv is a central on its own embedded etcd, as a site of a fleet is.
func fedEnv(t *testing.T, c *clock) *env {
	t.Helper()
	return newEnv(t, func(o *Options) {
		o.Store = storetest.Open(t)
		if c != nil {
			o.Now = c.now
		}
	})
}

func jsonBody(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// heartbeatNode reports a node with n VMs to e with the operator's token.
func heartbeatNode(t *testing.T, e *env, name string, vms int) {
	t.Helper()
	hb := sdk.Heartbeat{Version: "test"}
	for i := range vms {
		hb.VMs = append(hb.VMs, sdk.HeartbeatVM{ID: name + "-vm-" + string(rune('a'+i)), Name: "vm", Tenant: "t", State: "running"})
	}
	e.must(req{method: "POST", path: "/fleet/nodes/" + name + "/heartbeat", token: testFleetToken, body: jsonBody(t, hb)}, 200)
}

// pairByHand pairs a joiner of kind with owner e through the public routes
// as a joiner does, comparing the codes, and returns the credential.
func pairByHand(t *testing.T, e *env, kind, name string) (cred, memberID string) {
	t.Helper()
	var inv sdk.FleetInvite
	e.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: jsonBody(t, sdk.FleetCreateInviteRequest{Kind: kind})}, 201).decode(t, &inv)
	nonce := sdk.NewPairingNonce()
	var red sdk.FleetRedeemReply
	e.must(req{method: "POST", path: "/fleet/pairing/redeem", body: jsonBody(t, sdk.FleetRedeemRequest{Invite: inv.Invite, Nonce: nonce, Kind: kind, Name: name})}, 201).decode(t, &red)
	norm, _ := sdk.NormalizeInvite(inv.Invite)
	joinerCode := sdk.PairingCode(norm, nonce)
	var list sdk.FleetRequestList
	e.must(req{method: "GET", path: "/fleet/federation/requests", token: testFleetToken}, 200).decode(t, &list)
	var ownerCode string
	for _, q := range list.Requests {
		if q.ID == red.RequestID {
			ownerCode = q.Code
		}
	}
	if ownerCode != joinerCode {
		t.Fatalf("owner shows %q, joiner %q", ownerCode, joinerCode)
	}
	e.must(req{method: "POST", path: "/fleet/federation/requests/" + red.RequestID + "/approve", token: testFleetToken, body: jsonBody(t, sdk.FleetApproveRequest{Code: joinerCode})}, 200)
	var res sdk.FleetPairingResult
	e.must(req{method: "POST", path: "/fleet/pairing/confirm", body: jsonBody(t, sdk.FleetPairingConfirm{Nonce: nonce})}, 200).decode(t, &res)
	if res.State != sdk.PairingAdmitted || res.Credential == "" {
		t.Fatalf("confirm after approval: %+v", res)
	}
	return res.Credential, res.MemberID
}

func federation(t *testing.T, e *env) sdk.Federation {
	t.Helper()
	var f sdk.Federation
	e.must(req{method: "GET", path: "/fleet/federation", token: testFleetToken}, 200).decode(t, &f)
	return f
}

// TestTwoCentralsPairThroughTheWholeFlowComparingBothScreensCodes: an owner
// and a member central, each on its own embedded etcd, pair with the codes
// read off each screen into the other; nothing is admitted before both
// sides agreed; then each sees the other's nodes and VM counts.
func TestTwoCentralsPairThroughTheWholeFlowComparingBothScreensCodes(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	heartbeatNode(t, owner, "owner-node", 2)
	heartbeatNode(t, member, "member-node", 3)

	var inv sdk.FleetInvite
	owner.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: `{"kind": "central"}`}, 201).decode(t, &inv)
	if !strings.Contains(inv.Note, "SHA-256") || time.Until(inv.ExpiresAt) > 15*time.Minute+time.Second {
		t.Errorf("invite %+v", inv)
	}
	// The member's operator types the owner's URL and the invite.
	var joining sdk.FleetMembership
	member.must(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken,
		body: jsonBody(t, sdk.FleetJoinRequest{OwnerURL: owner.srv.URL, Invite: strings.ToLower(inv.Invite), Name: "site-b", URL: member.srv.URL})}, 201).decode(t, &joining)
	memberScreen := joining.Code
	var list sdk.FleetRequestList
	owner.must(req{method: "GET", path: "/fleet/federation/requests", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Requests) != 1 || list.Requests[0].Name != "site-b" || list.Requests[0].State != sdk.RequestPending {
		t.Fatalf("owner's requests: %+v", list.Requests)
	}
	ownerScreen := list.Requests[0].Code
	if len(memberScreen) != 6 || memberScreen != ownerScreen {
		t.Fatalf("the screens show %q (member) and %q (owner)", memberScreen, ownerScreen)
	}

	// The joiner confirms first: pending, nothing admitted.
	member.must(req{method: "POST", path: "/fleet/federation/confirm", token: testFleetToken, body: jsonBody(t, sdk.FleetConfirmJoinRequest{Code: ownerScreen})}, 202)
	if f := federation(t, owner); len(f.Members) != 0 || f.Role != sdk.FedAlone {
		t.Fatalf("admitted before the owner approved: %+v", f)
	}
	// The owner approves what the member's screen shows, read out as "123 456".
	spoken := memberScreen[:3] + " " + memberScreen[3:]
	owner.must(req{method: "POST", path: "/fleet/federation/requests/" + list.Requests[0].ID + "/approve", token: testFleetToken, body: jsonBody(t, sdk.FleetApproveRequest{Code: spoken})}, 200)
	if f := federation(t, owner); len(f.Members) != 0 {
		t.Fatalf("admitted before the joiner confirmed: %+v", f)
	}
	var joined sdk.FleetMembership
	member.must(req{method: "POST", path: "/fleet/federation/confirm", token: testFleetToken, body: jsonBody(t, sdk.FleetConfirmJoinRequest{Code: ownerScreen})}, 200).decode(t, &joined)
	if joined.State != sdk.PairingJoined || joined.MemberID == "" || joined.Code != "" {
		t.Fatalf("member after confirm: %+v", joined)
	}
	// The member fetched the owner's egress floor as it joined: heard from.
	of := federation(t, owner)
	if of.Role != sdk.FedOwner || len(of.Members) != 1 || of.Members[0].Name != "site-b" || of.Members[0].Health.Badge != sdk.HealthOK {
		t.Fatalf("owner's fleet: %+v", of)
	}
	if f := federation(t, member); f.Role != sdk.FedMember || f.Membership.Health.Badge != sdk.HealthNotChecked {
		t.Fatalf("member's fleet before its first poll: %+v", f)
	}

	// The owner reads the site of a member that gave a URL, with the poll
	// token that member gave it; the token opens nothing else there.
	if err := owner.api.federation.PollMembers(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f := federation(t, owner); len(f.Sites) != 2 || f.Sites[1].Member != "site-b" || f.Sites[1].VMs != 3 || f.Members[0].Health.Badge != sdk.HealthOK {
		t.Fatalf("owner's view after polling site-b: %+v", f)
	}
	pm, err := owner.api.federation.Member(context.Background(), "site-b")
	if err != nil || !strings.HasPrefix(pm.PollToken, sdk.OwnerPollPrefix) {
		t.Fatalf("site-b's poll token on the owner: %+v %v", pm, err)
	}
	member.must(req{method: "GET", path: "/fleet/federation/site", token: pm.PollToken}, 200)
	member.must(req{method: "GET", path: "/fleet/federation", token: pm.PollToken}, 403)
	member.must(req{method: "GET", path: "/fleet/nodes", token: pm.PollToken}, 403)
	member.must(req{method: "POST", path: "/fleet/federation/refresh", token: pm.PollToken}, 403)

	// The member's poll carries its site up and brings the fleet view back.
	if err := member.api.federation.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	sites := func(f sdk.Federation) map[string]sdk.FleetSite {
		m := map[string]sdk.FleetSite{}
		for _, s := range f.Sites {
			m[s.Member] = s
		}
		return m
	}
	for who, f := range map[string]sdk.Federation{"owner": federation(t, owner), "member": federation(t, member)} {
		s := sites(f)
		if s["owner"].VMs != 2 || len(s["owner"].Nodes) != 1 || s["owner"].Nodes[0].Name != "owner-node" {
			t.Errorf("%s's view of the owner: %+v", who, s["owner"])
		}
		if s["site-b"].VMs != 3 || len(s["site-b"].Nodes) != 1 || s["site-b"].Nodes[0].Name != "member-node" {
			t.Errorf("%s's view of site-b: %+v", who, s["site-b"])
		}
	}
	if f := federation(t, owner); f.Members[0].Health.Badge != sdk.HealthOK {
		t.Errorf("owner's badge for site-b after its report: %+v", f.Members[0].Health)
	}
	if f := federation(t, member); f.Membership.Health.Badge != sdk.HealthOK {
		t.Errorf("member's own badge after a poll: %+v", f.Membership.Health)
	}

	// A launch the owner's nodes cannot take names the member with room.
	owner.must(req{method: "PUT", path: "/fleet/images/tiny", token: testFleetToken, body: `{"guest_os": "linux", "image": "/images/tiny.img"}`}, 201)
	var np sdk.NoPlacementBody
	owner.must(req{method: "POST", path: "/fleet/vms", token: testFleetToken, body: `{"name": "nowhere", "image": "tiny"}`}, 409).decode(t, &np)
	if !strings.Contains(np.Hint, "fleet member site-b has 1 node(s) up") {
		t.Errorf("the no-placement hint does not name the member: %q", np.Hint)
	}

	// One central is in at most one fleet.
	member.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: `{"kind": "central"}`}, 409)
	member.must(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken,
		body: jsonBody(t, sdk.FleetJoinRequest{OwnerURL: owner.srv.URL, Invite: "AAAA-BBBB-CCCC-DDDD", Name: "again"})}, 409)
	owner.must(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken,
		body: jsonBody(t, sdk.FleetJoinRequest{OwnerURL: member.srv.URL, Invite: "AAAA-BBBB-CCCC-DDDD", Name: "owner"})}, 409)

	// The member leaves: the owner forgets it, and no tombstone is left.
	member.must(req{method: "DELETE", path: "/fleet/federation/membership", token: testFleetToken}, 204)
	if f := federation(t, owner); len(f.Members) != 0 || f.Role != sdk.FedAlone {
		t.Errorf("owner after the member left: %+v", f)
	}
	if f := federation(t, member); f.Role != sdk.FedAlone {
		t.Errorf("member after leaving: %+v", f)
	}
}

// TestStolenInviteRedeemedFirstFailsTheRealJoinerAndLeavesAnUnvouchedRequest:
// the thief's redeem consumes the invite; the real joiner gets the one 404;
// the owner sees a request whose code nobody shows, and cannot approve it
// with any code the real joiner could read out.
func TestStolenInviteRedeemedFirstFailsTheRealJoinerAndLeavesAnUnvouchedRequest(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	var inv sdk.FleetInvite
	owner.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: `{"kind": "central"}`}, 201).decode(t, &inv)
	thief := sdk.NewPairingNonce()
	owner.must(req{method: "POST", path: "/fleet/pairing/redeem", body: jsonBody(t, sdk.FleetRedeemRequest{Invite: inv.Invite, Nonce: thief, Kind: "central", Name: "site-b"})}, 201)

	r := member.must(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken,
		body: jsonBody(t, sdk.FleetJoinRequest{OwnerURL: owner.srv.URL, Invite: inv.Invite, Name: "site-b"})}, 404)
	if eb := r.errorBody(t); !strings.Contains(eb.Error, "someone else") {
		t.Errorf("the real joiner's error does not say the invite may be stolen: %q", eb.Error)
	}
	if f := federation(t, member); f.Role != sdk.FedAlone || f.Membership != nil {
		t.Errorf("the real joiner holds a membership: %+v", f)
	}
	var list sdk.FleetRequestList
	owner.must(req{method: "GET", path: "/fleet/federation/requests", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Requests) != 1 || list.Requests[0].Name != "site-b" {
		t.Fatalf("owner's requests: %+v", list.Requests)
	}
	// The thief's code is not the one any screen of the real joiner shows;
	// an operator typing another code is refused, then rejects.
	other := "000000"
	if list.Requests[0].Code == other {
		other = "000001"
	}
	owner.must(req{method: "POST", path: "/fleet/federation/requests/" + list.Requests[0].ID + "/approve", token: testFleetToken, body: jsonBody(t, sdk.FleetApproveRequest{Code: other})}, 409)
	var res sdk.FleetPairingResult
	owner.must(req{method: "POST", path: "/fleet/pairing/confirm", body: jsonBody(t, sdk.FleetPairingConfirm{Nonce: thief})}, 202).decode(t, &res)
	owner.must(req{method: "POST", path: "/fleet/federation/requests/" + list.Requests[0].ID + "/reject", token: testFleetToken}, 204)
	owner.must(req{method: "POST", path: "/fleet/pairing/confirm", body: jsonBody(t, sdk.FleetPairingConfirm{Nonce: thief})}, 404)
	if f := federation(t, owner); len(f.Members) != 0 {
		t.Errorf("someone paired: %+v", f.Members)
	}
}

// TestInvalidExpiredAndUsedInvitesAreOneIndistinguishable404: the three
// answers are byte for byte the same; the invite lives 15 minutes on the
// injected clock.
func TestInvalidExpiredAndUsedInvitesAreOneIndistinguishable404(t *testing.T) {
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	e := fedEnv(t, c)
	mint := func() string {
		var inv sdk.FleetInvite
		e.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: `{"kind": "node"}`}, 201).decode(t, &inv)
		return inv.Invite
	}
	redeem := func(invite string, status int) string {
		return string(e.must(req{method: "POST", path: "/fleet/pairing/redeem",
			body: jsonBody(t, sdk.FleetRedeemRequest{Invite: invite, Nonce: sdk.NewPairingNonce(), Kind: "node", Name: "n1"})}, status).body)
	}
	invalid := redeem("ZZZZ-ZZZZ-ZZZZ-ZZZZ", 404)

	late := mint()
	c.add(fleet.InviteTTL - time.Second)
	fresh := mint()
	c.add(time.Second)
	expired := redeem(late, 404)

	redeem(fresh, 201)
	used := redeem(fresh, 404)
	if invalid != expired || expired != used {
		t.Errorf("the three 404s differ:\ninvalid %s\nexpired %s\nused    %s", invalid, expired, used)
	}
}

// TestRemovedMemberGets403RemovedFromTheFleetAndCannotRefresh: after the
// owner removes a member central, its fleet token reads 403 "removed from
// the fleet" (not 401) on every fleet route, refresh included, and the
// member's own badge says so; a member that left gets 401 (no tombstone).
func TestRemovedMemberGets403RemovedFromTheFleetAndCannotRefresh(t *testing.T) {
	owner, member := fedEnv(t, nil), fedEnv(t, nil)
	var inv sdk.FleetInvite
	owner.must(req{method: "POST", path: "/fleet/federation/invites", token: testFleetToken, body: `{"kind": "central"}`}, 201).decode(t, &inv)
	var joining sdk.FleetMembership
	member.must(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken,
		body: jsonBody(t, sdk.FleetJoinRequest{OwnerURL: owner.srv.URL, Invite: inv.Invite, Name: "site-b"})}, 201).decode(t, &joining)
	var list sdk.FleetRequestList
	owner.must(req{method: "GET", path: "/fleet/federation/requests", token: testFleetToken}, 200).decode(t, &list)
	owner.must(req{method: "POST", path: "/fleet/federation/requests/" + list.Requests[0].ID + "/approve", token: testFleetToken, body: jsonBody(t, sdk.FleetApproveRequest{Code: joining.Code})}, 200)
	member.must(req{method: "POST", path: "/fleet/federation/confirm", token: testFleetToken, body: jsonBody(t, sdk.FleetConfirmJoinRequest{Code: list.Requests[0].Code})}, 200)

	owner.must(req{method: "DELETE", path: "/fleet/federation/members/site-b", token: testFleetToken}, 204)
	if err := member.api.federation.Poll(context.Background()); err == nil {
		t.Fatal("a removed member's poll succeeded")
	}
	f := federation(t, member)
	if f.Membership == nil || f.Membership.Health.Badge != sdk.HealthStopped || f.Membership.Health.Reason != "Removed from the fleet" {
		t.Errorf("the removed member's badge: %+v", f.Membership)
	}

	// A second member, paired by hand, to hold the token itself.
	cred, _ := pairByHand(t, owner, sdk.PairCentral, "site-c")
	owner.must(req{method: "POST", path: "/fleet/federation/refresh", token: cred}, 200).decode(t, &struct{}{})
	// The old token was revoked by the refresh: unknown now.
	owner.must(req{method: "POST", path: "/fleet/federation/report", token: cred, body: `{"site": {"member": "x", "nodes": [], "vms": 0, "checked_at": "2026-01-01T00:00:00Z"}}`}, 401)

	cred, _ = pairByHand(t, owner, sdk.PairCentral, "site-d")
	owner.must(req{method: "DELETE", path: "/fleet/federation/members/site-d", token: testFleetToken}, 204)
	for _, p := range []string{"/fleet/federation/refresh", "/fleet/federation/leave"} {
		r := owner.must(req{method: "POST", path: p, token: cred}, 403)
		if eb := r.errorBody(t); eb.Error != "removed from the fleet" {
			t.Errorf("%s: %q", p, eb.Error)
		}
	}
	cred, _ = pairByHand(t, owner, sdk.PairCentral, "site-e")
	owner.must(req{method: "POST", path: "/fleet/federation/leave", token: cred}, 204)
	owner.must(req{method: "POST", path: "/fleet/federation/refresh", token: cred}, 401)
}

// pathFor fills a route's parameters: the node's own name where fill says,
// else another node's and another tenant's objects.
func pathFor(p string, vars map[string]string) string {
	for k, v := range vars {
		p = strings.ReplaceAll(p, "{"+k+"}", v)
	}
	return p
}

// TestNodeCredentialOpensOnlyItsOwnHeartbeatAndChannelOnEveryRoute walks
// the whole access table (a new route is covered without a change here)
// with an enrolled node's credential: its own heartbeat and channel pass,
// every other route, and its routes for another node, are 403.
func TestNodeCredentialOpensOnlyItsOwnHeartbeatAndChannelOnEveryRoute(t *testing.T) {
	e := fedEnv(t, nil)
	a, _ := e.createTenant("acme", "")
	heartbeatNode(t, e, "node-2", 1)
	cred, _ := pairByHand(t, e, sdk.PairNode, "node-1")
	if !strings.HasPrefix(cred, sdk.NodeCredentialPrefix) {
		t.Fatalf("node credential %q", cred)
	}
	own := map[string]string{"name": "node-1", "node": "node-1", "id": "vm-a", "key": "k", "email": "a@example.com", "ticket": "t"}
	other := map[string]string{"name": "node-2", "node": "node-2", "id": a.ID, "key": "k", "email": "a@example.com", "ticket": "t"}
	checked := 0
	for _, rt := range Routes() {
		if rt.Access == Public {
			continue
		}
		for _, vars := range []map[string]string{own, other} {
			path := pathFor(rt.Path, vars)
			got := e.call(req{method: rt.Method, path: path, token: cred, body: `{}`}).status
			want := http.StatusForbidden
			if rt.NodeOwn && vars["name"] == "node-1" {
				if got == http.StatusUnauthorized || got == http.StatusForbidden {
					t.Errorf("%s %s: %d for the node's own route", rt.Method, path, got)
				}
				continue
			}
			checked++
			if got != want {
				t.Errorf("%s %s with node-1's credential: %d, want 403", rt.Method, path, got)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d route calls checked", checked)
	}
	var n sdk.FleetNode
	e.must(req{method: "GET", path: "/fleet/nodes/node-1", token: testFleetToken}, 200).decode(t, &n)
	if !n.Enrolled {
		t.Errorf("node-1 heartbeated with its credential but is not marked enrolled")
	}
	// Removed: its heartbeat is 403 "removed from the fleet".
	e.must(req{method: "DELETE", path: "/fleet/federation/members/node-1", token: testFleetToken}, 204)
	r := e.must(req{method: "POST", path: "/fleet/nodes/node-1/heartbeat", token: cred, body: jsonBody(t, sdk.Heartbeat{Version: "test"})}, 403)
	if eb := r.errorBody(t); eb.Error != "removed from the fleet" {
		t.Errorf("removed node's heartbeat: %q", eb.Error)
	}
}

// TestFleetTokenIsAdmittedOnFleetRoutesOnly walks the access table with a
// member central's fleet token: every route but the member routes is 403.
func TestFleetTokenIsAdmittedOnFleetRoutesOnly(t *testing.T) {
	e := fedEnv(t, nil)
	heartbeatNode(t, e, "node-1", 0)
	cred, _ := pairByHand(t, e, sdk.PairCentral, "site-b")
	vars := map[string]string{"name": "node-1", "node": "node-1", "id": "x", "key": "k", "email": "a@example.com", "ticket": "t"}
	for _, rt := range Routes() {
		if rt.Access == Public || rt.Access == FleetMember {
			continue
		}
		if got := e.call(req{method: rt.Method, path: pathFor(rt.Path, vars), token: cred, body: `{}`}).status; got != http.StatusForbidden {
			t.Errorf("%s %s with a fleet token: %d, want 403", rt.Method, rt.Path, got)
		}
	}
	e.must(req{method: "POST", path: "/fleet/federation/report", token: cred, body: `{"site": {"member": "x", "nodes": [], "vms": 0, "checked_at": "2026-01-01T00:00:00Z"}}`}, 200)
}

// TestFleetRoutesRefuseBadInputWithTheRightStatus: each pairing route says
// what is wrong with its input, with 400, 404 or 409 as the case is.
func TestFleetRoutesRefuseBadInputWithTheRightStatus(t *testing.T) {
	e := fedEnv(t, nil)
	cred, _ := pairByHand(t, e, sdk.PairCentral, "site-b")
	goodNonce := sdk.NewPairingNonce()
	for _, c := range []struct {
		what, method, path, token, body string
		status                          int
		says                            string
	}{
		{"an unknown kind", "POST", "/fleet/federation/invites", testFleetToken, `{"kind": "satellite"}`, 400, "kind"},
		{"a nonce of the wrong shape", "POST", "/fleet/pairing/redeem", "", `{"invite": "AAAA-BBBB-CCCC-DDDD", "nonce": "abc", "kind": "node", "name": "n"}`, 400, "nonce"},
		{"a redeem without a name", "POST", "/fleet/pairing/redeem", "", jsonBody(t, sdk.FleetRedeemRequest{Invite: "AAAA-BBBB-CCCC-DDDD", Nonce: goodNonce, Kind: "node"}), 400, "name"},
		{"an approval without six digits", "POST", "/fleet/federation/requests/pr-0/approve", testFleetToken, `{"code": "12a456"}`, 400, "six digits"},
		{"an approval of no request", "POST", "/fleet/federation/requests/pr-0/approve", testFleetToken, `{"code": "123456"}`, 404, "not found"},
		{"a join with a URL that is none", "POST", "/fleet/federation/join", testFleetToken, `{"owner_url": "ftp://x", "invite": "AAAA-BBBB-CCCC-DDDD", "name": "b"}`, 400, "owner_url"},
		{"a join with a bad invite", "POST", "/fleet/federation/join", testFleetToken, `{"owner_url": "http://127.0.0.1:1", "invite": "nope", "name": "b"}`, 400, "invite"},
		{"a join with a bad name", "POST", "/fleet/federation/join", testFleetToken, `{"owner_url": "http://127.0.0.1:1", "invite": "AAAA-BBBB-CCCC-DDDD", "name": "-x"}`, 400, "name"},
		{"a join while owning member centrals", "POST", "/fleet/federation/join", testFleetToken, `{"owner_url": "http://127.0.0.1:1", "invite": "AAAA-BBBB-CCCC-DDDD", "name": "b"}`, 409, "owner with members"},
		{"a confirm while not joining", "POST", "/fleet/federation/confirm", testFleetToken, `{"code": "123456"}`, 409, "not joining"},
		{"leaving no fleet", "DELETE", "/fleet/federation/membership", testFleetToken, "", 404, "in no fleet"},
		{"removing nobody", "DELETE", "/fleet/federation/members/nobody", testFleetToken, "", 404, "not found"},
		{"a report with a bad node name", "POST", "/fleet/federation/report", cred, `{"site": {"member": "x", "nodes": [{"name": "-bad", "state": "up", "vms": 0}], "vms": 0, "checked_at": "2026-01-01T00:00:00Z"}}`, 400, "valid name"},
	} {
		r := e.call(req{method: c.method, path: c.path, token: c.token, body: c.body})
		if r.status != c.status || !strings.Contains(r.errorBody(t).Error, c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.what, r.status, r.body, c.status, c.says)
		}
	}
	alone := fedEnv(t, nil)
	r := alone.call(req{method: "POST", path: "/fleet/federation/join", token: testFleetToken, body: `{"owner_url": "http://127.0.0.1:1", "invite": "AAAA-BBBB-CCCC-DDDD", "name": "b"}`})
	if r.status != 502 || !strings.Contains(r.errorBody(t).Error, "did not answer") {
		t.Errorf("a join to an owner that does not answer: %d %s", r.status, r.body)
	}
}
