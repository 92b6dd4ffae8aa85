package api

import (
	"net/http"
	"strings"

	"github.com/fluxvm/fluxvm/central/previews"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Previews (docs/previews.md): the mechanism is central/previews; these
// handlers check access, find the VM and hand over.

// previewCaller is who calls a preview route, for central/previews.
func previewCaller(r *http.Request, p Principal) previews.Caller {
	o := openerOf(p)
	c := previews.Caller{Operator: p.Operator, TenantID: o.TenantID, TenantName: o.TenantName, ReadOnly: p.Key != nil && p.Key.ReadOnly}
	switch {
	case o.User != "":
		c.Label = o.User
	case p.Operator:
		c.Label = "operator"
	case o.KeyName != "":
		c.Label = "key " + o.KeyName
	default:
		c.Label = "primary token"
	}
	if scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		c.Credential = strings.TrimSpace(token)
	}
	return c
}

// previewTarget is the VM a preview route names, as central/previews needs it.
func (s *Server) previewTarget(r *http.Request, t *vms.Target) previews.Target {
	pt := previews.Target{Node: t.Node.Name, ID: t.ID, Name: vmName(t)}
	if t.Entry != nil && t.Entry.Tenant != "" {
		pt.Tenant = t.Entry.Tenant
		pt.TenantName = s.opts.Store.TenantName(r.Context(), t.Entry.Tenant)
	}
	return pt
}

// previewError answers an error of central/previews, or of the store or
// the VM's node.
func (s *Server) previewError(w http.ResponseWriter, r *http.Request, t *vms.Target, what string, err error) {
	if status, hint := previews.Status(err); status != 0 {
		jsonapi.WriteError(w, status, err.Error(), hint)
		return
	}
	if t != nil {
		s.nodeError(w, PrincipalOf(r.Context()), t.Node, what, err)
		return
	}
	s.storeError(w, what, err)
}

// openPreview is POST /fleet/vms/{node}/{id}/preview {"port": N}.
func (s *Server) openPreview(w http.ResponseWriter, r *http.Request) {
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	var body sdk.PreviewRequest
	if e := jsonapi.ReadBody(w, r, &body, true, specHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if t.Node.State != store.NodeUp {
		s.nodeClient(w, t) // answers that the node is down
		return
	}
	p, created, err := s.previews.Open(r.Context(), previewCaller(r, PrincipalOf(r.Context())), s.previewTarget(r, t), body.Port)
	if err != nil {
		s.previewError(w, r, t, "open a preview", err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	jsonapi.Write(w, status, p)
}

// closePreview is DELETE /fleet/vms/{node}/{id}/preview[?port=N]: the VM's
// preview of that port, or all of its previews, end at once.
func (s *Server) closePreview(w http.ResponseWriter, r *http.Request) {
	port, ok := jsonapi.IntParam(w, r, "port", 0, 0, previews.MaxPort)
	if !ok {
		return
	}
	t, ok := s.resolve(w, r)
	if !ok {
		return
	}
	if _, err := s.previews.Close(r.Context(), previewCaller(r, PrincipalOf(r.Context())), s.previewTarget(r, t), port); err != nil {
		s.previewError(w, r, nil, "close the preview", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listPreviews is GET /fleet/previews: the caller's open previews (all of
// them for the operator).
func (s *Server) listPreviews(w http.ResponseWriter, r *http.Request) {
	list, err := s.previews.List(r.Context(), previewCaller(r, PrincipalOf(r.Context())))
	if err != nil {
		s.storeError(w, "list previews", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.PreviewList{Previews: list})
}

// servePreview is every method of /fleet/previews/{id}/{path}: the request
// goes to the guest port, less the caller's credentials. It takes a bearer
// token or an API key, not a console session: a page of the guest served
// under central's own address must never run with a signed-in person's
// cookie (docs/design/018-previews.md).
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	if p.User != "" {
		jsonapi.WriteError(w, http.StatusForbidden, "a preview is not served to a console session",
			"send a bearer token or an API key (curl -H 'Authorization: Bearer ...', or sdk.FleetClient.DoPreview); browsers are not served previews yet")
		return
	}
	id := mux.Vars(r)["id"]
	// The path below the preview as the caller escaped it, so the guest
	// sees the same bytes.
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), sdk.PreviewPathPrefix+id+"/")
	if !ok {
		rest = mux.Vars(r)["path"]
	}
	rest = "/" + rest
	s.previews.Serve(w, r, previewCaller(r, p), id, rest)
}
