package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetNotificationsAndWebhooksAgainstARealCentral: the operator adds a
// webhook (its secret printed once), tests it, and the real central's
// leader delivers a tenant's vm.created to it, signed; the tenant lists its
// notifications; bad input is refused with a hint; rm asks, then removes.
func TestFleetNotificationsAndWebhooksAgainstARealCentral(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	op, tenant := fleetCLI(f, f.OperatorToken), fleetCLI(f, token)

	var (
		mu     sync.Mutex
		secret string
		got    []string
	)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if !webhooks.Verify(secret, body, r.Header.Get("X-FluxVM-Signature")) {
			t.Errorf("a delivery's signature does not verify")
		}
		got = append(got, r.Header.Get("X-FluxVM-Event"))
	}))
	defer recv.Close()

	r := op.tty().run(t, "fleet", "webhooks", "add", recv.URL+"/hook", "--event", "vm.created", "--name", "ops").ok(t, "webhooks add")
	m := regexp.MustCompile(`(?m)^  secret  (whsec_[0-9a-f]{48})$`).FindStringSubmatch(r.stdout)
	if m == nil || !strings.HasPrefix(r.stdout, "✓ Added webhook whk_") || !strings.Contains(r.stdout, "shown only this once") {
		t.Fatalf("webhooks add printed:\n%s", r.stdout)
	}
	mu.Lock()
	secret = m[1]
	mu.Unlock()
	op.tty().run(t, "fleet", "webhooks", "test", "ops").ok(t, "webhooks test").has(t, "webhooks test", "✓ Delivered dlv_")

	// A tenant's VM: central notifies, and the leader delivers it.
	tenant.run(t, "fleet", "launch", "web-1", "--image", "debian-minimal").ok(t, "launch")
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	mu.Lock()
	if strings.Join(got, " ") != "webhook.test vm.created" {
		t.Errorf("the receiver got %v", got)
	}
	mu.Unlock()
	tenant.tty().run(t, "fleet", "notifications").ok(t, "notifications").has(t, "notifications", "TIME", "TYPE", "TITLE", "vm.created", "VM web-1 was launched")
	list := decode[sdk.NotificationList](t, "notifications piped", tenant.run(t, "fleet", "notifications", "-n", "5").ok(t, "notifications piped").stdout)
	if len(list.Notifications) != 1 || list.Notifications[0].Type != sdk.NotifyVMCreated {
		t.Fatalf("notifications piped: %+v", list)
	}
	op.tty().run(t, "fleet", "webhooks").ok(t, "webhooks").has(t, "webhooks", "NAME", "URL", "EVENTS", "LAST DELIVERY", "ops", "vm.created ok")
	op.tty().run(t, "fleet", "webhooks", "-o", "wide").ok(t, "webhooks -o wide").has(t, "webhooks -o wide", "ID", "whk_")

	for _, c := range []struct {
		what      string
		cli       cli
		args      []string
		msg, hint string
	}{
		{"a tenant's http webhook", tenant, []string{"fleet", "webhooks", "add", "http://hooks.example.com/x"}, "https", "public address"},
		{"a tenant's private address", tenant, []string{"fleet", "webhooks", "add", "https://192.168.1.10/x"}, "private", "public address"},
		{"an unknown event", tenant, []string{"fleet", "webhooks", "add", "https://hooks.example.com/x", "--event", "vm.exploded"}, "unknown --event", "usage:"},
		{"an unknown webhook", tenant, []string{"fleet", "webhooks", "rm", "nope", "-y"}, "no webhook nope", "fluxctl fleet webhooks lists"},
		{"another owner's webhook", tenant, []string{"fleet", "webhooks", "test", "ops"}, "no webhook ops", "fluxctl fleet webhooks lists"},
		{"rm piped without -y", op, []string{"fleet", "webhooks", "rm", "ops"}, "without confirmation", "-y"},
		{"a limit past 500", tenant, []string{"fleet", "notifications", "-n", "501"}, "--limit is 1-500", "usage:"},
	} {
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}
	op.tty().run(t, "fleet", "webhooks", "rm", "ops", "-y").ok(t, "webhooks rm").has(t, "webhooks rm", "✓ Removed webhook whk_")
	op.tty().run(t, "fleet", "webhooks").ok(t, "no webhooks").has(t, "no webhooks", "no webhooks", "next: fluxctl fleet webhooks add")
}
