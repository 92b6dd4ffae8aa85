package api

import (
	"net/http"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/schemas"
)

// limitsHint points a caller whose number is out of range at the table of
// every range.
const limitsHint = `docs/tenancy.md, "Limits", lists every field's range and what 0 means`

// inBounds checks every request against the ranges schemas/fleet-openapi.yaml
// gives its numbers, strings and lists (schemas.Spec.Bounds) before the
// handler runs, and answers 400 naming the field and its range. This is the
// one place ranges are enforced; anything else wrong with a request (not
// JSON, a wrong type, an unknown or missing field, a body over 1 MiB) is the
// handler's to answer. The answer never repeats the value: an exec's body
// carries commands and secrets.
func inBounds(rt Route, next http.HandlerFunc) http.HandlerFunc {
	spec, err := schemas.FleetSpec() // parsed once per process
	if err != nil {
		panic("central's fleet API description does not load: " + err.Error()) // it is embedded and tested: a broken build
	}
	// Only a route that takes JSON has a body to look at: any other's (a
	// preview's, passed on to a guest as it came) is never read here.
	var jsonBody bool
	if item := spec.Doc.Paths.Value(rt.Path); item != nil {
		if op := item.GetOperation(rt.Method); op != nil && op.RequestBody != nil && op.RequestBody.Value != nil {
			jsonBody = op.RequestBody.Value.Content.Get("application/json") != nil
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if !jsonBody {
			if e := spec.Bounds(rt.Method, rt.Path, r.URL.Query(), nil); e != nil {
				jsonapi.WriteError(w, http.StatusBadRequest, e.Error(), limitsHint)
				return
			}
			next(w, r)
			return
		}
		// The body is held once (jsonapi.BufferBody) for this look, the
		// activity log's and the handler's. One too large, or unreadable,
		// is the handler's to answer (413, 400) as it always has.
		body, err := jsonapi.BufferBody(r)
		if err != nil || len(body) > jsonapi.MaxBodyBytes {
			next(w, r)
			return
		}
		if e := spec.Bounds(rt.Method, rt.Path, r.URL.Query(), body); e != nil {
			jsonapi.WriteError(w, http.StatusBadRequest, e.Error(), limitsHint)
			return
		}
		next(w, r)
	}
}
