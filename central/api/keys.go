package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/keys"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// A tenant's named API keys (docs/tenancy.md, "API keys"): the mechanism is
// central/keys, and a key is taken for its tenant in authenticate. Here are
// the routes: the tenant's under /fleet/tenants/me/keys, the operator's
// under /fleet/tenants/{id}/keys.

// keyNameHint says what a key's name may be.
const keyNameHint = "key names are 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit, and not of an id's form (key- and 16 hex digits)"

// keyOwner finds whose keys the route is about: the {id} tenant on the
// operator's routes, the caller on a tenant's. For a change (change set) a
// tenant must call with its primary token: a key that could make keys or
// revoke the others would let one leak become many.
func (s *Server) keyOwner(w http.ResponseWriter, r *http.Request, change bool) (*store.Tenant, bool) {
	if _, ok := mux.Vars(r)["id"]; ok {
		return s.pathTenant(w, r)
	}
	p := PrincipalOf(r.Context())
	switch {
	case p.Tenant == nil:
		jsonapi.WriteError(w, http.StatusBadRequest, "the operator is not a tenant and has no API keys",
			"name the tenant: /fleet/tenants/{id}/keys (fluxctl fleet keys --tenant T)")
		return nil, false
	case change && p.Key != nil:
		jsonapi.WriteError(w, http.StatusForbidden, "API key "+p.Key.Name+" cannot create or revoke keys",
			"only the tenant's primary token (fvt_) or the operator creates and revokes keys, so that a leaked key cannot make more; "+
				"keys may list them (GET)")
		return nil, false
	}
	return p.Tenant, true
}

// listKeys is GET /fleet/tenants/me/keys and /fleet/tenants/{id}/keys.
func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	t, ok := s.keyOwner(w, r, false)
	if !ok {
		return
	}
	ks, err := s.keys.List(r.Context(), t.ID)
	if err != nil {
		s.storeError(w, "list the keys of tenant "+t.Name, err)
		return
	}
	out := sdk.APIKeyList{Keys: make([]sdk.APIKey, 0, len(ks))}
	for _, k := range ks {
		out.Keys = append(out.Keys, keys.Wire(k))
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// createKey is POST /fleet/tenants/me/keys and /fleet/tenants/{id}/keys: a
// new key, shown this once.
func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	t, ok := s.keyOwner(w, r, true)
	if !ok {
		return
	}
	var req sdk.CreateKeyRequest
	if e := jsonapi.ReadBody(w, r, &req, true, `the body is {"name": "ci-github", "read_only": false, "expires_days": 90}`); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	k, token, err := s.keys.Create(r.Context(), t.ID, req)
	switch {
	case errors.Is(err, store.ErrInvalid) && store.CheckKeyName(req.Name) != nil:
		invalid(w, err, keyNameHint)
	case errors.Is(err, store.ErrInvalid):
		invalid(w, err, limitsHint)
	case errors.Is(err, store.ErrExists):
		jsonapi.WriteError(w, http.StatusConflict, fmt.Sprintf("tenant %s already has a key named %s", t.Name, req.Name),
			"pick another name, or revoke that key first")
	case errors.Is(err, store.ErrQuota):
		jsonapi.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("tenant %s holds %d API keys, the most a tenant may", t.Name, store.MaxKeysPerTenant),
			"revoke keys nobody uses (the list shows when each was last used), then create this one")
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no tenant "+t.Name, "it was deleted meanwhile")
	case err != nil:
		s.storeError(w, "create key "+req.Name, err)
	default:
		nameTarget(r, k.Name)
		jsonapi.Write(w, http.StatusCreated, sdk.APIKeyWithToken{Key: keys.Wire(*k), Token: token, Note: keys.Note})
	}
}

// revokeKey is DELETE /fleet/tenants/me/keys/{key} and
// /fleet/tenants/{id}/keys/{key}: {key} is the key's id or its name.
func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	t, ok := s.keyOwner(w, r, true)
	if !ok {
		return
	}
	ref := mux.Vars(r)["key"]
	k, err := s.keys.Revoke(r.Context(), t.ID, ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no key "+jsonapi.Echo(ref)+" of tenant "+t.Name,
			"name a key by its name or id, as the list of keys (GET …/keys, fluxctl fleet keys) shows them")
	case err != nil:
		s.storeError(w, "revoke key "+jsonapi.Echo(ref), err)
	default:
		nameTarget(r, k.Name)
		w.WriteHeader(http.StatusNoContent)
	}
}
