package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/scheduler"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// DefaultHeartbeatInterval is how often nodes heartbeat unless central says
// otherwise; a node silent for DownAfterIntervals of them is marked down.
const DefaultHeartbeatInterval = 10 * time.Second

// DownAfterIntervals is how many heartbeat intervals a node may miss before
// it is marked down: one lost heartbeat is noise, three is a node.
const DownAfterIntervals = 3

// Limits of a heartbeat body, so one node cannot blow up its record.
const (
	maxHeartbeatVMs     = 10000
	maxHeartbeatDrivers = 64
	maxLabels           = vms.MaxLabels
)

// heartbeat records a node's report: its address, capacity, drivers and VMs.
// A node that was down is up again from here on.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	if !store.ValidName(name) {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("node name %q is not valid", jsonapi.Echo(name)),
			"node names are 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit (the node's HCL `name`)")
		return
	}
	var hb sdk.Heartbeat
	if e := jsonapi.ReadBody(w, r, &hb, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if msg, hint := checkHeartbeat(&hb); msg != "" {
		jsonapi.WriteError(w, http.StatusBadRequest, msg, hint)
		return
	}
	now := s.opts.Now().UTC()
	wasDown := false
	n, err := s.opts.Store.UpdateNode(r.Context(), name, true, func(n *store.Node) error {
		wasDown = n.State == store.NodeDown
		applyHeartbeat(n, &hb, now)
		markEnrolled(n, PrincipalOf(r.Context()))
		return nil
	})
	if err != nil {
		s.storeError(w, "record the heartbeat of node "+name, err)
		return
	}
	if wasDown {
		s.log.Info("node is up again", "node", name, "vms", len(n.VMs))
	}
	jsonapi.Write(w, http.StatusOK, sdk.HeartbeatReply{State: n.State, IntervalSeconds: int(s.opts.HeartbeatInterval / time.Second)})
}

// checkHeartbeat validates what the store does not: the URL central may
// call (none: only the node's channel), and sizes that must not be negative. It returns a message and a hint,
// or "" when the heartbeat is fine.
func checkHeartbeat(hb *sdk.Heartbeat) (msg, hint string) {
	// No URL: central reaches the node only through its channel.
	if u, err := url.Parse(hb.URL); hb.URL != "" &&
		(err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "") {
		return fmt.Sprintf("url %q is not a node API address", jsonapi.Echo(hb.URL)),
			"send the URL central reaches this node's API at, e.g. http://10.0.0.5:7777 (the node's central { advertise = ... }), or none when central reaches the node only through its channel"
	}
	c := hb.Capacity
	for _, v := range []int64{c.Total.VCPUs, c.Total.MemoryMiB, c.Total.MacOSSlots, c.Reserved.VCPUs, c.Reserved.MemoryMiB} {
		if v < 0 {
			return "capacity must not be negative", "send the node's total, reserved and free resources as GET /v1/health reports them"
		}
	}
	if len(hb.Labels) > maxLabels {
		return fmt.Sprintf("%d labels: at most %d", len(hb.Labels), maxLabels), "trim the node's labels"
	}
	if len(hb.Drivers) > maxHeartbeatDrivers {
		return fmt.Sprintf("%d drivers: at most %d", len(hb.Drivers), maxHeartbeatDrivers), "a node runs a handful of driver plugins"
	}
	for _, d := range hb.Drivers {
		if d.Name == "" {
			return "every driver needs a name", "send each driver as GET /v1/health names it"
		}
	}
	if len(hb.Networks) > maxHeartbeatDrivers {
		return fmt.Sprintf("%d network plugins: at most %d", len(hb.Networks), maxHeartbeatDrivers), "a node runs one network plugin"
	}
	for _, n := range hb.Networks {
		if n == "" || len(n) > 64 {
			return "every network plugin needs a name of at most 64 bytes", "send the names GET /v1/health lists under networks"
		}
	}
	if len(hb.VMs) > maxHeartbeatVMs {
		return fmt.Sprintf("%d vms: at most %d", len(hb.VMs), maxHeartbeatVMs), "a node reports every VM it runs; this many is not a node"
	}
	for _, vm := range hb.VMs {
		if vm.ID == "" || vm.VCPUs < 0 || vm.MemoryMiB < 0 {
			return "every vm needs an id and non-negative sizes", "send each VM as GET /v1/vms lists it"
		}
	}
	return "", ""
}

// applyHeartbeat rewrites the node-reported fields of n; the fields central
// owns (cordoned, draining, scrub pending) stay.
func applyHeartbeat(n *store.Node, hb *sdk.Heartbeat, now time.Time) {
	c := hb.Capacity
	// What the node offers VMs is its total less what its config keeps for
	// the host; the store checks reservations against that.
	n.URL = hb.URL
	n.Labels = hb.Labels
	n.Capacity = sdk.FleetNodeCapacity{
		Total: sdk.Resources{
			VCPUs:      max(c.Total.VCPUs-c.Reserved.VCPUs, 0),
			MemoryMiB:  max(c.Total.MemoryMiB-c.Reserved.MemoryMiB, 0),
			MacOSSlots: c.Total.MacOSSlots,
		},
		Free: c.Free,
	}
	n.Drivers = n.Drivers[:0]
	n.GuestOS = nil
	for _, d := range hb.Drivers {
		n.Drivers = append(n.Drivers, sdk.FleetNodeDriver{Name: d.Name, Health: d.Health, Simulated: d.Simulated})
		if d.Health != "healthy" {
			continue
		}
		for _, g := range d.GuestOS {
			if !slices.Contains(n.GuestOS, g) {
				n.GuestOS = append(n.GuestOS, g)
			}
		}
	}
	slices.Sort(n.GuestOS)
	n.Nested = hb.Nested
	n.Networks = slices.Clone(hb.Networks)
	n.VMs = slices.Clone(hb.VMs)
	n.LastHeartbeat = now
	n.State = store.NodeUp
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	ns, err := s.opts.Store.ListNodes(r.Context())
	if err != nil {
		s.storeError(w, "list nodes", err)
		return
	}
	out := sdk.FleetNodeList{Nodes: []sdk.FleetNode{}}
	for i := range ns {
		out.Nodes = append(out.Nodes, wireNode(&ns[i]))
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// getNode shows one node to the operator. A tenant sees a node it leases,
// without its address or labels (sdk.LeasedNode); any other is "not found".
func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	p := PrincipalOf(r.Context())
	notFound := func() {
		hint := "GET /fleet/nodes lists the nodes (operator)"
		if p.Tenant != nil {
			hint = "GET /fleet/leases lists the nodes you lease"
		}
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+jsonapi.Echo(name), hint)
	}
	if !store.ValidName(name) {
		notFound()
		return
	}
	n, err := s.opts.Store.GetNode(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		notFound()
		return
	}
	if err != nil {
		s.storeError(w, "read node "+name, err)
		return
	}
	if p.Tenant != nil {
		if n.LeasedBy != p.Tenant.ID {
			notFound()
			return
		}
		v, err := s.leasedNodeView(r.Context(), n)
		if err != nil {
			s.storeError(w, "read node "+name, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, v)
		return
	}
	jsonapi.Write(w, http.StatusOK, wireNode(n))
}

// capacity is GET /fleet/capacity: what the caller could launch now.
func (s *Server) capacity(w http.ResponseWriter, r *http.Request) {
	_, nodes, err := s.place.Snapshot(r.Context())
	if err != nil {
		s.storeError(w, "read the fleet", err)
		return
	}
	pol, err := s.opts.Store.GetPolicy(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, scheduler.Capacity(nodes, tenantID(PrincipalOf(r.Context())), placement.SchedulerPolicy(pol)))
}

func tenantID(p Principal) string {
	if p.Tenant != nil {
		return p.Tenant.ID
	}
	return ""
}

// storeError answers a store failure that is not the caller's fault. A
// service's *store.OpError says itself what was being done.
func (s *Server) storeError(w http.ResponseWriter, what string, err error) {
	if oe := (*store.OpError)(nil); errors.As(err, &oe) {
		what, err = oe.Op, oe.Err
	}
	switch {
	case errors.Is(err, store.ErrInvalid):
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), specHint)
	case errors.Is(err, store.ErrConflict):
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "could not "+what+": too many concurrent changes", "retry in a moment")
	default:
		s.log.Error("store", "op", what, "error", err)
		jsonapi.WriteError(w, http.StatusServiceUnavailable, "could not "+what+": central's store does not answer", "retry; if it persists, check central's etcd")
	}
}

// wireNode is a node as the operator sees it (sdk.FleetNode) from its
// record, which is that node whole: every answer that shows a node whole is
// built here.
func wireNode(n *store.Node) sdk.FleetNode { return n.FleetNode }

// leasedNodeView shows n to its lessee, with free capacity as central
// counts it (running and reserved through central, or what the node
// reports, whichever is more).
func (s *Server) leasedNodeView(ctx context.Context, n *store.Node) (sdk.LeasedNode, error) {
	u, err := s.opts.Store.NodeUsage(ctx, n.Name)
	if err != nil {
		return sdk.LeasedNode{}, err
	}
	sn := placement.SchedulerNode(n, u)
	t := n.Capacity.Total
	v := sdk.LeasedNode{Name: n.Name, State: n.State, Nested: n.Nested, LeaseID: n.LeaseID, VMs: len(n.VMs),
		Drivers: append([]sdk.FleetNodeDriver{}, n.Drivers...), GuestOS: append([]string{}, n.GuestOS...),
		Capacity: sdk.FleetNodeCapacity{Total: t, Free: sdk.Resources{
			VCPUs:      max(t.VCPUs-sn.Used.VCPUs, 0),
			MemoryMiB:  max(t.MemoryMiB-sn.Used.MemoryMiB, 0),
			MacOSSlots: max(t.MacOSSlots-sn.Used.MacOSSlots, 0),
		}}}
	return v, nil
}
