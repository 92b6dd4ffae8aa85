package api

import (
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// leastRole is this test's own copy of who may call what: for each route,
// the least role of a tenant's team that may call it, "operator" for the
// operator's routes and "public" for those that need nothing. It is written
// out here on purpose, apart from routes.go: a route added to the table
// without a line here fails, and so does a role changed on one side only.
var leastRole = map[string]string{
	"GET /auth/config":                                     "public",
	"GET /auth/login":                                      "public",
	"GET /auth/callback":                                   "public",
	"GET /auth/session":                                    "public",
	"POST /auth/logout":                                    "public",
	"GET /healthz":                                         "public",
	"GET /metrics":                                         "operator",
	"POST /fleet/nodes/{name}/heartbeat":                   "operator",
	"GET /fleet/nodes/{name}/channel":                      "operator",
	"GET /fleet/nodes":                                     "operator",
	"GET /fleet/nodes/{name}":                              "viewer",
	"GET /fleet/capacity":                                  "viewer",
	"POST /fleet/nodes/{name}/cordon":                      "operator",
	"POST /fleet/nodes/{name}/uncordon":                    "operator",
	"POST /fleet/nodes/{name}/drain":                       "operator",
	"GET /fleet/nodes/{name}/drain":                        "operator",
	"POST /fleet/nodes/{name}/scrub":                       "operator",
	"GET /fleet/rebalance/plan":                            "operator",
	"GET /fleet/leases":                                    "viewer",
	"POST /fleet/leases":                                   "admin",
	"GET /fleet/leases/{id}":                               "viewer",
	"POST /fleet/leases/{id}/release":                      "admin",
	"GET /fleet/tenants":                                   "operator",
	"POST /fleet/tenants":                                  "operator",
	"GET /fleet/tenants/me":                                "viewer",
	"GET /fleet/tenants/me/keys":                           "admin",
	"POST /fleet/tenants/me/keys":                          "admin",
	"DELETE /fleet/tenants/me/keys/{key}":                  "admin",
	"GET /fleet/tenants/me/members":                        "viewer",
	"POST /fleet/tenants/me/members":                       "admin",
	"PATCH /fleet/tenants/me/members/{email}":              "admin",
	"DELETE /fleet/tenants/me/members/{email}":             "admin",
	"GET /fleet/tenants/{id}/members":                      "operator",
	"POST /fleet/tenants/{id}/members":                     "operator",
	"PATCH /fleet/tenants/{id}/members/{email}":            "operator",
	"DELETE /fleet/tenants/{id}/members/{email}":           "operator",
	"GET /fleet/tenants/{id}/keys":                         "operator",
	"POST /fleet/tenants/{id}/keys":                        "operator",
	"DELETE /fleet/tenants/{id}/keys/{key}":                "operator",
	"GET /fleet/tenants/{id}":                              "operator",
	"PATCH /fleet/tenants/{id}":                            "operator",
	"DELETE /fleet/tenants/{id}":                           "operator",
	"POST /fleet/tenants/{id}/rotate-token":                "operator",
	"GET /fleet/policy":                                    "operator",
	"PUT /fleet/policy":                                    "operator",
	"GET /fleet/images":                                    "viewer",
	"PUT /fleet/images/{name}":                             "operator",
	"DELETE /fleet/images/{name}":                          "operator",
	"GET /fleet/vms":                                       "viewer",
	"POST /fleet/vms":                                      "member",
	"DELETE /fleet/vms/{node}/{id}":                        "member",
	"POST /fleet/vms/{node}/{id}/exec":                     "member",
	"POST /fleet/vms/{node}/{id}/start":                    "member",
	"POST /fleet/vms/{node}/{id}/stop":                     "member",
	"POST /fleet/vms/{node}/{id}/restart":                  "member",
	"POST /fleet/vms/{node}/{id}/pause":                    "member",
	"POST /fleet/vms/{node}/{id}/resume":                   "member",
	"GET /fleet/vms/{node}/{id}/logs":                      "member",
	"GET /fleet/vms/{node}/{id}/screen":                    "member",
	"GET /fleet/vms/{node}/{id}/tunnel":                    "member",
	"POST /fleet/vms/{node}/{id}/ws-ticket":                "member",
	"GET /fleet/ws/{ticket}":                               "public",
	"POST /fleet/vms/{node}/{id}/input":                    "member",
	"GET /fleet/vms/{node}/{id}/snapshots":                 "viewer",
	"POST /fleet/vms/{node}/{id}/snapshots":                "member",
	"DELETE /fleet/vms/{node}/{id}/snapshots/{name}":       "member",
	"POST /fleet/vms/{node}/{id}/snapshots/{name}/restore": "member",
	"POST /fleet/vms/{node}/{id}/clone":                    "member",
	"GET /fleet/overlays":                                  "viewer",
	"POST /fleet/overlays":                                 "member",
	"GET /fleet/overlays/{name}":                           "viewer",
	"DELETE /fleet/overlays/{name}":                        "member",
	"POST /fleet/overlays/{name}/members":                  "member",
	"DELETE /fleet/overlays/{name}/members/{node}":         "member",
	"POST /fleet/overlays/{name}/rotate":                   "member",
	"GET /fleet/volumes":                                   "viewer",
	"POST /fleet/volumes":                                  "member",
	"GET /fleet/volumes/{name}":                            "viewer",
	"DELETE /fleet/volumes/{name}":                         "member",
	"POST /fleet/volumes/{name}/resize":                    "member",
	"GET /fleet/tunnels":                                   "viewer",
	"DELETE /fleet/tunnels/{id}":                           "admin",
	"GET /fleet/pools":                                     "viewer",
	"POST /fleet/pools":                                    "admin",
	"GET /fleet/pools/{name}":                              "viewer",
	"PATCH /fleet/pools/{name}":                            "admin",
	"DELETE /fleet/pools/{name}":                           "admin",
	"GET /fleet/pools/{name}/status":                       "viewer",
	"POST /fleet/macos-pool/checkout":                      "operator",
	"POST /fleet/macos-pool/{node}/{id}/return":            "operator",
	"GET /fleet/prices":                                    "viewer",
	"PUT /fleet/prices":                                    "operator",
	"GET /fleet/usage":                                     "viewer",
	"GET /fleet/billing":                                   "viewer",
	"PUT /fleet/tenants/me/budget":                         "admin",
	"PUT /fleet/tenants/{id}/budget":                       "operator",
	"POST /fleet/reconcile":                                "operator",
	"GET /fleet/events":                                    "viewer",
	"GET /fleet/notifications":                             "viewer",
	"GET /fleet/webhooks":                                  "viewer",
	"POST /fleet/webhooks":                                 "admin",
	"DELETE /fleet/webhooks/{id}":                          "admin",
	"POST /fleet/webhooks/{id}/test":                       "admin",
	"GET /fleet/billing/invoices":                          "viewer",
	"POST /fleet/billing/invoices":                         "operator",
	"POST /fleet/billing/payment-method":                   "admin",
	"PUT /fleet/tenants/{id}/billing":                      "operator",
	"POST /stripe/webhook":                                 "public",
	"GET /signup/config":                                   "public",
	"POST /signup":                                         "public",
	"GET /signup/confirm":                                  "public",
	"POST /signup/confirm":                                 "public",
	"POST /fleet/pairing/redeem":                           "public",
	"POST /fleet/pairing/confirm":                          "public",
	"GET /fleet/federation":                                "operator",
	"POST /fleet/federation/invites":                       "operator",
	"GET /fleet/federation/requests":                       "operator",
	"POST /fleet/federation/requests/{id}/approve":         "operator",
	"POST /fleet/federation/requests/{id}/reject":          "operator",
	"DELETE /fleet/federation/members/{id}":                "operator",
	"POST /fleet/federation/join":                          "operator",
	"POST /fleet/federation/confirm":                       "operator",
	"DELETE /fleet/federation/membership":                  "operator",
	"POST /fleet/federation/report":                        "member",
	"POST /fleet/federation/leave":                         "member",
	"POST /fleet/federation/refresh":                       "member",
	"GET /fleet/federation/site":                           "member",
	"GET /fleet/federation/policy":                         "member",

	// Previews. "token" is a tenant route that names no role: the
	// tenant's token and keys may call it, no console session may.
	"POST /fleet/vms/{node}/{id}/preview":   "member",
	"DELETE /fleet/vms/{node}/{id}/preview": "member",
	"GET /fleet/previews":                   "viewer",
	"GET /fleet/previews/{id}/{path:.*}":    "token",
	"POST /fleet/previews/{id}/{path:.*}":   "token",
	"PUT /fleet/previews/{id}/{path:.*}":    "token",
	"PATCH /fleet/previews/{id}/{path:.*}":  "token",
	"DELETE /fleet/previews/{id}/{path:.*}": "token",
	"GET /fleet/history/sync":               "operator",
	"GET /fleet/history/sync/preview":       "operator",
	"POST /fleet/history/sync/consent":      "operator",
	"POST /fleet/history/sync":              "operator",
	"POST /fleet/history/payloads":          "member",
	"POST /fleet/history/rows":              "member",
	"GET /fleet/history":                    "operator",
}

// TestEveryRouteHasItsRoleForEveryKindOfCaller holds the access table to
// leastRole, then decides every route for every role of a team (in a
// console session) and for the primary token and a full and a read-only
// key: a role below the route's is refused, one at or above it passes, and
// the tenant's token and its keys pass every tenant route here. (A
// read-only key's writes and keys' changes of keys and the team are refused
// after this check, as TestEveryRouteWithEveryCredential holds over HTTP.)
func TestEveryRouteHasItsRoleForEveryKindOfCaller(t *testing.T) {
	tenant := &store.Tenant{Tenant: sdk.Tenant{ID: "t-0123456789abcdef", Name: "acme"}}
	callers := map[string]Principal{
		"owner session":  {Tenant: tenant, Role: sdk.RoleOwner, User: "o@example.com"},
		"admin session":  {Tenant: tenant, Role: sdk.RoleAdmin, User: "a@example.com"},
		"member session": {Tenant: tenant, Role: sdk.RoleMember, User: "m@example.com"},
		"viewer session": {Tenant: tenant, Role: sdk.RoleViewer, User: "v@example.com"},
		"primary token":  {Tenant: tenant, Role: sdk.RoleOwner},
		"full key":       {Tenant: tenant, Role: sdk.RoleAdmin, Key: &sdk.APIKey{Name: "ci"}},
		"read-only key":  {Tenant: tenant, Role: sdk.RoleAdmin, Key: &sdk.APIKey{Name: "ro", ReadOnly: true}},
	}
	seen := map[string]bool{}
	for _, rt := range Routes() {
		key := rt.Method + " " + rt.Path
		seen[key] = true
		want, ok := leastRole[key]
		if !ok {
			t.Errorf("route %s is not in leastRole: decide which role of a team may call it", key)
			continue
		}
		switch rt.Access {
		case Public, Operator, FleetMember:
			if want != rt.Access.String() || rt.Role != "" {
				t.Errorf("%s is %s with role %q in the table, %s here", key, rt.Access, rt.Role, want)
			}
			continue
		}
		if string(rt.Role) != strings.TrimPrefix(want, "token") {
			t.Errorf("%s: the table's least role is %q, this test's %q", key, rt.Role, want)
			continue
		}
		for who, p := range callers {
			msg, _ := roleRefusal(rt, p)
			refused, wantRefused := msg != "", p.Role.Rank() < sdk.Role(want).Rank()
			if want == "token" {
				wantRefused = p.User != ""
			}
			if refused != wantRefused {
				t.Errorf("%s by %s: refused %v (%q), want refused %v", key, who, refused, msg, wantRefused)
			}
		}
	}
	for key := range leastRole {
		if !seen[key] {
			t.Errorf("leastRole names %s, which the table does not have", key)
		}
	}
	// A tenant route that names no role is closed to every session, and
	// open to the token and keys.
	closed := Route{Method: "POST", Path: "/fleet/new-thing", Access: Tenant}
	for who, p := range callers {
		msg, _ := roleRefusal(closed, p)
		if (msg != "") != (p.User != "") {
			t.Errorf("a route without a role, by %s: refusal %q", who, msg)
		}
	}
}
