package sdk_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestFleetClientManagesWebhooksOnARealCentral: a tenant adds webhooks (the
// secret comes once, never in a listing), is held to 10, is refused an http
// or private URL with a 400 that says why, cannot see or touch another
// tenant's webhook (404), tests and deletes its own; notifications list.
func TestFleetClientManagesWebhooksOnARealCentral(t *testing.T) {
	ctx := t.Context()
	_, tokenA := liveFleet.Tenant(t, unique("hooks-a"), nil)
	_, tokenB := liveFleet.Tenant(t, unique("hooks-b"), nil)
	a, b := fleetClient(t, tokenA), fleetClient(t, tokenB)

	first, err := a.CreateWebhook(ctx, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/a", Events: []string{sdk.NotifyLeaseEnding}, Name: "first"})
	if err != nil || !strings.HasPrefix(first.Secret, "whsec_") || first.Webhook.Name != "first" || len(first.Webhook.Events) != 1 {
		t.Fatalf("create: %+v %v", first, err)
	}
	for i := 1; i < 10; i++ {
		if _, err := a.CreateWebhook(ctx, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/a"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.CreateWebhook(ctx, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/a"}); !sdk.IsQuota(err) {
		t.Fatalf("the 11th: %v", err)
	}
	for _, bad := range []string{"http://hooks.example.com/a", "https://10.0.0.1/a", "https://[::1]/a"} {
		_, err := b.CreateWebhook(ctx, sdk.CreateWebhookRequest{URL: bad})
		var api *sdk.APIError
		if !errors.As(err, &api) || api.Status != 400 || api.Hint == "" {
			t.Errorf("create %s: %v, want a 400 with a hint", bad, err)
		}
	}
	ws, err := a.ListWebhooks(ctx)
	if err != nil || len(ws) != 10 {
		t.Fatalf("list: %d %v", len(ws), err)
	}
	if bs, err := b.ListWebhooks(ctx); err != nil || len(bs) != 0 {
		t.Fatalf("B lists %d (%v)", len(bs), err)
	}
	if _, err := b.TestWebhook(ctx, first.Webhook.ID); !sdk.IsNotFound(err) {
		t.Fatalf("B tests A's webhook: %v", err)
	}
	if err := b.DeleteWebhook(ctx, first.Webhook.ID); !sdk.IsNotFound(err) {
		t.Fatalf("B deletes A's webhook: %v", err)
	}
	if err := a.DeleteWebhook(ctx, first.Webhook.ID); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteWebhook(ctx, first.Webhook.ID); !sdk.IsNotFound(err) {
		t.Fatalf("deleted twice: %v", err)
	}
	ns, err := a.ListNotifications(ctx, 10)
	if err != nil || ns == nil {
		t.Fatalf("notifications: %v %v", ns, err)
	}
}
