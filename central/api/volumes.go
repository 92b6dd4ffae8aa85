package api

import (
	"errors"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/volumes"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Volumes (docs/volumes.md): the rules are central/volumes'; these handlers
// decode, call it and answer.

func volumeCaller(p Principal) volumes.Caller {
	return volumes.Caller{Tenant: tenantID(p), Operator: p.Tenant == nil}
}

// volumeTenant reads ?tenant=: the operator's choice of one tenant (its id;
// "" when not given); a tenant may name only itself. False when answered.
func (s *Server) volumeTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := PrincipalOf(r.Context())
	q := r.URL.Query()
	if len(q["tenant"]) > 1 {
		jsonapi.WriteError(w, http.StatusBadRequest, "query parameter tenant is given more than once", "give one tenant id or name")
		return "", false
	}
	ref := q.Get("tenant")
	switch {
	case p.Tenant != nil:
		if ref != "" && ref != p.Tenant.ID && ref != p.Tenant.Name {
			jsonapi.WriteError(w, http.StatusForbidden, "a tenant sees and makes only its own volumes", "leave tenant= out (or give your own id or name)")
			return "", false
		}
	case ref != "":
		t, err := s.findTenant(r.Context(), ref)
		switch {
		case errors.Is(err, store.ErrNotFound):
			jsonapi.WriteError(w, http.StatusNotFound, "no tenant "+jsonapi.Echo(ref), "fluxctl fleet tenants lists them")
			return "", false
		case err != nil:
			s.storeError(w, "find tenant "+jsonapi.Echo(ref), err)
			return "", false
		}
		return t.ID, true
	}
	return "", true
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	tenant, ok := s.volumeTenant(w, r)
	if !ok {
		return
	}
	out, err := s.volumes.List(r.Context(), volumeCaller(p), tenant)
	if err != nil {
		s.refused(w, r, "list the volumes", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, out)
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetCreateVolumeRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	tenant, ok := s.volumeTenant(w, r)
	if !ok {
		return
	}
	c := volumeCaller(PrincipalOf(r.Context()))
	if c.Operator && tenant != "" {
		c.Tenant = tenant // the operator makes one for a tenant: its quota and names apply
	}
	v, err := s.volumes.Create(r.Context(), c, req)
	if err != nil {
		s.refused(w, r, "create the volume", err)
		return
	}
	nameTarget(r, v.Name)
	w.Header().Set("Location", "/fleet/volumes/"+v.Name)
	jsonapi.Write(w, http.StatusCreated, v)
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.volumes.Get(r.Context(), volumeCaller(PrincipalOf(r.Context())), mux.Vars(r)["name"])
	if err != nil {
		s.refused(w, r, "read the volume", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}

func (s *Server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.volumes.Delete(r.Context(), volumeCaller(PrincipalOf(r.Context())), mux.Vars(r)["name"])
	if err != nil {
		s.refused(w, r, "delete the volume", err)
		return
	}
	nameTarget(r, v.Name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) resizeVolume(w http.ResponseWriter, r *http.Request) {
	var req sdk.FleetResizeVolumeRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	v, err := s.volumes.Resize(r.Context(), volumeCaller(PrincipalOf(r.Context())), mux.Vars(r)["name"], req.SizeGiB)
	if err != nil {
		s.refused(w, r, "resize the volume", err)
		return
	}
	nameTarget(r, v.Name)
	jsonapi.Write(w, http.StatusOK, v)
}
