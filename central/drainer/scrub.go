package drainer

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// ErrNodeDown: the node does not report; a scrub needs it to answer.
var ErrNodeDown = errors.New("node is down")

// LeftoverError: a scrub found the node still holding VMs, or VM workspaces
// no VM owns, and stopped.
type LeftoverError struct {
	Node string
	// Workspaces: what is left are VM workspaces (else VMs).
	Workspaces bool
	// Count is how many are left; Sample up to five of them (VM names, or
	// workspaces as driver/id).
	Count  int
	Sample []string
	// Forced: the scrub tried to delete them (force); Err is why that
	// failed, when it did.
	Forced bool
	Err    error
}

func (e *LeftoverError) Error() string {
	what := "VMs"
	if e.Workspaces {
		what = "VM workspaces"
	}
	if e.Err != nil {
		return fmt.Sprintf("node %s: could not delete every one of its %s: %v", e.Node, what, e.Err)
	}
	return fmt.Sprintf("node %s still holds %d %s", e.Node, e.Count, what)
}
func (e *LeftoverError) Unwrap() error { return e.Err }

// Scrub proves that node name, which a lease left, holds nothing of a VM,
// then clears its scrub_pending. VMs still there stop it (*LeftoverError)
// unless force, which deletes them; then the node must list no VM and no VM
// workspace (force has it destroy leftover workspaces). A node under a lease
// (*LeasedError) or down (ErrNodeDown) is refused. Node failures are
// *nodecall.NodeError, the store's *store.OpError. The work goes on past ctx's end,
// within Timeout.
func (dr *Drainer) Scrub(ctx context.Context, name string, force bool) (*sdk.ScrubResult, error) {
	n, err := dr.node(ctx, name)
	if err != nil {
		return nil, err
	}
	if n.LeasedBy != "" {
		return nil, &LeasedError{Node: n.Name, Lease: n.LeaseID}
	}
	if n.State != store.NodeUp {
		return nil, fmt.Errorf("%w: %s", ErrNodeDown, n.Name)
	}
	nc, err := dr.nodes.Client(n)
	if err != nil {
		return nil, &nodecall.NodeError{Node: n, Err: err}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	defer cancel()
	list := func() ([]sdk.VM, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
		defer cancel()
		vms, err := nc.ListVMs(lctx)
		if err != nil {
			return nil, &nodecall.NodeError{Node: n, What: "list its vms", Err: err}
		}
		return vms, nil
	}
	vms, err := list()
	if err != nil {
		return nil, err
	}
	res := &sdk.ScrubResult{Node: n.Name, Deleted: []string{}, WorkspacesRemoved: []string{}}
	if len(vms) > 0 {
		if !force {
			names := make([]string, 0, min(len(vms), 5))
			for _, vm := range vms[:min(len(vms), 5)] {
				names = append(names, vm.Name)
			}
			return nil, &LeftoverError{Node: n.Name, Count: len(vms), Sample: names}
		}
		deleted, err := dr.remover.DeleteMatching(ctx, n, func(string) bool { return true }, "scrubbed")
		res.Deleted = append(res.Deleted, deleted...)
		if err != nil {
			return nil, &LeftoverError{Node: n.Name, Forced: true, Err: err}
		}
		if vms, err = list(); err != nil {
			return nil, err
		}
	}
	if len(vms) > 0 {
		return nil, &LeftoverError{Node: n.Name, Count: len(vms), Forced: true}
	}
	// No VM; now nothing of one on disk either.
	if res.Proof, err = dr.scrubWorkspaces(ctx, nc, n, force, res); err != nil {
		return nil, err
	}
	n, err = dr.st.UpdateNode(ctx, n.Name, false, func(n *store.Node) error { n.ScrubPending = false; return nil })
	if err != nil {
		return nil, &store.OpError{Op: "clear scrub_pending", Err: err}
	}
	dr.log.Info("node scrubbed", "node", n.Name, "deleted", len(res.Deleted))
	res.ScrubPending = n.ScrubPending
	return res, nil
}

// scrubWorkspaces makes the node show that no VM folder is left in its
// drivers' state directories: leftovers (a create cut short) refuse the
// scrub unless force, which has the node destroy them. It returns the proof
// to report.
func (dr *Drainer) scrubWorkspaces(ctx context.Context, nc *sdk.NodeClient, n *store.Node, force bool, res *sdk.ScrubResult) (string, error) {
	list := func() ([]sdk.Workspace, error) {
		lctx, cancel := context.WithTimeout(ctx, 2*nodecall.ListTimeout)
		defer cancel()
		return nc.Workspaces(lctx)
	}
	ws, err := list()
	if sdk.IsNotFound(err) {
		return "the node lists no VM (its agent is too old to list VM workspaces)", nil
	}
	if err != nil {
		return "", &nodecall.NodeError{Node: n, What: "list its vm workspaces", Err: err}
	}
	if len(ws) > 0 && force {
		cctx, cancel := context.WithTimeout(ctx, nodecall.CallTimeout)
		removed, err := nc.CleanWorkspaces(cctx)
		cancel()
		for _, x := range removed {
			res.WorkspacesRemoved = append(res.WorkspacesRemoved, x.Driver+"/"+x.ID)
		}
		if err != nil {
			return "", &nodecall.NodeError{Node: n, What: "destroy leftover vm workspaces", Err: err}
		}
		if ws, err = list(); err != nil {
			return "", &nodecall.NodeError{Node: n, What: "list its vm workspaces", Err: err}
		}
	}
	if len(ws) > 0 {
		ids := make([]string, 0, min(len(ws), 5))
		for _, x := range ws[:min(len(ws), 5)] {
			ids = append(ids, x.Driver+"/"+x.ID)
		}
		return "", &LeftoverError{Node: n.Name, Workspaces: true, Count: len(ws), Sample: ids, Forced: force}
	}
	return "the node lists no VM and no VM workspace", nil
}
