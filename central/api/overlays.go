package api

import (
	"net/http"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Overlays, tenants' private networks across nodes (docs/networks.md): the
// rules and the calls to nodes are central/overlays'; these handlers
// decode, call it and answer. A tenant names only its own overlays; the
// operator names the owner with ?tenant= (volumeTenant reads it).

func (s *Server) overlayOwner(w http.ResponseWriter, r *http.Request) (tenant string, operator, ok bool) {
	p := PrincipalOf(r.Context())
	tenant, ok = s.volumeTenant(w, r)
	if !ok {
		return "", false, false
	}
	if p.Tenant != nil {
		return p.Tenant.ID, false, true
	}
	return tenant, true, true
}

func (s *Server) listOverlays(w http.ResponseWriter, r *http.Request) {
	tenant, operator, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	l, err := s.overlays.List(r.Context(), tenant, operator)
	if err != nil {
		s.refused(w, r, "list the overlays", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.OverlayList{Overlays: l})
}

func (s *Server) createOverlay(w http.ResponseWriter, r *http.Request) {
	var req sdk.CreateOverlayRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	tenant, _, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	o, err := s.overlays.Create(r.Context(), tenant, req)
	if err != nil {
		s.refused(w, r, "create the overlay", err)
		return
	}
	nameTarget(r, o.Name)
	w.Header().Set("Location", "/fleet/overlays/"+o.Name)
	jsonapi.Write(w, http.StatusCreated, o)
}

func (s *Server) getOverlay(w http.ResponseWriter, r *http.Request) {
	tenant, operator, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	o, err := s.overlays.Get(r.Context(), tenant, mux.Vars(r)["name"], operator)
	if err != nil {
		s.refused(w, r, "read the overlay", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, o)
}

func (s *Server) deleteOverlay(w http.ResponseWriter, r *http.Request) {
	tenant, _, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	name := mux.Vars(r)["name"]
	if err := s.overlays.Delete(r.Context(), tenant, name); err != nil {
		s.refused(w, r, "delete the overlay", err)
		return
	}
	nameTarget(r, name)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) addOverlayNode(w http.ResponseWriter, r *http.Request) {
	var req sdk.AddOverlayNodeRequest
	if e := jsonapi.ReadBody(w, r, &req, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	tenant, operator, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	o, err := s.overlays.AddNode(r.Context(), tenant, mux.Vars(r)["name"], req.Node, operator)
	if err != nil {
		s.refused(w, r, "add the node", err)
		return
	}
	nameTarget(r, o.Name)
	jsonapi.Write(w, http.StatusOK, o)
}

func (s *Server) removeOverlayNode(w http.ResponseWriter, r *http.Request) {
	tenant, operator, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	o, err := s.overlays.RemoveNode(r.Context(), tenant, mux.Vars(r)["name"], mux.Vars(r)["node"], operator)
	if err != nil {
		s.refused(w, r, "remove the node", err)
		return
	}
	nameTarget(r, o.Name)
	jsonapi.Write(w, http.StatusOK, o)
}

func (s *Server) rotateOverlay(w http.ResponseWriter, r *http.Request) {
	tenant, operator, ok := s.overlayOwner(w, r)
	if !ok {
		return
	}
	o, err := s.overlays.Rotate(r.Context(), tenant, mux.Vars(r)["name"], operator)
	if err != nil {
		s.refused(w, r, "rotate the overlay's keys", err)
		return
	}
	nameTarget(r, o.Name)
	jsonapi.Write(w, http.StatusOK, o)
}
