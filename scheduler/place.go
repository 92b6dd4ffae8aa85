package scheduler

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// rule names a filter. The values follow the filter order, so the lowest rule a
// node breaks is its first refusal.
type rule uint8

const (
	ruleDown rule = iota
	ruleUnhealthy
	ruleNoDriver
	ruleCordoned
	ruleDraining
	ruleScrub
	ruleSelector
	ruleNested
	ruleNoNetwork // a tenant-network VM on a node without a network plugin up
	ruleVCPUs
	ruleMemory
	ruleNotMac
	ruleSlots
	ruleLeaseRequired  // a tenant's macOS guest on a Mac it does not lease
	ruleLeasedOther    // a host leased by another tenant
	ruleLeasedOperator // a leased host an operator request did not name
	ruleCount
)

// rules is a set of broken rules.
type rules uint32

func (s rules) first() rule { return rule(bits.TrailingZeros32(uint32(s))) }

// filter is one request's view of the filters, with what does not depend on the
// node worked out once: a 2,000-node fleet otherwise sorts the same selector
// keys and formats the same refusal 2,000 times.
type filter struct {
	req     *Request
	pol     Policy
	pinned  bool
	labels  []labelRule // req.NodeSelector, sorted by key so reasons keep one order
	noGuest string
	lease   [ruleCount]string // refusal texts that name no node
	// needVCPUs and needMemory start the resource refusals ("needs 4 vCPUs, ").
	needVCPUs, needMemory string
	// texts holds every node's refusals back to back, so a call allocates a
	// few large arrays rather than one small slice per refused node.
	texts []string
}

type labelRule struct{ key, value, refusal string }

func newFilter(req *Request, pol Policy) *filter {
	f := &filter{req: req, pol: pol, pinned: req.Node != ""}
	for k, v := range req.NodeSelector {
		f.labels = append(f.labels, labelRule{k, v, fmt.Sprintf("label %s=%s does not match", k, v)})
	}
	slices.SortFunc(f.labels, func(a, b labelRule) int { return strings.Compare(a.key, b.key) })
	f.needVCPUs = "needs " + plural(req.VCPUs, "vCPU") + ", "
	f.needMemory = "needs " + strconv.FormatInt(req.MemoryMiB, 10) + " MiB, "
	f.noGuest = fmt.Sprintf("no healthy driver runs %s guests", req.GuestOS)
	f.lease[ruleLeaseRequired] = fmt.Sprintf("not leased by %s (require_lease_for_macos)", req.Tenant)
	f.lease[ruleLeasedOther] = "leased by another tenant (exclusive_leased_hosts)"
	if req.GuestOS == GuestMacOS && req.Tenant != "" && pol.RequireLeaseForMacOS {
		f.lease[ruleLeasedOther] = "leased by another tenant (require_lease_for_macos)"
	}
	return f
}

// check runs every filter on n, in the documented order, and returns the rules
// it broke with one reason each (none: the node fits). Every filter runs even
// after one refused, so an operator sees at once that uncordoning a full node
// would not help. The reasons stay valid across later calls.
func (f *filter) check(n *Node) (rules, []string) {
	set := f.broken(n)
	if set == 0 {
		return 0, nil
	}
	start := len(f.texts)
	f.explain(n, set)
	return set, f.texts[start:len(f.texts):len(f.texts)]
}

// broken runs every filter on n and returns the rules it broke, without a
// word of why (explain writes that): what a choice alone needs.
func (f *filter) broken(n *Node) rules {
	req := f.req
	var set rules
	if !n.Up {
		set |= 1 << ruleDown
	}
	switch {
	case !n.Healthy:
		set |= 1 << ruleUnhealthy
	case !slices.Contains(n.GuestOS, req.GuestOS):
		set |= 1 << ruleNoDriver
	}
	if n.Cordoned {
		set |= 1 << ruleCordoned
	}
	if n.Draining {
		set |= 1 << ruleDraining
	}
	if n.ScrubPending {
		set |= 1 << ruleScrub
	}
	for _, l := range f.labels {
		if v, ok := n.Labels[l.key]; !ok || v != l.value {
			set |= 1 << ruleSelector
			break
		}
	}
	if req.Nested && !n.Nested {
		set |= 1 << ruleNested
	}
	if req.TenantNetwork && len(n.Networks) == 0 {
		set |= 1 << ruleNoNetwork
	}
	if req.VCPUs > free(n.Total.VCPUs, n.Used.VCPUs) {
		set |= 1 << ruleVCPUs
	}
	if req.MemoryMiB > free(n.Total.MemoryMiB, n.Used.MemoryMiB) {
		set |= 1 << ruleMemory
	}
	if req.GuestOS == GuestMacOS {
		if !n.Mac {
			set |= 1 << ruleNotMac
		} else if used, total := macSlots(n); used >= total {
			set |= 1 << ruleSlots
		}
	}
	if ru, ok := leaseRule(n, req, f.pol, f.pinned); !ok {
		set |= 1 << ru
	}
	return set
}

// explain appends to f.texts why n broke each rule of set, in filter order
// (one text per rule, one per mismatched label for the selector).
func (f *filter) explain(n *Node, set rules) {
	for ru := range ruleCount {
		if set&(1<<ru) == 0 {
			continue
		}
		switch ru {
		case ruleDown:
			f.texts = append(f.texts, "not reporting")
		case ruleUnhealthy:
			f.texts = append(f.texts, "unhealthy")
		case ruleNoDriver:
			f.texts = append(f.texts, f.noGuest)
		case ruleCordoned:
			f.texts = append(f.texts, "cordoned")
		case ruleDraining:
			f.texts = append(f.texts, "draining")
		case ruleScrub:
			f.texts = append(f.texts, "scrub pending: takes nothing until an operator scrubs it")
		case ruleSelector:
			for _, l := range f.labels {
				if v, ok := n.Labels[l.key]; !ok || v != l.value {
					f.texts = append(f.texts, l.refusal)
				}
			}
		case ruleNested:
			f.texts = append(f.texts, "nested virtualisation wanted but not offered")
		case ruleNoNetwork:
			f.texts = append(f.texts, NoNetworkPlugin)
		case ruleVCPUs:
			f.texts = append(f.texts, f.needVCPUs+strconv.FormatInt(max(free(n.Total.VCPUs, n.Used.VCPUs), 0), 10)+" free")
		case ruleMemory:
			f.texts = append(f.texts, f.needMemory+strconv.FormatInt(max(free(n.Total.MemoryMiB, n.Used.MemoryMiB), 0), 10)+" MiB free")
		case ruleNotMac:
			f.texts = append(f.texts, "not a Mac")
		case ruleSlots:
			used, total := macSlots(n)
			f.texts = append(f.texts, fmt.Sprintf("no free macOS slot (%d of %d in use; Apple's licence allows %d per Mac)",
				used, total, MacOSSlotsPerMac))
		case ruleLeasedOperator:
			// Only the operator reads this, so it may name the lessee.
			f.texts = append(f.texts, fmt.Sprintf("leased by %s (exclusive_leased_hosts); name the node to place an operator VM there", n.LeasedBy))
		case ruleLeaseRequired, ruleLeasedOther:
			f.texts = append(f.texts, f.lease[ru])
		}
	}
}

// leaseRule applies the lease rules of the package doc. It is shared with
// Capacity and RebalancePlan so the three can never disagree.
func leaseRule(n *Node, req *Request, pol Policy, pinned bool) (rule, bool) {
	if req.Tenant != "" && req.GuestOS == GuestMacOS && pol.RequireLeaseForMacOS {
		switch n.LeasedBy {
		case req.Tenant:
			return 0, true
		case "":
			return ruleLeaseRequired, false
		default:
			return ruleLeasedOther, false
		}
	}
	if n.LeasedBy == "" || n.LeasedBy == req.Tenant || !pol.ExclusiveLeasedHosts {
		return 0, true
	}
	if req.Tenant == "" {
		if pinned {
			return 0, true
		}
		return ruleLeasedOperator, false
	}
	return ruleLeasedOther, false
}

// free is total-used without overflow; corrupt negative figures count as zero.
func free(total, used int64) int64 { return max(total, 0) - max(used, 0) }

// macSlots returns the macOS guests on a Mac and how many it may run. Used and
// the VM list may lag each other (a reservation is in Used before the VM shows
// up), so the larger wins: overshooting Apple's licence is the error to avoid.
func macSlots(n *Node) (used, total int64) {
	total = n.Total.MacOSSlots
	if total <= 0 || total > MacOSSlotsPerMac {
		total = MacOSSlotsPerMac
	}
	var listed int64
	for _, vm := range n.VMs {
		if vm.GuestOS == GuestMacOS {
			listed++
		}
	}
	return max(n.Used.MacOSSlots, listed, 0), total
}

// fill is how full n would be after taking req: the mean of its vCPU and memory
// fractions, and of its macOS slot fraction for a macOS guest.
func fill(n *Node, req *Request) (mean, vcpu, mem float64) {
	vcpu = fraction(max(n.Used.VCPUs, 0)+req.VCPUs, n.Total.VCPUs)
	mem = fraction(max(n.Used.MemoryMiB, 0)+req.MemoryMiB, n.Total.MemoryMiB)
	if req.GuestOS == GuestMacOS {
		used, total := macSlots(n)
		return (vcpu + mem + fraction(used+1, total)) / 3, vcpu, mem
	}
	return (vcpu + mem) / 2, vcpu, mem
}

func fraction(part, whole int64) float64 {
	if whole <= 0 {
		return 1
	}
	return float64(part) / float64(whole)
}

// macPenalty drops every Mac below every other node for a Linux guest (fill
// scores lie in [0, 1]).
const macPenalty = 2

func score(n *Node, req *Request, strategy Strategy) float64 {
	f, _, _ := fill(n, req)
	s := f
	if strategy == Spread {
		s = 1 - f
	}
	if req.GuestOS != GuestMacOS && n.Mac {
		s -= macPenalty
	}
	return s
}

// Place picks the node for req among nodes, or returns a *NoPlacementError that
// says why no node fits (an error matching ErrInvalidRequest for a request no
// fleet could take, such as zero vCPUs). nodes is a snapshot and is not
// modified; the result depends only on its contents, not on its order.
func Place(nodes []Node, req Request, pol Policy, strategy Strategy) (Decision, error) {
	if req.GuestOS == "" {
		req.GuestOS = GuestLinux
	}
	if req.VCPUs <= 0 || req.MemoryMiB <= 0 {
		return Decision{}, fmt.Errorf("%w: vcpus and memory_mib must be positive (got %d and %d)",
			ErrInvalidRequest, req.VCPUs, req.MemoryMiB)
	}
	if strategy != BinPack && strategy != Spread {
		return Decision{}, fmt.Errorf("%w: unknown strategy %s", ErrInvalidRequest, strategy)
	}
	pinned := req.Node != ""
	order := byName(nodes)
	f := newFilter(&req, pol)

	// Verdicts come out in name order, so a strictly greater score is needed to
	// win and equal scores go to the name that sorts first.
	considered := make([]Verdict, 0, len(nodes))
	sets := make([]rules, 0, len(nodes))
	best := -1
	var chosen *Node
	for _, i := range order {
		n := &nodes[i]
		if pinned && n.Name != req.Node {
			continue
		}
		set, reasons := f.check(n)
		v := Verdict{Node: n.Name, Reasons: reasons}
		if set == 0 {
			v.Fits = true
			v.Score = score(n, &req, strategy)
			if best < 0 || v.Score > considered[best].Score {
				best, chosen = len(considered), n
			}
		}
		considered = append(considered, v)
		sets = append(sets, set)
	}
	if best < 0 {
		return Decision{}, &NoPlacementError{
			Summary:  summarize(&req, pol, considered, sets),
			Verdicts: considered,
		}
	}

	fits := 0
	for _, v := range considered {
		if v.Fits {
			fits++
		}
	}
	return Decision{Node: chosen.Name, Reason: choiceReason(chosen, &req, strategy, fits), Considered: considered}, nil
}

// choiceReason says why n won among fits fitting nodes.
func choiceReason(n *Node, req *Request, strategy Strategy, fits int) string {
	pinned := req.Node != ""
	mean, vcpu, mem := fill(n, req)
	var why string
	switch {
	case pinned:
		why = "pinned by the request"
	case strategy == Spread:
		why = fmt.Sprintf("spread: emptiest of %s", plural(int64(fits), "fitting node"))
	default:
		why = fmt.Sprintf("bin-pack: fullest of %s", plural(int64(fits), "fitting node"))
	}
	why += fmt.Sprintf(", %.0f%% full after placement (vCPUs %.0f%%, memory %.0f%%", 100*mean, 100*vcpu, 100*mem)
	if req.GuestOS == GuestMacOS {
		used, total := macSlots(n)
		why += fmt.Sprintf(", macOS slots %d of %d", used+1, total)
	}
	why += ")"
	if req.GuestOS != GuestMacOS && n.Mac && !pinned {
		why += "; a Mac, taken only because no other node fits"
	}
	return why
}

// PlaceShort is Place for a caller that needs the choice and a short list,
// not every node's verdict: the same choice and reason, or the same error,
// but Decision.Considered holds only the verdicts of the keep best-scored
// fitting nodes (the chosen one among them), in name order, and refused
// nodes cost no words. On a 2,000-node fleet that is a pass of plain
// comparisons instead of 2,000 verdicts, most of them refusals written out.
// keep below 1 counts as 1.
func PlaceShort(nodes []Node, req Request, pol Policy, strategy Strategy, keep int) (Decision, error) {
	return placeShort(nodes, nil, req, pol, strategy, keep)
}

// placeShort is PlaceShort, and PlaceShortMemo with a memo m.
func placeShort(nodes []Node, m *Memo, req Request, pol Policy, strategy Strategy, keep int) (Decision, error) {
	if req.GuestOS == "" {
		req.GuestOS = GuestLinux
	}
	if req.Node != "" || req.VCPUs <= 0 || req.MemoryMiB <= 0 || (strategy != BinPack && strategy != Spread) {
		return Place(nodes, req, pol, strategy) // one node, or an invalid request: nothing to save
	}
	keep = max(keep, 1)
	f := newFilter(&req, pol)
	// top holds the best fitting nodes so far, best first: a higher score,
	// then the name that sorts first (Place's tie rule).
	type cand struct {
		n     *Node
		score float64
	}
	top := make([]cand, 0, keep+1)
	// c comes later in the list than every node in top: in a list in name
	// order, an equal score never makes it the better (nor reads a name).
	byName := false
	if m != nil {
		m.prepare(nodes, &req, pol, strategy)
		byName = m.byName
	}
	better := func(c, b cand) bool {
		return c.score > b.score || (!byName && c.score == b.score && c.n.Name < b.n.Name)
	}
	fits := 0
	for i := range nodes {
		n := &nodes[i]
		var sc float64
		if m != nil {
			set, s := m.verdict(i, n, f, strategy)
			if set != 0 {
				continue
			}
			sc = s
		} else {
			if f.broken(n) != 0 {
				continue
			}
			sc = score(n, &req, strategy)
		}
		fits++
		c := cand{n, sc}
		if len(top) == keep && !better(c, top[keep-1]) {
			continue
		}
		at := len(top)
		for at > 0 && better(c, top[at-1]) {
			at--
		}
		top = slices.Insert(top, at, c)
		if len(top) > keep {
			top = top[:keep]
		}
	}
	if fits == 0 {
		return Place(nodes, req, pol, strategy) // the refusal, with every node's reasons
	}
	d := Decision{Node: top[0].n.Name, Reason: choiceReason(top[0].n, &req, strategy, fits), Considered: make([]Verdict, len(top))}
	for i, c := range top {
		d.Considered[i] = Verdict{Node: c.n.Name, Fits: true, Score: c.score}
	}
	slices.SortFunc(d.Considered, func(a, b Verdict) int { return strings.Compare(a.Node, b.Node) })
	return d, nil
}

// byName returns the indices of nodes in name order (input order among equal
// names). Snapshots usually arrive sorted already, which costs one pass.
func byName(nodes []Node) []int {
	order := make([]int, len(nodes))
	for i := range order {
		order[i] = i
	}
	if !slices.IsSortedFunc(nodes, func(a, b Node) int { return strings.Compare(a.Name, b.Name) }) {
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(nodes[a].Name, nodes[b].Name) })
	}
	return order
}

// summarize writes the one sentence of a NoPlacementError. A tenant's macOS
// request under require_lease_for_macos is judged by the Macs it leases only:
// the rest of the fleet could never take it, so counting it would hide the
// real reason.
func summarize(req *Request, pol Policy, considered []Verdict, sets []rules) string {
	size := fmt.Sprintf("%s / %d MiB for %s", plural(req.VCPUs, "vCPU"), req.MemoryMiB, req.GuestOS)
	if req.Node != "" {
		if len(considered) == 0 {
			return fmt.Sprintf("node %s is not registered", req.Node)
		}
		return fmt.Sprintf("node %s cannot take %s: %s", req.Node, size, strings.Join(considered[0].Reasons, "; "))
	}
	if len(considered) == 0 {
		return fmt.Sprintf("no node can take %s: no node is registered", size)
	}
	if req.Tenant == "" || req.GuestOS != GuestMacOS || !pol.RequireLeaseForMacOS {
		return fmt.Sprintf("no node can take %s: %s", size, breakdown(sets, "node", req))
	}
	// Only Macs the tenant leases pass the lease rule; judge by those.
	var own []rules
	for _, s := range sets {
		if s&(1<<ruleLeaseRequired|1<<ruleLeasedOther|1<<ruleNotMac) == 0 {
			own = append(own, s)
		}
	}
	if len(own) == 0 {
		return fmt.Sprintf("%s leases no Mac that can run macOS guests, and require_lease_for_macos runs a tenant's macOS guests only on Macs it leases", req.Tenant)
	}
	if !slices.ContainsFunc(own, func(s rules) bool { return s&(1<<ruleSlots) == 0 }) {
		return fmt.Sprintf("no Mac leased by %s has a free macOS slot", req.Tenant)
	}
	return fmt.Sprintf("no Mac leased by %s can take %s: %s", req.Tenant, size, breakdown(own, "Mac", req))
}

// breakdown counts nodes by the first rule each broke, most common first.
func breakdown(sets []rules, noun string, req *Request) string {
	var counts [ruleCount]int
	for _, s := range sets {
		counts[s.first()]++
	}
	var seen []rule
	for ru := range ruleCount {
		if counts[ru] > 0 {
			seen = append(seen, ru)
		}
	}
	slices.SortStableFunc(seen, func(a, b rule) int { return counts[b] - counts[a] })
	const shown = 4
	var parts []string
	for k, ru := range seen {
		if k == shown {
			rest := 0
			for _, r := range seen[shown:] {
				rest += counts[r]
			}
			parts = append(parts, fmt.Sprintf("%d for other reasons", rest))
			break
		}
		c := counts[ru]
		who := fmt.Sprint(c)
		if k == 0 {
			who = plural(int64(c), noun)
		}
		parts = append(parts, who+" "+phrase(ru, c > 1, req))
	}
	return strings.Join(parts, ", ")
}

func phrase(ru rule, many bool, req *Request) string {
	pick := func(one, more string) string {
		if many {
			return more
		}
		return one
	}
	switch ru {
	case ruleDown:
		return pick("is", "are") + " not reporting"
	case ruleUnhealthy:
		return pick("is", "are") + " unhealthy"
	case ruleNoDriver:
		return pick("has", "have") + " no healthy driver for " + req.GuestOS
	case ruleCordoned:
		return pick("is", "are") + " cordoned"
	case ruleDraining:
		return pick("is", "are") + " draining"
	case ruleScrub:
		return pick("awaits", "await") + " a scrub"
	case ruleSelector:
		return pick("does", "do") + " not match the node selector"
	case ruleNested:
		return pick("does", "do") + " not offer nested virtualisation"
	case ruleNoNetwork:
		return pick("has", "have") + " no tenant network plugin"
	case ruleVCPUs:
		return pick("lacks", "lack") + " vCPUs"
	case ruleMemory:
		return pick("lacks", "lack") + " memory"
	case ruleNotMac:
		return pick("is not a Mac", "are not Macs")
	case ruleSlots:
		return pick("has", "have") + " no free macOS slot"
	case ruleLeaseRequired:
		return pick("is", "are") + " not leased by " + req.Tenant
	case ruleLeasedOther:
		return pick("is leased by another tenant", "are leased by other tenants")
	case ruleLeasedOperator:
		return pick("is leased and was not named", "are leased and were not named")
	}
	return "refused"
}

// plural writes "1 vCPU", "4 vCPUs".
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}
