package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/team"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// A tenant's team (docs/identity.md, "Members and roles"): the rules are
// central/team's, the last owner is kept by the store. Here are the routes:
// the tenant's under /fleet/tenants/me/members, the operator's under
// /fleet/tenants/{id}/members.

// memberHint says what a member request holds.
const memberHint = `the body is {"email": "alex@example.com", "role": "viewer"}; roles are viewer, member, admin and owner`

// teamOf finds whose team the route is about and who acts on it: the {id}
// tenant and the operator (as an owner) on the operator's routes, the
// caller's tenant and role on a tenant's. A change made with an API key is
// refused, as for keys: a leaked key must not let its holder in.
func (s *Server) teamOf(w http.ResponseWriter, r *http.Request, change bool) (*store.Tenant, team.Actor, bool) {
	if _, ok := mux.Vars(r)["id"]; ok {
		t, ok := s.pathTenant(w, r)
		return t, team.Actor{Role: sdk.RoleOwner, Name: "operator"}, ok
	}
	p := PrincipalOf(r.Context())
	switch {
	case p.Tenant == nil:
		jsonapi.WriteError(w, http.StatusBadRequest, "the operator is not a tenant and has no members",
			"name the tenant: /fleet/tenants/{id}/members (fluxctl fleet members --tenant T)")
		return nil, team.Actor{}, false
	case change && p.Key != nil:
		jsonapi.WriteError(w, http.StatusForbidden, "API key "+p.Key.Name+" cannot add, change or remove members",
			"the tenant's primary token, an admin or owner signed in to the console, or the operator changes the team; keys may list it (GET)")
		return nil, team.Actor{}, false
	}
	name := "token"
	if p.User != "" {
		name = p.User
	}
	return p.Tenant, team.Actor{Role: p.Role, Name: name}, true
}

// teamError answers a refusal of the team's rules or the store's.
func (s *Server) teamError(w http.ResponseWriter, t *store.Tenant, email string, err error) {
	switch {
	case errors.Is(err, team.ErrOwnersOnly):
		jsonapi.WriteError(w, http.StatusForbidden, err.Error(), "ask one of the tenant's owners")
	case errors.Is(err, team.ErrNotAllowed):
		jsonapi.WriteError(w, http.StatusForbidden, err.Error(), "ask an admin or owner of the team")
	case errors.Is(err, store.ErrLastOwner):
		jsonapi.WriteError(w, http.StatusConflict, jsonapi.Echo(email)+" is the last owner of tenant "+t.Name,
			"make someone else an owner first (fluxctl fleet member-role EMAIL owner)")
	case errors.Is(err, store.ErrInvalid):
		invalid(w, err, memberHint)
	case errors.Is(err, store.ErrExists):
		jsonapi.WriteError(w, http.StatusConflict, jsonapi.Echo(email)+" is already a member of tenant "+t.Name,
			"change their role instead (PATCH …/members/{email}, fluxctl fleet member-role)")
	case errors.Is(err, store.ErrQuota):
		jsonapi.WriteError(w, http.StatusTooManyRequests, fmt.Sprintf("tenant %s has %d members, the most a tenant may", t.Name, store.MaxMembersPerTenant),
			"remove members who no longer need access, then add this one")
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no member "+jsonapi.Echo(email)+" of tenant "+t.Name,
			"the list of members (GET …/members, fluxctl fleet members) shows them by email")
	default:
		s.storeError(w, "change the members of tenant "+t.Name, err)
	}
}

// emailTarget tells the activity log whose membership a change was about,
// when the email is one the store would keep and fits the log's target.
func emailTarget(r *http.Request, email string) {
	if store.CheckEmail(email) == nil && len(email) <= audit.MaxTargetBytes {
		setTarget(r, email)
	}
}

// listMembers is GET /fleet/tenants/me/members and /fleet/tenants/{id}/members.
func (s *Server) listMembers(w http.ResponseWriter, r *http.Request) {
	t, _, ok := s.teamOf(w, r, false)
	if !ok {
		return
	}
	ms, err := s.team.List(r.Context(), t.ID)
	if err != nil {
		s.storeError(w, "list the members of tenant "+t.Name, err)
		return
	}
	out := sdk.MemberList{Members: make([]sdk.Member, 0, len(ms))}
	for _, m := range ms {
		out.Members = append(out.Members, m.Member)
	}
	jsonapi.Write(w, http.StatusOK, out)
}

// addMember is POST /fleet/tenants/me/members and /fleet/tenants/{id}/members.
func (s *Server) addMember(w http.ResponseWriter, r *http.Request) {
	t, by, ok := s.teamOf(w, r, true)
	if !ok {
		return
	}
	var req sdk.AddMemberRequest
	if e := jsonapi.ReadBody(w, r, &req, true, memberHint); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	email := store.NormalEmail(req.Email)
	emailTarget(r, email)
	m, err := s.team.Add(r.Context(), t.ID, by, req)
	if err != nil {
		s.teamError(w, t, email, err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, m.Member)
}

// setMemberRole is PATCH …/members/{email}.
func (s *Server) setMemberRole(w http.ResponseWriter, r *http.Request) {
	t, by, ok := s.teamOf(w, r, true)
	if !ok {
		return
	}
	var req sdk.MemberRoleRequest
	if e := jsonapi.ReadBody(w, r, &req, true, `the body is {"role": "admin"}; roles are viewer, member, admin and owner`); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	email := store.NormalEmail(mux.Vars(r)["email"])
	emailTarget(r, email)
	m, err := s.team.SetRole(r.Context(), t.ID, by, email, req.Role)
	if err != nil {
		s.teamError(w, t, email, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, m.Member)
}

// removeMember is DELETE …/members/{email}.
func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	t, by, ok := s.teamOf(w, r, true)
	if !ok {
		return
	}
	email := store.NormalEmail(mux.Vars(r)["email"])
	emailTarget(r, email)
	if _, err := s.team.Remove(r.Context(), t.ID, by, email); err != nil {
		s.teamError(w, t, email, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
