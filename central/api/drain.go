package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/drainer"
	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/gorilla/mux"
)

// EphemeralLabel marks a VM that a drain may delete, like one with a TTL.
const EphemeralLabel = drainer.EphemeralLabel

// cordonNode is POST /fleet/nodes/{name}/cordon: no new VM or lease lands
// there; what runs stays.
func (s *Server) cordonNode(w http.ResponseWriter, r *http.Request) {
	n, err := s.drainer.Cordon(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		s.drainerError(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, wireNode(n))
}

// uncordonNode is POST /fleet/nodes/{name}/uncordon: it ends a cordon and a
// drain (the drain's record stays for GET .../drain).
func (s *Server) uncordonNode(w http.ResponseWriter, r *http.Request) {
	n, err := s.drainer.Uncordon(r.Context(), mux.Vars(r)["name"])
	if err != nil {
		s.drainerError(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, wireNode(n))
}

// drainNode is POST /fleet/nodes/{name}/drain?mode=cordon|evict-ephemeral|
// reschedule[&force=true]: it cordons the node, marks it draining, then handles each
// VM by mode and records what it did (GET .../drain). A leased node needs
// force: draining it breaks the tenant's sole use. A reschedule answers once
// each copy boots (central/drainer).
func (s *Server) drainNode(w http.ResponseWriter, r *http.Request) {
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	mode := r.URL.Query().Get("mode")
	d, err := s.drainer.Drain(r.Context(), mux.Vars(r)["name"], mode, force)
	var le *drainer.LeasedError
	switch {
	case errors.Is(err, drainer.ErrBadMode):
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("mode %q is not a drain mode", jsonapi.Echo(mode)),
			"use mode=cordon (keep every VM), mode=evict-ephemeral (delete VMs with a TTL or label fluxvm.dev/ephemeral=true) "+
				"or mode=reschedule (also recreate reschedulable VMs on other nodes)")
	case errors.As(err, &le):
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s is leased (lease %s): draining it breaks the tenant's sole use", le.Node, le.Lease),
			"add force=true to drain it anyway, or wait for the lease to end")
	case err != nil:
		s.drainerError(w, r, err)
	default:
		jsonapi.Write(w, http.StatusOK, drainer.Wire(*d))
	}
}

// drainerError answers the drainer's errors that every drain route shares:
// a node that is not there, and the store's failures.
func (s *Server) drainerError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, drainer.ErrNoNode) {
		jsonapi.WriteError(w, http.StatusNotFound, "no node "+jsonapi.Echo(mux.Vars(r)["name"]), "GET /fleet/nodes lists the nodes")
		return
	}
	s.storeError(w, "drain the node", err)
}

// drainStatus is GET /fleet/nodes/{name}/drain: the node's latest drain,
// each VM with what happened to it, and whether it finished.
func (s *Server) drainStatus(w http.ResponseWriter, r *http.Request) {
	d, draining, err := s.drainer.Status(r.Context(), mux.Vars(r)["name"])
	switch {
	case errors.Is(err, drainer.ErrNotDrained):
		name := mux.Vars(r)["name"]
		jsonapi.WriteError(w, http.StatusNotFound, "node "+name+" has not been drained", "POST /fleet/nodes/"+name+"/drain starts one")
	case err != nil:
		s.drainerError(w, r, err)
	default:
		out := drainer.Wire(*d)
		out.Draining = &draining
		jsonapi.Write(w, http.StatusOK, out)
	}
}

// scrubNode is POST /fleet/nodes/{name}/scrub[?force=true]: refused while
// VMs remain on the node (force deletes them); then the node must prove
// through its API that it lists no VM and no VM workspace (force has it
// destroy leftover workspaces), and the node's scrub_pending is cleared. A
// node under an active lease is refused: release the lease first.
func (s *Server) scrubNode(w http.ResponseWriter, r *http.Request) {
	force, ok := boolParam(w, r, "force")
	if !ok {
		return
	}
	res, err := s.drainer.Scrub(r.Context(), mux.Vars(r)["name"], force)
	if err != nil {
		s.scrubError(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, res)
}

// scrubError answers a scrub the drainer refused or could not finish.
func (s *Server) scrubError(w http.ResponseWriter, r *http.Request, err error) {
	name := mux.Vars(r)["name"]
	var le *drainer.LeasedError
	var ne *nodecall.NodeError
	var lo *drainer.LeftoverError
	switch {
	case errors.As(err, &le):
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s is leased (lease %s)", le.Node, le.Lease),
			"a scrub follows a lease's end: release the lease first (POST /fleet/leases/"+le.Lease+"/release?force=true)")
	case errors.Is(err, drainer.ErrNodeDown):
		jsonapi.WriteError(w, http.StatusServiceUnavailable, fmt.Sprintf("node %s is down: a scrub needs it to answer", name),
			"retry once the node reports again")
	case errors.As(err, &ne) && ne.What == "":
		jsonapi.WriteError(w, http.StatusBadGateway, ne.Err.Error(), "the node's heartbeat must carry its API address")
	case errors.As(err, &ne):
		s.nodeError(w, PrincipalOf(r.Context()), ne.Node, ne.What, ne.Err)
	case errors.As(err, &lo) && lo.Workspaces:
		hint := "add force=true to have the node destroy them with the scrub"
		if lo.Forced {
			hint = "the node could not destroy them: see its log, then retry"
		}
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s runs no VM but still holds %d VM workspaces (%v)", lo.Node, lo.Count, lo.Sample), hint)
	case errors.As(err, &lo) && lo.Err != nil:
		jsonapi.WriteError(w, http.StatusBadGateway, fmt.Sprintf("node %s: could not delete every VM: %v", lo.Node, lo.Err),
			"retry the scrub; the node keeps scrub_pending until it lists no VM")
	case errors.As(err, &lo) && lo.Forced:
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s still lists %d VMs after the deletes", lo.Node, lo.Count),
			"retry the scrub with force=true; the node keeps scrub_pending until it lists no VM")
	case errors.As(err, &lo):
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("node %s still runs %d VMs (%v)", lo.Node, lo.Count, lo.Sample),
			"delete them first, or add force=true to delete them with the scrub")
	default:
		s.drainerError(w, r, err)
	}
}
