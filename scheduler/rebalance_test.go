package scheduler

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func vm(id, node, tenant string, vcpus, mem int64, resched, ephemeral bool) MovableVM {
	return MovableVM{ID: id, Node: node, Tenant: tenant, GuestOS: GuestLinux, VCPUs: vcpus, MemoryMiB: mem,
		Reschedulable: resched, Ephemeral: ephemeral}
}

func movedIDs(moves []Move) []string {
	var ids []string
	for _, m := range moves {
		ids = append(ids, m.VM+":"+m.From+">"+m.To)
	}
	return ids
}

func TestRebalancePlan(t *testing.T) {
	// hot: 16 vCPUs and 32 GiB, 10 vCPUs and ~28 GiB (88%) used by the VMs below.
	hot := host("hot", used(10, 29000))
	hotVMs := []MovableVM{
		vm("plain", "hot", "", 2, 16384, false, false), // never moves
		vm("big", "hot", "", 4, 8192, true, false),
		vm("small", "hot", "", 2, 2048, false, true),
		vm("mid", "hot", "", 2, 4096, true, false),
	}
	cases := []struct {
		name     string
		fleet    []Node
		vms      []MovableVM
		hw       float64
		maxMoves int
		want     []string
	}{
		{"smallest VM that is enough leaves, to the emptiest node",
			[]Node{hot, host("cool", used(2, 4096)), host("cold")},
			hotVMs, 0.85, 10,
			[]string{"small:hot>cold"}}, // 26952 MiB after: 82%
		{"no single VM is enough: largest first, then the smallest that is enough",
			[]Node{host("hot", used(10, 32000)), host("cold")},
			hotVMs, 0.70, 10,
			[]string{"big:hot>cold", "small:hot>cold"}}, // 32000 -> 23808 (73%) -> 21760 (66%)
		{"maxMoves caps the plan",
			[]Node{host("hot", used(10, 32000)), host("cold")},
			hotVMs, 0.70, 1,
			[]string{"big:hot>cold"}},
		{"a target that would cross the high water is skipped",
			[]Node{host("hot", used(10, 32000)), host("warm", used(0, 20000))},
			hotVMs, 0.85, 10,
			// big alone would do, but would take warm to 86%.
			[]string{"mid:hot>warm", "small:hot>warm"}},
		{"nodes under the mark are left alone",
			[]Node{host("hot", used(10, 16384)), host("cold")},
			hotVMs, 0.85, 10,
			nil},
		{"never onto another tenant's leased host",
			[]Node{host("hot", used(10, 32000)), host("bobs", leasedBy("bob"))},
			[]MovableVM{vm("acme-vm", "hot", "acme", 2, 8192, true, false)}, 0.85, 10,
			nil},
		{"onto the VM's own tenant's leased host",
			[]Node{host("hot", used(10, 32000)), host("bobs", leasedBy("bob")), host("acmes", leasedBy("acme"))},
			[]MovableVM{vm("acme-vm", "hot", "acme", 2, 8192, true, false)}, 0.85, 10,
			[]string{"acme-vm:hot>acmes"}},
		{"an operator VM stays off leased hosts",
			[]Node{host("hot", used(10, 32000)), host("acmes", leasedBy("acme"))},
			[]MovableVM{vm("op-vm", "hot", "", 2, 8192, true, false)}, 0.85, 10,
			nil},
		{"unusable targets are skipped",
			[]Node{host("hot", used(10, 32000)), host("a", func(n *Node) { n.Cordoned = true }), host("b", func(n *Node) { n.Up = false }), host("c", func(n *Node) { n.ScrubPending = true })},
			hotVMs, 0.85, 10,
			nil},
		{"a down node is not a source",
			[]Node{host("hot", used(10, 32000), func(n *Node) { n.Up = false }), host("cold")},
			hotVMs, 0.85, 10,
			nil},
		{"no moves asked",
			[]Node{host("hot", used(10, 32000)), host("cold")},
			hotVMs, 0.85, 0,
			nil},
		{"a high water of 1 or more sees nothing overloaded",
			[]Node{host("hot", used(16, 32768)), host("cold")},
			hotVMs, 1, 10,
			nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := deepCopy(tc.fleet)
			moves := RebalancePlan(tc.fleet, tc.vms, tc.hw, tc.maxMoves)
			if got := movedIDs(moves); !slices.Equal(got, tc.want) {
				t.Fatalf("moves = %v, want %v\n%+v", got, tc.want, moves)
			}
			if !reflect.DeepEqual(tc.fleet, before) {
				t.Fatal("RebalancePlan changed its input")
			}
			for _, m := range moves {
				if m.Reason == "" {
					t.Fatalf("move %+v has no reason", m)
				}
			}
		})
	}
}

func TestRebalanceReasonSaysWhatAndWhy(t *testing.T) {
	fleet := []Node{host("hot", used(10, 32000)), host("cold")}
	moves := RebalancePlan(fleet, []MovableVM{vm("e", "hot", "", 2, 4096, false, true)}, 0.85, 10)
	want := "hot is above the 85% high water (vCPUs 62%, memory 98%); ephemeral: delete here, launch again on cold (vCPUs 12%, memory 12% after)"
	if len(moves) != 1 || moves[0].Reason != want {
		t.Fatalf("moves = %+v\nwant reason %q", moves, want)
	}
}

// A tenant's macOS guest moves only to another Mac it leases with a free slot.
func TestRebalanceMacOSGuestsFollowLeasesAndSlots(t *testing.T) {
	macVM := MovableVM{ID: "mvm", Node: "m1", Tenant: "acme", GuestOS: GuestMacOS, VCPUs: 4, MemoryMiB: 16384, Reschedulable: true}
	fleet := []Node{
		mac("m1", leasedBy("acme"), used(4, 62000), macGuests("acme", 1)),
		mac("m2"), // unleased: require_lease_for_macos forbids
		mac("m3", leasedBy("acme"), macGuests("acme", 2)), // no slot
		host("linux"),
	}
	if moves := RebalancePlan(fleet, []MovableVM{macVM}, 0.85, 10); len(moves) != 0 {
		t.Fatalf("moves = %+v, want none", moves)
	}
	fleet = append(fleet, mac("m4", leasedBy("acme")))
	moves := RebalancePlan(fleet, []MovableVM{macVM}, 0.85, 10)
	if got := movedIDs(moves); !slices.Equal(got, []string{"mvm:m1>m4"}) || !strings.Contains(moves[0].Reason, "reschedulable") {
		t.Fatalf("moves = %+v", moves)
	}
}

// Planned moves count on each other: two VMs do not both land in the last room.
func TestRebalanceMovesSeeEachOther(t *testing.T) {
	fleet := []Node{host("hot", used(16, 32768)), host("room", used(0, 20000))}
	vms := []MovableVM{vm("a", "hot", "", 2, 8192, true, false), vm("b", "hot", "", 2, 8192, true, false)}
	moves := RebalancePlan(fleet, vms, 0.9, 10)
	if len(moves) != 1 {
		t.Fatalf("moves = %+v, want one (room takes one 8 GiB VM under 90%%)", moves)
	}
}
