package drainer

import (
	"context"
	"errors"
	"sync"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
)

// Plan is a dry run of a rebalance: which reschedulable VMs (a kept spec)
// or ephemeral VMs (as a drain decides) could leave the nodes whose vCPU or
// memory use passes highWater, and where each fits, at most maxMoves of
// them. Nothing is changed. An overloaded node that does not answer is
// skipped for its ephemeral VMs (it is listed in NodesSkipped). Store
// failures are *store.OpError.
func (dr *Drainer) Plan(ctx context.Context, highWater float64, maxMoves int) (*sdk.RebalancePlan, error) {
	stored, nodes, err := dr.place.Snapshot(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "read the fleet", Err: err}
	}
	entries, err := dr.st.ListEntries(ctx, func(e *store.LedgerEntry) bool { return e.Running() })
	if err != nil {
		return nil, &store.OpError{Op: "read the ledger", Err: err}
	}
	// Only VMs of nodes above the mark can move: only those nodes are asked
	// for their VMs and only their entries' kept specs are read.
	over := map[string]*store.Node{}
	for i := range nodes {
		if nodes[i].Up && aboveHighWater(&nodes[i], highWater) {
			over[nodes[i].Name] = &stored[i]
		}
	}
	listed, skipped := dr.listNodesVMs(ctx, over)
	type key struct{ node, vm string }
	byKey := map[key]*store.LedgerEntry{}
	var movable []scheduler.MovableVM
	for i := range entries {
		e := &entries[i]
		if over[e.Node] == nil {
			continue
		}
		_, err := dr.st.GetSpec(ctx, e.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, &store.OpError{Op: "read kept specs", Err: err}
		}
		eph := false
		if vm := listed[e.Node][e.VMID]; vm != nil {
			eph = isEphemeral(vm)
		}
		mv := scheduler.MovableVM{ID: e.VMID, Node: e.Node, Tenant: e.Tenant, GuestOS: e.GuestOS,
			VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, Reschedulable: err == nil, Ephemeral: eph}
		if mv.Reschedulable || mv.Ephemeral {
			movable = append(movable, mv)
			byKey[key{e.Node, e.VMID}] = e
		}
	}
	out := &sdk.RebalancePlan{HighWater: highWater, MaxMoves: maxMoves, Moves: []sdk.RebalanceMove{}, NodesSkipped: skipped}
	for _, m := range scheduler.RebalancePlan(nodes, movable, highWater, maxMoves) {
		rm := sdk.RebalanceMove{VM: m.VM, From: m.From, To: m.To, Reason: m.Reason}
		if e := byKey[key{m.From, m.VM}]; e != nil {
			rm.Name, rm.Tenant = e.Name, e.Tenant
		}
		out.Moves = append(out.Moves, rm)
	}
	return out, nil
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
func (dr *Drainer) listNodesVMs(ctx context.Context, nodes map[string]*store.Node) (map[string]map[string]*sdk.VM, []sdk.SkippedNode) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]map[string]*sdk.VM{}
	skipped := []sdk.SkippedNode{}
	for name, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var vms []sdk.VM
			nc, err := dr.nodes.Client(n)
			if err == nil {
				lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
				vms, err = nc.ListVMs(lctx)
				cancel()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				skipped = append(skipped, sdk.SkippedNode{Node: name, Reason: "list its vms: " + err.Error()})
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
