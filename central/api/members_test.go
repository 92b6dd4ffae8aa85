package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestMembersThroughTheAPI walks a team's life with the primary token and
// the operator: the first owner added, people added and re-roled (emails
// matched lowercase), the last owner kept (409 with a hint), a key refused,
// another tenant's member 404, and each change in the activity log under
// the person it was about.
func TestMembersThroughTheAPI(t *testing.T) {
	e := newEnv(t, nil)
	acme, token := e.createTenant("acme", "")
	_, otherToken := e.createTenant("other", "")
	key := e.createKey(token, "ci", false)

	var m sdk.Member
	e.must(req{method: "POST", path: "/fleet/tenants/acme/members", token: testFleetToken, body: `{"email": "Olga@Example.com", "role": "owner"}`}, 201).decode(t, &m)
	if m.Email != "olga@example.com" || m.Role != sdk.RoleOwner || m.AddedBy != "operator" || m.AddedAt.IsZero() || !m.LastSignInAt.IsZero() {
		t.Fatalf("the first owner: %+v", m)
	}
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "ada@example.com", "role": "admin"}`}, 201).decode(t, &m)
	if m.AddedBy != "token" {
		t.Fatalf("added with the primary token: %+v", m)
	}
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: otherToken, body: `{"email": "bo@example.com", "role": "owner"}`}, 201)

	eb := e.must(req{method: "PATCH", path: "/fleet/tenants/me/members/OLGA@example.com", token: token, body: `{"role": "admin"}`}, 409).errorBody(t)
	if !strings.Contains(eb.Error, "last owner") || !strings.Contains(eb.Hint, "owner first") {
		t.Fatalf("demoting the last owner: %+v", eb)
	}
	e.must(req{method: "DELETE", path: "/fleet/tenants/me/members/olga@example.com", token: token}, 409)
	e.must(req{method: "PATCH", path: "/fleet/tenants/me/members/ada@example.com", token: token, body: `{"role": "owner"}`}, 200)
	e.must(req{method: "DELETE", path: "/fleet/tenants/me/members/olga@example.com", token: token}, 204)

	// Keys read the team and change nothing in it; another tenant's member is not there.
	e.must(req{method: "GET", path: "/fleet/tenants/me/members", token: key}, 200)
	eb = e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: key, body: `{"email": "mallory@example.com", "role": "viewer"}`}, 403).errorBody(t)
	if !strings.Contains(eb.Error, "API key ci") {
		t.Fatalf("a key adding a member: %+v", eb)
	}
	e.must(req{method: "DELETE", path: "/fleet/tenants/me/members/bo@example.com", token: token}, 404)
	e.must(req{method: "PATCH", path: "/fleet/tenants/me/members/bo@example.com", token: token, body: `{"role": "viewer"}`}, 404)
	e.must(req{method: "GET", path: "/fleet/tenants/me/members", token: testFleetToken}, 400)

	var list sdk.MemberList
	e.must(req{method: "GET", path: "/fleet/tenants/" + acme.ID + "/members", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Members) != 1 || list.Members[0].Email != "ada@example.com" || list.Members[0].Role != sdk.RoleOwner {
		t.Fatalf("acme's team: %+v", list.Members)
	}

	var actions []string
	for _, ev := range e.api.opts.Activity.Recent(0, acme.ID) {
		actions = append(actions, fmt.Sprintf("%s %d", ev.Action, ev.Status))
	}
	want := []string{"remove member olga@example.com 204", "change the role of ada@example.com 200", "remove member olga@example.com 409",
		"change the role of olga@example.com 409", "add member ada@example.com 201"}
	got := strings.Join(actions, "|")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("the activity log lacks %q: %q", w, actions)
		}
	}
}

// TestMemberRequestsRefused: every kind of bad input to the members'
// routes is refused with its status, and nothing is written.
func TestMemberRequestsRefused(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("acme", "")
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "ada@example.com", "role": "owner"}`}, 201)
	before := e.dump()
	long := strings.Repeat("a", store.MaxEmailLen) + "@example.com"
	for _, c := range []struct {
		name         string
		method, path string
		body         string
		status       int
	}{
		{"not JSON", "POST", "/fleet/tenants/me/members", `{`, 400},
		{"an unknown field", "POST", "/fleet/tenants/me/members", `{"email": "x@example.com", "role": "viewer", "admin": true}`, 400},
		{"no email", "POST", "/fleet/tenants/me/members", `{"role": "viewer"}`, 400},
		{"not an email", "POST", "/fleet/tenants/me/members", `{"email": "x", "role": "viewer"}`, 400},
		{"a slash", "POST", "/fleet/tenants/me/members", `{"email": "x/y@example.com", "role": "viewer"}`, 400},
		{"an email too long", "POST", "/fleet/tenants/me/members", `{"email": "` + long + `", "role": "viewer"}`, 400},
		{"no role", "POST", "/fleet/tenants/me/members", `{"email": "x@example.com"}`, 400},
		{"an unknown role", "POST", "/fleet/tenants/me/members", `{"email": "x@example.com", "role": "root"}`, 400},
		{"already a member", "POST", "/fleet/tenants/me/members", `{"email": "ADA@example.com", "role": "viewer"}`, 409},
		{"an unknown role on a change", "PATCH", "/fleet/tenants/me/members/ada@example.com", `{"role": "god"}`, 400},
		{"an empty change", "PATCH", "/fleet/tenants/me/members/ada@example.com", `{}`, 400},
		{"nobody", "PATCH", "/fleet/tenants/me/members/nobody@example.com", `{"role": "viewer"}`, 404},
		{"not an email in the path", "DELETE", "/fleet/tenants/me/members/nobody", ``, 404},
		{"an unknown tenant", "POST", "/fleet/tenants/nobody/members", `{"email": "x@example.com", "role": "viewer"}`, 404},
	} {
		tok := token
		if strings.Contains(c.path, "/nobody/") {
			tok = testFleetToken
		}
		if got := e.call(req{method: c.method, path: c.path, token: tok, body: c.body}); got.status != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, got.status, got.body, c.status)
		}
	}
	after := e.dump()
	if len(after) != len(before) {
		t.Fatalf("refused requests wrote: %d keys before, %d after", len(before), len(after))
	}
}

// TestTheFiveHundredAndFirstMemberIsRefused: a tenant holds at most 500
// members; the next is 429 naming the limit.
func TestTheFiveHundredAndFirstMemberIsRefused(t *testing.T) {
	e := newEnv(t, nil)
	acme, token := e.createTenant("acme", "")
	ctx := context.Background()
	for i := range store.MaxMembersPerTenant - 1 {
		if err := e.store.AddTeamMember(ctx, &store.TeamMember{Member: sdk.Member{Email: fmt.Sprintf("p%d@example.com", i), Role: sdk.RoleViewer,
			AddedBy: "operator", AddedAt: time.Now().UTC()}, Tenant: acme.ID}); err != nil {
			t.Fatal(err)
		}
	}
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "last@example.com", "role": "viewer"}`}, 201)
	eb := e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: token, body: `{"email": "one-more@example.com", "role": "viewer"}`}, 429).errorBody(t)
	if !strings.Contains(eb.Error, "500 members") {
		t.Fatalf("the 501st: %+v", eb)
	}
	var list sdk.MemberList
	e.must(req{method: "GET", path: "/fleet/tenants/me/members", token: token}, 200).decode(t, &list)
	if len(list.Members) != store.MaxMembersPerTenant {
		t.Fatalf("%d members listed", len(list.Members))
	}
}
