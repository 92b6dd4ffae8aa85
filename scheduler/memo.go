package scheduler

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Memo remembers, for a node list that changes a few nodes at a time (central's
// watched view of the fleet), each node's verdict on the last kind of request
// placed: which filters it breaks, leaving out the lease rules, and its score.
// PlaceShortMemo then repeats that work only for the nodes that changed since,
// or for every node when the kind of request changes, instead of running every
// filter and scoring every node on every placement. The lease rules, the only
// ones that look at the tenant asking, are checked afresh on each call for the
// nodes they can refuse (leased hosts, and Macs for a macOS guest), so
// placements of many tenants share one memo.
//
// The zero Memo is empty and ready. Its user tells it of every change to the
// node list: Forget for a node changed in place, Reset for a list rebuilt
// (nodes added, removed or reordered). A Memo is not safe for concurrent use:
// its user serialises the calls that take it and the changes they tell.
type Memo struct {
	kind    memoKind
	entries []memoEntry
	dirty   []int
	// byName: the list is in name order (strictly), so among equal scores the
	// node met first wins and a later one never needs its name compared.
	byName bool
	ready  bool
}

// memoKind is everything of a request and its policy that a node's filters
// (without the lease rules) and its score depend on.
type memoKind struct {
	guestOS          string
	vcpus, memoryMiB int64
	nested, network  bool
	selector         string // NodeSelector, in key order
	pol              Policy
	strategy         Strategy
}

type memoEntry struct {
	known  bool
	lessee bool  // the lease rules can refuse this node: check them per call
	set    rules // the filters the node breaks, the lease rules left out
	score  float64
}

// Forget tells the memo that node i of the list changed in place (same name).
func (m *Memo) Forget(i int) {
	if i >= 0 && i < len(m.entries) && m.entries[i].known {
		m.entries[i].known = false
		m.dirty = append(m.dirty, i)
	}
}

// Reset tells the memo that the list was rebuilt: it forgets every node.
func (m *Memo) Reset() {
	m.ready = false
}

// PlaceShortMemo is PlaceShort for a node list that m remembers: the same
// decision or the same error, given that m was told of every change to nodes
// since it was last used with them.
func PlaceShortMemo(nodes []Node, m *Memo, req Request, pol Policy, strategy Strategy, keep int) (Decision, error) {
	return placeShort(nodes, m, req, pol, strategy, keep)
}

// prepare readies m for a placement of req on nodes: it starts over when the
// list was rebuilt or the kind of request differs from the last.
func (m *Memo) prepare(nodes []Node, req *Request, pol Policy, strategy Strategy) {
	kind := memoKind{guestOS: req.GuestOS, vcpus: req.VCPUs, memoryMiB: req.MemoryMiB, nested: req.Nested,
		network: req.TenantNetwork, pol: pol, strategy: strategy}
	if len(req.NodeSelector) > 0 {
		// Each key and value with its length first: no two selectors encode alike,
		// whatever bytes their labels hold.
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(req.NodeSelector)) {
			for _, part := range []string{k, req.NodeSelector[k]} {
				b.WriteString(strconv.Itoa(len(part)))
				b.WriteByte(':')
				b.WriteString(part)
			}
		}
		kind.selector = b.String()
	}
	if !m.ready || len(m.entries) != len(nodes) {
		m.entries = make([]memoEntry, len(nodes))
		m.dirty = m.dirty[:0]
		m.byName = slices.IsSortedFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) })
		for i := 1; i < len(nodes) && m.byName; i++ {
			m.byName = nodes[i-1].Name != nodes[i].Name
		}
		m.kind, m.ready = kind, true
		return
	}
	if kind != m.kind {
		clear(m.entries)
		m.kind = kind
	}
	// A node changed in place keeps its name, so the order holds; a caller that
	// renamed one in place without Reset is caught here.
	for _, i := range m.dirty {
		if m.byName && ((i > 0 && nodes[i-1].Name >= nodes[i].Name) || (i+1 < len(nodes) && nodes[i].Name >= nodes[i+1].Name)) {
			m.byName = false
		}
	}
	m.dirty = m.dirty[:0]
}

// verdict is node i's broken rules and, when it fits, its score: remembered,
// or worked out and remembered, with the lease rules applied for this call.
func (m *Memo) verdict(i int, n *Node, f *filter, strategy Strategy) (rules, float64) {
	e := &m.entries[i]
	if !e.known {
		set := f.broken(n)
		// Strip the lease rules' verdict: they are checked per call below.
		set &^= 1<<ruleLeaseRequired | 1<<ruleLeasedOther | 1<<ruleLeasedOperator
		*e = memoEntry{known: true, set: set, lessee: n.LeasedBy != "" || f.req.GuestOS == GuestMacOS}
		if set == 0 { // the score is only read for a node that fits
			e.score = score(n, f.req, strategy)
		}
	}
	set := e.set
	if e.lessee {
		if ru, ok := leaseRule(n, f.req, f.pol, f.pinned); !ok {
			set |= 1 << ru
		}
	}
	return set, e.score
}
