package scheduler

import (
	"cmp"
	"fmt"
	"slices"
)

// MovableVM is a VM the rebalancer may consider moving.
type MovableVM struct {
	ID, Node, Tenant, GuestOS string
	VCPUs, MemoryMiB          int64
	// Reschedulable VMs kept their spec and can be recreated elsewhere.
	Reschedulable bool
	// Ephemeral VMs (a TTL or label fluxvm.dev/ephemeral=true) may be deleted
	// and launched again elsewhere.
	Ephemeral bool
}

// Move is one step of a rebalance plan.
type Move struct {
	VM     string `json:"vm"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// RebalancePlan is the dry run behind GET /fleet/rebalance/plan: it names up to
// maxMoves reschedulable or ephemeral VMs that could leave nodes above highWater
// (a fraction of vCPUs or of memory) and a node each fits on without crossing
// highWater itself. nodes and vms are not modified.
//
// Targets pass Place's filters under DefaultPolicy whatever the fleet's policy:
// a plan must never suggest a move that the stricter policy would refuse, in
// particular never onto another tenant's leased host or an unleased Mac for a
// tenant's macOS guest. Targets are chosen as Spread would (the emptiest after
// the move, Macs last for Linux guests). The most loaded nodes go first; on each,
// the smallest VM that alone brings it back under the mark moves, else the
// largest, so the plan disturbs as few VMs as it can.
func RebalancePlan(nodes []Node, vms []MovableVM, highWater float64, maxMoves int) []Move {
	if maxMoves <= 0 || !(highWater > 0) {
		return nil
	}
	// A private copy lets each planned move count on the next one's view.
	work := slices.Clone(nodes)
	for i := range work {
		work[i].VMs = slices.Clone(work[i].VMs)
	}
	order := byName(work)
	named := make(map[string]*Node, len(work))
	for _, i := range order {
		if _, dup := named[work[i].Name]; !dup {
			named[work[i].Name] = &work[i]
		}
	}

	movable := map[string][]MovableVM{}
	for _, vm := range vms {
		if (vm.Reschedulable || vm.Ephemeral) && vm.VCPUs > 0 && vm.MemoryMiB > 0 && named[vm.Node] != nil {
			if vm.GuestOS == "" {
				vm.GuestOS = GuestLinux
			}
			movable[vm.Node] = append(movable[vm.Node], vm)
		}
	}

	var sources []*Node
	for _, i := range order {
		n := &work[i]
		if n.Up && named[n.Name] == n && load(n) > highWater && len(movable[n.Name]) > 0 {
			sources = append(sources, n)
		}
	}
	slices.SortStableFunc(sources, func(a, b *Node) int { return cmp.Compare(load(b), load(a)) })

	var moves []Move
	for _, src := range sources {
		cands := movable[src.Name]
		for len(moves) < maxMoves && load(src) > highWater && len(cands) > 0 {
			before := loadText(src)
			k, to := pickMove(work, order, src, cands, highWater)
			if k < 0 {
				break
			}
			vm := cands[k]
			cands = slices.Delete(cands, k, k+1)
			shift(src, vm, -1)
			shift(to, vm, +1)
			how := "ephemeral: delete here, launch again on " + to.Name
			if vm.Reschedulable {
				how = "reschedulable: recreate on " + to.Name + ", then delete here"
			}
			moves = append(moves, Move{
				VM: vm.ID, From: src.Name, To: to.Name,
				Reason: fmt.Sprintf("%s is above the %.0f%% high water (%s); %s (%s after)",
					src.Name, 100*highWater, before, how, loadText(to)),
			})
		}
	}
	return moves
}

// pickMove returns the index in cands of the VM to move and where to, or -1.
func pickMove(work []Node, order []int, src *Node, cands []MovableVM, highWater float64) (int, *Node) {
	type cand struct {
		k        int
		resolves bool
	}
	ranked := make([]cand, len(cands))
	for k, vm := range cands {
		shift(src, vm, -1)
		ranked[k] = cand{k, load(src) <= highWater}
		shift(src, vm, +1)
	}
	bySize := func(a, b MovableVM) int {
		return cmp.Or(cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.VCPUs, b.VCPUs), cmp.Compare(a.ID, b.ID))
	}
	slices.SortFunc(ranked, func(a, b cand) int {
		switch {
		case a.resolves && !b.resolves:
			return -1
		case b.resolves && !a.resolves:
			return 1
		case a.resolves:
			return bySize(cands[a.k], cands[b.k]) // smallest that is enough
		}
		return bySize(cands[b.k], cands[a.k]) // largest first
	})
	for _, c := range ranked {
		vm := cands[c.k]
		req := Request{Tenant: vm.Tenant, GuestOS: vm.GuestOS, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB}
		f := newFilter(&req, DefaultPolicy)
		var best *Node
		var bestScore float64
		for _, i := range order {
			t := &work[i]
			if t.Name == src.Name {
				continue
			}
			set, _ := f.check(t)
			f.texts = f.texts[:0] // the reasons are not read here
			if set != 0 {
				continue
			}
			shift(t, vm, +1)
			ok := load(t) <= highWater
			shift(t, vm, -1)
			if !ok {
				continue
			}
			if s := score(t, &req, Spread); best == nil || s > bestScore {
				best, bestScore = t, s
			}
		}
		if best != nil {
			return c.k, best
		}
	}
	return -1, nil
}

// shift adds (dir=+1) or removes (dir=-1) vm's share of n.
func shift(n *Node, vm MovableVM, dir int64) {
	n.Used.VCPUs += dir * vm.VCPUs
	n.Used.MemoryMiB += dir * vm.MemoryMiB
	if vm.GuestOS != GuestMacOS {
		return
	}
	if dir > 0 {
		n.Used.MacOSSlots++
		n.VMs = append(n.VMs, VMRef{Tenant: vm.Tenant, GuestOS: GuestMacOS})
		return
	}
	n.Used.MacOSSlots = max(n.Used.MacOSSlots-1, 0)
	if k := slices.Index(n.VMs, VMRef{Tenant: vm.Tenant, GuestOS: GuestMacOS}); k >= 0 {
		n.VMs = slices.Delete(n.VMs, k, k+1)
	}
}

// load is the larger of a node's vCPU and memory fractions in use; a node that
// reports no total of either counts as empty in it.
func load(n *Node) float64 {
	var l float64
	if n.Total.VCPUs > 0 {
		l = float64(max(n.Used.VCPUs, 0)) / float64(n.Total.VCPUs)
	}
	if n.Total.MemoryMiB > 0 {
		l = max(l, float64(max(n.Used.MemoryMiB, 0))/float64(n.Total.MemoryMiB))
	}
	return l
}

func loadText(n *Node) string {
	return fmt.Sprintf("vCPUs %.0f%%, memory %.0f%%",
		100*fraction(max(n.Used.VCPUs, 0), n.Total.VCPUs), 100*fraction(max(n.Used.MemoryMiB, 0), n.Total.MemoryMiB))
}
