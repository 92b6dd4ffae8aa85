package main

import (
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetPairingCommandsJoinTwoRealCentrals: two centrals (each on its
// own embedded etcd, with a node) pair through fluxctl alone, each operator
// typing the code the other's screen shows; the owner lists the member;
// leaving asks first and needs -y without a terminal; a removed member's
// view says so.
func TestFleetPairingCommandsJoinTwoRealCentrals(t *testing.T) {
	owner, member := fleettest.Start(t), fleettest.Start(t)
	o, m := fleetCLI(owner, owner.OperatorToken), fleetCLI(member, member.OperatorToken)

	inv := decode[sdk.FleetInvite](t, "invite", o.run(t, "fleet", "invite").ok(t, "invite").stdout)
	o.tty().run(t, "fleet", "invite", "--node").ok(t, "invite --node").has(t, "invite --node", "fluxvm-agent node enroll", "only this once")

	joined := m.tty().run(t, "fleet", "join", owner.URL, inv.Invite, "--name", "site-b", "--url", member.URL).ok(t, "join").stdout
	memberScreen := ""
	for _, line := range strings.Split(joined, "\n") {
		if c, ok := strings.CutPrefix(line, "Confirmation code: "); ok {
			memberScreen = c
		}
	}
	requests := o.tty().run(t, "fleet", "requests").ok(t, "requests").stdout
	if memberScreen == "" || !strings.Contains(requests, memberScreen) || !strings.Contains(requests, "site-b") {
		t.Fatalf("the member's screen shows %q; the owner's:\n%s", memberScreen, requests)
	}
	list := decode[sdk.FleetRequestList](t, "requests", o.run(t, "fleet", "requests").ok(t, "requests -o json").stdout)
	ownerScreen := sdk.ShowPairingCode(list.Requests[0].Code)

	m.tty().run(t, "fleet", "confirm", ownerScreen).ok(t, "confirm before approval").has(t, "confirm", "pending")
	o.run(t, "fleet", "approve", list.Requests[0].ID).refused(t, "approve without --code", "--code is required", "usage")
	o.tty().run(t, "fleet", "approve", list.Requests[0].ID, "--code", memberScreen).ok(t, "approve").has(t, "approve", "Approved central site-b")
	m.tty().run(t, "fleet", "confirm", ownerScreen).ok(t, "confirm").has(t, "confirm", "Joined the fleet of "+owner.URL)

	peers := o.tty().run(t, "fleet", "peers").ok(t, "peers").stdout
	if !strings.Contains(peers, "role: owner") || !strings.Contains(peers, "site-b") || !strings.Contains(peers, "site owner: 1 node(s)") {
		t.Fatalf("the owner's fleet peers:\n%s", peers)
	}
	fed := decode[sdk.Federation](t, "peers", m.run(t, "fleet", "peers").ok(t, "peers -o json").stdout)
	if fed.Role != sdk.FedMember || fed.Membership.OwnerURL != owner.URL {
		t.Fatalf("the member's fleet: %+v", fed)
	}

	m.run(t, "fleet", "leave").refused(t, "leave piped without -y", "without confirmation", "fleet leave -y")
	asked := o.tty()
	asked.stdin = "n\n"
	if r := asked.run(t, "fleet", "remove", "site-b"); r.code != 1 || !strings.Contains(r.stderr, "remove site-b from the fleet? [y/N]") || !strings.Contains(r.stderr, "nothing done") {
		t.Fatalf("remove answered no: exit %d, stderr %q", r.code, r.stderr)
	}
	asked.stdin = "y\n"
	asked.run(t, "fleet", "remove", "site-b").ok(t, "remove answered yes")
	m.run(t, "fleet", "leave", "-y").ok(t, "leave after removal")
	if fed := decode[sdk.Federation](t, "peers", m.run(t, "fleet", "peers").ok(t, "peers").stdout); fed.Role != sdk.FedAlone {
		t.Fatalf("after leaving: %+v", fed)
	}
}
