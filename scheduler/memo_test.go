package scheduler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// Random fleets changing a node at a time, placed on by many tenants with a
// few kinds of request: PlaceShortMemo, told of each change, decides exactly
// as PlaceShort does on the same list (the same choice, reason, short list and
// scores, or the same error), across changes of request kind, of policy, of
// the list's order and of its length.
func TestPlaceShortMemoDecidesAsPlaceShort(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 9))
	hits, sorted := 0, 0
	for c := range 3000 {
		nodes, req, pol, strategy := genCase(&bytesReader{b: randomBytes(rng, 400)})
		req.Node = "" // a pinned request goes to Place, memo or not
		var m Memo
		for step := range 40 {
			switch r := rng.IntN(10); {
			case r < 5 && len(nodes) > 0: // a node changes in place
				i := rng.IntN(len(nodes))
				mutate(rng, &nodes[i])
				m.Forget(i)
			case r == 5: // the list is rebuilt in name order (as central's view keeps it)
				slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
				m.Reset()
			case r == 6: // a node joins
				extra, _, _, _ := genCase(&bytesReader{b: randomBytes(rng, 400)})
				if len(extra) > 0 && !slices.ContainsFunc(nodes, func(n Node) bool { return n.Name == extra[0].Name }) {
					nodes = append(nodes, extra[0])
					m.Reset()
				}
			case r == 7: // another kind of request
				req.VCPUs = int64(rng.IntN(9)) - 1
				req.GuestOS = []string{GuestLinux, GuestMacOS, ""}[rng.IntN(3)]
			case r == 8:
				pol.ExclusiveLeasedHosts = !pol.ExclusiveLeasedHosts
			}
			req.Tenant = tenants[rng.IntN(len(tenants))] // tenants share the memo
			keep := 1 + rng.IntN(4)
			want, werr := PlaceShort(nodes, req, pol, strategy, keep)
			got, gerr := PlaceShortMemo(nodes, &m, req, pol, strategy, keep)
			if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
				t.Fatalf("case %d step %d: PlaceShort says %v, PlaceShortMemo %v", c, step, werr, gerr)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("case %d step %d: PlaceShort decided %+v, PlaceShortMemo %+v", c, step, want, got)
			}
			if werr == nil {
				hits++
			}
			if m.byName {
				sorted++
			}
		}
	}
	if hits < 10000 || sorted < 10000 {
		t.Fatalf("only %d placements and %d on lists in name order: the generator does not exercise the memo", hits, sorted)
	}
}

// mutate changes what a node's verdict rests on: its use, state, lessee, VMs.
func mutate(rng *rand.Rand, n *Node) {
	switch rng.IntN(6) {
	case 0:
		n.Used.VCPUs += int64(rng.IntN(5)) - 2
	case 1:
		n.Used.MemoryMiB += int64(rng.IntN(5)-2) * 256
	case 2:
		n.Cordoned = !n.Cordoned
	case 3:
		n.LeasedBy = tenants[rng.IntN(len(tenants))]
	case 4:
		n.Up = !n.Up
	case 5:
		n.VMs = append(n.VMs, VMRef{Tenant: tenants[rng.IntN(len(tenants))], GuestOS: GuestMacOS})
	}
}

// A memo that was not told of a change keeps deciding on what it remembers:
// this is why its user must tell it (and why the test above proves something).
func TestPlaceShortMemoDecidesOnWhatItWasTold(t *testing.T) {
	nodes := make([]Node, 5)
	for i := range nodes {
		nodes[i] = host(fmt.Sprintf("n%d", i))
	}
	req := Request{Tenant: "acme", GuestOS: GuestLinux, VCPUs: 1, MemoryMiB: 256}
	var m Memo
	if d, err := PlaceShortMemo(nodes, &m, req, DefaultPolicy, BinPack, 2); err != nil || d.Node != "n0" {
		t.Fatalf("empty fleet: %s, %v; want n0 (the first among equals)", d.Node, err)
	}
	nodes[3].Used.VCPUs = nodes[3].Total.VCPUs / 2 // n3 is now the fullest
	if d, _ := PlaceShortMemo(nodes, &m, req, DefaultPolicy, BinPack, 2); d.Node != "n0" {
		t.Fatalf("untold change: chose %s, want n0 (what the memo remembers)", d.Node)
	}
	m.Forget(3)
	if d, _ := PlaceShortMemo(nodes, &m, req, DefaultPolicy, BinPack, 2); d.Node != "n3" {
		t.Fatalf("after Forget(3): chose %s, want n3", d.Node)
	}
}

// Selectors that a naive joining of their labels would confuse are two kinds
// of request to the memo.
func TestPlaceShortMemoTellsSelectorsApart(t *testing.T) {
	nodes := []Node{host("n0", func(n *Node) { n.Labels = map[string]string{"a": "b\x00c\x00d"} }),
		host("n1", func(n *Node) { n.Labels = map[string]string{"a": "b", "c": "d"} })}
	var m Memo
	for _, sel := range []map[string]string{{"a": "b\x00c\x00d"}, {"a": "b", "c": "d"}, {"a": "b\x00c\x00d"}} {
		req := Request{Tenant: "acme", GuestOS: GuestLinux, VCPUs: 1, MemoryMiB: 256, NodeSelector: sel}
		want, werr := PlaceShort(nodes, req, DefaultPolicy, BinPack, 2)
		got, gerr := PlaceShortMemo(nodes, &m, req, DefaultPolicy, BinPack, 2)
		if werr != nil || gerr != nil || got.Node != want.Node {
			t.Fatalf("selector %q: PlaceShortMemo chose %s (%v), PlaceShort %s (%v)", sel, got.Node, gerr, want.Node, werr)
		}
	}
}
