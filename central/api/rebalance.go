package api

import (
	"context"
	"errors"
	"github.com/fluxvm/fluxvm/central/drainer"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"net/http"
	"sync"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

// Rebalance plan defaults and bounds.
const (
	defaultHighWater = 0.85
	defaultMaxMoves  = 10
	maxRebalanceMove = 1000
)

// rebalanceMove is one move of a plan, with the VM's name and tenant.
type rebalanceMove struct {
	VM     string `json:"vm"`
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// rebalancePlanView is the answer of GET /fleet/rebalance/plan.
type rebalancePlanView struct {
	HighWater float64         `json:"high_water"`
	MaxMoves  int             `json:"max_moves"`
	Moves     []rebalanceMove `json:"moves"`
	// NodesSkipped are overloaded nodes whose VMs could not be listed: their
	// ephemeral VMs are unknown, so only their reschedulable ones count.
	NodesSkipped []SkippedNode `json:"nodes_skipped"`
}

// rebalancePlan is GET /fleet/rebalance/plan?high_water=0.85&max_moves=10, a
// dry run: which reschedulable VMs (a kept spec) or ephemeral VMs (a TTL or
// label fluxvm.dev/ephemeral=true, as a drain decides) could leave the nodes
// above high_water, and where each fits. Nothing is changed.
func (s *Server) rebalancePlan(w http.ResponseWriter, r *http.Request) {
	hw, ok := jsonapi.FloatParam(w, r, "high_water", defaultHighWater, 0.01, 1)
	if !ok {
		return
	}
	maxMoves, ok := jsonapi.IntParam(w, r, "max_moves", defaultMaxMoves, 1, maxRebalanceMove)
	if !ok {
		return
	}
	ctx := r.Context()
	stored, nodes, err := s.place.Snapshot(ctx)
	if err != nil {
		s.storeError(w, "read the fleet", err)
		return
	}
	entries, err := s.opts.Store.ListEntries(ctx, func(e *store.LedgerEntry) bool { return e.Running() })
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	// Only VMs of nodes above the mark can move: only those nodes are asked
	// for their VMs and only their entries' kept specs are read.
	over := map[string]*store.Node{}
	for i := range nodes {
		if nodes[i].Up && aboveHighWater(&nodes[i], hw) {
			over[nodes[i].Name] = &stored[i]
		}
	}
	listed, skipped := s.listNodesVMs(ctx, over)
	type key struct{ node, vm string }
	byKey := map[key]*store.LedgerEntry{}
	var movable []scheduler.MovableVM
	for i := range entries {
		e := &entries[i]
		if over[e.Node] == nil {
			continue
		}
		_, err := s.opts.Store.GetSpec(ctx, e.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.storeError(w, "read kept specs", err)
			return
		}
		eph := false
		if vm := listed[e.Node][e.VMID]; vm != nil {
			eph = drainer.IsEphemeral(vm)
		}
		mv := scheduler.MovableVM{ID: e.VMID, Node: e.Node, Tenant: e.Tenant, GuestOS: e.GuestOS,
			VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, Reschedulable: err == nil, Ephemeral: eph}
		if mv.Reschedulable || mv.Ephemeral {
			movable = append(movable, mv)
			byKey[key{e.Node, e.VMID}] = e
		}
	}
	out := rebalancePlanView{HighWater: hw, MaxMoves: maxMoves, Moves: []rebalanceMove{}, NodesSkipped: skipped}
	for _, m := range scheduler.RebalancePlan(nodes, movable, hw, maxMoves) {
		rm := rebalanceMove{VM: m.VM, From: m.From, To: m.To, Reason: m.Reason}
		if e := byKey[key{m.From, m.VM}]; e != nil {
			rm.Name, rm.Tenant = e.Name, e.Tenant
		}
		out.Moves = append(out.Moves, rm)
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// aboveHighWater: the larger of the node's vCPU and memory fractions in use
// passes hw (the rebalancer's measure; a total of 0 counts as empty).
func aboveHighWater(n *scheduler.Node, hw float64) bool {
	frac := func(used, total int64) float64 {
		if total <= 0 {
			return 0
		}
		return float64(max(used, 0)) / float64(total)
	}
	return max(frac(n.Used.VCPUs, n.Total.VCPUs), frac(n.Used.MemoryMiB, n.Total.MemoryMiB)) > hw
}

// listNodesVMs asks each node for its VMs, in parallel, by id; a node that
// does not answer is skipped, with the reason.
func (s *Server) listNodesVMs(ctx context.Context, nodes map[string]*store.Node) (map[string]map[string]*sdk.VM, []SkippedNode) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]map[string]*sdk.VM{}
	skipped := []SkippedNode{}
	for name, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var vms []sdk.VM
			nc, err := s.nodes.Client(n)
			if err == nil {
				lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
				vms, err = nc.ListVMs(lctx)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				skipped = append(skipped, SkippedNode{Node: name, Reason: "list its vms: " + err.Error()})
				return
			}
			m := make(map[string]*sdk.VM, len(vms))
			for i := range vms {
				m[vms[i].ID] = &vms[i]
			}
			out[name] = m
		}()
	}
	wg.Wait()
	return out, skipped
}
