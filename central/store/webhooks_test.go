package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/notify"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestDeletingATenantDeletesItsWebhooks: a deleted tenant's webhooks, their
// id index and done marks go in the deleting transaction; the operator's
// stay.
func TestDeletingATenantDeletesItsWebhooks(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := context.Background()
	acme := &Tenant{Tenant: sdk.Tenant{Name: "acme"}, TokenSHA256: HashToken("fvt_acme")}
	if err := s.CreateTenant(ctx, acme); err != nil {
		t.Fatal(err)
	}
	for _, w := range []Webhook{{Webhook: sdk.Webhook{ID: "whk_aaaaaaaaaaaa", Tenant: acme.ID}, Secret: "whsec_a"},
		{Webhook: sdk.Webhook{ID: "whk_bbbbbbbbbbbb"}, Secret: "whsec_b"}} {
		if err := s.CreateWebhook(ctx, &w); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RecordDelivery(ctx, acme.ID, "whk_aaaaaaaaaaaa", sdk.WebhookDelivery{ID: "dlv_1", Notification: "n-1", OK: true}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, acme.ID); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"webhooks/" + acme.ID + "/", "webhook-ids/whk_aaaaaaaaaaaa", "webhook-done/whk_aaaaaaaaaaaa/"} {
		r, err := s.Client().Get(ctx, s.Prefix()+k, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Count != 0 {
			t.Errorf("%s: %d keys left (%v)", k, r.Count, err)
		}
	}
	if ws, err := s.AllWebhooks(ctx); err != nil || len(ws) != 1 || ws[0].ID != "whk_bbbbbbbbbbbb" {
		t.Fatalf("webhooks left: %+v %v", ws, err)
	}
}

// TestPruneNotificationsKeepsTheRecentOnes: notifications before the cut go
// with every key made for them; the newer ones and their keys stay.
func TestPruneNotificationsKeepsTheRecentOnes(t *testing.T) {
	s := openEmbedded(t, Options{})
	ctx := context.Background()
	cut := time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC)
	for i, at := range []time.Time{cut.Add(-48 * time.Hour), cut.Add(-time.Hour), cut.Add(time.Hour)} {
		if _, err := s.Emit(ctx, notify.Event{Type: "vm.created", Tenant: "t-1", Time: at}, fmt.Sprintf("vm.created/n/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	all, _ := s.Notifications(ctx, "", 10)
	if err := s.CreateWebhook(ctx, &Webhook{Webhook: sdk.Webhook{ID: "whk_cccccccccccc"}, Secret: "whsec_c"}); err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		if err := s.RecordDelivery(ctx, "", "whk_cccccccccccc", sdk.WebhookDelivery{ID: "dlv_" + n.ID[:4], Notification: n.ID, OK: true}, true); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PruneNotifications(ctx, cut)
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want 2", n, err)
	}
	for prefix, want := range map[string]int64{"notify-events/": 1, "notify-by-tenant/": 1, "notify-once/": 1, "notify-outbox/": 1, "webhook-done/": 1} {
		r, err := s.Client().Get(ctx, s.Prefix()+prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || r.Count != want {
			t.Errorf("%s: %d keys (%v), want %d", prefix, r.Count, err, want)
		}
	}
	left, _ := s.Notifications(ctx, "t-1", 10)
	if len(left) != 1 || !left[0].Time.Equal(cut.Add(time.Hour)) {
		t.Fatalf("left %+v", left)
	}
}
