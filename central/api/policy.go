package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
)

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	p, version, err := s.opts.Store.PolicyVersion(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	setETag(w, version)
	jsonapi.Write(w, http.StatusOK, p)
}

// putPolicy replaces the policy with a whole document: a field left out
// takes its default (GET /fleet/policy, edit, PUT back is the way to change
// one field). Unknown fields are refused, values are checked, and a
// min_lease_hours below 24 is raised to 24 (Apple's minimum) and said so in a
// Warning header. With If-Match it replaces only the version read (412
// otherwise). The answer is the policy as stored, with its new ETag.
func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	p := store.DefaultPolicy()
	if e := jsonapi.ReadBody(w, r, &p, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	asked := p.MinLeaseHours
	stored, err := s.opts.Store.PutPolicy(r.Context(), p, version...)
	if stale(w, err, "policy") {
		return
	}
	if errors.Is(err, store.ErrInvalid) {
		invalid(w, err, "GET /fleet/policy shows every field with its current value; "+specHint)
		return
	}
	if err != nil {
		s.storeError(w, "store the policy", err)
		return
	}
	if stored.MinLeaseHours != asked {
		w.Header().Set("Warning", fmt.Sprintf(`299 fluxvm "min_lease_hours %d raised to %d: Apple's licence asks for 24 hours of sole use"`,
			asked, stored.MinLeaseHours))
	}
	s.log.Info("policy replaced")
	if _, v, err := s.opts.Store.PolicyVersion(r.Context()); err == nil {
		setETag(w, v)
	}
	jsonapi.Write(w, http.StatusOK, stored)
}
