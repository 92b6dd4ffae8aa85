package payments_test

import (
	"context"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/stripe/stripe-go/v82/webhook"
)

// FuzzWebhookBody feeds Stripe-signed bodies of any shape to the webhook's
// decoder: it must answer an error or a result, never panic, whatever a
// holder of the secret (or a bug at Stripe) sends.
func FuzzWebhookBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"evt_1","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","object":"invoice"}}}`,
		`{"id":"evt_2","type":"checkout.session.completed","data":{"object":{"mode":"setup","client_reference_id":"t","customer":"cus_a"}}}`,
		`{"id":"evt_3","type":"invoice.paid","data":{"object":[]}}`,
		`{"id":"","type":"x"}`, `[]`, `null`, `{"data":null}`,
	} {
		f.Add([]byte(s))
	}
	st := storetest.Open(f)
	svc := payments.New(payments.Config{SecretKey: "sk_test_x", WebhookSecret: "whsec_f"}, st, nil, nil, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: "whsec_f", Timestamp: time.Now()})
		_, _ = svc.HandleWebhook(context.Background(), body, p.Header)
	})
}
