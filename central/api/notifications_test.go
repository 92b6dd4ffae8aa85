package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestNotificationsATenantSeesItsOwnNewestFirst: a tenant's viewer lists its
// own notifications, newest first; the operator sees everyone's; limit is
// held to 1-500 in one place (the spec's range, before the handler).
func TestNotificationsATenantSeesItsOwnNewestFirst(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	a, tokenA := e.createTenant("tenant-a", "")
	b, _ := e.createTenant("tenant-b", "")
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for i, n := range []notify.Event{
		{Type: sdk.NotifyVMCreated, Tenant: a.ID, Title: "a first"},
		{Type: sdk.NotifyVMCreated, Tenant: b.ID, Title: "b's"},
		{Type: sdk.NotifyNodeDown, Title: "the operator's"},
		{Type: sdk.NotifyLeaseEnding, Tenant: a.ID, Title: "a second", Link: "/fleet/leases/lease-1"},
	} {
		n.Time = at.Add(time.Duration(i) * time.Minute)
		if _, err := e.store.Emit(ctx, n, ""); err != nil {
			t.Fatal(err)
		}
	}
	titles := func(token, query string) string {
		var out sdk.NotificationList
		e.must(req{method: "GET", path: "/fleet/notifications" + query, token: token}, 200).decode(t, &out)
		var ts []string
		for _, n := range out.Notifications {
			ts = append(ts, n.Title)
		}
		return strings.Join(ts, ", ")
	}
	if got := titles(tokenA, ""); got != "a second, a first" {
		t.Fatalf("tenant A sees %q", got)
	}
	if got := titles(testFleetToken, ""); got != "a second, the operator's, b's, a first" {
		t.Fatalf("the operator sees %q", got)
	}
	if got := titles(testFleetToken, "?limit=1"); got != "a second" {
		t.Fatalf("limit=1: %q", got)
	}
	// A viewer of A's team lists them too.
	e.must(req{method: "POST", path: "/fleet/tenants/me/members", token: tokenA, body: `{"email": "v@example.com", "role": "viewer"}`}, 201)
	tok, _, err := e.api.sessions.Start(ctx, "v@example.com", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.must(req{method: "GET", path: "/fleet/notifications", header: map[string][]string{"Cookie": {"fluxvm_session=" + tok}}}, 200)
	for _, q := range []string{"?limit=0", "?limit=501", "?limit=-1", "?limit=ten"} {
		r := e.call(req{method: "GET", path: "/fleet/notifications" + q, token: tokenA})
		if r.status != 400 || r.errorBody(t).Hint == "" {
			t.Errorf("%s: %d %s, want 400 with a hint", q, r.status, r.body)
		}
	}
}

// TestWebhookRoutesRefuseBadInputWithHints: the refusals of POST, DELETE and
// test, each with a hint; the secret is shown once, never listed, never in
// the activity log or central's log.
func TestWebhookRoutesRefuseBadInputWithHints(t *testing.T) {
	e := newEnv(t, nil)
	_, tokenA := e.createTenant("tenant-a", "")
	_, tokenB := e.createTenant("tenant-b", "")
	for _, c := range []struct {
		body   string
		status int
		says   string
	}{
		{`{"url": "http://hooks.example.com/x"}`, 400, "https"},
		{`{"url": "https://10.0.0.1/x"}`, 400, "private"},
		{`{"url": "https://[::1]/x"}`, 400, "loopback"},
		{`{"url": "https://[64:ff9b::a9fe:a9fe]/x"}`, 400, "link-local"},
		{`{"url": "https://hooks.example.com/x", "events": ["vm.exploded"]}`, 400, "vm.exploded"},
		{`{"url": "https://hooks.example.com/x", "events": ["vm.created", "vm.created"]}`, 400, "twice"},
		{`{"url": "https://hooks.example.com/x", "secret": "mine"}`, 400, "secret"},
		{`{"url": "https://hooks.example.com/` + strings.Repeat("x", 2100) + `"}`, 400, "url"},
		{`{"url": "https://hooks.example.com/x", "name": "` + strings.Repeat("n", 65) + `"}`, 400, "name"},
		{`{}`, 400, "url"},
		{`not json`, 400, ""},
	} {
		r := e.call(req{method: "POST", path: "/fleet/webhooks", token: tokenA, body: c.body})
		eb := r.errorBody(t)
		if r.status != c.status || !strings.Contains(eb.Error, c.says) || eb.Hint == "" {
			t.Errorf("POST %.80s: %d %s, want %d saying %q with a hint", c.body, r.status, r.body, c.status, c.says)
		}
	}
	var first sdk.WebhookWithSecret
	e.must(req{method: "POST", path: "/fleet/webhooks", token: tokenA, body: `{"url": "https://hooks.example.com/a", "events": ["lease.ending"]}`}, 201).decode(t, &first)
	for i := 1; i < 10; i++ {
		e.must(req{method: "POST", path: "/fleet/webhooks", token: tokenA, body: `{"url": "https://hooks.example.com/a"}`}, 201)
	}
	r := e.call(req{method: "POST", path: "/fleet/webhooks", token: tokenA, body: `{"url": "https://hooks.example.com/a"}`})
	if r.status != 429 || !strings.Contains(r.errorBody(t).Hint, "webhooks rm") {
		t.Fatalf("the 11th: %d %s", r.status, r.body)
	}
	// B has room of its own, and A's webhook is not found to B.
	e.must(req{method: "POST", path: "/fleet/webhooks", token: tokenB, body: `{"url": "https://hooks.example.com/b"}`}, 201)
	for _, p := range []string{"DELETE /fleet/webhooks/" + first.Webhook.ID, "POST /fleet/webhooks/" + first.Webhook.ID + "/test",
		"DELETE /fleet/webhooks/whk_000000000000", "DELETE /fleet/webhooks/..", "POST /fleet/webhooks/nope/test"} {
		m, path, _ := strings.Cut(p, " ")
		r := e.call(req{method: m, path: path, token: tokenB})
		if r.status != 404 || r.errorBody(t).Hint == "" {
			t.Errorf("%s by B: %d %s, want 404", p, r.status, r.body)
		}
	}
	// The test delivery is refused (this env resolves nothing) and says so.
	var d sdk.WebhookDelivery
	e.must(req{method: "POST", path: "/fleet/webhooks/" + first.Webhook.ID + "/test", token: tokenA}, 200).decode(t, &d)
	if d.OK || d.Attempts != 1 || d.Error == "" || d.Event != sdk.NotifyWebhookTest {
		t.Fatalf("test delivery %+v", d)
	}
	list := e.must(req{method: "GET", path: "/fleet/webhooks", token: tokenA}, 200)
	events := e.must(req{method: "GET", path: "/fleet/events?limit=5000", token: testFleetToken}, 200)
	for what, text := range map[string]string{"GET /fleet/webhooks": string(list.body), "the activity log": string(events.body), "central's log": e.logs.String()} {
		if strings.Contains(text, first.Secret) || strings.Contains(text, "whsec_") {
			t.Errorf("%s carries a webhook secret", what)
		}
	}
	e.must(req{method: "DELETE", path: "/fleet/webhooks/" + first.Webhook.ID, token: tokenA}, 204)
	e.must(req{method: "DELETE", path: "/fleet/webhooks/" + first.Webhook.ID, token: tokenA}, 404)
}

// TestWebhookCreationRefusesALiteralOfEveryClass: a tenant's webhook whose
// host is an IP literal that is not public is a 400 naming the class; the
// operator's may point there.
func TestWebhookCreationRefusesALiteralOfEveryClass(t *testing.T) {
	e := newEnv(t, nil)
	_, token := e.createTenant("tenant-a", "")
	for _, c := range []struct{ host, says string }{
		{"0.0.0.0", "this network"}, {"10.9.8.7", "private"}, {"100.64.1.1", "carrier-grade NAT"}, {"127.0.0.1", "loopback"},
		{"169.254.169.254", "link-local"}, {"172.20.0.1", "private"}, {"192.0.2.1", "documentation"}, {"192.168.0.1", "private"},
		{"198.18.0.1", "benchmarking"}, {"198.51.100.1", "documentation"}, {"203.0.113.1", "documentation"}, {"224.0.0.251", "multicast"},
		{"240.0.0.1", "reserved"}, {"255.255.255.255", "broadcast"},
		{"[::]", "unspecified"}, {"[::1]", "loopback"}, {"[::ffff:127.0.0.1]", "loopback"}, {"[::ffff:10.0.0.1]", "private"},
		{"[::127.0.0.1]", "IPv4-compatible"}, {"[64:ff9b::7f00:1]", "loopback"}, {"[64:ff9b:1::a00:1]", "local-use NAT64"},
		{"[2002:c0a8:101::1]", "private"}, {"[2001::1]", "Teredo"}, {"[2001:db8::1]", "documentation"}, {"[2001:2::1]", "benchmarking"},
		{"[fc00::1]", "unique-local"}, {"[fe80::1]", "link-local"}, {"[fec0::1]", "site-local"}, {"[ff02::1]", "multicast"},
	} {
		r := e.call(req{method: "POST", path: "/fleet/webhooks", token: token, body: `{"url": "https://` + c.host + `/hook"}`})
		eb := r.errorBody(t)
		if r.status != 400 || !strings.Contains(eb.Error, c.says) || !strings.Contains(eb.Hint, "public address") {
			t.Errorf("%s: %d %s, want 400 for %q", c.host, r.status, r.body, c.says)
		}
	}
	e.must(req{method: "POST", path: "/fleet/webhooks", token: testFleetToken, body: `{"url": "http://127.0.0.1:9/hook"}`}, 201)
}
