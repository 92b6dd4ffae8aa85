package store

import (
	"context"
	"testing"

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
