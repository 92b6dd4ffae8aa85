package api

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// Routes is the access table: every route central serves and who may call
// it. A route missing here is not served; the access test walks this table
// with every kind of credential. A tenant route names, as Role, the least
// role a member of the tenant's team needs to call it; one without is closed
// to members (see roleRefusal), and the role test walks every route with
// every role.
func Routes() []Route {
	const (
		Viewer, Member, Admin = sdk.RoleViewer, sdk.RoleMember, sdk.RoleAdmin
	)
	h := func(f func(*Server, http.ResponseWriter, *http.Request)) func(*Server) http.HandlerFunc {
		return func(s *Server) http.HandlerFunc { return func(w http.ResponseWriter, r *http.Request) { f(s, w, r) } }
	}
	return []Route{
		{Method: "GET", Path: "/healthz", Access: Public, handler: h((*Server).healthz)},
		// The console's session: public routes that read the cookie themselves.
		{Method: "GET", Path: "/auth/config", Access: Public, handler: h((*Server).authConfig)},
		{Method: "GET", Path: "/auth/login", Access: Public, handler: h((*Server).authLogin)},
		{Method: "GET", Path: "/auth/callback", Access: Public, handler: h((*Server).authCallback)},
		{Method: "GET", Path: "/auth/session", Access: Public, handler: h((*Server).authSession)},
		{Method: "POST", Path: "/auth/logout", Access: Public, handler: h((*Server).authLogout)},
		{Method: "GET", Path: "/metrics", Access: Operator, handler: h((*Server).metrics)},

		{Method: "POST", Path: "/fleet/nodes/{name}/heartbeat", Access: Operator, NodeOwn: true, NoActivity: true, handler: h((*Server).heartbeat)},
		{Method: "GET", Path: "/fleet/nodes/{name}/channel", Access: Operator, NodeOwn: true, NoActivity: true, handler: h((*Server).nodeChannel)},
		{Method: "GET", Path: "/fleet/nodes", Access: Operator, handler: h((*Server).listNodes)},
		{Method: "GET", Path: "/fleet/nodes/{name}", Access: Tenant, Role: Viewer, handler: h((*Server).getNode)},
		{Method: "GET", Path: "/fleet/capacity", Access: Tenant, Role: Viewer, handler: h((*Server).capacity)},
		{Method: "POST", Path: "/fleet/nodes/{name}/cordon", Action: "cordon node", Access: Operator, handler: h((*Server).cordonNode)},
		{Method: "POST", Path: "/fleet/nodes/{name}/uncordon", Action: "uncordon node", Access: Operator, handler: h((*Server).uncordonNode)},
		{Method: "POST", Path: "/fleet/nodes/{name}/drain", Action: "drain node", Access: Operator, handler: h((*Server).drainNode)},
		{Method: "GET", Path: "/fleet/nodes/{name}/drain", Access: Operator, handler: h((*Server).drainStatus)},
		{Method: "POST", Path: "/fleet/nodes/{name}/scrub", Action: "scrub node", Access: Operator, handler: h((*Server).scrubNode)},
		{Method: "GET", Path: "/fleet/rebalance/plan", Access: Operator, handler: h((*Server).rebalancePlan)},

		{Method: "GET", Path: "/fleet/leases", Access: Tenant, Role: Viewer, handler: h((*Server).listLeases)},
		{Method: "POST", Path: "/fleet/leases", Action: "lease node", Access: Tenant, Role: Admin, handler: h((*Server).createLease)},
		{Method: "GET", Path: "/fleet/leases/{id}", Access: Tenant, Role: Viewer, handler: h((*Server).getLease)},
		{Method: "POST", Path: "/fleet/leases/{id}/release", Action: "release lease", Access: Tenant, Role: Admin, handler: h((*Server).releaseLease)},

		{Method: "GET", Path: "/fleet/tenants", Access: Operator, handler: h((*Server).listTenants)},
		{Method: "POST", Path: "/fleet/tenants", Action: "create tenant", Access: Operator, handler: h((*Server).createTenant)},
		{Method: "GET", Path: "/fleet/tenants/me", Access: Tenant, Role: Viewer, handler: h((*Server).tenantMe)},
		// A tenant's API keys; the /me routes come before /{id} so that "me" is never taken for a tenant.
		{Method: "GET", Path: "/fleet/tenants/me/keys", Access: Tenant, Role: Admin, handler: h((*Server).listKeys)},
		{Method: "POST", Path: "/fleet/tenants/me/keys", Action: "create key", Access: Tenant, Role: Admin, handler: h((*Server).createKey)},
		{Method: "DELETE", Path: "/fleet/tenants/me/keys/{key}", Action: "revoke key", Access: Tenant, Role: Admin, handler: h((*Server).revokeKey)},
		// A tenant's team; {email} is matched lowercase.
		{Method: "GET", Path: "/fleet/tenants/me/members", Access: Tenant, Role: Viewer, handler: h((*Server).listMembers)},
		{Method: "POST", Path: "/fleet/tenants/me/members", Action: "add member", Access: Tenant, Role: Admin, handler: h((*Server).addMember)},
		{Method: "PATCH", Path: "/fleet/tenants/me/members/{email}", Action: "change the role of", Access: Tenant, Role: Admin, handler: h((*Server).setMemberRole)},
		{Method: "DELETE", Path: "/fleet/tenants/me/members/{email}", Action: "remove member", Access: Tenant, Role: Admin, handler: h((*Server).removeMember)},
		{Method: "GET", Path: "/fleet/tenants/{id}/members", Access: Operator, handler: h((*Server).listMembers)},
		{Method: "POST", Path: "/fleet/tenants/{id}/members", Action: "add member", Access: Operator, handler: h((*Server).addMember)},
		{Method: "PATCH", Path: "/fleet/tenants/{id}/members/{email}", Action: "change the role of", Access: Operator, handler: h((*Server).setMemberRole)},
		{Method: "DELETE", Path: "/fleet/tenants/{id}/members/{email}", Action: "remove member", Access: Operator, handler: h((*Server).removeMember)},
		{Method: "GET", Path: "/fleet/tenants/{id}/keys", Access: Operator, handler: h((*Server).listKeys)},
		{Method: "POST", Path: "/fleet/tenants/{id}/keys", Action: "create key", Access: Operator, handler: h((*Server).createKey)},
		{Method: "DELETE", Path: "/fleet/tenants/{id}/keys/{key}", Action: "revoke key", Access: Operator, handler: h((*Server).revokeKey)},
		{Method: "GET", Path: "/fleet/tenants/{id}", Access: Operator, handler: h((*Server).getTenant)},
		{Method: "PATCH", Path: "/fleet/tenants/{id}", Action: "update tenant", Access: Operator, handler: h((*Server).updateTenant)},
		{Method: "DELETE", Path: "/fleet/tenants/{id}", Action: "delete tenant", Access: Operator, handler: h((*Server).deleteTenant)},
		{Method: "POST", Path: "/fleet/tenants/{id}/rotate-token", Action: "rotate the token of", Access: Operator, handler: h((*Server).rotateTenantToken)},

		{Method: "GET", Path: "/fleet/policy", Access: Operator, handler: h((*Server).getPolicy)},
		{Method: "PUT", Path: "/fleet/policy", Action: "set the fleet policy", Access: Operator, handler: h((*Server).putPolicy)},

		{Method: "GET", Path: "/fleet/images", Access: Tenant, Role: Viewer, handler: h((*Server).listImages)},
		{Method: "PUT", Path: "/fleet/images/{name}", Action: "put image", Access: Operator, handler: h((*Server).putImage)},
		{Method: "DELETE", Path: "/fleet/images/{name}", Action: "delete image", Access: Operator, handler: h((*Server).deleteImage)},

		{Method: "GET", Path: "/fleet/vms", Access: Tenant, Role: Viewer, handler: h((*Server).listVMs)},
		{Method: "POST", Path: "/fleet/vms", Action: "launch vm", Access: Tenant, Role: Member, handler: h((*Server).createVM)},
		{Method: "DELETE", Path: "/fleet/vms/{node}/{id}", Action: "delete vm", Access: Tenant, Role: Member, handler: h((*Server).deleteVM)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/exec", Action: "run in", Access: Tenant, Role: Member, handler: h((*Server).execVM)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/start", Action: "start vm", Access: Tenant, Role: Member, handler: h(vmAction("start"))},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/stop", Action: "stop vm", Access: Tenant, Role: Member, handler: h(vmAction("stop"))},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/restart", Action: "restart vm", Access: Tenant, Role: Member, handler: h(vmAction("restart"))},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/pause", Action: "pause vm", Access: Tenant, Role: Member, handler: h(vmAction("pause"))},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/resume", Action: "resume vm", Access: Tenant, Role: Member, handler: h(vmAction("resume"))},
		{Method: "GET", Path: "/fleet/vms/{node}/{id}/logs", Access: Tenant, Role: Member, handler: h((*Server).vmLogs)},
		{Method: "GET", Path: "/fleet/vms/{node}/{id}/screen", Access: Tenant, Role: Member, handler: h((*Server).vmScreen)},
		// Tunnels and screens (docs/tunnels.md): the streams are GETs (WebSockets) that record OPEN and CLOSE themselves.
		{Method: "GET", Path: "/fleet/vms/{node}/{id}/tunnel", Access: Tenant, Role: Member, handler: h((*Server).openTunnel)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/ws-ticket", Action: "screen ticket for", Access: Tenant, Role: Member, handler: h((*Server).wsTicket)},
		{Method: "GET", Path: "/fleet/ws/{ticket}", Access: Public, handler: h((*Server).redeemTicket)},
		// Previews (docs/previews.md): the proxy's routes take a token or a key, never a console session, and are not activity.
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/preview", Action: "open a preview of", Access: Tenant, Role: Member, handler: h((*Server).openPreview)},
		{Method: "DELETE", Path: "/fleet/vms/{node}/{id}/preview", Action: "close the preview of", Access: Tenant, Role: Member, handler: h((*Server).closePreview)},
		{Method: "GET", Path: "/fleet/previews", Access: Tenant, Role: Viewer, handler: h((*Server).listPreviews)},
		{Method: "GET", Path: "/fleet/previews/{id}/{path:.*}", Access: Tenant, NoActivity: true, handler: h((*Server).servePreview)},
		{Method: "POST", Path: "/fleet/previews/{id}/{path:.*}", Access: Tenant, NoActivity: true, handler: h((*Server).servePreview)},
		{Method: "PUT", Path: "/fleet/previews/{id}/{path:.*}", Access: Tenant, NoActivity: true, handler: h((*Server).servePreview)},
		{Method: "PATCH", Path: "/fleet/previews/{id}/{path:.*}", Access: Tenant, NoActivity: true, handler: h((*Server).servePreview)},
		{Method: "DELETE", Path: "/fleet/previews/{id}/{path:.*}", Access: Tenant, NoActivity: true, handler: h((*Server).servePreview)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/input", Action: "send input to", Access: Tenant, Role: Member, handler: h((*Server).vmInput)},
		// Snapshots and clones (docs/snapshots.md).
		{Method: "GET", Path: "/fleet/vms/{node}/{id}/snapshots", Access: Tenant, Role: Viewer, handler: h((*Server).listSnapshots)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/snapshots", Action: "snapshot vm", Access: Tenant, Role: Member, handler: h((*Server).takeSnapshot)},
		{Method: "DELETE", Path: "/fleet/vms/{node}/{id}/snapshots/{name}", Action: "delete snapshot", Access: Tenant, Role: Member, handler: h((*Server).deleteSnapshot)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/snapshots/{name}/restore", Action: "restore vm", Access: Tenant, Role: Member, handler: h((*Server).restoreSnapshot)},
		{Method: "POST", Path: "/fleet/vms/{node}/{id}/clone", Action: "clone vm", Access: Tenant, Role: Member, handler: h((*Server).cloneVM)},
		// Overlays: tenants' private networks across nodes (docs/networks.md).
		{Method: "GET", Path: "/fleet/overlays", Access: Tenant, Role: Viewer, handler: h((*Server).listOverlays)},
		{Method: "POST", Path: "/fleet/overlays", Action: "create overlay", Access: Tenant, Role: Member, handler: h((*Server).createOverlay)},
		{Method: "GET", Path: "/fleet/overlays/{name}", Access: Tenant, Role: Viewer, handler: h((*Server).getOverlay)},
		{Method: "DELETE", Path: "/fleet/overlays/{name}", Action: "delete overlay", Access: Tenant, Role: Member, handler: h((*Server).deleteOverlay)},
		{Method: "POST", Path: "/fleet/overlays/{name}/members", Action: "add overlay node", Access: Tenant, Role: Member, handler: h((*Server).addOverlayNode)},
		{Method: "DELETE", Path: "/fleet/overlays/{name}/members/{node}", Action: "remove overlay node", Access: Tenant, Role: Member, handler: h((*Server).removeOverlayNode)},
		{Method: "POST", Path: "/fleet/overlays/{name}/rotate", Action: "rotate overlay keys", Access: Tenant, Role: Member, handler: h((*Server).rotateOverlay)},
		// Volumes (docs/volumes.md).
		{Method: "GET", Path: "/fleet/volumes", Access: Tenant, Role: Viewer, handler: h((*Server).listVolumes)},
		{Method: "POST", Path: "/fleet/volumes", Action: "create volume", Access: Tenant, Role: Member, handler: h((*Server).createVolume)},
		{Method: "GET", Path: "/fleet/volumes/{name}", Access: Tenant, Role: Viewer, handler: h((*Server).getVolume)},
		{Method: "DELETE", Path: "/fleet/volumes/{name}", Action: "delete volume", Access: Tenant, Role: Member, handler: h((*Server).deleteVolume)},
		{Method: "POST", Path: "/fleet/volumes/{name}/resize", Action: "resize volume", Access: Tenant, Role: Member, handler: h((*Server).resizeVolume)},
		{Method: "GET", Path: "/fleet/tunnels", Access: Tenant, Role: Viewer, handler: h((*Server).listTunnels)},
		{Method: "DELETE", Path: "/fleet/tunnels/{id}", Action: "close tunnel", Access: Tenant, Role: Admin, handler: h((*Server).closeTunnel)},

		{Method: "GET", Path: "/fleet/pools", Access: Tenant, Role: Viewer, handler: h((*Server).listPools)},
		{Method: "POST", Path: "/fleet/pools", Action: "create pool", Access: Tenant, Role: Admin, handler: h((*Server).createPool)},
		{Method: "GET", Path: "/fleet/pools/{name}", Access: Tenant, Role: Viewer, handler: h((*Server).getPool)},
		{Method: "PATCH", Path: "/fleet/pools/{name}", Action: "update pool", Access: Tenant, Role: Admin, handler: h((*Server).patchPool)},
		{Method: "DELETE", Path: "/fleet/pools/{name}", Action: "delete pool", Access: Tenant, Role: Admin, handler: h((*Server).deletePool)},
		{Method: "GET", Path: "/fleet/pools/{name}/status", Access: Tenant, Role: Viewer, handler: h((*Server).poolStatus)},
		{Method: "POST", Path: "/fleet/macos-pool/checkout", Action: "check out a macOS vm", Access: Operator, handler: h((*Server).checkoutMacOS)},
		{Method: "POST", Path: "/fleet/macos-pool/{node}/{id}/return", Action: "return macOS vm", Access: Operator, handler: h((*Server).returnMacOS)},

		{Method: "GET", Path: "/fleet/prices", Access: Tenant, Role: Viewer, handler: h((*Server).getPrices)},
		{Method: "PUT", Path: "/fleet/prices", Action: "publish prices", Access: Operator, handler: h((*Server).putPrices)},
		{Method: "GET", Path: "/fleet/usage", Access: Tenant, Role: Viewer, handler: h((*Server).usage)},
		{Method: "GET", Path: "/fleet/billing", Access: Tenant, Role: Viewer, handler: h((*Server).billingStatement)},
		{Method: "PUT", Path: "/fleet/tenants/me/budget", Action: "set the budget of", Access: Tenant, Role: Admin, handler: h((*Server).putMyBudget)},
		{Method: "PUT", Path: "/fleet/tenants/{id}/budget", Action: "set the budget of", Access: Operator, handler: h((*Server).putTenantBudget)},

		{Method: "POST", Path: "/fleet/reconcile", Action: "reconcile", Access: Operator, handler: h((*Server).reconcile)},
		{Method: "GET", Path: "/fleet/events", Access: Tenant, Role: Viewer, handler: h((*Server).listEvents)},
		{Method: "GET", Path: "/fleet/notifications", Access: Tenant, Role: Viewer, handler: h((*Server).listNotifications)},
		{Method: "GET", Path: "/fleet/webhooks", Access: Tenant, Role: Viewer, handler: h((*Server).listWebhooks)},
		{Method: "POST", Path: "/fleet/webhooks", Action: "create webhook", Access: Tenant, Role: Admin, handler: h((*Server).createWebhook)},
		{Method: "DELETE", Path: "/fleet/webhooks/{id}", Action: "delete webhook", Access: Tenant, Role: Admin, handler: h((*Server).deleteWebhook)},
		{Method: "POST", Path: "/fleet/webhooks/{id}/test", Action: "test webhook", Access: Tenant, Role: Admin, handler: h((*Server).testWebhook)},
		// Stripe invoices and self-service sign-up (docs/billing.md, docs/signup.md).
		{Method: "GET", Path: "/fleet/billing/invoices", Access: Tenant, Role: Viewer, handler: h((*Server).listInvoices)},
		{Method: "POST", Path: "/fleet/billing/invoices", Action: "create invoices", Access: Operator, handler: h((*Server).createInvoices)},
		{Method: "POST", Path: "/fleet/billing/payment-method", Action: "ask to save a card", Access: Tenant, Role: Admin, handler: h((*Server).paymentMethod)},
		{Method: "PUT", Path: "/fleet/tenants/{id}/billing", Action: "set the billing of", Access: Operator, handler: h((*Server).setTenantBilling)},
		{Method: "POST", Path: "/stripe/webhook", Access: Public, handler: h((*Server).stripeWebhook)},
		// Fleets (docs/fleets.md): pairing centrals and enrolling nodes. The two
		// pairing routes are public: the invite, then the joiner's nonce, is the credential.
		{Method: "POST", Path: "/fleet/pairing/redeem", Access: Public, handler: h((*Server).redeemInvite)},
		{Method: "POST", Path: "/fleet/pairing/confirm", Access: Public, handler: h((*Server).confirmPairing)},
		{Method: "GET", Path: "/fleet/federation", Access: Operator, handler: h((*Server).getFederation)},
		{Method: "POST", Path: "/fleet/federation/invites", Action: "mint a fleet invite", Access: Operator, handler: h((*Server).createInvite)},
		{Method: "GET", Path: "/fleet/federation/requests", Access: Operator, handler: h((*Server).listPairingRequests)},
		{Method: "POST", Path: "/fleet/federation/requests/{id}/approve", Action: "approve pairing of", Access: Operator, handler: h((*Server).approvePairing)},
		{Method: "POST", Path: "/fleet/federation/requests/{id}/reject", Action: "reject the pairing", Access: Operator, handler: h((*Server).rejectPairing)},
		{Method: "DELETE", Path: "/fleet/federation/members/{id}", Action: "remove from the fleet", Access: Operator, handler: h((*Server).removeFleetMember)},
		{Method: "POST", Path: "/fleet/federation/join", Action: "join the fleet of", Access: Operator, handler: h((*Server).joinFleet)},
		{Method: "POST", Path: "/fleet/federation/confirm", Action: "confirm fleet join", Access: Operator, handler: h((*Server).confirmJoin)},
		{Method: "DELETE", Path: "/fleet/federation/membership", Action: "leave the fleet", Access: Operator, handler: h((*Server).leaveFleet)},
		{Method: "POST", Path: "/fleet/federation/report", Access: FleetMember, NoActivity: true, handler: h((*Server).memberReport)},
		{Method: "POST", Path: "/fleet/federation/leave", Action: "leave the fleet", Access: FleetMember, handler: h((*Server).memberLeave)},
		{Method: "GET", Path: "/fleet/federation/site", Access: FleetMember, OwnerPoll: true, handler: h((*Server).memberSite)},
		{Method: "POST", Path: "/fleet/federation/refresh", Action: "refresh fleet token", Access: FleetMember, handler: h((*Server).memberRefresh)},
		{Method: "GET", Path: "/fleet/federation/policy", Access: FleetMember, handler: h((*Server).ownerFloor)},
		// History push (docs/history.md): the member's operator consents and drains; the owner stores and lists.
		{Method: "GET", Path: "/fleet/history/sync", Access: Operator, handler: h((*Server).historyStatus)},
		{Method: "GET", Path: "/fleet/history/sync/preview", Access: Operator, handler: h((*Server).historyPreview)},
		{Method: "POST", Path: "/fleet/history/sync/consent", Action: "turn history push", Access: Operator, handler: h((*Server).historyConsent)},
		{Method: "POST", Path: "/fleet/history/sync", Action: "push history now", Access: Operator, handler: h((*Server).historyDrain)},
		{Method: "POST", Path: "/fleet/history/payloads", Access: FleetMember, NoActivity: true, handler: h((*Server).historyPayloads)},
		{Method: "POST", Path: "/fleet/history/rows", Access: FleetMember, NoActivity: true, handler: h((*Server).historyRows)},
		{Method: "GET", Path: "/fleet/history", Access: Operator, handler: h((*Server).listHistory)},
		{Method: "GET", Path: "/signup/config", Access: Public, handler: h((*Server).signupConfig)},
		{Method: "POST", Path: "/signup", Access: Public, handler: h((*Server).postSignup)},
		{Method: "GET", Path: "/signup/confirm", Access: Public, handler: h((*Server).signupConfirmPage)},
		{Method: "POST", Path: "/signup/confirm", Access: Public, handler: h((*Server).signupConfirm)},
	}
}

// targetOf finds the name or id a change is about, for the activity log:
// "name" or "id" from a JSON body (nothing else of the body is kept, and an
// exec's body is never read), else the route's own key, name or id (a key's
// route names its tenant too: the key is what it is about). Only a valid
// name or id (store.ValidName, which VM names and ids meet too) is a target:
// whatever else a caller sends, however long, is not repeated in the log.
func targetOf(r *http.Request) string {
	if !strings.HasSuffix(r.URL.Path, "/exec") {
		// The handler decodes the same bytes (jsonapi.ReadBody): one copy.
		data, err := jsonapi.BufferBody(r)
		if err == nil && len(data) > 0 {
			var b struct {
				Name targetField `json:"name"`
				ID   targetField `json:"id"`
			}
			if json.Unmarshal(data, &b) == nil {
				if b.Name != "" {
					return string(b.Name)
				}
				if b.ID != "" {
					return string(b.ID)
				}
			}
		}
	}
	v := mux.Vars(r)
	for _, k := range []string{"key", "id", "name", "node"} {
		if store.ValidName(v[k]) {
			return v[k]
		}
	}
	return ""
}

// targetField is "name" or "id" of a body, read for the activity log. It
// holds the value only when that is a valid name; the decoder hands it the
// raw JSON, so a long value is looked at, never copied.
type targetField string

func (f *targetField) UnmarshalJSON(b []byte) error {
	// A valid name needs no escapes: at most 64 bytes between the quotes.
	if len(b) < 3 || len(b) > 66 || b[0] != '"' {
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil && store.ValidName(s) {
		*f = targetField(s)
	}
	return nil
}
