package api

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/gorilla/mux"
)

// routeCase says how the access test calls one route: its path with the
// caller's own objects and with another tenant's, and a body. Every route of
// Routes() must have one, so a new route cannot slip in untested.
type routeCase struct {
	own, other string // paths; other "" when the route names no object of a tenant
	body       string
	// foreign is the status a tenant gets for another tenant's object (404:
	// decision 8); 0 when the route is operator-only, where every tenant gets 403.
	foreign int
	// tenantOK is the exact status a tenant gets on its own object, where
	// this test knows it (0: anything but 401 and 403).
	tenantOK int
	// public is the status a public route answers here (0: 200).
	public int
	// keyRefused is a tenant route that an API key may not call (403): a
	// change of the tenant's keys, which only its primary token makes.
	keyRefused bool
	// readOnlyRefused is a GET a read-only key may not call (403): a
	// stream that reaches into a VM (a tunnel).
	readOnlyRefused bool
}

// TestEveryRouteWithEveryCredential walks the access table with every kind
// of caller: none, a bad token, the operator, tenant A on its own objects
// and on tenant B's with its primary token, a full API key and a read-only
// one, a revoked and an expired key, and a disabled tenant with its token
// and its key.
func TestEveryRouteWithEveryCredential(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a, tokenA := e.createTenant("tenant-a", "")
	b, tokenB := e.createTenant("tenant-b", "")
	victim, tokenVictim := e.createTenant("victim", "") // what the operator's destructive calls hit
	dTenant, tokenD := e.createTenant("disabled", "")
	keyA := e.createKey(tokenA, "access-full", false)
	readOnlyA := e.createKey(tokenA, "access-read-only", true)
	keyD := e.createKey(tokenD, "disabled-key", false)
	e.createKey(tokenA, "revoke-me", false)
	revokedA := e.createKey(tokenA, "revoked", false)
	e.must(req{method: "DELETE", path: "/fleet/tenants/me/keys/revoked", token: tokenA}, 204)
	const expiredA = "fvk_expired-key-of-tenant-a-0123456789abcdefghijklm"
	if err := e.store.CreateKey(ctx, &store.APIKey{APIKey: sdk.APIKey{Name: "expired", CreatedAt: time.Now().Add(-48 * time.Hour),
		ExpiresAt: time.Now().Add(-time.Hour)}, Tenant: a.ID, TokenSHA256: store.HashToken(expiredA)}); err != nil {
		t.Fatal(err)
	}
	e.createKey(tokenVictim, "op-revoke", false)
	// Console sessions of A's team, one per role, and one of the disabled tenant's.
	sessions := map[sdk.Role]string{}
	for _, role := range sdk.Roles {
		email := string(role) + "@example.com"
		e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: tokenA, body: `{"email": "` + email + `", "role": "` + string(role) + `"}`}, 201)
		tok, _, err := e.api.sessions.Start(ctx, email, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		sessions[role] = tok
	}
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: tokenD, body: `{"email": "d@example.com", "role": "owner"}`}, 201)
	sessionD, _, err := e.api.sessions.Start(ctx, "d@example.com", dTenant.ID)
	if err != nil {
		t.Fatal(err)
	}
	var keyB sdk.APIKeyWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/me/keys", token: tokenB, body: `{"name": "b-key"}`}, 201).decode(t, &keyB)
	e.must(req{method: "PATCH", path: "/fleet/tenants/disabled", token: testFleetToken, body: `{"disabled": true}`}, 200)
	for _, m := range []struct{ token, email string }{{tokenA, "a-admin@example.com"}, {tokenA, "a-rm@example.com"}, {tokenB, "b-only@example.com"}} {
		e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: m.token, body: `{"email": "` + m.email + `", "role": "admin"}`}, 201)
	}
	e.must(req{method: "PUT", path: "/fleet/images/img-1", token: testFleetToken, body: `{"guest_os": "linux", "image": "/vms/img-1.raw"}`}, 201)
	// A node nobody answers on, with one VM of A's and one of B's in the ledger.
	if err := e.store.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "node-1", URL: "http://127.0.0.1:1", State: store.NodeUp,
		LastHeartbeat: time.Now().UTC(), Capacity: sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 8, MemoryMiB: 16384}}}}); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct{ tenant, vm string }{{a.ID, "vm-a"}, {b.ID, "vm-b"}} {
		if _, err := e.store.RecordEntry(ctx, store.LedgerEntry{Tenant: v.tenant, Node: "node-1", VMID: v.vm, Name: v.vm,
			VCPUs: 1, MemoryMiB: 512}); err != nil {
			t.Fatal(err)
		}
	}

	// Nodes leased by A and B, and one for the operator's node routes.
	for _, name := range []string{"node-lease-a", "node-lease-b", "node-ops"} {
		if err := e.store.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: "http://127.0.0.1:1", State: store.NodeUp,
			LastHeartbeat: time.Now().UTC(), GuestOS: []string{"linux", "macos"},
			Capacity: sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: 8, MemoryMiB: 16384, MacOSSlots: 2}}}}); err != nil {
			t.Fatal(err)
		}
	}
	leaseA, err := e.store.CreateLease(ctx, store.CreateLeaseRequest{Tenant: a.ID, Node: "node-lease-a"})
	if err != nil {
		t.Fatal(err)
	}
	leaseB, err := e.store.CreateLease(ctx, store.CreateLeaseRequest{Tenant: b.ID, Node: "node-lease-b"})
	if err != nil {
		t.Fatal(err)
	}
	// Volumes of A and B on node-1 (which never answers: a change is a 502 after the access checks).
	for _, v := range []struct{ tenant, id, name string }{{a.ID, "vol-00000000000a", "data-a"}, {b.ID, "vol-00000000000b", "data-b"}} {
		if err := e.store.PutVolume(ctx, &store.Volume{FleetVolume: sdk.FleetVolume{ID: v.id, Name: v.name, Tenant: v.tenant, Node: "node-1",
			SizeGiB: 1, CreatedAt: time.Now().UTC()}, Sizes: []store.VolumeSize{{GiB: 1, From: time.Now().UTC()}}}); err != nil {
			t.Fatal(err)
		}
	}
	previewOf := map[string]string{}
	for _, v := range []struct{ tenant, vm string }{{a.ID, "vm-a"}, {b.ID, "vm-b"}} {
		id := store.NewPreviewID()
		if _, err := e.store.AddPreview(ctx, &store.Preview{Preview: sdk.Preview{ID: id, Tenant: v.tenant, Node: "node-1", VM: v.vm, VMName: v.vm,
			Port: 8080, OpenedAt: time.Now().UTC()}, Owner: v.tenant, VMStartedAt: time.Now().UTC()},
			func([]store.Preview) (*store.Preview, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		previewOf[v.vm] = id
	}
	previewCase := func(path string, reads bool) routeCase {
		return routeCase{own: "/fleet/previews/" + previewOf["vm-a"] + path, other: "/fleet/previews/" + previewOf["vm-b"] + path,
			foreign: 404, tenantOK: 502, readOnlyRefused: reads}
	}
	node := func(action string) routeCase { return routeCase{own: "/fleet/nodes/node-ops/" + action} }
	// Warm pools of A and B (nothing boots: no pool loop runs here).
	for _, pl := range []store.Pool{{Pool: sdk.Pool{Name: "pool-a", Tenant: a.ID}}, {Pool: sdk.Pool{Name: "pool-b", Tenant: b.ID}},
		{Pool: sdk.Pool{Name: "pool-a-del", Tenant: a.ID}}, {Pool: sdk.Pool{Name: "pool-b-del", Tenant: b.ID}}} {
		pl.Image, pl.VCPUs, pl.MemoryMiB, pl.Size, pl.MaxSize = "img-1", 1, 512, 1, 1
		if err := e.store.CreatePool(ctx, &pl); err != nil {
			t.Fatal(err)
		}
	}
	e.must(req{method: "PUT", path: "/fleet/images/img-pool", token: testFleetToken, body: `{"guest_os": "linux", "image": "/vms/img-pool.raw"}`}, 201)

	// Webhooks of A and B; the test route's delivery is refused (no DNS here).
	hooks := map[string]string{}
	for _, h := range []struct{ token, name string }{{tokenA, "a-test"}, {tokenA, "a-del"}, {tokenB, "b-test"}, {tokenB, "b-del"}} {
		var created sdk.WebhookWithSecret
		e.must(req{method: "POST", path: "/fleet/webhooks", token: h.token, body: `{"url": "https://hooks.example.com/` + h.name + `", "name": "` + h.name + `"}`}, 201).decode(t, &created)
		hooks[h.name] = created.Webhook.ID
	}

	// Overlays of A and B, without members (no node is called).
	for _, o := range []struct{ tenant, name string }{{a.ID, "net-a"}, {a.ID, "net-a-del"}, {b.ID, "net-b"}} {
		if err := e.store.CreateOverlay(ctx, &store.Overlay{Overlay: sdk.Overlay{Name: o.name, Tenant: o.tenant}, ID: "ov-" + o.name}); err != nil {
			t.Fatal(err)
		}
	}

	vm := func(action string) routeCase {
		return routeCase{own: "/fleet/vms/node-1/vm-a" + action, other: "/fleet/vms/node-1/vm-b" + action, foreign: 404}
	}
	cases := map[string]routeCase{
		"GET /healthz":     {own: "/healthz"},
		"GET /auth/config": {own: "/auth/config"},
		// No SSO is configured here; sso_test.go signs in with a real provider.
		"GET /auth/login":                    {own: "/auth/login", public: 404},
		"GET /auth/callback":                 {own: "/auth/callback", public: 404},
		"GET /auth/session":                  {own: "/auth/session"},
		"POST /auth/logout":                  {own: "/auth/logout"},
		"GET /metrics":                       {own: "/metrics"},
		"POST /fleet/nodes/{name}/heartbeat": {own: "/fleet/nodes/node-2/heartbeat", body: `{}`},
		"GET /fleet/nodes/{name}/channel":    {own: "/fleet/nodes/node-2/channel"},
		"GET /fleet/nodes":                   {own: "/fleet/nodes"},
		// A tenant sees a node it leases; any other is "not found" to it.
		"GET /fleet/nodes/{name}":           {own: "/fleet/nodes/node-lease-a", other: "/fleet/nodes/node-lease-b", foreign: 404, tenantOK: 200},
		"POST /fleet/nodes/{name}/cordon":   node("cordon"),
		"POST /fleet/nodes/{name}/uncordon": node("uncordon"),
		"POST /fleet/nodes/{name}/drain":    node("drain"),
		"GET /fleet/nodes/{name}/drain":     node("drain"),
		"POST /fleet/nodes/{name}/scrub":    node("scrub"),
		"GET /fleet/rebalance/plan":         {own: "/fleet/rebalance/plan?high_water=0.85&max_moves=10"},
		"GET /fleet/leases":                 {own: "/fleet/leases", tenantOK: 200},
		// Every Mac is leased or runs VMs: a tenant's lease is refused for the state (409).
		"POST /fleet/leases":     {own: "/fleet/leases", body: `{}`, tenantOK: 409},
		"GET /fleet/leases/{id}": {own: "/fleet/leases/" + leaseA.ID, other: "/fleet/leases/" + leaseB.ID, foreign: 404, tenantOK: 200},
		// Before the 24-hour minimum: refused for the state (409).
		"POST /fleet/leases/{id}/release": {own: "/fleet/leases/" + leaseA.ID + "/release", other: "/fleet/leases/" + leaseB.ID + "/release", foreign: 404, tenantOK: 409},
		"GET /fleet/capacity":             {own: "/fleet/capacity", tenantOK: 200},
		"GET /fleet/tenants":              {own: "/fleet/tenants"},
		"POST /fleet/tenants":             {own: "/fleet/tenants", body: `{"name": "made-by-access-test"}`},
		"GET /fleet/tenants/me":           {own: "/fleet/tenants/me", tenantOK: 200},
		"GET /fleet/tenants/me/keys":      {own: "/fleet/tenants/me/keys", tenantOK: 200},
		"POST /fleet/tenants/me/keys":     {own: "/fleet/tenants/me/keys", body: `{"name": "made-by-access-test"}`, tenantOK: 201, keyRefused: true},
		// Another tenant's key is "not found", as one that does not exist.
		"DELETE /fleet/tenants/me/keys/{key}": {own: "/fleet/tenants/me/keys/revoke-me", other: "/fleet/tenants/me/keys/" + keyB.Key.ID,
			foreign: 404, tenantOK: 204, keyRefused: true},
		"GET /fleet/tenants/me/members":  {own: "/fleet/tenants/me/members", tenantOK: 200},
		"POST /fleet/tenants/me/members": {own: "/fleet/tenants/me/members", body: `{"email": "new@example.com", "role": "viewer"}`, tenantOK: 201, keyRefused: true},
		// Another tenant's member is "not found", as someone who is in no team.
		"PATCH /fleet/tenants/me/members/{email}": {own: "/fleet/tenants/me/members/a-admin@example.com", other: "/fleet/tenants/me/members/b-only@example.com",
			body: `{"role": "member"}`, foreign: 404, tenantOK: 200, keyRefused: true},
		"DELETE /fleet/tenants/me/members/{email}": {own: "/fleet/tenants/me/members/a-rm@example.com", other: "/fleet/tenants/me/members/b-only@example.com",
			foreign: 404, tenantOK: 204, keyRefused: true},
		"GET /fleet/tenants/{id}/members":  {own: "/fleet/tenants/" + a.ID + "/members", other: "/fleet/tenants/" + b.ID + "/members"},
		"POST /fleet/tenants/{id}/members": {own: "/fleet/tenants/" + a.ID + "/members", other: "/fleet/tenants/" + b.ID + "/members", body: `{"email": "op@example.com", "role": "owner"}`},
		"PATCH /fleet/tenants/{id}/members/{email}": {own: "/fleet/tenants/" + a.ID + "/members/a-admin@example.com",
			other: "/fleet/tenants/" + b.ID + "/members/b-only@example.com", body: `{"role": "viewer"}`},
		"DELETE /fleet/tenants/{id}/members/{email}": {own: "/fleet/tenants/" + a.ID + "/members/a-admin@example.com",
			other: "/fleet/tenants/" + b.ID + "/members/b-only@example.com"},
		"GET /fleet/tenants/{id}/keys":          {own: "/fleet/tenants/" + a.ID + "/keys", other: "/fleet/tenants/" + b.ID + "/keys"},
		"POST /fleet/tenants/{id}/keys":         {own: "/fleet/tenants/" + a.ID + "/keys", other: "/fleet/tenants/" + b.ID + "/keys", body: `{"name": "made-by-operator"}`},
		"DELETE /fleet/tenants/{id}/keys/{key}": {own: "/fleet/tenants/" + a.ID + "/keys/op-revoke", other: "/fleet/tenants/" + b.ID + "/keys/b-key"},
		"GET /fleet/tenants/{id}":               {own: "/fleet/tenants/" + a.ID, other: "/fleet/tenants/" + b.ID},
		"PATCH /fleet/tenants/{id}":             {own: "/fleet/tenants/" + a.ID, other: "/fleet/tenants/" + b.ID, body: `{}`},
		"DELETE /fleet/tenants/{id}":            {own: "/fleet/tenants/" + a.ID, other: "/fleet/tenants/" + b.ID},
		"POST /fleet/tenants/{id}/rotate-token": {own: "/fleet/tenants/" + a.ID + "/rotate-token", other: "/fleet/tenants/" + b.ID + "/rotate-token"},
		"GET /fleet/policy":                     {own: "/fleet/policy"},
		"PUT /fleet/policy":                     {own: "/fleet/policy", body: `{}`},
		"GET /fleet/images":                     {own: "/fleet/images", tenantOK: 200},
		"PUT /fleet/images/{name}":              {own: "/fleet/images/img-2", body: `{"guest_os": "linux", "image": "/vms/img-2.raw"}`},
		"DELETE /fleet/images/{name}":           {own: "/fleet/images/img-1"},
		"GET /fleet/vms":                        {own: "/fleet/vms", tenantOK: 200},
		"POST /fleet/vms":                       {own: "/fleet/vms", body: `{"name": "new-vm", "image": "img-1"}`},
		"DELETE /fleet/vms/{node}/{id}":         vm(""),
		"POST /fleet/vms/{node}/{id}/exec":      {own: "/fleet/vms/node-1/vm-a/exec", other: "/fleet/vms/node-1/vm-b/exec", body: `{"command": ["true"]}`, foreign: 404},
		"POST /fleet/vms/{node}/{id}/start":     vm("/start"),
		"POST /fleet/vms/{node}/{id}/stop":      vm("/stop"),
		"POST /fleet/vms/{node}/{id}/restart":   vm("/restart"),
		"POST /fleet/vms/{node}/{id}/pause":     vm("/pause"),
		"POST /fleet/vms/{node}/{id}/resume":    vm("/resume"),
		"GET /fleet/vms/{node}/{id}/logs":       vm("/logs"),
		"GET /fleet/vms/{node}/{id}/screen":     vm("/screen"),
		// Without an upgrade: 400 after the access checks (tunnels_test.go opens real ones).
		"GET /fleet/vms/{node}/{id}/tunnel": {own: "/fleet/vms/node-1/vm-a/tunnel", other: "/fleet/vms/node-1/vm-b/tunnel", foreign: 404,
			tenantOK: 400, readOnlyRefused: true},
		"POST /fleet/vms/{node}/{id}/ws-ticket": {own: "/fleet/vms/node-1/vm-a/ws-ticket", other: "/fleet/vms/node-1/vm-b/ws-ticket",
			body: `{"kind": "vnc"}`, foreign: 404, tenantOK: 201},
		"GET /fleet/ws/{ticket}": {own: "/fleet/ws/no-such-ticket", public: 404},
		// A's preview of vm-a and B's of vm-b (recorded above); node-1 never
		// answers, so A's own is a 502 once found.
		"POST /fleet/vms/{node}/{id}/preview": {own: "/fleet/vms/node-1/vm-a/preview", other: "/fleet/vms/node-1/vm-b/preview",
			body: `{"port": 8080}`, foreign: 404, tenantOK: 502},
		"DELETE /fleet/vms/{node}/{id}/preview": {own: "/fleet/vms/node-1/vm-a/preview?port=9999", other: "/fleet/vms/node-1/vm-b/preview",
			foreign: 404, tenantOK: 404},
		"GET /fleet/previews":                   {own: "/fleet/previews", tenantOK: 200},
		"GET /fleet/previews/{id}/{path:.*}":    previewCase("/index.html", true),
		"POST /fleet/previews/{id}/{path:.*}":   previewCase("/api", false),
		"PUT /fleet/previews/{id}/{path:.*}":    previewCase("/api", false),
		"PATCH /fleet/previews/{id}/{path:.*}":  previewCase("/api", false),
		"DELETE /fleet/previews/{id}/{path:.*}": previewCase("/api", false),
		"POST /fleet/vms/{node}/{id}/input": {own: "/fleet/vms/node-1/vm-a/input", other: "/fleet/vms/node-1/vm-b/input",
			body: `{"actions": [{"kind": "text", "text": "x"}]}`, foreign: 404},
		"GET /fleet/vms/{node}/{id}/snapshots": {own: "/fleet/vms/node-1/vm-a/snapshots", other: "/fleet/vms/node-1/vm-b/snapshots", foreign: 404},
		"POST /fleet/vms/{node}/{id}/snapshots": {own: "/fleet/vms/node-1/vm-a/snapshots", other: "/fleet/vms/node-1/vm-b/snapshots",
			body: `{"name": "snap-1"}`, foreign: 404},
		"DELETE /fleet/vms/{node}/{id}/snapshots/{name}": {own: "/fleet/vms/node-1/vm-a/snapshots/snap-1", other: "/fleet/vms/node-1/vm-b/snapshots/snap-1",
			foreign: 404},
		"POST /fleet/vms/{node}/{id}/snapshots/{name}/restore": {own: "/fleet/vms/node-1/vm-a/snapshots/snap-1/restore",
			other: "/fleet/vms/node-1/vm-b/snapshots/snap-1/restore", foreign: 404},
		"POST /fleet/vms/{node}/{id}/clone": {own: "/fleet/vms/node-1/vm-a/clone", other: "/fleet/vms/node-1/vm-b/clone",
			body: `{"name": "vm-a-clone"}`, foreign: 404},
		"GET /fleet/overlays": {own: "/fleet/overlays", tenantOK: 200},
		// A bad name: refused after the access checks (400).
		"POST /fleet/overlays":          {own: "/fleet/overlays", body: `{"name": "Bad Name"}`, tenantOK: 400},
		"GET /fleet/overlays/{name}":    {own: "/fleet/overlays/net-a", other: "/fleet/overlays/net-b", foreign: 404, tenantOK: 200},
		"DELETE /fleet/overlays/{name}": {own: "/fleet/overlays/net-a-del", other: "/fleet/overlays/net-b", foreign: 404},
		// No such node: 404 after the access checks.
		"POST /fleet/overlays/{name}/members": {own: "/fleet/overlays/net-a/members", other: "/fleet/overlays/net-b/members",
			body: `{"node": "no-such-node"}`, foreign: 404, tenantOK: 404},
		"DELETE /fleet/overlays/{name}/members/{node}": {own: "/fleet/overlays/net-a/members/node-1", other: "/fleet/overlays/net-b/members/node-1",
			foreign: 404, tenantOK: 404},
		"POST /fleet/overlays/{name}/rotate": {own: "/fleet/overlays/net-a/rotate", other: "/fleet/overlays/net-b/rotate", foreign: 404, tenantOK: 200},
		"GET /fleet/volumes":                 {own: "/fleet/volumes", tenantOK: 200},
		// No such node: refused after the access checks (400).
		"POST /fleet/volumes": {own: "/fleet/volumes", body: `{"name": "new-vol", "size_gib": 1, "node": "no-such-node"}`, tenantOK: 400},
		// Another tenant's volume is "not found", as one that does not exist.
		"GET /fleet/volumes/{name}":    {own: "/fleet/volumes/data-a", other: "/fleet/volumes/vol-00000000000b", foreign: 404, tenantOK: 200},
		"DELETE /fleet/volumes/{name}": {own: "/fleet/volumes/data-a", other: "/fleet/volumes/vol-00000000000b", foreign: 404, tenantOK: 502},
		"POST /fleet/volumes/{name}/resize": {own: "/fleet/volumes/data-a/resize", other: "/fleet/volumes/vol-00000000000b/resize",
			body: `{"size_gib": 2}`, foreign: 404, tenantOK: 502},
		"GET /fleet/tunnels":         {own: "/fleet/tunnels", tenantOK: 200},
		"DELETE /fleet/tunnels/{id}": {own: "/fleet/tunnels/tun_000000000000", tenantOK: 404},
		"GET /fleet/pools":           {own: "/fleet/pools", tenantOK: 200},
		"POST /fleet/pools":          {own: "/fleet/pools", body: `{"name": "pool-new", "image": "img-pool", "size": 1}`, tenantOK: 201},
		// Another tenant's pool is "not found", as for one that does not exist.
		"GET /fleet/pools/{name}":        {own: "/fleet/pools/pool-a", other: "/fleet/pools/pool-b", foreign: 404, tenantOK: 200},
		"PATCH /fleet/pools/{name}":      {own: "/fleet/pools/pool-a", other: "/fleet/pools/pool-b", body: `{"size": 2}`, foreign: 404, tenantOK: 200},
		"DELETE /fleet/pools/{name}":     {own: "/fleet/pools/pool-a-del", other: "/fleet/pools/pool-b-del", foreign: 404, tenantOK: 204},
		"GET /fleet/pools/{name}/status": {own: "/fleet/pools/pool-a/status", other: "/fleet/pools/pool-b/status", foreign: 404, tenantOK: 200},
		"POST /fleet/reconcile":          {own: "/fleet/reconcile"},
		"GET /fleet/prices":              {own: "/fleet/prices", tenantOK: 200},
		"PUT /fleet/prices":              {own: "/fleet/prices", body: `{"currency": "EUR", "mac_classes": [], "mac_per_hour": 0.5}`},
		// A tenant names only itself; another tenant is a 403 (as for events).
		"GET /fleet/usage":                          {own: "/fleet/usage?tenant=" + a.ID, other: "/fleet/usage?tenant=" + b.ID, foreign: 403, tenantOK: 200},
		"GET /fleet/billing":                        {own: "/fleet/billing?tenant=" + a.ID, other: "/fleet/billing?tenant=" + b.ID, foreign: 403, tenantOK: 200},
		"PUT /fleet/tenants/me/budget":              {own: "/fleet/tenants/me/budget", body: `{"monthly": 500}`, tenantOK: 200},
		"PUT /fleet/tenants/{id}/budget":            {own: "/fleet/tenants/" + a.ID + "/budget", other: "/fleet/tenants/" + b.ID + "/budget", body: `{"monthly": 500}`},
		"POST /fleet/macos-pool/checkout":           {own: "/fleet/macos-pool/checkout"},
		"POST /fleet/macos-pool/{node}/{id}/return": {own: "/fleet/macos-pool/node-1/vm-a/return"},
		"GET /fleet/events":                         {own: "/fleet/events", tenantOK: 200},
		"GET /fleet/notifications":                  {own: "/fleet/notifications?limit=10", tenantOK: 200},
		"GET /fleet/webhooks":                       {own: "/fleet/webhooks", tenantOK: 200},
		"POST /fleet/webhooks":                      {own: "/fleet/webhooks", body: `{"url": "https://hooks.example.com/new"}`, tenantOK: 201},
		// Another tenant's webhook is "not found", as one that does not exist.
		"DELETE /fleet/webhooks/{id}": {own: "/fleet/webhooks/" + hooks["a-del"], other: "/fleet/webhooks/" + hooks["b-del"], foreign: 404, tenantOK: 204},
		"POST /fleet/webhooks/{id}/test": {own: "/fleet/webhooks/" + hooks["a-test"] + "/test", other: "/fleet/webhooks/" + hooks["b-test"] + "/test",
			foreign: 404, tenantOK: 200},
		// Stripe and sign-up are off here (payments_api_test.go and
		// signup_api_test.go turn them on): the routes still answer.
		"GET /fleet/billing/invoices":        {own: "/fleet/billing/invoices", tenantOK: 200},
		"POST /fleet/billing/invoices":       {own: "/fleet/billing/invoices?month=2026-10"},
		"POST /fleet/billing/payment-method": {own: "/fleet/billing/payment-method", tenantOK: 409},
		"PUT /fleet/tenants/{id}/billing":    {own: "/fleet/tenants/" + a.ID + "/billing", other: "/fleet/tenants/" + b.ID + "/billing", body: `{"stripe_customer": "cus_a"}`},
		"POST /stripe/webhook":               {own: "/stripe/webhook", body: `{}`, public: 404},
		// Fleets (federation_test.go pairs for real): refused for the input, or not found, after the access checks.
		"POST /fleet/pairing/redeem":                   {own: "/fleet/pairing/redeem", body: `{}`, public: 404},
		"POST /fleet/pairing/confirm":                  {own: "/fleet/pairing/confirm", body: `{"nonce": "x"}`, public: 404},
		"GET /fleet/federation":                        {own: "/fleet/federation"},
		"POST /fleet/federation/invites":               {own: "/fleet/federation/invites", body: `{"kind": "node"}`},
		"GET /fleet/federation/requests":               {own: "/fleet/federation/requests"},
		"POST /fleet/federation/requests/{id}/approve": {own: "/fleet/federation/requests/pr-none/approve", body: `{"code": "123456"}`},
		"POST /fleet/federation/requests/{id}/reject":  {own: "/fleet/federation/requests/pr-none/reject"},
		"DELETE /fleet/federation/members/{id}":        {own: "/fleet/federation/members/mem-none"},
		"POST /fleet/federation/join":                  {own: "/fleet/federation/join", body: `{}`},
		"POST /fleet/federation/confirm":               {own: "/fleet/federation/confirm", body: `{"code": "123456"}`},
		"DELETE /fleet/federation/membership":          {own: "/fleet/federation/membership"},
		"POST /fleet/federation/report":                {own: "/fleet/federation/report", body: `{"site": {"member": "x", "nodes": [], "vms": 0, "checked_at": "2026-01-01T00:00:00Z"}}`},
		"POST /fleet/federation/leave":                 {own: "/fleet/federation/leave"},
		"POST /fleet/federation/refresh":               {own: "/fleet/federation/refresh"},
		"GET /fleet/federation/site":                   {own: "/fleet/federation/site"},
		"GET /fleet/federation/policy":                 {own: "/fleet/federation/policy"},
		"GET /signup/config":                           {own: "/signup/config"},
		"POST /signup":                                 {own: "/signup", body: `{"email": "a@example.com", "tenant": "a"}`, public: 404},
		"GET /signup/confirm":                          {own: "/signup/confirm?token=fsu_0", public: 404},
		"POST /signup/confirm":                         {own: "/signup/confirm", body: `{"token": "fsu_0"}`, public: 404},
		// History push (history_test.go drains between two centrals): this central is in no fleet (409), or the body is refused.
		"GET /fleet/history/sync":          {own: "/fleet/history/sync"},
		"GET /fleet/history/sync/preview":  {own: "/fleet/history/sync/preview"},
		"POST /fleet/history/sync/consent": {own: "/fleet/history/sync/consent", body: `{"enabled": true}`},
		"POST /fleet/history/sync":         {own: "/fleet/history/sync"},
		"POST /fleet/history/payloads":     {own: "/fleet/history/payloads", body: `{"payloads": []}`},
		"POST /fleet/history/rows":         {own: "/fleet/history/rows", body: `{"rows": []}`},
		"GET /fleet/history":               {own: "/fleet/history?limit=5"},
	}

	// The table, the router and the spec agree: every route the mux serves
	// is in Routes() (a route added around the table fails here), every
	// route of the table has a case here and is described in the spec.
	table := map[string]Route{}
	for _, rt := range Routes() {
		table[rt.Method+" "+rt.Path] = rt
	}
	served := 0
	err = e.api.router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tmpl, err := r.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := r.GetMethods()
		if err != nil {
			t.Errorf("route %s serves every method: give it one in Routes()", tmpl)
		}
		for _, m := range methods {
			served++
			if _, ok := table[m+" "+tmpl]; !ok {
				t.Errorf("the router serves %s %s, which the access table (Routes) lacks", m, tmpl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if served != len(table) {
		t.Errorf("the router serves %d routes, the access table has %d", served, len(table))
	}
	for key, rt := range table {
		if _, ok := cases[key]; !ok {
			t.Errorf("route %s has no case in TestEveryRouteWithEveryCredential: add one", key)
		}
		item := e.spec.Doc.Paths.Find(rt.Path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("route %s is not in schemas/fleet-openapi.yaml", key)
		}
	}
	for key := range cases {
		if _, ok := table[key]; !ok {
			t.Errorf("case %s names no route of the table", key)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	keys := make([]string, 0, len(table))
	for k := range table {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The operator goes last on each route (its deletes and rotations would
	// change what the others see), and on victim's objects.
	for _, key := range keys {
		rt, c := table[key], cases[key]
		t.Run(strings.ReplaceAll(key, "/", "_"), func(t *testing.T) {
			e.t = t
			defer func() { e.t = nil }()
			call := func(token, path string) int {
				t.Helper()
				return e.call(req{method: rt.Method, path: path, token: token, body: c.body}).status
			}
			inSession := func(session, path string) int {
				t.Helper()
				return e.call(req{method: rt.Method, path: path, body: c.body, header: http.Header{
					"Cookie": {identity.CookieName + "=" + session}, "X-Fluxvm-Console": {"1"}}}).status
			}
			expect := func(who string, got int, ok func(int) bool, want string) {
				t.Helper()
				if !ok(got) {
					t.Errorf("%s: %d, want %s", who, got, want)
				}
			}
			is := func(s int) func(int) bool { return func(got int) bool { return got == s } }
			notRefused := func(got int) bool { return got != http.StatusUnauthorized && got != http.StatusForbidden }

			if rt.Access == Public {
				want := http.StatusOK
				if c.public != 0 {
					want = c.public
				}
				for who, tok := range map[string]string{"no token": "", "bad token": "garbage", "disabled tenant": tokenD, "tenant": tokenA,
					"key": keyA, "read-only key": readOnlyA, "operator": testFleetToken} {
					expect(who, call(tok, c.own), is(want), http.StatusText(want))
				}
				return
			}
			expect("no token", call("", c.own), is(http.StatusUnauthorized), "401")
			expect("bad token", call("not-a-token", c.own), is(http.StatusUnauthorized), "401")
			expect("forged tenant token", call("fvt_"+strings.Repeat("x", 43), c.own), is(http.StatusUnauthorized), "401")
			expect("forged key", call("fvk_"+strings.Repeat("x", 43), c.own), is(http.StatusUnauthorized), "401")
			expect("revoked key", call(revokedA, c.own), is(http.StatusUnauthorized), "401")
			expect("expired key", call(expiredA, c.own), is(http.StatusUnauthorized), "401")
			expect("disabled tenant", call(tokenD, c.own), is(http.StatusForbidden), "403")
			expect("disabled tenant's key", call(keyD, c.own), is(http.StatusForbidden), "403")
			expect("disabled tenant's session", inSession(sessionD, c.own), is(http.StatusForbidden), "403")
			reads := rt.Method == http.MethodGet
			switch rt.Access {
			case FleetMember:
				// A member central's fleet token only (federation_test.go): the operator is no member.
				for who, tok := range map[string]string{"tenant A": tokenA, "tenant A's key": keyA, "operator": testFleetToken} {
					expect(who, call(tok, c.own), is(http.StatusForbidden), "403")
				}
				return
			case Operator:
				for who, tok := range map[string]string{"tenant A": tokenA, "tenant A's key": keyA, "tenant A's read-only key": readOnlyA} {
					expect(who, call(tok, c.own), is(http.StatusForbidden), "403")
					if c.other != "" {
						expect(who+" on B's", call(tok, c.other), is(http.StatusForbidden), "403")
					}
				}
				for _, role := range sdk.Roles {
					expect(string(role)+" session", inSession(sessions[role], c.own), is(http.StatusForbidden), "403")
				}
			case Tenant:
				// The primary token first: its exact answers hold before a
				// key's call changes anything (a delete, say).
				ownOK, ownWant := notRefused, "neither 401 nor 403"
				if c.tenantOK != 0 {
					ownOK, ownWant = is(c.tenantOK), http.StatusText(c.tenantOK)
				}
				expect("tenant A on its own", call(tokenA, c.own), ownOK, ownWant)
				if c.other != "" {
					expect("tenant A on B's", call(tokenA, c.other), is(c.foreign), http.StatusText(c.foreign))
				}
				for who, tok := range map[string]string{"tenant A's key": keyA, "tenant A's read-only key": readOnlyA} {
					switch {
					case who == "tenant A's read-only key" && reads && c.readOnlyRefused:
						// Refused once the VM is found: another tenant's is still 404.
						expect(who, call(tok, c.own), is(http.StatusForbidden), "403")
						expect(who+" on B's", call(tok, c.other), is(c.foreign), http.StatusText(c.foreign))
						continue
					case c.keyRefused, who == "tenant A's read-only key" && !reads:
						expect(who, call(tok, c.own), is(http.StatusForbidden), "403")
						if c.other != "" {
							expect(who+" on B's", call(tok, c.other), is(http.StatusForbidden), "403")
						}
						continue
					case reads:
						expect(who, call(tok, c.own), ownOK, ownWant)
					default:
						expect(who, call(tok, c.own), notRefused, "neither 401 nor 403")
					}
					if c.other != "" {
						expect(who+" on B's", call(tok, c.other), is(c.foreign), http.StatusText(c.foreign))
					}
				}
				// Each role of the team, in a console session: below the
				// route's least role (roles_test.go) refused, at or above it
				// let through, to the same answers as a key.
				for _, role := range sdk.Roles {
					who := string(role) + " session"
					if role.Rank() < sdk.Role(leastRole[key]).Rank() || leastRole[key] == "token" {
						expect(who, inSession(sessions[role], c.own), is(http.StatusForbidden), "403")
						if c.other != "" {
							expect(who+" on B's", inSession(sessions[role], c.other), is(http.StatusForbidden), "403")
						}
						continue
					}
					expect(who, inSession(sessions[role], c.own), notRefused, "neither 401 nor 403")
					if c.other != "" {
						expect(who+" on B's", inSession(sessions[role], c.other), is(c.foreign), http.StatusText(c.foreign))
					}
				}
			}
			opPath := strings.ReplaceAll(c.own, a.ID, victim.ID)
			expect("operator", call(testFleetToken, opPath), notRefused, "neither 401 nor 403")
		})
	}
	e.t = t

	// Tenant A's token and keys still work (nothing above rotated or
	// revoked them), B's objects are intact, and the victim took the
	// operator's delete.
	for _, tok := range []string{tokenA, keyA, readOnlyA} {
		e.must(req{method: "GET", path: "/fleet/tenants/me", token: tok}, 200)
	}
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: keyB.Token}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/" + b.ID, token: testFleetToken}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/" + victim.ID, token: testFleetToken}, 404)
}

// TestLabModeIsOpenUntilTheFirstTenant: without -token, callers without a
// token are the operator while there are no tenants; once one exists, only
// tenant tokens get in.
func TestLabModeIsOpenUntilTheFirstTenant(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FleetToken = "" })
	e.must(req{method: "GET", path: "/fleet/tenants"}, 200)
	e.must(req{method: "GET", path: "/metrics"}, 200)
	e.must(req{method: "PUT", path: "/fleet/images/img", body: `{"guest_os": "linux", "image": "/i"}`}, 201)
	// A token that is not a tenant's is refused even in lab mode: there is
	// no fleet token for it to be.
	e.must(req{method: "GET", path: "/fleet/tenants", token: "anything"}, 401)

	// Tenants cannot be made through lab mode; one made out of band (a state
	// directory that had a fleet token before) closes the door.
	const token = "fvt_lab-mode-tenant-token-0123456789abcdef"
	if err := e.store.CreateTenant(context.Background(), &store.Tenant{Tenant: sdk.Tenant{Name: "early"}, TokenSHA256: store.HashToken(token)}); err != nil {
		t.Fatal(err)
	}
	eb := e.must(req{method: "GET", path: "/fleet/tenants"}, 401).errorBody(t)
	if !strings.Contains(eb.Hint, "-token") {
		t.Fatalf("401 in lab mode with tenants: %+v", eb)
	}
	e.must(req{method: "GET", path: "/fleet/images"}, 401)
	e.must(req{method: "GET", path: "/fleet/tenants", token: "anything"}, 401)
	e.must(req{method: "GET", path: "/fleet/images", token: token}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: token}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants", token: token}, 403)
	e.must(req{method: "GET", path: "/healthz"}, 200)
}
