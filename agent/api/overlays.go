package api

import (
	"net/http"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// The node's parts of overlays (networks joined across nodes). Central
// calls these for the members of a tenant's overlay; see docs/networks.md.

func (s *server) listOverlays(w http.ResponseWriter, r *http.Request) {
	l, err := s.opts.Manager.Overlays(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, l)
}

func (s *server) ensureOverlay(w http.ResponseWriter, r *http.Request) {
	var req sdk.NodeOverlay
	if !s.readJSON(w, r, &req, false) {
		return
	}
	st, err := s.opts.Manager.EnsureOverlay(r.Context(), mux.Vars(r)["network"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, st)
}

func (s *server) deleteOverlay(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.Manager.DeleteOverlay(r.Context(), mux.Vars(r)["network"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) overlayKey(w http.ResponseWriter, r *http.Request) {
	var req sdk.OverlayKeyRequest
	if !s.readJSON(w, r, &req, false) {
		return
	}
	k, err := s.opts.Manager.OverlayKey(r.Context(), mux.Vars(r)["network"], req.Commit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, k)
}
