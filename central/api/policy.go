package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

func (s *Server) getPolicy(w http.ResponseWriter, r *http.Request) {
	p, version, err := s.opts.Store.PolicyVersion(r.Context())
	if err != nil {
		s.storeError(w, "read the policy", err)
		return
	}
	if err := s.withFleetEgress(r.Context(), &p); err != nil {
		s.storeError(w, "read the fleet's egress floor", err)
		return
	}
	setETag(w, version)
	jsonapi.Write(w, http.StatusOK, p)
}

// withFleetEgress fills, on a member central, the owner's egress floor
// (fleet_egress): as last fetched, and what tenant networks here get.
func (s *Server) withFleetEgress(ctx context.Context, p *sdk.Policy) error {
	fe, err := s.federation.FleetEgress(ctx)
	if err != nil || fe == nil {
		return err
	}
	if fe.Effective, fe.Overridden, err = s.overlays.Floor(ctx, *p); err != nil {
		return err
	}
	p.FleetEgress = fe
	return nil
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
	// On a member central the operator's egress may tighten the fleet
	// owner's floor, never loosen it (409 with every reason).
	if err := s.overlays.CheckOwnEgress(r.Context(), p.Egress); err != nil {
		s.refused(w, r, "check the policy", err)
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
	if err := s.withFleetEgress(r.Context(), &stored); err != nil {
		s.log.Warn("read the fleet's egress floor", "error", err) // stored all the same
	}
	jsonapi.Write(w, http.StatusOK, stored)
}
