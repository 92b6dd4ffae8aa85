package main

import (
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetPolicyShowsTheOwnersEgressFloorOnAMember: two real centrals
// (each on its own embedded etcd) pair with fluxctl; the owner's egress
// floor, set before, is on the member at once; fluxctl fleet policy on the
// member shows it with when it was fetched and what tenant networks get
// there, and on the owner only its own floor; a tenant cannot read it.
func TestFleetPolicyShowsTheOwnersEgressFloorOnAMember(t *testing.T) {
	owner, member := fleettest.Start(t), fleettest.Start(t)
	o, m := fleetCLI(owner, owner.OperatorToken), fleetCLI(member, member.OperatorToken)
	oc, err := sdk.NewFleetClient(owner.URL, sdk.WithToken(owner.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := oc.GetPolicy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pol.Egress = &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}, Block: []string{"192.0.2.66"}}
	if _, err := oc.PutPolicy(t.Context(), *pol); err != nil {
		t.Fatal(err)
	}
	o.tty().run(t, "fleet", "policy").ok(t, "owner's policy").has(t, "owner's policy", "egress floor", "allowlist allow 192.0.2.0/24 block 192.0.2.66")
	if out := o.tty().run(t, "fleet", "policy").stdout; strings.Contains(out, "owner's floor") {
		t.Fatalf("the owner's policy shows a fleet floor:\n%s", out)
	}

	inv := decode[sdk.FleetInvite](t, "invite", o.run(t, "fleet", "invite").ok(t, "invite").stdout)
	joining := decode[sdk.FleetMembership](t, "join", m.run(t, "fleet", "join", owner.URL, inv.Invite, "--name", "site-b").ok(t, "join").stdout)
	list := decode[sdk.FleetRequestList](t, "requests", o.run(t, "fleet", "requests").ok(t, "requests").stdout)
	o.run(t, "fleet", "approve", list.Requests[0].ID, "--code", joining.Code).ok(t, "approve")
	m.run(t, "fleet", "confirm", list.Requests[0].Code).ok(t, "confirm")

	m.tty().run(t, "fleet", "policy").ok(t, "member's policy").has(t, "member's policy",
		"egress floor", "fleet owner", owner.URL, "owner's floor", "allowlist allow 192.0.2.0/24 block 192.0.2.66", "fetched",
		"tenant networks get")
	got := decode[sdk.Policy](t, "policy -o json", m.run(t, "fleet", "policy").ok(t, "policy -o json").stdout)
	if fe := got.FleetEgress; fe == nil || fe.Floor == nil || fe.Floor.Mode != "allowlist" || fe.FetchedAt == nil || fe.Effective.Mode != "allowlist" {
		t.Fatalf("the member's fleet_egress: %+v", got.FleetEgress)
	}
	_, tenant := member.Tenant(t, "acme", nil)
	fleetCLI(member, tenant).run(t, "fleet", "policy").refused(t, "a tenant's fleet policy", "for the operator", "the policy is the operator's")
}
