package scheduler

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// host is a shared Linux node with 16 vCPUs and 32 GiB, nothing used.
func host(name string, mods ...func(*Node)) Node {
	n := Node{
		Name: name, Up: true, Healthy: true, GuestOS: []string{GuestLinux},
		Labels: map[string]string{"rack": "a1"}, Nested: true,
		Total: Resources{VCPUs: 16, MemoryMiB: 32768},
	}
	for _, m := range mods {
		m(&n)
	}
	return n
}

// mac is an unleased Mac with 12 vCPUs, 64 GiB and Apple's two macOS slots.
func mac(name string, mods ...func(*Node)) Node {
	n := host(name, func(n *Node) {
		n.Mac = true
		n.GuestOS = []string{GuestLinux, GuestMacOS}
		n.Total = Resources{VCPUs: 12, MemoryMiB: 65536, MacOSSlots: 2}
	})
	for _, m := range mods {
		m(&n)
	}
	return n
}

func leasedBy(tenant string) func(*Node) { return func(n *Node) { n.LeasedBy = tenant } }

func used(vcpus, mem int64) func(*Node) {
	return func(n *Node) { n.Used.VCPUs, n.Used.MemoryMiB = vcpus, mem }
}

func macGuests(tenant string, k int) func(*Node) {
	return func(n *Node) {
		for range k {
			n.VMs = append(n.VMs, VMRef{Tenant: tenant, GuestOS: GuestMacOS})
		}
	}
}

func linuxReq(tenant string, vcpus, mem int64) Request {
	return Request{Tenant: tenant, GuestOS: GuestLinux, VCPUs: vcpus, MemoryMiB: mem}
}

func macReq(tenant string) Request {
	return Request{Tenant: tenant, GuestOS: GuestMacOS, VCPUs: 4, MemoryMiB: 8192}
}

func noPlacement(t *testing.T, err error) *NoPlacementError {
	t.Helper()
	var npe *NoPlacementError
	if !errors.As(err, &npe) {
		t.Fatalf("want *NoPlacementError, got %v", err)
	}
	if !errors.Is(err, ErrNoPlacement) {
		t.Fatalf("errors.Is(%v, ErrNoPlacement) is false", err)
	}
	return npe
}

// Each filter, alone, refuses a node that every other filter accepts, with its
// own words.
func TestEachFilterRefusesWithItsReason(t *testing.T) {
	cases := []struct {
		name string
		node Node
		req  Request
		pol  Policy
		want string
	}{
		{"down", host("n", func(n *Node) { n.Up = false }), linuxReq("", 1, 1024), DefaultPolicy,
			"not reporting"},
		{"unhealthy", host("n", func(n *Node) { n.Healthy = false }), linuxReq("", 1, 1024), DefaultPolicy,
			"unhealthy"},
		{"no driver for the guest", host("n", func(n *Node) { n.GuestOS = []string{GuestMacOS} }), linuxReq("", 1, 1024), DefaultPolicy,
			"no healthy driver runs linux guests"},
		{"no driver for macOS on a Mac", mac("n", func(n *Node) { n.GuestOS = []string{GuestLinux} }), macReq(""), DefaultPolicy,
			"no healthy driver runs macos guests"},
		{"cordoned", host("n", func(n *Node) { n.Cordoned = true }), linuxReq("", 1, 1024), DefaultPolicy,
			"cordoned"},
		{"draining", host("n", func(n *Node) { n.Draining = true }), linuxReq("", 1, 1024), DefaultPolicy,
			"draining"},
		{"scrub pending", host("n", func(n *Node) { n.ScrubPending = true }), linuxReq("", 1, 1024), DefaultPolicy,
			"scrub pending: takes nothing until an operator scrubs it"},
		{"label differs", host("n"), Request{VCPUs: 1, MemoryMiB: 1024, NodeSelector: map[string]string{"rack": "b2"}}, DefaultPolicy,
			"label rack=b2 does not match"},
		{"label missing", host("n"), Request{VCPUs: 1, MemoryMiB: 1024, NodeSelector: map[string]string{"rack": "a1", "gpu": "yes"}}, DefaultPolicy,
			"label gpu=yes does not match"},
		{"nested", host("n", func(n *Node) { n.Nested = false }), Request{VCPUs: 1, MemoryMiB: 1024, Nested: true}, DefaultPolicy,
			"nested virtualisation wanted but not offered"},
		{"vCPUs", host("n", used(14, 0)), linuxReq("", 4, 1024), DefaultPolicy,
			"needs 4 vCPUs, 2 free"},
		{"one vCPU, overcommitted node", host("n", used(20, 0)), linuxReq("", 1, 1024), DefaultPolicy,
			"needs 1 vCPU, 0 free"},
		{"memory", host("n", used(0, 28672)), linuxReq("", 1, 8192), DefaultPolicy,
			"needs 8192 MiB, 4096 MiB free"},
		{"macOS on a Linux host with a macOS-capable driver (sim)", host("n", func(n *Node) { n.GuestOS = []string{GuestLinux, GuestMacOS} }), macReq(""), DefaultPolicy,
			"not a Mac"},
		{"macOS slots, counted from the VM list", mac("n", macGuests("", 2)), macReq(""), DefaultPolicy,
			"no free macOS slot (2 of 2 in use; Apple's licence allows 2 per Mac)"},
		{"macOS slots, counted from Used", mac("n", func(n *Node) { n.Used.MacOSSlots = 2 }), macReq(""), DefaultPolicy,
			"no free macOS slot (2 of 2 in use; Apple's licence allows 2 per Mac)"},
		{"macOS slots, never more than the licence", mac("n", macGuests("", 2), func(n *Node) { n.Total.MacOSSlots = 8 }), macReq(""), DefaultPolicy,
			"no free macOS slot (2 of 2 in use; Apple's licence allows 2 per Mac)"},
		{"macOS slots, fewer when the node says so", mac("n", macGuests("", 1), func(n *Node) { n.Total.MacOSSlots = 1 }), macReq(""), DefaultPolicy,
			"no free macOS slot (1 of 1 in use; Apple's licence allows 2 per Mac)"},
		{"require_lease_for_macos, unleased Mac", mac("n"), macReq("acme"), DefaultPolicy,
			"not leased by acme (require_lease_for_macos)"},
		{"require_lease_for_macos, another tenant's Mac", mac("n", leasedBy("bob")), macReq("acme"), DefaultPolicy,
			"leased by another tenant (require_lease_for_macos)"},
		{"exclusive_leased_hosts, another tenant's Linux VM", mac("n", leasedBy("bob")), linuxReq("acme", 1, 1024), DefaultPolicy,
			"leased by another tenant (exclusive_leased_hosts)"},
		{"exclusive_leased_hosts, unpinned operator VM", host("n", leasedBy("bob")), linuxReq("", 1, 1024), DefaultPolicy,
			"leased by bob (exclusive_leased_hosts); name the node to place an operator VM there"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Place([]Node{tc.node}, tc.req, tc.pol, BinPack)
			npe := noPlacement(t, err)
			if len(npe.Verdicts) != 1 {
				t.Fatalf("verdicts = %+v, want one", npe.Verdicts)
			}
			v := npe.Verdicts[0]
			if v.Fits || !slices.Equal(v.Reasons, []string{tc.want}) {
				t.Fatalf("reasons = %q, want exactly [%q]", v.Reasons, tc.want)
			}
		})
	}
}

// Every filter that refuses is listed, in filter order, so an operator sees that
// uncordoning alone would not help.
func TestAllRefusalsListedInFilterOrder(t *testing.T) {
	n := host("n", used(16, 32768), func(n *Node) { n.Cordoned, n.Up = true, false })
	_, err := Place([]Node{n}, linuxReq("", 2, 2048), DefaultPolicy, BinPack)
	want := []string{"not reporting", "cordoned", "needs 2 vCPUs, 0 free", "needs 2048 MiB, 0 MiB free"}
	if got := noPlacement(t, err).Verdicts[0].Reasons; !slices.Equal(got, want) {
		t.Fatalf("reasons = %q, want %q", got, want)
	}
}

func TestLeaseRules(t *testing.T) {
	off := Policy{}
	onlyExclusive := Policy{ExclusiveLeasedHosts: true}
	cases := []struct {
		name string
		node Node
		req  Request
		pol  Policy
		fits bool
	}{
		{"tenant's macOS on its leased Mac with a free slot", mac("m", leasedBy("acme"), macGuests("acme", 1)), macReq("acme"), DefaultPolicy, true},
		{"tenant's macOS not on another tenant's Mac", mac("m", leasedBy("bob")), macReq("acme"), DefaultPolicy, false},
		{"tenant's macOS not on an unleased Mac under require_lease_for_macos", mac("m"), macReq("acme"), DefaultPolicy, false},
		{"tenant's macOS on an unleased Mac when the policy is off", mac("m"), macReq("acme"), onlyExclusive, true},
		{"require off, exclusive on: still not on another tenant's Mac", mac("m", leasedBy("bob")), macReq("acme"), onlyExclusive, false},
		{"both off: another tenant's Mac is shared", mac("m", leasedBy("bob")), macReq("acme"), off, true},
		{"exclusive host refuses another tenant's Linux VM", host("h", leasedBy("bob")), linuxReq("acme", 2, 2048), DefaultPolicy, false},
		{"lessee's Linux VM may use its leased host", host("h", leasedBy("acme")), linuxReq("acme", 2, 2048), DefaultPolicy, true},
		{"lessee's Linux VM may use its leased Mac", mac("m", leasedBy("acme")), linuxReq("acme", 2, 2048), DefaultPolicy, true},
		{"tenant's Linux VM on a shared node", host("h"), linuxReq("acme", 2, 2048), DefaultPolicy, true},
		{"exclusive off: another tenant's leased host takes Linux", host("h", leasedBy("bob")), linuxReq("acme", 2, 2048), off, true},
		{"operator's macOS on an unleased Mac under require_lease_for_macos", mac("m"), macReq(""), DefaultPolicy, true},
		{"operator's unpinned VM not on a leased host", host("h", leasedBy("bob")), linuxReq("", 2, 2048), DefaultPolicy, false},
		{"operator's pinned VM on a leased host", host("h", leasedBy("bob")), Request{GuestOS: GuestLinux, VCPUs: 2, MemoryMiB: 2048, Node: "h"}, DefaultPolicy, true},
		{"operator's pinned macOS on a leased Mac", mac("m", leasedBy("bob")), Request{GuestOS: GuestMacOS, VCPUs: 2, MemoryMiB: 2048, Node: "m"}, DefaultPolicy, true},
		{"tenant's pin does not lift the lease rules", host("h", leasedBy("bob")), Request{Tenant: "acme", VCPUs: 2, MemoryMiB: 2048, Node: "h"}, DefaultPolicy, false},
		{"exclusive off: operator's unpinned VM on a leased host", host("h", leasedBy("bob")), linuxReq("", 2, 2048), off, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Place([]Node{tc.node}, tc.req, tc.pol, BinPack)
			if tc.fits && (err != nil || d.Node != tc.node.Name) {
				t.Fatalf("want placed on %s, got %+v, %v", tc.node.Name, d, err)
			}
			if !tc.fits {
				noPlacement(t, err)
			}
		})
	}
}

// Two macOS guests fill a Mac; the third is refused by the slot rule, by name.
func TestThirdMacOSGuestRefusedBySlot(t *testing.T) {
	fleet := []Node{mac("studio-1", leasedBy("acme")), host("linux-1")}
	for k := range 2 {
		d, err := Place(fleet, macReq("acme"), DefaultPolicy, BinPack)
		if err != nil || d.Node != "studio-1" {
			t.Fatalf("macOS guest %d: got %+v, %v", k+1, d, err)
		}
		fleet[0].Used.VCPUs += 4
		fleet[0].Used.MemoryMiB += 8192
		fleet[0].VMs = append(fleet[0].VMs, VMRef{Tenant: "acme", GuestOS: GuestMacOS})
	}
	_, err := Place(fleet, macReq("acme"), DefaultPolicy, BinPack)
	npe := noPlacement(t, err)
	if npe.Summary != "no Mac leased by acme has a free macOS slot" {
		t.Fatalf("summary = %q", npe.Summary)
	}
	if r := npe.Verdicts[1].Reasons; npe.Verdicts[1].Node != "studio-1" || !slices.Contains(r, "no free macOS slot (2 of 2 in use; Apple's licence allows 2 per Mac)") {
		t.Fatalf("studio-1 verdict = %+v", npe.Verdicts[1])
	}
}

func TestStrategyChoices(t *testing.T) {
	fleet := []Node{
		host("half", used(8, 16384)),
		host("empty"),
		host("most", used(12, 24576)),
		host("full", used(15, 32000)), // cannot take the request
	}
	req := linuxReq("", 2, 2048)
	cases := []struct {
		strategy Strategy
		want     string
		reason   string
	}{
		{BinPack, "most", "bin-pack: fullest of 3 fitting nodes, 84% full after placement (vCPUs 88%, memory 81%)"},
		{Spread, "empty", "spread: emptiest of 3 fitting nodes, 9% full after placement (vCPUs 12%, memory 6%)"},
	}
	for _, tc := range cases {
		t.Run(tc.strategy.String(), func(t *testing.T) {
			d, err := Place(fleet, req, DefaultPolicy, tc.strategy)
			if err != nil || d.Node != tc.want || d.Reason != tc.reason {
				t.Fatalf("got %q (%q), %v; want %q (%q)", d.Node, d.Reason, err, tc.want, tc.reason)
			}
		})
	}
}

// Linux guests go to a Mac only when nothing else fits: a Mac's memory is the
// only place macOS guests can run.
func TestLinuxGuestsPreferNonMacs(t *testing.T) {
	fleet := []Node{mac("mac-1", used(10, 60000)), host("linux-1")}
	for _, s := range []Strategy{BinPack, Spread} {
		d, err := Place(fleet, linuxReq("", 1, 1024), DefaultPolicy, s)
		if err != nil || d.Node != "linux-1" {
			t.Fatalf("%s: got %+v, %v; want linux-1", s, d, err)
		}
	}
	fleet[1].Cordoned = true
	d, err := Place(fleet, linuxReq("", 1, 1024), DefaultPolicy, BinPack)
	if err != nil || d.Node != "mac-1" || !strings.HasSuffix(d.Reason, "; a Mac, taken only because no other node fits") {
		t.Fatalf("got %+v, %v; want mac-1 with the Mac note", d, err)
	}
}

// Equal nodes go to the first name, and the input order changes nothing.
func TestTiesBrokenByNameWhateverTheOrder(t *testing.T) {
	fleet := []Node{host("n3"), host("n1", used(4, 4096)), host("n2"), host("n1b", used(4, 4096)), host("n0", func(n *Node) { n.Cordoned = true })}
	want := map[Strategy]string{BinPack: "n1", Spread: "n2"}
	for s, node := range want {
		first, err := Place(fleet, linuxReq("", 2, 2048), DefaultPolicy, s)
		if err != nil || first.Node != node {
			t.Fatalf("%s: got %+v, %v; want %s", s, first, err, node)
		}
		names := make([]string, len(first.Considered))
		for k, v := range first.Considered {
			names[k] = v.Node
		}
		if !slices.IsSorted(names) {
			t.Fatalf("considered not in name order: %v", names)
		}
		r := rand.New(rand.NewPCG(1, 2))
		for range 50 {
			shuffled := slices.Clone(fleet)
			r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			again, err := Place(shuffled, linuxReq("", 2, 2048), DefaultPolicy, s)
			if err != nil || !reflect.DeepEqual(again, first) {
				t.Fatalf("%s: order changed the decision: %+v vs %+v", s, again, first)
			}
		}
	}
}

func TestPinnedNode(t *testing.T) {
	fleet := []Node{host("a", used(12, 0)), host("b"), host("c", func(n *Node) { n.Cordoned = true })}

	// The pin wins over the strategy, which would take a.
	req := linuxReq("", 2, 2048)
	req.Node = "b"
	d, err := Place(fleet, req, DefaultPolicy, BinPack)
	if err != nil || d.Node != "b" || len(d.Considered) != 1 || !strings.HasPrefix(d.Reason, "pinned by the request") {
		t.Fatalf("got %+v, %v", d, err)
	}

	req.Node = "c"
	_, err = Place(fleet, req, DefaultPolicy, BinPack)
	npe := noPlacement(t, err)
	if npe.Summary != "node c cannot take 2 vCPUs / 2048 MiB for linux: cordoned" || len(npe.Verdicts) != 1 {
		t.Fatalf("got %q, %+v", npe.Summary, npe.Verdicts)
	}

	req.Node = "nope"
	_, err = Place(fleet, req, DefaultPolicy, BinPack)
	if npe := noPlacement(t, err); npe.Summary != "node nope is not registered" {
		t.Fatalf("summary = %q", npe.Summary)
	}
}

func TestNoPlacementSummary(t *testing.T) {
	cases := []struct {
		name  string
		fleet []Node
		req   Request
		want  string
	}{
		{"most common rule first",
			[]Node{host("a", used(0, 30000)), host("b", used(0, 28000)), host("c", func(n *Node) { n.Cordoned = true })},
			linuxReq("acme", 4, 8192),
			"no node can take 4 vCPUs / 8192 MiB for linux: 2 nodes lack memory, 1 is cordoned"},
		{"one node, singular",
			[]Node{host("a", func(n *Node) { n.Up = false })},
			linuxReq("", 1, 512),
			"no node can take 1 vCPU / 512 MiB for linux: 1 node is not reporting"},
		{"equal counts in filter order, the rest folded",
			[]Node{
				host("a", func(n *Node) { n.Up = false }), host("b", func(n *Node) { n.Healthy = false }),
				host("c", func(n *Node) { n.Draining = true }), host("d", func(n *Node) { n.ScrubPending = true }),
				host("e", leasedBy("bob")), host("f", used(16, 0)),
			},
			linuxReq("acme", 2, 2048),
			"no node can take 2 vCPUs / 2048 MiB for linux: 1 node is not reporting, 1 is unhealthy, 1 is draining, 1 awaits a scrub, 2 for other reasons"},
		{"empty fleet",
			nil, linuxReq("", 1, 512),
			"no node can take 1 vCPU / 512 MiB for linux: no node is registered"},
		{"tenant leases no Mac",
			[]Node{mac("m1"), mac("m2", leasedBy("bob")), host("h", leasedBy("acme"))},
			macReq("acme"),
			"acme leases no Mac that can run macOS guests, and require_lease_for_macos runs a tenant's macOS guests only on Macs it leases"},
		{"tenant's Macs refused for something else",
			[]Node{mac("m1", leasedBy("acme"), func(n *Node) { n.Cordoned = true }), mac("m2", leasedBy("acme"), used(0, 60000)), mac("m3"), host("h")},
			macReq("acme"),
			"no Mac leased by acme can take 4 vCPUs / 8192 MiB for macos: 1 Mac is cordoned, 1 lacks memory"},
		{"operator's macOS on a Linux fleet",
			[]Node{host("a"), host("b")},
			macReq(""),
			"no node can take 4 vCPUs / 8192 MiB for macos: 2 nodes have no healthy driver for macos"},
		{"operator kept off leased hosts",
			[]Node{host("a", leasedBy("acme")), host("b", leasedBy("bob"))},
			linuxReq("", 1, 512),
			"no node can take 1 vCPU / 512 MiB for linux: 2 nodes are leased and were not named"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Place(tc.fleet, tc.req, DefaultPolicy, BinPack)
			if npe := noPlacement(t, err); npe.Summary != tc.want || err.Error() != tc.want {
				t.Fatalf("summary = %q\nwant      %q", npe.Summary, tc.want)
			}
		})
	}
}

// A tenant reads its refusals, so they never name another tenant.
func TestTenantRefusalsNeverNameOtherTenants(t *testing.T) {
	fleet := []Node{mac("m1", leasedBy("bob")), host("h1", leasedBy("bob"))}
	for _, req := range []Request{macReq("acme"), linuxReq("acme", 1, 512)} {
		_, err := Place(fleet, req, DefaultPolicy, BinPack)
		npe := noPlacement(t, err)
		if strings.Contains(npe.Summary, "bob") {
			t.Fatalf("summary names bob: %q", npe.Summary)
		}
		for _, v := range npe.Verdicts {
			for _, r := range v.Reasons {
				if strings.Contains(r, "bob") {
					t.Fatalf("reason names bob: %q", r)
				}
			}
		}
	}
}

func TestInvalidRequests(t *testing.T) {
	fleet := []Node{host("a")}
	for _, req := range []Request{linuxReq("", 0, 512), linuxReq("", 1, 0), linuxReq("", -1, 512)} {
		if _, err := Place(fleet, req, DefaultPolicy, BinPack); !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("%+v: err = %v, want ErrInvalidRequest", req, err)
		}
	}
	if _, err := Place(fleet, linuxReq("", 1, 512), DefaultPolicy, Strategy(7)); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("unknown strategy: err = %v", err)
	}
	// An empty guest OS is Linux, as on the node agent.
	if d, err := Place(fleet, Request{VCPUs: 1, MemoryMiB: 512}, DefaultPolicy, BinPack); err != nil || d.Node != "a" {
		t.Fatalf("default guest: %+v, %v", d, err)
	}
}

func TestParseStrategy(t *testing.T) {
	for in, want := range map[string]Strategy{"": BinPack, "binpack": BinPack, "spread": Spread} {
		if got, err := ParseStrategy(in); err != nil || got != want {
			t.Fatalf("ParseStrategy(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseStrategy("random"); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("ParseStrategy(random) err = %v", err)
	}
}

func TestPlaceDoesNotModifyTheSnapshot(t *testing.T) {
	fleet := []Node{host("b"), mac("a", leasedBy("acme"), macGuests("acme", 1))}
	before := deepCopy(fleet)
	_, _ = Place(fleet, macReq("acme"), DefaultPolicy, BinPack)
	_, _ = Place(fleet, Request{VCPUs: 1, MemoryMiB: 1, NodeSelector: map[string]string{"x": "y"}}, DefaultPolicy, Spread)
	if !reflect.DeepEqual(fleet, before) {
		t.Fatal("Place changed its input")
	}
}

func deepCopy(nodes []Node) []Node {
	out := slices.Clone(nodes)
	for i := range out {
		out[i].VMs = slices.Clone(out[i].VMs)
		out[i].GuestOS = slices.Clone(out[i].GuestOS)
		if out[i].Labels != nil {
			m := map[string]string{}
			for k, v := range out[i].Labels {
				m[k] = v
			}
			out[i].Labels = m
		}
	}
	return out
}
