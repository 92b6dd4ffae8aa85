package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// allows is the placement rules written a second time, as plainly as possible and
// without sharing code with check, so the property tests compare two readings of
// the rules rather than one with itself.
func allows(n *Node, req Request, pol Policy) bool {
	guest := req.GuestOS
	if guest == "" {
		guest = GuestLinux
	}
	if req.Node != "" && n.Name != req.Node {
		return false
	}
	if !n.Up || !n.Healthy || n.Cordoned || n.Draining || n.ScrubPending {
		return false
	}
	if !slices.Contains(n.GuestOS, guest) {
		return false
	}
	for k, v := range req.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	if req.Nested && !n.Nested {
		return false
	}
	usedV, usedM := max(n.Used.VCPUs, 0), max(n.Used.MemoryMiB, 0)
	if usedV+req.VCPUs > n.Total.VCPUs || usedM+req.MemoryMiB > n.Total.MemoryMiB {
		return false
	}
	if guest == GuestMacOS {
		if !n.Mac {
			return false
		}
		macs := int64(0)
		for _, vm := range n.VMs {
			if vm.GuestOS == GuestMacOS {
				macs++
			}
		}
		limit := int64(2) // Apple's licence
		if n.Total.MacOSSlots == 1 {
			limit = 1
		}
		if max(macs, n.Used.MacOSSlots)+1 > limit {
			return false
		}
		if req.Tenant != "" && pol.RequireLeaseForMacOS && n.LeasedBy != req.Tenant {
			return false
		}
	}
	operatorPin := req.Tenant == "" && req.Node != ""
	if pol.ExclusiveLeasedHosts && n.LeasedBy != "" && n.LeasedBy != req.Tenant && !operatorPin {
		return false
	}
	return true
}

// bytesReader turns fuzz input into choices; past the end every choice is 0.
type bytesReader struct {
	b []byte
	i int
}

func (r *bytesReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *bytesReader) bit(k uint) bool { return r.next()>>k&1 == 1 }

var (
	tenants = []string{"", "acme", "bob"}
	racks   = []string{"a1", "b2", ""}
)

// genCase builds a fleet, a request, a policy and a strategy from bytes. Sizes
// are small so that fits, misfits and exact fits all happen often; a few used
// figures are negative, as a corrupt heartbeat could make them.
func genCase(r *bytesReader) ([]Node, Request, Policy, Strategy) {
	pol := Policy{RequireLeaseForMacOS: r.bit(0), ExclusiveLeasedHosts: r.bit(1)}
	strategy := Strategy(r.next() % 2)
	count := int(r.next() % 24)
	names := rand.New(rand.NewPCG(uint64(r.next()), 0)).Perm(count) // unique names, any order
	nodes := make([]Node, count)
	for i := range nodes {
		flags := r.next()
		n := Node{
			Name:         fmt.Sprintf("n%02d", names[i]),
			Up:           flags&0x3 != 0, // mostly up
			Healthy:      flags&0xc != 0,
			Cordoned:     flags&0x10 != 0 && flags&0x20 != 0,
			Draining:     flags&0x40 != 0 && flags&0x80 != 0,
			ScrubPending: flags == 0xff,
		}
		more := r.next()
		n.Nested = more&1 != 0
		n.Mac = more&2 != 0
		if more&4 == 0 {
			n.GuestOS = append(n.GuestOS, GuestLinux)
		}
		if more&8 != 0 {
			n.GuestOS = append(n.GuestOS, GuestMacOS)
		}
		if rack := racks[int(more>>4)%len(racks)]; rack != "" {
			n.Labels = map[string]string{"rack": rack}
		}
		n.LeasedBy = tenants[int(more>>6)%len(tenants)]
		n.Total = Resources{VCPUs: int64(r.next() % 33), MemoryMiB: int64(r.next()) * 256, MacOSSlots: int64(r.next() % 4)}
		// Used is a quarter-step fraction of Total, give or take a little, so
		// full, empty and overcommitted nodes all turn up.
		uv, um := r.next(), r.next()
		n.Used = Resources{
			VCPUs:      n.Total.VCPUs*int64(uv%5)/4 + int64(uv>>5%3) - 1,
			MemoryMiB:  n.Total.MemoryMiB*int64(um%5)/4 + (int64(um>>5%3)-1)*256,
			MacOSSlots: int64(r.next() % 4),
		}
		for range r.next() % 4 {
			k := r.next()
			guest := GuestLinux
			if k&1 != 0 {
				guest = GuestMacOS
			}
			n.VMs = append(n.VMs, VMRef{Tenant: tenants[int(k>>1)%len(tenants)], GuestOS: guest})
		}
		nodes[i] = n
	}
	k := r.next()
	req := Request{
		Tenant:    tenants[int(k)%len(tenants)],
		GuestOS:   []string{GuestLinux, GuestMacOS, ""}[int(k>>2)%3],
		VCPUs:     int64(r.next()%17) - 1,
		MemoryMiB: (int64(r.next()) - 1) * 128,
		Nested:    k&0x18 == 0x18,
	}
	if k&0x60 == 0x60 {
		req.NodeSelector = map[string]string{"rack": racks[int(k>>6)%2]}
	}
	if pin := r.next(); pin&0x7 == 0 {
		req.Node = fmt.Sprintf("n%02d", pin>>3) // sometimes a node that does not exist
	}
	return nodes, req, pol, strategy
}

func randomBytes(rng *rand.Rand, n int) []byte {
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	return buf
}

// checkDecision asserts everything a Place result must satisfy.
func checkDecision(t *testing.T, nodes []Node, req Request, pol Policy, d Decision, err error) {
	t.Helper()
	if req.VCPUs <= 0 || req.MemoryMiB <= 0 {
		if !errors.Is(err, ErrInvalidRequest) {
			t.Fatalf("invalid request %+v: err = %v", req, err)
		}
		return
	}
	byName := map[string]*Node{}
	anyAllowed := false
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
		anyAllowed = anyAllowed || allows(&nodes[i], req, pol)
	}
	verdicts := d.Considered
	if err != nil {
		var npe *NoPlacementError
		if !errors.As(err, &npe) || npe.Summary == "" {
			t.Fatalf("err = %v, want a *NoPlacementError with a summary", err)
		}
		if anyAllowed {
			t.Fatalf("refused %+v although a node allows it: %s", req, npe.Summary)
		}
		verdicts = npe.Verdicts
	} else {
		n := byName[d.Node]
		if n == nil || !allows(n, req, pol) {
			t.Fatalf("placed %+v on %s, which the rules refuse (node %+v)", req, d.Node, n)
		}
		if d.Reason == "" {
			t.Fatal("decision without a reason")
		}
	}
	if !slices.IsSortedFunc(verdicts, func(a, b Verdict) int { return strings.Compare(a.Node, b.Node) }) {
		t.Fatal("verdicts not in name order")
	}
	var best *Verdict
	for k := range verdicts {
		v := &verdicts[k]
		if want := allows(byName[v.Node], req, pol); v.Fits != want {
			t.Fatalf("%s: Fits = %v, rules say %v (reasons %q)", v.Node, v.Fits, want, v.Reasons)
		}
		if v.Fits != (len(v.Reasons) == 0) {
			t.Fatalf("%s: Fits = %v with reasons %q", v.Node, v.Fits, v.Reasons)
		}
		if v.Fits && (best == nil || v.Score > best.Score) {
			best = v
		}
	}
	if err == nil && best.Node != d.Node {
		t.Fatalf("chose %s but %s scores higher or ties with an earlier name", d.Node, best.Node)
	}
}

// Random fleets: a placed VM always fits its node and passes every rule, a
// refusal happens only when no node would pass, and the best score wins.
func TestPlaceRandomFleetsObeyTheRules(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 7))
	placed, placedMacOS, refused := 0, 0, 0
	for range 20000 {
		buf := randomBytes(rng, 400)
		nodes, req, pol, strategy := genCase(&bytesReader{b: buf})
		d, err := Place(nodes, req, pol, strategy)
		checkDecision(t, nodes, req, pol, d, err)
		switch {
		case err == nil:
			placed++
			if req.GuestOS == GuestMacOS {
				placedMacOS++
			}
		case errors.Is(err, ErrNoPlacement):
			refused++
		}
	}
	t.Logf("placed %d (%d macOS), refused %d", placed, placedMacOS, refused)
	// A generator that never places (or never refuses) would prove nothing.
	if placed < 1000 || placedMacOS < 100 || refused < 1000 {
		t.Fatalf("placed %d (%d macOS), refused %d: the generator does not exercise every outcome", placed, placedMacOS, refused)
	}
}

// Random fleets for Capacity and RebalancePlan: what they promise holds.
func TestCapacityAndRebalanceRandomFleets(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 9))
	moved := 0
	for range 5000 {
		buf := randomBytes(rng, 400)
		nodes, req, pol, _ := genCase(&bytesReader{b: buf})
		for i := range nodes {
			nodes[i].Used.VCPUs = max(nodes[i].Used.VCPUs, 0)
			nodes[i].Used.MemoryMiB = max(nodes[i].Used.MemoryMiB, 0)
		}
		rep := Capacity(nodes, req.Tenant, pol)
		if s := rep.LargestLinux; s.Node != "" {
			r := Request{Tenant: req.Tenant, GuestOS: GuestLinux, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB}
			if _, err := Place(nodes, r, pol, BinPack); err != nil {
				t.Fatalf("capacity promised %+v but Place says %v", s, err)
			}
		}
		if s := rep.LargestMacOS; s.Node != "" {
			r := Request{Tenant: req.Tenant, GuestOS: GuestMacOS, VCPUs: s.VCPUs, MemoryMiB: s.MemoryMiB}
			if _, err := Place(nodes, r, pol, BinPack); err != nil {
				t.Fatalf("capacity promised macOS %+v but Place says %v", s, err)
			}
		}

		var vms []MovableVM
		for i, n := range nodes {
			for k := range 3 {
				vms = append(vms, MovableVM{
					ID: fmt.Sprintf("vm-%d-%d", i, k), Node: n.Name, Tenant: tenants[(i+k)%3],
					GuestOS: GuestLinux, VCPUs: int64(1 + k), MemoryMiB: int64(1024 << k),
					Reschedulable: k != 1, Ephemeral: k == 1,
				})
			}
		}
		hw := 0.5 + float64(buf[0]%50)/100
		maxMoves := int(buf[1] % 6)
		before := deepCopy(nodes)
		moves := RebalancePlan(nodes, vms, hw, maxMoves)
		if len(moves) > maxMoves {
			t.Fatalf("%d moves, max %d", len(moves), maxMoves)
		}
		// Replay the plan: every target passes the strict rules and stays under
		// the mark at the moment of its move.
		sim := deepCopy(before)
		idx := map[string]*Node{}
		for i := range sim {
			idx[sim[i].Name] = &sim[i]
		}
		vmByID := map[string]MovableVM{}
		for _, v := range vms {
			vmByID[v.ID] = v
		}
		for _, m := range moves {
			v, from, to := vmByID[m.VM], idx[m.From], idx[m.To]
			if from == nil || to == nil || v.Node != m.From || m.From == m.To || load(from) <= hw {
				t.Fatalf("bad move %+v", m)
			}
			r := Request{Tenant: v.Tenant, GuestOS: v.GuestOS, VCPUs: v.VCPUs, MemoryMiB: v.MemoryMiB}
			if !allows(to, r, DefaultPolicy) {
				t.Fatalf("move %+v breaks the rules on %+v", m, *to)
			}
			if to.LeasedBy != "" && to.LeasedBy != v.Tenant {
				t.Fatalf("move %+v lands on a host leased by %s", m, to.LeasedBy)
			}
			shift(from, v, -1)
			shift(to, v, +1)
			if load(to) > hw {
				t.Fatalf("move %+v takes %s over the high water", m, m.To)
			}
			moved++
		}
	}
	t.Logf("%d moves", moved)
	if moved < 100 {
		t.Fatalf("only %d moves planned over all fleets: the generator does not exercise rebalancing", moved)
	}
}

// FuzzPlace: any fleet and request, no panic, and the decision obeys the rules.
func FuzzPlace(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 4, 0xf3, 0x0f, 16, 64, 2, 4, 64, 0, 1, 0x02, 4, 16, 1})
	f.Add([]byte{1, 1, 2, 0x03, 0x4a, 12, 255, 2, 2, 40, 1, 2, 1, 3, 0x0d, 0x03, 4, 32, 0xff})
	rng := rand.New(rand.NewPCG(5, 5))
	for range 8 {
		f.Add(randomBytes(rng, 200))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		nodes, req, pol, strategy := genCase(&bytesReader{b: data})
		d, err := Place(nodes, req, pol, strategy)
		checkDecision(t, nodes, req, pol, d, err)
	})
}

// Random fleets: PlaceShort chooses as Place does, with Place's reason or
// Place's error, and its short list is the keep best-scored of Place's
// fitting verdicts (the chosen one first among equals), in name order.
func TestPlaceShortChoosesAsPlaceDoes(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 5))
	shortened := 0
	for i := range 20000 {
		nodes, req, pol, strategy := genCase(&bytesReader{b: randomBytes(rng, 400)})
		keep := 1 + i%4
		want, werr := Place(nodes, req, pol, strategy)
		got, gerr := PlaceShort(nodes, req, pol, strategy, keep)
		if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
			t.Fatalf("case %d: Place says %v, PlaceShort %v", i, werr, gerr)
		}
		if werr != nil {
			continue
		}
		if got.Node != want.Node || got.Reason != want.Reason {
			t.Fatalf("case %d: PlaceShort chose %s (%s), Place %s (%s)", i, got.Node, got.Reason, want.Node, want.Reason)
		}
		if req.Node != "" {
			continue // Place itself answered
		}
		var fit []Verdict
		for _, v := range want.Considered {
			if v.Fits {
				fit = append(fit, v)
			}
		}
		slices.SortStableFunc(fit, func(a, b Verdict) int {
			switch {
			case a.Score > b.Score:
				return -1
			case a.Score < b.Score:
				return 1
			}
			return strings.Compare(a.Node, b.Node)
		})
		fit = fit[:min(len(fit), keep)]
		slices.SortStableFunc(fit, func(a, b Verdict) int { return strings.Compare(a.Node, b.Node) })
		if len(fit) < len(want.Considered) {
			shortened++
		}
		if !slices.EqualFunc(fit, got.Considered, func(a, b Verdict) bool {
			return a.Node == b.Node && a.Fits == b.Fits && a.Score == b.Score && len(b.Reasons) == 0
		}) {
			t.Fatalf("case %d (keep %d): short list %+v, want %+v", i, keep, got.Considered, fit)
		}
	}
	if shortened < 1000 {
		t.Fatalf("only %d cases had a list to shorten: the generator does not exercise PlaceShort", shortened)
	}
}

// Equal scores: PlaceShort keeps Place's tie rule (the name that sorts first
// wins) in its choice and its short list, whatever the input order.
func TestPlaceShortBreaksTiesByName(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	nodes := make([]Node, 50)
	for i := range nodes {
		nodes[i] = host(fmt.Sprintf("n%02d", i))
	}
	rng.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
	req := Request{Tenant: "t", GuestOS: GuestLinux, VCPUs: 1, MemoryMiB: 256}
	want, err := Place(nodes, req, DefaultPolicy, BinPack)
	if err != nil {
		t.Fatal(err)
	}
	got, err := PlaceShort(nodes, req, DefaultPolicy, BinPack, 3)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range got.Considered {
		names = append(names, v.Node)
	}
	if want.Node != "n00" || got.Node != "n00" || !slices.Equal(names, []string{"n00", "n01", "n02"}) {
		t.Fatalf("among equals Place chose %s, PlaceShort %s with list %v; want n00 and n00, n01, n02", want.Node, got.Node, names)
	}
}
