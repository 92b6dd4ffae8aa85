package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/schemas"
	"github.com/fluxvm/fluxvm/sdk"
)

// max63 is 2^63-1, the number outside testing sent.
const max63 = "9223372036854775807"

// registerMac heartbeats a Mac with a healthy macOS driver into central. Its
// address answers nothing: the tests here never need the node itself.
func (e *env) registerMac(name string) {
	e.t.Helper()
	e.must(req{method: "POST", path: "/fleet/nodes/" + name + "/heartbeat", token: testFleetToken, body: `{"url": "http://127.0.0.1:1",
		"capacity": {"total": {"vcpus": 8, "memory_mib": 16384, "macos_slots": 2}, "free": {"vcpus": 8, "memory_mib": 16384, "macos_slots": 2}},
		"drivers": [{"name": "vz", "health": "healthy", "guest_os": ["macos"]}], "nested": false, "vms": []}`}, 200)
}

// TestOutOfRangeNumbersAreRefusedBeforeAnythingIsStored sends what outside
// testing sent to a real central: a policy, a lease, pools and a stop with
// numbers past their range. Each is refused with 400 naming the field and
// its range (never the value), and etcd is left as it was; the same
// requests with numbers in range go through.
func TestOutOfRangeNumbersAreRefusedBeforeAnythingIsStored(t *testing.T) {
	e := newEnv(t, nil)
	e.registerMac("mac-1")
	_, tenant := e.createTenant("acme", "")
	e.must(req{method: "PUT", path: "/fleet/images/tiny", token: testFleetToken, body: `{"guest_os": "linux", "image": "/images/tiny.img"}`}, 201)
	before := e.dump()

	cases := []struct {
		name, method, path, token, body string
		want                            string
	}{
		{"policy retention", "PUT", "/fleet/policy", testFleetToken, `{"ledger_retention_days": ` + max63 + `}`,
			`field "ledger_retention_days" must be from 0 to 3650`},
		{"policy minimum lease", "PUT", "/fleet/policy", testFleetToken, `{"min_lease_hours": ` + max63 + `}`,
			`field "min_lease_hours" must be from 0 to 8760`},
		{"lease hours", "POST", "/fleet/leases", tenant, `{"hours": ` + max63 + `}`,
			`field "hours" must be from 0 to 26280`},
		{"pool vcpus", "POST", "/fleet/pools", tenant, `{"name": "ci-1", "image": "tiny", "size": 1, "vcpus": ` + max63 + `}`,
			`field "vcpus" must be from 0 to 1024`},
		{"pool memory", "POST", "/fleet/pools", tenant, `{"name": "ci-2", "image": "tiny", "size": 1, "memory_mib": ` + max63 + `}`,
			`field "memory_mib" must be from 0 to 16777216`},
		{"stop timeout", "POST", "/fleet/vms/mac-1/vm-1/stop", testFleetToken, `{"timeout_seconds": -1}`,
			`field "timeout_seconds" must be from 0 to 3600`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			out := e.call(req{method: c.method, path: c.path, token: c.token, body: c.body})
			if out.status != 400 {
				t.Fatalf("-> %d %s, want 400", out.status, out.body)
			}
			if eb := out.errorBody(t); eb.Error != c.want || !strings.Contains(eb.Hint, `"Limits"`) {
				t.Fatalf("-> %+v, want %q with a hint pointing at the limits", eb, c.want)
			}
			if out.specErr == nil {
				t.Fatalf("the description takes %s", c.body) // the refusal must come from the description's ranges
			}
			if strings.Contains(string(out.body), max63) {
				t.Fatalf("the answer repeats the value: %s", out.body)
			}
		})
	}
	e.t = t
	if after := e.dump(); !maps.Equal(before, after) {
		t.Fatal("a refused request changed etcd")
	}

	// In range, the same requests go through (the stop reaches for the node,
	// which does not answer).
	var l struct {
		StartedAt time.Time `json:"started_at"`
		EndsAt    time.Time `json:"ends_at"`
		MinEnd    time.Time `json:"min_end"`
	}
	e.must(req{method: "POST", path: "/fleet/leases", token: tenant, body: `{"hours": 26280}`}, 201).decode(t, &l)
	if l.EndsAt.Sub(l.StartedAt) != 26280*time.Hour || l.MinEnd.Sub(l.StartedAt) != 24*time.Hour {
		t.Fatalf("lease of 26280 hours: %+v", l)
	}
	e.must(req{method: "POST", path: "/fleet/pools", token: tenant, body: `{"name": "ci", "image": "tiny", "size": 0, "vcpus": 1024, "memory_mib": 16777216}`}, 201)
	e.must(req{method: "PUT", path: "/fleet/policy", token: testFleetToken, body: `{"ledger_retention_days": 3650, "min_lease_hours": 8760}`}, 200)
	e.must(req{method: "POST", path: "/fleet/vms/mac-1/vm-1/stop", token: testFleetToken, body: `{"timeout_seconds": 3600}`}, 502)
}

// TestValuesAnOlderCentralStoredOutOfRangeDoNotWrap puts a policy with
// 2^63-1 hours and days into etcd, as a central from before the ranges
// could: it reads back clamped to the ranges, the reconciler keeps an entry
// that ended an hour ago, and a new lease's minimum end is a year after its
// start, not before it.
func TestValuesAnOlderCentralStoredOutOfRangeDoNotWrap(t *testing.T) {
	e := newEnv(t, nil)
	e.registerMac("mac-1")
	_, tenant := e.createTenant("acme", "")
	ctx := context.Background()
	put := func(key string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Client().Put(ctx, e.store.Prefix()+key, string(data)); err != nil {
			t.Fatal(err)
		}
	}
	pol := store.DefaultPolicy()
	pol.MinLeaseHours, pol.LedgerRetentionDays = 1<<63-1, 1<<63-1
	put("policy", pol)
	now := time.Now().UTC()
	put("ledger/e-recent", store.LedgerEntry{ID: "e-recent", Node: "gone", VMID: "vm-1", Name: "recent", VCPUs: 1, MemoryMiB: 64,
		GuestOS: "linux", StartedAt: now.Add(-2 * time.Hour), EndedAt: now.Add(-time.Hour), EndReason: "deleted"})

	e.must(req{method: "POST", path: "/fleet/reconcile", token: testFleetToken}, 200)
	if _, err := e.store.GetEntry(ctx, "e-recent"); err != nil {
		t.Fatalf("the reconciler dropped an entry that ended an hour ago: %v", err)
	}
	var l struct {
		StartedAt time.Time `json:"started_at"`
		MinEnd    time.Time `json:"min_end"`
	}
	e.must(req{method: "POST", path: "/fleet/leases", token: tenant}, 201).decode(t, &l)
	if l.MinEnd.Sub(l.StartedAt) != store.MaxMinLeaseHours*time.Hour {
		t.Fatalf("lease under a stored min_lease_hours of 2^63-1: started %v, min_end %v", l.StartedAt, l.MinEnd)
	}
	var got sdk.Policy // held to the description's ranges by e.call
	e.must(req{method: "GET", path: "/fleet/policy", token: testFleetToken}, 200).decode(t, &got)
	if got.MinLeaseHours != store.MaxMinLeaseHours || got.LedgerRetentionDays != store.MaxLedgerRetentionDays {
		t.Fatalf("stored 2^63-1 reads as min_lease_hours %d, ledger_retention_days %d", got.MinLeaseHours, got.LedgerRetentionDays)
	}
}

// TestStoreRangesMatchTheDescription holds the store's clamping ranges to
// the ranges schemas/fleet-openapi.yaml gives the same fields, so a range
// changed in one place and not the other fails here.
func TestStoreRangesMatchTheDescription(t *testing.T) {
	spec, err := schemas.FleetSpec()
	if err != nil {
		t.Fatal(err)
	}
	schema := func(name string) map[string]float64 {
		out := map[string]float64{}
		for field, p := range spec.Doc.Components.Schemas[name].Value.Properties {
			if p.Value.Max != nil {
				out[field] = *p.Value.Max
			}
		}
		return out
	}
	maxLen := func(schema, field string) float64 {
		return float64(*spec.Doc.Components.Schemas[schema].Value.Properties[field].Value.MaxLength)
	}
	maxItems := func(schema, field string) float64 {
		return float64(*spec.Doc.Components.Schemas[schema].Value.Properties[field].Value.MaxItems)
	}
	policy, pool, res, lease, key := schema("Policy"), schema("Pool"), schema("Resources"), schema("CreateLeaseRequest"), schema("CreateKeyRequest")
	vm := schema("VMSummary")
	for _, c := range []struct {
		what       string
		spec, code float64
	}{
		{"Policy.min_lease_hours", policy["min_lease_hours"], store.MaxMinLeaseHours},
		{"Policy.ledger_retention_days", policy["ledger_retention_days"], store.MaxLedgerRetentionDays},
		{"Policy.max_snapshots_per_vm", policy["max_snapshots_per_vm"], store.MaxSnapshotsPerVM},
		{"FleetSnapshotList.limit", *spec.Doc.Components.Schemas["FleetSnapshotList"].Value.Properties["limit"].Value.Max, store.MaxSnapshotsPerVM},
		{"FleetSnapshot.size_gib", *spec.Doc.Components.Schemas["FleetSnapshot"].Value.Properties["size_gib"].Value.Max, store.MaxSnapshotGiB},
		{"CreateLeaseRequest.hours", lease["hours"], store.MaxLeaseHours},
		{"Pool.vcpus", pool["vcpus"], store.MaxVMVCPUs},
		{"Pool.memory_mib", pool["memory_mib"], store.MaxVMMemoryMiB},
		{"Pool.size", pool["size"], store.MaxPoolSize},
		{"VMSummary.vcpus", vm["vcpus"], store.MaxVMVCPUs},
		{"VMSummary.memory_mib", vm["memory_mib"], store.MaxVMMemoryMiB},
		{"Resources.vcpus", res["vcpus"], store.MaxNodeVCPUs},
		{"Resources.memory_mib", res["memory_mib"], store.MaxNodeMemoryMiB},
		{"Resources.macos_slots", res["macos_slots"], store.MaxNodeMacOSSlots},
		{"CreateKeyRequest.expires_days", key["expires_days"], store.MaxKeyExpiresDays},
		{"KeyName.maxLength", float64(*spec.Doc.Components.Schemas["KeyName"].Value.MaxLength), store.MaxKeyNameLen},
		{"MemberEmail.maxLength", float64(*spec.Doc.Components.Schemas["MemberEmail"].Value.MaxLength), store.MaxEmailLen},
		{"MemberList.members.maxItems", float64(*spec.Doc.Components.Schemas["MemberList"].Value.Properties["members"].Value.MaxItems), store.MaxMembersPerTenant},
		{"Event.user.maxLength", float64(*spec.Doc.Components.Schemas["Event"].Value.Properties["user"].Value.MaxLength), audit.MaxUserBytes},
		{"audit.MaxUserBytes", float64(audit.MaxUserBytes), store.MaxEmailLen},
		{"CreateWebhookRequest.url.maxLength", maxLen("CreateWebhookRequest", "url"), webhooks.MaxURLLen},
		{"CreateWebhookRequest.name.maxLength", maxLen("CreateWebhookRequest", "name"), webhooks.MaxNameLen},
		{"CreateWebhookRequest.events.maxItems", maxItems("CreateWebhookRequest", "events"), float64(len(sdk.NotificationTypes))},
		{"WebhookList.webhooks.maxItems", maxItems("WebhookList", "webhooks"), store.MaxWebhooksPerOwner},
		{"Webhook.deliveries.maxItems", maxItems("Webhook", "deliveries"), store.KeepDeliveries},
		{"Notification.title.maxLength", maxLen("Notification", "title"), notify.MaxTitleLen},
		{"Notification.detail.maxLength", maxLen("Notification", "detail"), notify.MaxDetailLen},
		{"Notification.link.maxLength", maxLen("Notification", "link"), notify.MaxLinkLen},
		{"NotificationList.notifications.maxItems", maxItems("NotificationList", "notifications"), maxNotificationLimit},
		{"GET /fleet/notifications limit", *spec.Doc.Paths.Find("/fleet/notifications").Get.Parameters[0].Value.Schema.Value.Max, maxNotificationLimit},
		{"FleetCreateVMRequest.volumes.maxItems", maxItems("FleetCreateVMRequest", "volumes"), driver.MaxVolumes},
		{"FleetCreateVolumeRequest.size_gib", schema("FleetCreateVolumeRequest")["size_gib"], sdk.MaxVolumeGiB},
		{"FleetCreateVolumeRequest.size_gib minimum", *spec.Doc.Components.Schemas["FleetCreateVolumeRequest"].Value.Properties["size_gib"].Value.Min, sdk.MinVolumeGiB},
		{"FleetResizeVolumeRequest.size_gib", schema("FleetResizeVolumeRequest")["size_gib"], sdk.MaxVolumeGiB},
		{"FleetResizeVolumeRequest.size_gib minimum", *spec.Doc.Components.Schemas["FleetResizeVolumeRequest"].Value.Properties["size_gib"].Value.Min, sdk.MinVolumeGiB},
	} {
		if c.spec != c.code {
			t.Errorf("%s: the description's maximum is %s, the store's %s", c.what, fmt.Sprint(c.spec), fmt.Sprint(c.code))
		}
	}
}
