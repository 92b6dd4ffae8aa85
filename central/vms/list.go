package vms

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// ListStore is what the fleet-wide list needs of central's store.
type ListStore interface {
	// GetNode reads one node record.
	GetNode(ctx context.Context, name string) (*store.Node, error)
	// ListNodes reads every node record.
	ListNodes(ctx context.Context) ([]store.Node, error)
	// TenantHoldings reads, at one revision, a tenant's running ledger entries and the
	// nodes its creates under way hold reservations on.
	TenantHoldings(ctx context.Context, tenant string) ([]store.LedgerEntry, []string, error)
	// RunningOnNode reads a node's running ledger entries.
	RunningOnNode(ctx context.Context, node string) ([]store.LedgerEntry, error)
	// RunningVM reads the running entry of one VM on a node by its key.
	RunningVM(ctx context.Context, node, vmID string) (*store.LedgerEntry, error)
}

// Lister lists and finds VMs across the fleet.
type Lister struct {
	st    ListStore
	nodes *nodecall.Caller
}

// NewLister makes a Lister.
func NewLister(st ListStore, nodes *nodecall.Caller) *Lister { return &Lister{st: st, nodes: nodes} }

// List merges the nodes' VM lists, asking the nodes at once. Nodes that
// are down or do not answer are named in UnreachableNodes and their VMs
// shown as last reported (the heartbeat's, and the ledger's the heartbeat
// did not carry yet). For a tenant ("" is the operator) only its own VMs,
// by ledger or by stamp, and only the unreachable nodes that run them, are
// listed, without the nodes' errors; and only the nodes that hold its VMs
// are asked: those its running ledger entries and its creates under way
// (their reservations) name, read at one revision so that a create
// committing meanwhile is in one or the other, and those whose last
// heartbeat carries a VM stamped for it (one made outside central, or by a
// central that stopped before recording it, shows from the heartbeat after).
// A tenant's list on a fleet of thousands of nodes asks a few of them.
func (l *Lister) List(ctx context.Context, tenant string) (*sdk.FleetVMList, error) {
	// The tenant's holdings are read while the node records are.
	var tenantEntries []store.LedgerEntry
	var reservedOn []string
	var ledgerErr error
	ledgerRead := make(chan struct{})
	if tenant != "" {
		go func() {
			defer close(ledgerRead)
			tenantEntries, reservedOn, ledgerErr = l.st.TenantHoldings(ctx, tenant)
		}()
	} else {
		close(ledgerRead)
	}
	ns, err := l.st.ListNodes(ctx)
	<-ledgerRead
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	if ledgerErr != nil {
		return nil, fmt.Errorf("read the ledger: %w", ledgerErr)
	}
	// holds names the nodes a tenant's VMs can be on (nil: the operator's list, every node).
	var holds map[string]bool
	if tenant != "" {
		holds = map[string]bool{}
		for _, e := range tenantEntries {
			holds[e.Node] = true
		}
		for _, n := range reservedOn {
			holds[n] = true
		}
		for i := range ns {
			for _, vm := range ns[i].VMs {
				if vm.Tenant == tenant {
					holds[ns[i].Name] = true
					break
				}
			}
		}
	}

	type answer struct {
		vms     []sdk.VM
		err     error
		entries []store.LedgerEntry // the operator's view: what the ledger runs on the node
		ledger  error
	}
	answers := make([]answer, len(ns))
	var wg sync.WaitGroup
	for i := range ns {
		if holds != nil && !holds[ns[i].Name] {
			continue
		}
		if ns[i].State != store.NodeUp {
			answers[i].err = errors.New("node is down: no heartbeat since " + ns[i].LastHeartbeat.Format(time.RFC3339))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, nodecall.ListTimeout)
			defer cancel()
			nc, err := l.nodes.Client(&ns[i])
			if err == nil {
				answers[i].vms, err = nc.ListVMs(ctx)
			}
			answers[i].err = err
			if tenant == "" {
				answers[i].entries, answers[i].ledger = l.st.RunningOnNode(ctx, ns[i].Name)
			}
		}()
	}
	wg.Wait()
	var owned map[string]bool // node/vm id of the tenant's ledger entries
	if tenant != "" {
		owned = map[string]bool{}
		for _, e := range tenantEntries {
			owned[e.Node+"/"+e.VMID] = true
		}
	}
	mine := func(node, id, stamp string) bool {
		return tenant == "" || stamp == tenant || owned[node+"/"+id]
	}

	out := sdk.FleetVMList{VMs: []sdk.FleetVM{}, UnreachableNodes: []sdk.UnreachableNode{}}
	for i, n := range ns {
		if holds != nil && !holds[n.Name] {
			continue
		}
		a := answers[i]
		if a.err == nil {
			// The catalog image's name, from the VM's ledger entry.
			entries := a.entries
			if tenant != "" {
				entries = tenantEntries
			} else if a.ledger != nil {
				return nil, fmt.Errorf("read the ledger: %w", a.ledger)
			}
			image := map[string]string{}
			for _, e := range entries {
				if e.Node == n.Name {
					image[e.VMID] = e.Image
				}
			}
			for _, vm := range a.vms {
				if mine(n.Name, vm.ID, vm.Tenant) {
					out.VMs = append(out.VMs, sdk.FleetVM{Node: n.Name, ImageName: image[vm.ID], VM: vm})
				}
			}
			continue
		}
		// Out of sight: the VMs of the node's last heartbeat, and those the
		// ledger runs there that the heartbeat did not carry yet.
		shown := 0
		seen := map[string]bool{}
		for _, vm := range n.VMs {
			seen[vm.ID] = true
			if mine(n.Name, vm.ID, vm.Tenant) {
				shown++
				out.VMs = append(out.VMs, sdk.FleetVM{Node: n.Name, Unreachable: true, VM: sdk.VM{ID: vm.ID, Name: vm.Name,
					Tenant: vm.Tenant, State: vm.State, VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, GuestOS: vm.GuestOS}})
			}
		}
		entries := tenantEntries
		if tenant == "" {
			if entries, err = l.st.RunningOnNode(ctx, n.Name); err != nil {
				return nil, fmt.Errorf("read the ledger: %w", err)
			}
		}
		for _, e := range entries {
			if e.Node != n.Name || seen[e.VMID] {
				continue
			}
			shown++
			out.VMs = append(out.VMs, sdk.FleetVM{Node: n.Name, Unreachable: true, ImageName: e.Image, VM: sdk.VM{ID: e.VMID, Name: e.Name,
				Tenant: e.Tenant, State: "unknown", VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB, GuestOS: e.GuestOS, Image: e.Image,
				CreatedAt: e.StartedAt}})
		}
		switch {
		case tenant == "":
			hb := n.LastHeartbeat
			out.UnreachableNodes = append(out.UnreachableNodes, sdk.UnreachableNode{Node: n.Name, Error: a.err.Error(), LastHeartbeat: &hb})
		case shown > 0:
			out.UnreachableNodes = append(out.UnreachableNodes, sdk.UnreachableNode{Node: n.Name})
		}
	}
	sort.SliceStable(out.VMs, func(i, j int) bool {
		if out.VMs[i].Node != out.VMs[j].Node {
			return out.VMs[i].Node < out.VMs[j].Node
		}
		return out.VMs[i].CreatedAt.Before(out.VMs[j].CreatedAt)
	})
	return &out, nil
}

// ErrNoVM: no VM of the caller's by that id or name on that node.
var ErrNoVM = errors.New("no such vm")

// AmbiguousError is a name several tenants' VMs share on a node, asked by
// the operator, who must use an id.
type AmbiguousError struct{ Name, Node string }

func (e *AmbiguousError) Error() string {
	return fmt.Sprintf("several VMs are named %s on node %s", e.Name, e.Node)
}

// Target is a VM a route names, found for its caller.
type Target struct {
	Node  *store.Node
	Entry *store.LedgerEntry // nil: not created through central (or not yet recorded)
	ID    string             // the VM's id on the node (the route's id or name when the node did not answer)
	Name  string             // the VM's name ("" when neither the ledger nor the node said)
}

// Find finds the VM a route names by id or name on node, for tenant ("" is
// the operator). Names are per tenant: a tenant's name finds only its own
// VM. The ledger says whose a VM is; for a VM it has not recorded yet (its
// create in flight, or a central that died before writing it), the node's
// tenant stamp does. Anything not the caller's is ErrNoVM, as for a VM that
// does not exist. The operator may act on a VM the node does not list now
// (the node's answer then says so).
func (l *Lister) Find(ctx context.Context, node, id, tenant string) (*Target, error) {
	if !store.ValidName(node) || id == "" || len(id) > 128 {
		return nil, ErrNoVM
	}
	n, err := l.st.GetNode(ctx, node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNoVM
	}
	if err != nil {
		return nil, fmt.Errorf("read node %s: %w", node, err)
	}
	t := &Target{Node: n, ID: id}
	// An id is looked up by its entry's key: one read, however many VMs the node runs. A
	// name, or an id the ledger holds under another key (or not at all), is looked for
	// among the node's running entries.
	e, err := l.st.RunningVM(ctx, node, id)
	switch {
	case err == nil && e.VMID == id && (tenant == "" || e.Tenant == tenant):
		t.Entry, t.ID, t.Name = e, e.VMID, e.Name
		return t, nil
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	es, err := l.st.RunningOnNode(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("read the ledger: %w", err)
	}
	named := 0
	for i := range es {
		e := &es[i]
		if tenant != "" && e.Tenant != tenant {
			continue
		}
		if e.VMID == id {
			t.Entry, t.ID, t.Name, named = e, e.VMID, e.Name, 1
			break
		}
		if e.Name == id {
			t.Entry, t.ID, t.Name = e, e.VMID, e.Name
			named++
		}
	}
	if named > 1 {
		return nil, &AmbiguousError{Name: id, Node: node}
	}
	if t.Entry != nil {
		return t, nil
	}
	unlisted := func() (*Target, error) {
		if tenant != "" {
			return nil, ErrNoVM
		}
		return t, nil
	}
	if n.State != store.NodeUp {
		return unlisted()
	}
	nc, err := l.nodes.Client(n)
	if err != nil {
		return unlisted()
	}
	lctx, cancel := context.WithTimeout(ctx, nodecall.ListTimeout)
	defer cancel()
	vms, err := nc.ListVMs(lctx)
	if err != nil {
		return unlisted()
	}
	found := 0
	for _, vm := range vms {
		if vm.ID == id && (tenant == "" || vm.Tenant == tenant) {
			t.ID, t.Name = vm.ID, vm.Name
			return t, nil
		}
		if vm.Name == id && (tenant == "" || vm.Tenant == tenant) {
			t.ID, t.Name = vm.ID, vm.Name
			found++
		}
	}
	switch {
	case found > 1:
		return nil, &AmbiguousError{Name: id, Node: node}
	case found == 1:
		return t, nil
	}
	return unlisted()
}
