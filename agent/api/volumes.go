package api

import (
	"net/http"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

func (s *server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vols, err := s.opts.Manager.Volumes()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, vols)
}

func (s *server) createVolume(w http.ResponseWriter, r *http.Request) {
	var req sdk.CreateVolumeRequest
	if !s.readJSON(w, r, &req, false) {
		return
	}
	v, err := s.opts.Manager.CreateVolume(req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/volumes/"+v.Name)
	jsonapi.Write(w, http.StatusCreated, v)
}

func (s *server) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := s.opts.Manager.Volume(mux.Vars(r)["name"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}

func (s *server) deleteVolume(w http.ResponseWriter, r *http.Request) {
	if err := s.opts.Manager.DeleteVolume(mux.Vars(r)["name"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) resizeVolume(w http.ResponseWriter, r *http.Request) {
	var req sdk.ResizeVolumeRequest
	if !s.readJSON(w, r, &req, false) {
		return
	}
	v, err := s.opts.Manager.ResizeVolume(mux.Vars(r)["name"], req.SizeGiB)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, v)
}
