package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

const imageNameHint = "image names are 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	ims, err := s.opts.Store.ListImages(r.Context())
	if err != nil {
		s.storeError(w, "list images", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.ImageList{Images: ims})
}

// putImage adds (201) or replaces (200) a catalog entry. The name is the
// path's; the body may repeat it. vcpus, memory_mib and ssh_user default to
// 4, 8192 and admin. Central does not copy the disk: the operator puts it on
// the Macs first.
func (s *Server) putImage(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	if !store.ValidName(name) {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("image name %q is not valid", jsonapi.Echo(name)), imageNameHint)
		return
	}
	var im sdk.Image
	if e := jsonapi.ReadBody(w, r, &im, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if im.Name != "" && im.Name != name {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("the body names image %q but the path %q", jsonapi.Echo(im.Name), name),
			"leave name out of the body, or make it the path's; to rename an image, PUT the new name and DELETE the old")
		return
	}
	im.Name = name
	_, err := s.opts.Store.GetImage(r.Context(), name)
	existed := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.storeError(w, "read image "+name, err)
		return
	}
	if err := s.opts.Store.PutImage(r.Context(), &im); err != nil {
		if errors.Is(err, store.ErrInvalid) {
			invalid(w, err, `guest_os is "linux" or "macos", image the disk's path on the Macs, vcpus 1-1024, memory_mib 64-16777216`)
			return
		}
		s.storeError(w, "store image "+name, err)
		return
	}
	status := http.StatusCreated
	if existed {
		status = http.StatusOK
	} else {
		w.Header().Set("Location", "/fleet/images/"+name)
	}
	s.log.Info("catalog image stored", "image", name, "replaced", existed)
	jsonapi.Write(w, status, im)
}

func (s *Server) deleteImage(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	notFound := func() {
		jsonapi.WriteError(w, http.StatusNotFound, "no image "+jsonapi.Echo(name)+" in the catalog", "GET /fleet/images lists the catalog")
	}
	if !store.ValidName(name) {
		notFound()
		return
	}
	err := s.opts.Store.DeleteImage(r.Context(), name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		notFound()
	case err != nil:
		s.storeError(w, "delete image "+name, err)
	default:
		s.log.Info("catalog image deleted", "image", name)
		w.WriteHeader(http.StatusNoContent)
	}
}
