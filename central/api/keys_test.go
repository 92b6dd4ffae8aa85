package api

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/keys"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

var keyRE = regexp.MustCompile(`^fvk_[A-Za-z0-9_-]{43}$`)

// TestAPIKeysActAsTheirTenantAndTheLogNamesThem walks a key through its
// life: made with the primary token and shown once (central keeps its
// SHA-256), listed without it, used as the tenant, named in the activity
// log, kept through a rotation of the primary token, refused with its
// tenant disabled, revoked by the operator, and gone with its tenant.
func TestAPIKeysActAsTheirTenantAndTheLogNamesThem(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	acme, token := e.createTenant("acme", "")

	var made sdk.APIKeyWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/me/keys", token: token, body: `{"name": "ci-github"}`}, 201).decode(t, &made)
	if !keyRE.MatchString(made.Token) || made.Note != keys.Note || made.Key.Name != "ci-github" || made.Key.ReadOnly ||
		made.Key.ExpiresAt.Sub(made.Key.CreatedAt).Hours() != 90*24 || !made.Key.LastUsedAt.IsZero() {
		t.Fatalf("created %+v", made)
	}
	stored, err := e.store.GetKey(ctx, acme.ID, made.Key.ID)
	if err != nil || stored.TokenSHA256 != store.HashToken(made.Token) {
		t.Fatalf("stored %+v, %v: want the key's SHA-256", stored, err)
	}
	for k, v := range e.dump() {
		if strings.Contains(k+v, made.Token) {
			t.Fatalf("etcd holds the key itself at %s", k)
		}
	}
	readOnly := e.createKey(token, "grafana", true)

	// The key is the tenant: same record, same objects; a read notes its use.
	var me tenantMeView
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: made.Token}, 200).decode(t, &me)
	if me.Tenant.ID != acme.ID {
		t.Fatalf("the key is tenant %+v", me.Tenant)
	}
	var list sdk.APIKeyList
	out := e.must(req{method: "GET", path: "/fleet/tenants/me/keys", token: made.Token}, 200)
	out.decode(t, &list)
	if len(list.Keys) != 2 || list.Keys[0].Name != "ci-github" || list.Keys[0].LastUsedAt.IsZero() || list.Keys[1].Name != "grafana" ||
		!list.Keys[1].ReadOnly || !list.Keys[1].LastUsedAt.IsZero() {
		t.Fatalf("keys %+v: want ci-github used, grafana read-only and unused", list.Keys)
	}
	if strings.Contains(string(out.body), stored.TokenSHA256) || strings.Contains(string(out.body), "token") {
		t.Fatalf("the list shows a key or its digest: %s", out.body)
	}

	// A change made with the key, and one refused to the read-only key,
	// are logged as the tenant's, naming the key.
	e.must(req{method: "PUT", path: "/fleet/tenants/me/budget", token: made.Token, body: `{"monthly": 100}`}, 200)
	eb := e.must(req{method: "PUT", path: "/fleet/tenants/me/budget", token: readOnly, body: `{"monthly": 1}`}, 403).errorBody(t)
	if !strings.Contains(eb.Error, "read-only") || !strings.Contains(eb.Hint, "primary token") {
		t.Fatalf("a read-only key's change: %+v", eb)
	}
	var events sdk.EventList
	e.must(req{method: "GET", path: "/fleet/events", token: token}, 200).decode(t, &events)
	var byKey []string
	for _, ev := range events.Events {
		if ev.Key != "" {
			if ev.Who != "tenant:"+acme.ID || ev.Actor != "acme" {
				t.Errorf("event by key %s is %q, actor %q", ev.Key, ev.Who, ev.Actor)
			}
			byKey = append(byKey, fmt.Sprintf("%s %s %d", ev.Key, ev.Action, ev.Status))
		}
	}
	if want := []string{"grafana set the budget of 403", "ci-github set the budget of acme 200"}; strings.Join(byKey, "|") != strings.Join(want, "|") {
		t.Fatalf("events naming a key: %q, want %q", byKey, want)
	}
	if !strings.Contains(e.auditFile(), `"key":"ci-github"`) {
		t.Fatalf("the activity log's file does not name the key:\n%s", e.auditFile())
	}

	// Rotating the primary token keeps the keys; disabling the tenant
	// refuses them as it does its token.
	e.must(req{method: "POST", path: "/fleet/tenants/acme/rotate-token", token: testFleetToken}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: made.Token}, 200)
	e.must(req{method: "PATCH", path: "/fleet/tenants/acme", token: testFleetToken, body: `{"disabled": true}`}, 200)
	if eb := e.must(req{method: "GET", path: "/fleet/tenants/me", token: made.Token}, 403).errorBody(t); !strings.Contains(eb.Error, "disabled") {
		t.Fatalf("a disabled tenant's key: %+v", eb)
	}
	e.must(req{method: "PATCH", path: "/fleet/tenants/acme", token: testFleetToken, body: `{"disabled": false}`}, 200)

	// The operator makes and revokes a tenant's keys, by the tenant's name
	// or id and the key's name or id; a revoked key is refused at once.
	var opKey sdk.APIKeyWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/acme/keys", token: testFleetToken, body: `{"name": "from-ops", "expires_days": 0}`}, 201).
		decode(t, &opKey)
	if !opKey.Key.ExpiresAt.IsZero() {
		t.Fatalf("expires_days 0 made a key expiring at %v", opKey.Key.ExpiresAt)
	}
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: opKey.Token}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/" + acme.ID + "/keys", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Keys) != 3 {
		t.Fatalf("the operator sees %d keys, want 3", len(list.Keys))
	}
	e.must(req{method: "DELETE", path: "/fleet/tenants/acme/keys/from-ops", token: testFleetToken}, 204)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: opKey.Token}, 401)
	e.must(req{method: "DELETE", path: "/fleet/tenants/" + acme.ID + "/keys/" + made.Key.ID, token: testFleetToken}, 204)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: made.Token}, 401)
	if !strings.Contains(e.auditFile(), `"action":"revoke key ci-github"`) || !strings.Contains(e.auditFile(), `"action":"create key from-ops"`) {
		t.Fatalf("the log does not name the keys made and revoked:\n%s", e.auditFile())
	}

	// Deleting the tenant deletes its keys.
	e.must(req{method: "DELETE", path: "/fleet/tenants/acme", token: testFleetToken}, 204)
	e.must(req{method: "GET", path: "/fleet/images", token: readOnly}, 401)
	for k := range e.dump() {
		if strings.Contains(k, "/api-key") {
			t.Errorf("left behind by the tenant's delete: %s", k)
		}
	}
}

// TestAPIKeyRoutesRefuseWhatTheyMust: every way a key's route can be
// refused, each answered as the description says, with a hint, and none of
// them writes anything.
func TestAPIKeyRoutesRefuseWhatTheyMust(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("acme", "")
	_, otherToken := e.createTenant("other", "")
	full := e.createKey(token, "ci", false)
	readOnly := e.createKey(token, "grafana", true)
	var theirs sdk.APIKeyWithToken
	e.must(req{method: "POST", path: "/fleet/tenants/me/keys", token: otherToken, body: `{"name": "theirs"}`}, 201).decode(t, &theirs)

	const mine = "/fleet/tenants/me/keys"
	cases := []struct {
		name         string
		method, path string
		token, body  string
		status       int
		words        string // in the error or the hint
	}{
		{"not JSON", "POST", mine, token, `{"name":`, 400, "JSON"},
		{"an unknown field", "POST", mine, token, `{"name": "x", "scope": "all"}`, 400, "scope"},
		{"no name", "POST", mine, token, `{}`, 400, "letters"},
		{"a name taken", "POST", mine, token, `{"name": "ci"}`, 409, "already has a key named ci"},
		{"a name of an id's form", "POST", mine, token, `{"name": "key-0123456789abcdef"}`, 400, "form of a key id"},
		{"a name too long", "POST", mine, token, fmt.Sprintf(`{"name": %q}`, strings.Repeat("n", 64)), 400, "at most 63 characters"},
		{"a name with a space", "POST", mine, token, `{"name": "c i"}`, 400, "letters"},
		{"expires_days past ten years", "POST", mine, token, `{"name": "x", "expires_days": 3651}`, 400, "expires_days"},
		{"negative expires_days", "POST", mine, token, `{"name": "x", "expires_days": -1}`, 400, "expires_days"},
		{"a key making a key", "POST", mine, full, `{"name": "more"}`, 403, "primary token"},
		{"a read-only key making a key", "POST", mine, readOnly, `{"name": "more"}`, 403, "read-only"},
		{"a key revoking a key", "DELETE", mine + "/grafana", full, "", 403, "primary token"},
		{"another tenant's key by id", "DELETE", mine + "/" + theirs.Key.ID, token, "", 404, "no key"},
		{"another tenant's key by name", "DELETE", mine + "/theirs", token, "", 404, "no key"},
		{"an unknown key", "DELETE", mine + "/nope", token, "", 404, "no key"},
		{"an unknown id", "DELETE", mine + "/key-ffffffffffffffff", token, "", 404, "no key"},
		{"a read-only key changing anything", "PUT", "/fleet/tenants/me/budget", readOnly, `{"monthly": 5}`, 403, "read-only"},
		{"a read-only key deleting", "DELETE", "/fleet/pools/none", readOnly, "", 403, "read-only"},
		{"the operator on its own keys", "GET", mine, testFleetToken, "", 400, "/fleet/tenants/{id}/keys"},
		{"the operator for no tenant", "POST", "/fleet/tenants/nobody/keys", testFleetToken, `{"name": "x"}`, 404, "no tenant"},
		{"a tenant on another's keys", "GET", "/fleet/tenants/other/keys", token, "", 403, "operator"},
		{"a forged key", "GET", mine, "fvk_" + strings.Repeat("A", 43), "", 401, "invalid token"},
	}
	before := e.dump()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.t = t
			defer func() { e.t = nil }()
			// e.call holds the answer to the description; some of these
			// requests break it on purpose.
			out := e.call(req{method: c.method, path: c.path, token: c.token, body: c.body})
			if out.status != c.status {
				t.Fatalf("%d %s, want %d", out.status, out.body, c.status)
			}
			if eb := out.errorBody(t); eb.Hint == "" || !strings.Contains(eb.Error+" "+eb.Hint, c.words) {
				t.Fatalf("%+v: want an error and a hint naming %q", eb, c.words)
			}
		})
	}
	e.t = t
	// Only the keys' last_used_at moved.
	after := e.dump()
	for k, v := range after {
		if before[k] != v && !strings.Contains(k, "/api-keys/") {
			t.Errorf("%s was written: %s", k, v)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d keys in etcd before the refusals, %d after", len(before), len(after))
	}
	// A read-only key reads; its key and the full key still work.
	e.must(req{method: "GET", path: "/fleet/tenants/me/keys", token: readOnly}, 200)
	e.must(req{method: "GET", path: "/fleet/tenants/me", token: full}, 200)
}

// TestTheFiftyFirstKeyIs429: a tenant holds 50 keys; the 51st is refused
// with 429 naming the limit, revoking one makes room, and another tenant is
// not held to its count.
func TestTheFiftyFirstKeyIs429(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("acme", "")
	_, otherToken := e.createTenant("other", "")
	for i := range store.MaxKeysPerTenant {
		e.createKey(token, fmt.Sprintf("k%02d", i), i%2 == 0)
	}
	eb := e.must(req{method: "POST", path: "/fleet/tenants/me/keys", token: token, body: `{"name": "one-more"}`}, 429).errorBody(t)
	if !strings.Contains(eb.Error, "50 API keys") || !strings.Contains(eb.Hint, "revoke") {
		t.Fatalf("the 51st key: %+v", eb)
	}
	e.must(req{method: "POST", path: "/fleet/tenants/acme/keys", token: testFleetToken, body: `{"name": "one-more"}`}, 429)
	e.createKey(otherToken, "k00", false)
	e.must(req{method: "DELETE", path: "/fleet/tenants/me/keys/k07", token: token}, 204)
	e.createKey(token, "one-more", false)
	var list sdk.APIKeyList
	e.must(req{method: "GET", path: "/fleet/tenants/me/keys", token: token}, 200).decode(t, &list)
	if len(list.Keys) != store.MaxKeysPerTenant {
		t.Fatalf("%d keys listed, want %d", len(list.Keys), store.MaxKeysPerTenant)
	}
	// The answer is what the description says: JSON of 50 keys, by name.
	b, _ := json.Marshal(list)
	if !strings.HasPrefix(string(b), `{"keys":[{"id":"key-`) || list.Keys[0].Name != "k00" || list.Keys[49].Name != "one-more" {
		t.Fatalf("list %s", b)
	}
}
