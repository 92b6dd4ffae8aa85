package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

var tokenRE = regexp.MustCompile(`^fvt_[A-Za-z0-9_-]{32,}$`)

func TestTenantLifecycleShowsTheTokenOnceAndRotationCutsTheOldOneOff(t *testing.T) {
	e := newEnv(t, nil)
	var created sdk.TenantWithToken
	out := e.must(req{method: "POST", path: "/fleet/tenants", token: testFleetToken,
		body: `{"name": "acme", "quota": {"max_vms": 20, "max_memory_mib": 98304}}`}, 201)
	out.decode(t, &created)
	if !tokenRE.MatchString(created.Token) || created.Note != tokenNote {
		t.Fatalf("token %q, note %q", created.Token, created.Note)
	}
	id := created.Tenant.ID
	if out.header.Get("Location") != "/fleet/tenants/"+id || created.Tenant.Quota.MaxVMs != 20 {
		t.Fatalf("created %+v, Location %q", created.Tenant, out.header.Get("Location"))
	}
	stored, err := e.store.GetTenant(context.Background(), id)
	if err != nil || stored.TokenSHA256 != store.HashToken(created.Token) {
		t.Fatalf("stored %+v, %v: want the token's SHA-256 only", stored, err)
	}

	// The token and its digest appear in no read.
	for _, path := range []string{"/fleet/tenants", "/fleet/tenants/" + id, "/fleet/tenants/acme"} {
		body := string(e.must(req{method: "GET", path: path, token: testFleetToken}, 200).body)
		if strings.Contains(body, stored.TokenSHA256) || strings.Contains(body, created.Token) || strings.Contains(body, "token") {
			t.Fatalf("GET %s shows the token or its digest: %s", path, body)
		}
	}
	var list sdk.TenantList
	e.must(req{method: "GET", path: "/fleet/tenants", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Tenants) != 1 || list.Tenants[0].Name != "acme" {
		t.Fatalf("list %+v", list)
	}

	var me tenantMeView
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: created.Token}, 200).decode(t, &me)
	if me.Tenant.ID != id || me.Usage.Total.VMs != 0 || me.MaxSnapshotsPerVM != 20 {
		t.Fatalf("me %+v", me)
	}

	// PATCH: quota fields (a number sets, null clears), disabled, name.
	var upd sdk.Tenant
	e.must(req{method: "PATCH", path: "/fleet/tenants/acme", token: testFleetToken,
		body: `{"name": "acme-mobile", "quota": {"max_vms": null, "max_vcpus": 48, "max_snapshots_per_vm": 5}}`}, 200).decode(t, &upd)
	if upd.Name != "acme-mobile" || upd.Quota.MaxVMs != 0 || upd.Quota.MaxVCPUs != 48 || upd.Quota.MaxMemoryMiB != 98304 ||
		upd.Quota.MaxSnapshotsPerVM == nil || *upd.Quota.MaxSnapshotsPerVM != 5 {
		t.Fatalf("patched %+v", upd)
	}
	e.must(req{method: "GET", path: "/fleet/tenants/acme", token: testFleetToken}, 404)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: created.Token}, 200).decode(t, &me)
	if me.MaxSnapshotsPerVM != 5 || me.Tenant.Name != "acme-mobile" {
		t.Fatalf("me after patch %+v", me)
	}

	e.must(req{method: "PATCH", path: "/fleet/tenants/" + id, token: testFleetToken, body: `{"disabled": true}`}, 200)
	if eb := e.must(req{method: "GET", path: "/fleet/tenants/me", token: created.Token}, 403).errorBody(t); !strings.Contains(eb.Error, "disabled") {
		t.Fatalf("disabled tenant: %+v", eb)
	}
	e.must(req{method: "PATCH", path: "/fleet/tenants/" + id, token: testFleetToken, body: `{"disabled": false}`}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: created.Token}, 200)

	var rotated sdk.TenantWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/acme-mobile/rotate-token", token: testFleetToken}, 200).decode(t, &rotated)
	if !tokenRE.MatchString(rotated.Token) || rotated.Token == created.Token || rotated.Tenant.ID != id {
		t.Fatalf("rotated %+v", rotated)
	}
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: created.Token}, 401)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: rotated.Token}, 200)

	e.must(req{method: "DELETE", path: "/fleet/tenants/" + id, token: testFleetToken}, 204)
	e.must(req{method: "GET", path: "/fleet/tenants/" + id, token: testFleetToken}, 404)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: rotated.Token}, 401)
	e.must(req{method: "DELETE", path: "/fleet/tenants/" + id, token: testFleetToken}, 404)
	if got := e.dump(); len(got) != 0 {
		t.Fatalf("a deleted tenant leaves keys behind: %v", got)
	}
}

func TestLabModeRefusesToCreateTenants(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FleetToken = "" })
	out := e.must(req{method: "POST", path: "/fleet/tenants", body: `{"name": "acme"}`}, 409)
	if eb := out.errorBody(t); !strings.Contains(eb.Hint, "-token") {
		t.Fatalf("hint %q does not say to restart central with -token", eb.Hint)
	}
	if got := e.dump(); len(got) != 0 {
		t.Fatalf("the refused create wrote %v", got)
	}
	// Still lab mode: the tokenless caller is the operator.
	e.must(req{method: "GET", path: "/fleet/tenants"}, 200)
}

func TestDeletingATenantWithVMsIsRefusedUntilTheyEnd(t *testing.T) {
	e := newEnv(t, nil)
	tn, _ := e.createTenant("busy", "")
	ctx := context.Background()
	entry, err := e.store.RecordEntry(ctx, store.LedgerEntry{Tenant: tn.ID, Node: "node-1", VMID: "vm-1", Name: "ci-1", VCPUs: 2, MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	before := e.dump()
	eb := e.must(req{method: "DELETE", path: "/fleet/tenants/busy", token: testFleetToken}, 409).errorBody(t)
	if !strings.Contains(eb.Error, "1 VMs") || !strings.Contains(eb.Hint, "delete its VMs first") {
		t.Fatalf("refusal %+v", eb)
	}
	if after := e.dump(); !maps.Equal(before, after) {
		t.Fatal("a refused delete changed the store")
	}
	if _, err := e.store.EndEntry(ctx, entry.ID, "deleted", time.Now()); err != nil {
		t.Fatal(err)
	}
	e.must(req{method: "DELETE", path: "/fleet/tenants/busy", token: testFleetToken}, 204)
}

func TestTenantSeesItsUsageAgainstItsQuota(t *testing.T) {
	e := newEnv(t, nil)
	tn, token := e.createTenant("metered", `{"max_vms": 10, "max_vcpus": 48}`)
	if _, err := e.store.RecordEntry(context.Background(), store.LedgerEntry{Tenant: tn.ID, Node: "node-1", VMID: "vm-1",
		Name: "ci-1", VCPUs: 4, MemoryMiB: 8192, GuestOS: store.GuestMacOS}); err != nil {
		t.Fatal(err)
	}
	var me tenantMeView
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: token}, 200).decode(t, &me)
	want := sdk.Usage{VMs: 1, VCPUs: 4, MemoryMiB: 8192, MacOS: 1}
	if me.Usage.Running != want || me.Usage.Total != want || me.Tenant.Quota.MaxVMs != 10 {
		t.Fatalf("me %+v", me)
	}
	// The operator is no tenant.
	eb := e.must(req{method: "GET", path: "/fleet/tenants/me", token: testFleetToken}, 400).errorBody(t)
	if !strings.Contains(eb.Hint, "/fleet/tenants/{id}") {
		t.Fatalf("operator on /me: %+v", eb)
	}
}

// TestBadWritesAreRefusedWithHintsAndWriteNothing sends every write route
// bad input and checks the store is byte for byte as before.
func TestBadWritesAreRefusedWithHintsAndWriteNothing(t *testing.T) {
	e := newEnv(t, nil)
	tn, _ := e.createTenant("acme", `{"max_vms": 5}`)
	e.createTenant("other", "")
	e.must(req{method: "PUT", path: "/fleet/images/debian", token: testFleetToken, body: `{"guest_os": "linux", "image": "/vms/debian.raw"}`}, 201)
	e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: `{"ledger_retention_days": 30}`}, 200)
	before := e.dump()

	huge := `{"name": "` + strings.Repeat("a", 1<<20) + `"}`
	cases := []struct {
		name, method, path, body, ctype string
		status                          int
		inError                         string // a piece of the error message
	}{
		{"tenant: malformed JSON", "POST", "/fleet/tenants", `{"name": "x"`, "", 400, "ends in the middle"},
		{"tenant: not an object", "POST", "/fleet/tenants", `["acme"]`, "", 400, "JSON object"},
		{"tenant: unknown field", "POST", "/fleet/tenants", `{"name": "x", "token": "fvt_mine"}`, "", 400, `unknown field "token"`},
		{"tenant: unknown quota", "POST", "/fleet/tenants", `{"name": "x", "quota": {"max_cows": 1}}`, "", 400, `unknown field "max_cows"`},
		{"tenant: no body", "POST", "/fleet/tenants", ``, "", 400, "body is required"},
		{"tenant: two values", "POST", "/fleet/tenants", `{"name": "x"} {}`, "", 400, "more than one"},
		{"tenant: not JSON", "POST", "/fleet/tenants", `name=x`, "application/x-www-form-urlencoded", 415, "must be JSON"},
		{"tenant: too large", "POST", "/fleet/tenants", huge, "", 413, "larger than"},
		{"tenant: no name", "POST", "/fleet/tenants", `{"quota": {"max_vms": 1}}`, "", 400, "name is required"},
		{"tenant: bad name", "POST", "/fleet/tenants", `{"name": "acme corp"}`, "", 400, "not valid"},
		{"tenant: slash in name", "POST", "/fleet/tenants", `{"name": "a/b"}`, "", 400, "not valid"},
		{"tenant: name too long", "POST", "/fleet/tenants", `{"name": "` + strings.Repeat("a", 65) + `"}`, "", 400, "not valid"},
		{"tenant: reserved name", "POST", "/fleet/tenants", `{"name": "me"}`, "", 400, "reserved"},
		{"tenant: name taken", "POST", "/fleet/tenants", `{"name": "acme"}`, "", 409, "already exists"},
		{"tenant: negative quota", "POST", "/fleet/tenants", `{"name": "x", "quota": {"max_vcpus": -1}}`, "", 400, "max_vcpus"},
		{"tenant: negative snapshots", "POST", "/fleet/tenants", `{"name": "x", "quota": {"max_snapshots_per_vm": -2}}`, "", 400, "max_snapshots_per_vm"},
		{"tenant: quota not a number", "POST", "/fleet/tenants", `{"name": "x", "quota": {"max_vms": "ten"}}`, "", 400, "max_vms"},
		{"tenant: quota fraction", "POST", "/fleet/tenants", `{"name": "x", "quota": {"max_vms": 1.5}}`, "", 400, "max_vms"},
		{"tenant: quota overflow", "POST", "/fleet/tenants", `{"name": "x", "quota": {"max_vms": 99999999999999999999}}`, "", 400, "max_vms"},

		{"patch: malformed JSON", "PATCH", "/fleet/tenants/acme", `{"disabled": tru}`, "", 400, "not valid JSON"},
		{"patch: unknown field", "PATCH", "/fleet/tenants/acme", `{"token_sha256": "00"}`, "", 400, `unknown field "token_sha256"`},
		{"patch: id is not patchable", "PATCH", "/fleet/tenants/acme", `{"id": "t-1"}`, "", 400, `unknown field "id"`},
		{"patch: unknown quota", "PATCH", "/fleet/tenants/acme", `{"quota": {"max_gpus": 1}}`, "", 400, `unknown field "max_gpus"`},
		{"patch: bad name", "PATCH", "/fleet/tenants/acme", `{"name": "-acme"}`, "", 400, "not valid"},
		{"patch: reserved name", "PATCH", "/fleet/tenants/acme", `{"name": "me"}`, "", 400, "reserved"},
		{"patch: name taken", "PATCH", "/fleet/tenants/acme", `{"name": "other"}`, "", 409, "another tenant"},
		{"patch: negative quota", "PATCH", "/fleet/tenants/acme", `{"quota": {"max_vms": -5}}`, "", 400, "max_vms"},
		{"patch: quota not a number", "PATCH", "/fleet/tenants/acme", `{"quota": {"max_vms": true}}`, "", 400, "max_vms"},
		{"patch: disabled not a bool", "PATCH", "/fleet/tenants/acme", `{"disabled": "yes"}`, "", 400, "disabled"},
		{"patch: unknown tenant", "PATCH", "/fleet/tenants/nobody", `{"disabled": true}`, "", 404, "no tenant"},
		{"patch: no body", "PATCH", "/fleet/tenants/acme", ``, "", 400, "body is required"},
		{"delete: unknown tenant", "DELETE", "/fleet/tenants/nobody", ``, "", 404, "no tenant"},
		{"rotate: unknown tenant", "POST", "/fleet/tenants/nobody/rotate-token", ``, "", 404, "no tenant"},

		{"policy: malformed JSON", "PUT", "/fleet/policy", `{"min_lease_hours": }`, "", 400, "not valid JSON"},
		{"policy: unknown field", "PUT", "/fleet/policy", `{"allow_everything": true}`, "", 400, `unknown field "allow_everything"`},
		{"policy: unknown tunnels field", "PUT", "/fleet/policy", `{"tunnels": {"enabled": true, "wide_open": true}}`, "", 400, `unknown field "wide_open"`},
		{"policy: no body", "PUT", "/fleet/policy", ``, "", 400, "body is required"},
		{"policy: negative retention", "PUT", "/fleet/policy", `{"ledger_retention_days": -1}`, "", 400, "ledger_retention_days"},
		{"policy: bad subnet prefix", "PUT", "/fleet/policy", `{"tenant_subnet_prefix": "10.300"}`, "", 400, "tenant_subnet_prefix"},
		{"policy: three octets", "PUT", "/fleet/policy", `{"tenant_subnet_prefix": "10.1.2"}`, "", 400, "tenant_subnet_prefix"},
		{"policy: negative snapshots", "PUT", "/fleet/policy", `{"max_snapshots_per_vm": -1}`, "", 400, "max_snapshots_per_vm"},
		{"policy: bad email", "PUT", "/fleet/policy", `{"operator_emails": ["ops"]}`, "", 400, "operator_emails"},
		{"policy: bad port range", "PUT", "/fleet/policy", `{"tunnels": {"enabled": true, "ports": ["90-80"], "idle_timeout_minutes": 60, "max_lifetime_minutes": 480, "max_per_tenant": 20}}`, "", 400, "tunnels.ports"},
		{"policy: idle timeout out of range", "PUT", "/fleet/policy", `{"tunnels": {"enabled": true, "ports": ["22"], "idle_timeout_minutes": 0, "max_lifetime_minutes": 480, "max_per_tenant": 20}}`, "", 400, "idle_timeout_minutes"},
		{"policy: wrong type", "PUT", "/fleet/policy", `{"require_lease_for_macos": "no"}`, "", 400, "require_lease_for_macos"},

		{"image: malformed JSON", "PUT", "/fleet/images/macos", `{"guest_os": "macos",`, "", 400, "ends in the middle"},
		{"image: unknown field", "PUT", "/fleet/images/macos", `{"guest_os": "macos", "image": "/d", "password": "x"}`, "", 400, `unknown field "password"`},
		{"image: bad name", "PUT", "/fleet/images/.hidden", `{"guest_os": "macos", "image": "/d"}`, "", 400, "not valid"},
		{"image: body names another", "PUT", "/fleet/images/macos", `{"name": "linux", "guest_os": "macos", "image": "/d"}`, "", 400, "the body names"},
		{"image: no guest_os", "PUT", "/fleet/images/macos", `{"image": "/d"}`, "", 400, "guest_os"},
		{"image: bad guest_os", "PUT", "/fleet/images/macos", `{"guest_os": "windows", "image": "/d"}`, "", 400, "guest_os"},
		{"image: no disk", "PUT", "/fleet/images/macos", `{"guest_os": "macos"}`, "", 400, "image"},
		{"image: vcpus out of range", "PUT", "/fleet/images/macos", `{"guest_os": "macos", "image": "/d", "vcpus": 5000}`, "", 400, "vcpus"},
		{"image: negative memory", "PUT", "/fleet/images/macos", `{"guest_os": "macos", "image": "/d", "memory_mib": -1}`, "", 400, "memory_mib"},
		{"image: no body", "PUT", "/fleet/images/macos", ``, "", 400, "body is required"},
		{"image: delete unknown", "DELETE", "/fleet/images/nothing", ``, "", 404, "no image"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			out := e.call(req{method: c.method, path: c.path, token: testFleetToken, body: c.body, ctype: c.ctype})
			if out.status != c.status {
				t.Fatalf("-> %d %s, want %d", out.status, out.body, c.status)
			}
			eb := out.errorBody(t)
			if !strings.Contains(eb.Error, c.inError) || eb.Hint == "" {
				t.Fatalf("error %+v: want %q in the error and a hint", eb, c.inError)
			}
		})
	}
	e.t = t
	if after := e.dump(); !maps.Equal(before, after) {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("changed: %s = %s (was %q)", k, v, before[k])
			}
		}
		t.Fatal("a refused write changed the store")
	}
	if _, err := e.store.GetTenant(context.Background(), tn.ID); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyIsAWholeDocumentAndMinLeaseIsRaisedTo24(t *testing.T) {
	e := newEnv(t, nil)
	var got sdk.Policy
	e.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &got)
	def := store.DefaultPolicy()
	if fmt.Sprint(got) != fmt.Sprint(def) {
		t.Fatalf("before any PUT: %+v, want the defaults %+v", got, def)
	}

	out := e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken,
		body: `{"min_lease_hours": 12, "ledger_retention_days": 0, "isolate_tenant_networks": true, "operator_emails": ["ops@example.com"],
		        "tunnels": {"enabled": false, "ports": ["22"], "idle_timeout_minutes": 5, "max_lifetime_minutes": 60, "max_per_tenant": 2}}`}, 200)
	out.decode(t, &got)
	if got.MinLeaseHours != 24 || got.LedgerRetentionDays != 0 || !got.IsolateTenantNetworks || got.Tunnels.Enabled ||
		!strings.Contains(out.header.Get("Warning"), "min_lease_hours 12 raised to 24") {
		t.Fatalf("stored %+v, Warning %q", got, out.header.Get("Warning"))
	}
	// Omitted fields took their defaults.
	if !got.RequireLeaseForMacOS || got.TenantSubnetPrefix != "10.230" || got.MaxSnapshotsPerVM != 20 {
		t.Fatalf("omitted fields: %+v", got)
	}
	var again sdk.Policy
	e.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &again)
	if fmt.Sprint(again) != fmt.Sprint(got) {
		t.Fatalf("GET after PUT %+v, want %+v", again, got)
	}
	// A PUT of what GET shows changes nothing and warns of nothing.
	body, _ := json.Marshal(again)
	if out := e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: string(body)}, 200); out.header.Get("Warning") != "" {
		t.Fatalf("unexpected warning %q", out.header.Get("Warning"))
	}
}

func TestImageCatalogOperatorWritesTenantsRead(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("reader", "")
	var im sdk.Image
	out := e.must(req{method: "PUT", path: "/fleet/images/macos-27-xcode", token: testFleetToken, body: `{
		"display_name": "macOS 27 with Xcode", "guest_os": "macos", "image": "/Users/fluxvm/vms/macos-27-xcode/disk.raw",
		"source": "ghcr.io/acme/macos-xcode:27"}`}, 201)
	out.decode(t, &im)
	if im.Name != "macos-27-xcode" || im.VCPUs != 4 || im.MemoryMiB != 8192 || im.SSHUser != "admin" ||
		out.header.Get("Location") != "/fleet/images/macos-27-xcode" {
		t.Fatalf("stored %+v (defaults 4, 8192, admin)", im)
	}
	im = sdk.Image{}
	e.must(req{method: "PUT", path: "/fleet/images/macos-27-xcode", token: testFleetToken,
		body: `{"name": "macos-27-xcode", "guest_os": "macos", "image": "/d.raw", "vcpus": 6, "memory_mib": 16384, "ssh_user": "fluxvm"}`}, 200).decode(t, &im)
	if im.VCPUs != 6 || im.SSHUser != "fluxvm" || im.DisplayName != "" {
		t.Fatalf("replaced %+v", im)
	}
	e.must(req{method: "PUT", path: "/fleet/images/debian-13", token: testFleetToken, body: `{"guest_os": "linux", "image": "/d2.raw"}`}, 201)

	var list sdk.ImageList
	e.must(req{method: "GET", path: "/fleet/images", token: token}, 200).decode(t, &list)
	if len(list.Images) != 2 || list.Images[0].Name != "debian-13" || list.Images[1].Name != "macos-27-xcode" {
		t.Fatalf("tenant reads %+v", list)
	}
	e.must(req{method: "PUT", path: "/fleet/images/mine", token: token, body: `{"guest_os": "linux", "image": "/x"}`}, 403)
	e.must(req{method: "DELETE", path: "/fleet/images/debian-13", token: token}, 403)
	e.must(req{method: "DELETE", path: "/fleet/images/debian-13", token: testFleetToken}, 204)
	e.must(req{method: "DELETE", path: "/fleet/images/debian-13", token: testFleetToken}, 404)
	e.must(req{method: "GET", path: "/fleet/images", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Images) != 1 {
		t.Fatalf("after delete %+v", list)
	}
}

func TestActivityLogRecordsChangesNotReadsAndNeverBodiesOrTokens(t *testing.T) {
	e := newEnv(t, nil)
	a, tokenA := e.createTenant("alpha", "")
	b, tokenB := e.createTenant("beta", "")
	const secret = "s3cret-marker-in-a-body"
	e.must(req{method: "PUT", path: "/fleet/images/deb", token: testFleetToken,
		body: `{"guest_os": "linux", "image": "/` + secret + `", "source": "` + secret + `"}`}, 201)
	e.must(req{method: "GET", path: "/fleet/tenants", token: testFleetToken}, 200)
	e.must(req{method: "GET", path: "/fleet/images", token: tokenA}, 200)
	e.must(req{method: "GET", path: "/fleet/policy", token: tokenA}, 403)           // a tenant's 403: recorded
	e.must(req{method: "DELETE", path: "/fleet/images/deb", token: tokenB}, 403)    // and this one
	e.must(req{method: "POST", path: "/fleet/tenants", body: `{"name": "x"}`}, 401) // no token: not recorded
	e.must(req{method: "POST", path: "/fleet/tenants", token: "fvt_forged", body: `{"name": "x"}`}, 401)
	// An exec's body is never read for the log, even when the VM is not found.
	e.call(req{method: "POST", path: "/fleet/vms/node-1/vm-1/exec", token: tokenA,
		body: `{"command": ["sh", "-c", "echo ` + secret + `"]}`})
	var rotated sdk.TenantWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/alpha/rotate-token", token: testFleetToken}, 200).decode(t, &rotated)
	e.must(req{method: "PATCH", path: "/fleet/tenants/beta", token: testFleetToken, body: `{"quota": {"max_vms": 3}}`}, 200)

	type ev struct {
		who, method, path, target string
		status                    int
		actor, action             string
	}
	want := []ev{
		{"operator", "PATCH", "/fleet/tenants/beta", "beta", 200, "operator", "update tenant beta"},
		{"operator", "POST", "/fleet/tenants/alpha/rotate-token", "alpha", 200, "operator", "rotate the token of alpha"},
		{"tenant:" + a.ID, "POST", "/fleet/vms/node-1/vm-1/exec", "vm-1", 0, "alpha", "run in vm-1"}, // status: whatever the VM handler said
		{"tenant:" + b.ID, "DELETE", "/fleet/images/deb", "", 403, "beta", "delete image"},
		{"tenant:" + a.ID, "GET", "/fleet/policy", "", 403, "alpha", "GET /fleet/policy"},
		{"operator", "PUT", "/fleet/images/deb", "deb", 201, "operator", "put image deb"},
		{"operator", "POST", "/fleet/tenants", "beta", 201, "operator", "create tenant beta"},
		{"operator", "POST", "/fleet/tenants", "alpha", 201, "operator", "create tenant alpha"},
	}
	var got sdk.EventList
	e.must(req{method: "GET", path: "/fleet/events", token: testFleetToken}, 200).decode(t, &got)
	if len(got.Events) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(got.Events), len(want), got.Events)
	}
	for i, w := range want {
		g := got.Events[i]
		if g.Who != w.who || g.Method != w.method || g.Path != w.path || g.Target != w.target || (w.status != 0 && g.Status != w.status) ||
			g.Actor != w.actor || g.Action != w.action ||
			g.Time.IsZero() || (strings.HasPrefix(w.who, "tenant:") != (g.Tenant != "")) {
			t.Errorf("event %d: %+v, want %+v", i, g, w)
		}
	}

	file := e.auditFile()
	if n := strings.Count(file, "\n"); n != len(want) {
		t.Fatalf("file has %d lines, want %d:\n%s", n, len(want), file)
	}
	for _, s := range []string{secret, testFleetToken, tokenA, tokenB, rotated.Token, "fvt_forged", "echo", store.HashToken(tokenA)} {
		if strings.Contains(file, s) {
			t.Fatalf("the activity log holds %q:\n%s", s, file)
		}
	}

	// Filters: a tenant sees its own; naming another tenant is refused.
	var mine sdk.EventList
	e.must(req{method: "GET", path: "/fleet/events", token: tokenB}, 200).decode(t, &mine)
	if len(mine.Events) != 1 || mine.Events[0].Tenant != b.ID {
		t.Fatalf("beta sees %+v", mine.Events)
	}
	e.must(req{method: "GET", path: "/fleet/events?tenant=beta", token: tokenB}, 200)
	e.must(req{method: "GET", path: "/fleet/events?tenant=" + b.ID, token: tokenB}, 200)
	e.must(req{method: "GET", path: "/fleet/events?tenant=alpha", token: tokenB}, 403)
	e.must(req{method: "GET", path: "/fleet/events?tenant=nobody", token: tokenB}, 403)
	e.must(req{method: "GET", path: "/fleet/events?tenant=alpha&limit=1", token: testFleetToken}, 200).decode(t, &mine)
	if len(mine.Events) != 1 || mine.Events[0].Path != "/fleet/vms/node-1/vm-1/exec" {
		t.Fatalf("operator's view of alpha, limit 1: %+v", mine.Events)
	}
	e.must(req{method: "GET", path: "/fleet/events?tenant=" + a.ID, token: testFleetToken}, 200).decode(t, &mine)
	if len(mine.Events) != 2 {
		t.Fatalf("operator's view of alpha by id: %+v", mine.Events)
	}
	for _, q := range []string{"limit=0", "limit=5001", "limit=ten", "limit=1&limit=2", "tenant=a&tenant=b"} {
		if out := e.call(req{method: "GET", path: "/fleet/events?" + q, token: testFleetToken}); out.status != 400 {
			t.Fatalf("?%s -> %d, want 400", q, out.status)
		}
	}
	// The reads above were not recorded.
	e.must(req{method: "GET", path: "/fleet/events", token: testFleetToken}, 200).decode(t, &got)
	if len(got.Events) != len(want) {
		t.Fatalf("reads were recorded: %+v", got.Events[:len(got.Events)-len(want)])
	}

	// A new central on the same state directory serves the same log.
	reopened, err := audit.Open(audit.Options{Dir: e.dir})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if r := reopened.Recent(0, ""); len(r) != len(want) || r[0] != got.Events[0] {
		t.Fatalf("reloaded %+v", r)
	}
}

func TestHealthzIsPublicAndMetricsAreTheOperators(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("watcher", "")
	var h Health
	e.must(req{method: "GET", path: "/healthz"}, 200).decode(t, &h)
	if h.Status != "ok" || h.Etcd != "ok" || h.Version != "test" {
		t.Fatalf("health %+v", h)
	}
	e.must(req{method: "GET", path: "/metrics"}, 401)
	e.must(req{method: "GET", path: "/metrics", token: token}, 403)
	e.call(req{method: "GET", path: "/fleet/no-such-thing", token: testFleetToken})
	body := string(e.must(req{method: "GET", path: "/metrics", token: testFleetToken}, 200).body)
	for _, want := range []string{
		`fluxvm_central_requests_total{code="201",route="POST /fleet/tenants"} 1`,
		`fluxvm_central_requests_total{code="403",route="GET /metrics"} 1`,
		`fluxvm_central_requests_total{code="404",route="unmatched"} 1`,
		`fluxvm_central_request_duration_seconds_count{route="GET /healthz"} 1`,
		`fluxvm_central_tenants{state="enabled"} 1`,
		`fluxvm_central_tenants{state="disabled"} 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Two servers do not share a registry.
	other := newEnv(t, nil)
	if strings.Contains(string(other.must(req{method: "GET", path: "/metrics", token: testFleetToken}, 200).body), `route="POST /fleet/tenants"`) {
		t.Fatal("a second server sees the first one's requests")
	}
}

func TestHealthzSaysDegradedWhenEtcdDoesNotAnswer(t *testing.T) {
	e := newEnv(t, nil)
	e.store.Close()
	var h Health
	e.must(req{method: "GET", path: "/healthz"}, 503).decode(t, &h)
	if h.Status != "degraded" || h.Etcd != "unavailable" {
		t.Fatalf("health %+v", h)
	}
}

func TestConcurrentTenantCreatesWithOneNameMakeOneTenant(t *testing.T) {
	e := newEnv(t, nil)
	const n = 16
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.call(req{method: "POST", path: "/fleet/tenants", token: testFleetToken, body: `{"name": "race"}`}).status
		}()
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		switch s {
		case 201:
			created++
		case 409:
		default:
			t.Fatalf("status %d", s)
		}
	}
	ts, err := e.store.ListTenants(context.Background())
	if created != 1 || err != nil || len(ts) != 1 {
		t.Fatalf("%d created, %d stored (%v)", created, len(ts), err)
	}
	// Exactly one name and one token index entry.
	keys := 0
	for k := range e.dump() {
		if strings.Contains(k, "/tenant-names/") || strings.Contains(k, "/tenant-tokens/") {
			keys++
		}
	}
	if keys != 2 {
		t.Fatalf("%d index keys, want 2", keys)
	}
}
