package api

import (
	"errors"
	"net/http"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Limits of GET /fleet/events.
const (
	defaultEventLimit = 100
	maxEventLimit     = audit.DefaultKeep
)

// listEvents serves this central's activity log, newest first. The operator
// sees everyone's, or one tenant's with ?tenant= (an id or a name; an
// unknown name is taken as the id of a deleted tenant). A tenant sees only
// its own: ?tenant= naming anyone else is a 403, the same whether that
// tenant exists or not, so it tells nothing.
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	limit, ok := jsonapi.IntParam(w, r, "limit", defaultEventLimit, 1, maxEventLimit)
	if !ok {
		return
	}
	q := r.URL.Query()
	if len(q["tenant"]) > 1 {
		jsonapi.WriteError(w, http.StatusBadRequest, "query parameter tenant is given more than once", "give one tenant id or name")
		return
	}
	ref := q.Get("tenant")
	var tenant string
	switch p := PrincipalOf(r.Context()); {
	case p.Tenant != nil:
		if ref != "" && ref != p.Tenant.ID && ref != p.Tenant.Name {
			jsonapi.WriteError(w, http.StatusForbidden, "a tenant sees only its own events",
				"leave tenant= out (or give your own id or name)")
			return
		}
		tenant = p.Tenant.ID
	case ref != "":
		tenant = ref
		t, err := s.findTenant(r.Context(), ref)
		switch {
		case err == nil:
			tenant = t.ID
		case !errors.Is(err, store.ErrNotFound):
			s.storeError(w, "find tenant "+jsonapi.Echo(ref), err)
			return
		}
	}
	out := sdk.EventList{Events: []sdk.Event{}}
	if s.opts.Activity != nil {
		out.Events = append(out.Events, s.opts.Activity.Recent(limit, tenant)...)
	}
	jsonapi.Write(w, http.StatusOK, out)
}
