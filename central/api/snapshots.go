package api

import (
	"errors"
	"net/http"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Snapshots and clones (docs/snapshots.md): the rules are central/snapshots';
// these handlers find the VM, decode, call it and answer.

// snapshotTarget names a snapshot change for the activity log: the VM's
// name, a word, and the snapshot's (or the clone's) name, both valid names.
func snapshotTarget(r *http.Request, vm, word, name string) {
	if store.ValidName(vm) && store.ValidName(name) {
		setTarget(r, vm+" "+word+" "+name)
	}
}

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	var req sdk.FleetSnapshotRequest
	if e := jsonapi.ReadBody(w, r, &req, false, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	snap, err := s.snapshots.Take(r.Context(), t, req)
	if err != nil {
		s.snapshotError(w, r, t, "take the snapshot", err)
		return
	}
	snapshotTarget(r, snap.VM, "as", snap.Name)
	jsonapi.Write(w, http.StatusCreated, snap)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	out, err := s.snapshots.List(r.Context(), t)
	if err != nil {
		s.snapshotError(w, r, t, "list the snapshots", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, out)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	name, err := s.snapshots.Delete(r.Context(), t, mux.Vars(r)["name"])
	if err != nil {
		s.snapshotError(w, r, t, "delete the snapshot", err)
		return
	}
	snapshotTarget(r, name, "of", t.Name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	if e := jsonapi.ReadBody(w, r, &struct{}{}, false, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	vm, name, err := s.snapshots.Restore(r.Context(), t, mux.Vars(r)["name"])
	if err != nil {
		s.snapshotError(w, r, t, "restore the vm", err)
		return
	}
	snapshotTarget(r, vm.Name, "to", name)
	jsonapi.Write(w, http.StatusOK, sdk.FleetVM{Node: t.Node.Name, VM: *vm})
}

func (s *Server) cloneVM(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	var req sdk.FleetCloneRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	out, err := s.snapshots.Clone(r.Context(), t, req)
	if err != nil {
		s.snapshotError(w, r, t, "clone the vm", err)
		return
	}
	snapshotTarget(r, t.Name, "as", out.VM.Name)
	w.Header().Set("Location", "/fleet/vms/"+out.Node+"/"+out.VM.ID)
	jsonapi.Write(w, http.StatusCreated, out)
}

// snapshotError answers a refused or failed snapshot route; a node that
// is down is told as such rather than as a failed call.
func (s *Server) snapshotError(w http.ResponseWriter, r *http.Request, t *vms.Target, what string, err error) {
	if errors.As(err, new(*nodecall.NodeError)) {
		if _, ok := s.nodeClient(w, t); !ok {
			return
		}
	}
	s.refused(w, r, what, err)
}
