package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

const specHint = "the node API is described in schemas/node-openapi.yaml"

func contextWith(r *http.Request, info *reqInfo) context.Context {
	return context.WithValue(r.Context(), ctxKey{}, info)
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	h := s.opts.Manager.Health()
	if h.Version == "" {
		h.Version = s.opts.Version
	}
	if h.Drivers == nil {
		h.Drivers = []sdk.DriverHealth{}
	}
	for i := range h.Drivers {
		if h.Drivers[i].Capabilities == nil {
			h.Drivers[i].Capabilities = []string{}
		}
	}
	jsonapi.Write(w, http.StatusOK, h)
}

// listWorkspaces is GET /v1/workspaces: the VM folders on disk, so that a
// scrub can prove nothing of any VM is left.
func (s *server) listWorkspaces(w http.ResponseWriter, r *http.Request) {
	ws, err := s.opts.Manager.Workspaces()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.WorkspaceList{Workspaces: ws})
}

// cleanWorkspaces is POST /v1/workspaces/clean: destroys the workspaces no
// VM owns and lists them.
func (s *server) cleanWorkspaces(w http.ResponseWriter, r *http.Request) {
	removed, err := s.opts.Manager.CleanWorkspaces(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.WorkspaceList{Workspaces: removed})
}

func (s *server) listVMs(w http.ResponseWriter, r *http.Request) {
	vms, err := s.opts.Manager.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	list := sdk.VMList{VMs: make([]sdk.VM, len(vms))}
	for i, v := range vms {
		list.VMs[i] = *v
	}
	jsonapi.Write(w, http.StatusOK, list)
}

func (s *server) createVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.CreateVMRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	vm, err := s.opts.Manager.Create(r.Context(), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vm.ID)
	jsonapi.Write(w, http.StatusCreated, vm)
}

func (s *server) getVM(w http.ResponseWriter, r *http.Request) {
	wait, ok := jsonapi.IntParam(w, r, "wait_ready", 0, 0, sdk.MaxWaitReadySeconds)
	if !ok {
		return
	}
	vm, err := s.opts.Manager.AwaitReady(r.Context(), mux.Vars(r)["id"], time.Duration(wait)*time.Second)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, vm)
}

func (s *server) deleteVM(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.Manager.Delete(r.Context(), mux.Vars(r)["id"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// lifecycle serves start, restart, pause and resume, which take no body.
func (s *server) lifecycle(op func(context.Context, string) (*sdk.VM, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.readJSON(w, r, &struct{}{}, false) {
			return
		}
		vm, err := op(r.Context(), mux.Vars(r)["id"])
		if err != nil {
			s.fail(w, r, err)
			return
		}
		jsonapi.Write(w, http.StatusOK, vm)
	}
}

// maxStopSeconds bounds a graceful stop asked for through the API.
const maxStopSeconds = 3600

func (s *server) stopVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.StopRequest
	if !s.readJSON(w, r, &req, false) {
		return
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > maxStopSeconds {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("timeout_seconds %d is out of range", req.TimeoutSeconds),
			fmt.Sprintf("timeout_seconds is 0 to %d; leave it out for the node's default", maxStopSeconds))
		return
	}
	vm, err := s.opts.Manager.Stop(r.Context(), mux.Vars(r)["id"], time.Duration(req.TimeoutSeconds)*time.Second)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, vm)
}

func (s *server) exec(w http.ResponseWriter, r *http.Request) {
	var req sdk.ExecRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	res, err := s.opts.Manager.Exec(r.Context(), mux.Vars(r)["id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, res)
}

func (s *server) logs(w http.ResponseWriter, r *http.Request) {
	lines, ok := jsonapi.IntParam(w, r, "lines", 100, 1, 100000)
	if !ok {
		return
	}
	data, err := s.opts.Manager.Logs(r.Context(), mux.Vars(r)["id"], lines)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(data)
}

func (s *server) screenshot(w http.ResponseWriter, r *http.Request) {
	maxWidth, ok := jsonapi.IntParam(w, r, "max_width", 0, 1, 16384)
	if !ok {
		return
	}
	png, err := s.opts.Manager.Screenshot(r.Context(), mux.Vars(r)["id"], maxWidth)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(png)
}

func (s *server) input(w http.ResponseWriter, r *http.Request) {
	var req sdk.InputRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	if err := s.opts.Manager.Input(r.Context(), mux.Vars(r)["id"], req.Actions); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// readJSON decodes the request body into dst, answering the error itself
// (and returning false) when the body is refused. A body is required only
// when required is set; an absent one leaves dst as it is.
func (s *server) readJSON(w http.ResponseWriter, r *http.Request, dst any, required bool) bool {
	if err := jsonapi.ReadBody(w, r, dst, required, specHint); err != nil {
		jsonapi.WriteError(w, err.Status, err.Msg, err.Hint)
		return false
	}
	return true
}

func (s *server) snapshotVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.SnapshotRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	snap, err := s.opts.Manager.Snapshot(r.Context(), mux.Vars(r)["id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, snap)
}

func (s *server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	snaps, err := s.opts.Manager.Snapshots(r.Context(), mux.Vars(r)["id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, snaps)
}

func (s *server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	if err := s.opts.Manager.DeleteSnapshot(r.Context(), vars["id"], vars["tag"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) restoreVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.RestoreRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	vm, err := s.opts.Manager.Restore(r.Context(), mux.Vars(r)["id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, vm)
}

func (s *server) cloneVM(w http.ResponseWriter, r *http.Request) {
	var req sdk.CloneRequest
	if !s.readJSON(w, r, &req, true) {
		return
	}
	vm, err := s.opts.Manager.Clone(r.Context(), mux.Vars(r)["id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/vms/"+vm.ID)
	jsonapi.Write(w, http.StatusCreated, vm)
}
