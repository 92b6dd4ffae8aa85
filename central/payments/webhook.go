package payments

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"
)

// invoiceStatus maps the Stripe events that move an invoice's payment
// status to the status they set.
var invoiceStatus = map[stripe.EventType]string{
	"invoice.finalized":            sdk.InvoiceOpen,
	"invoice.paid":                 sdk.InvoicePaid,
	"invoice.payment_succeeded":    sdk.InvoicePaid,
	"invoice.payment_failed":       sdk.InvoicePaymentFailed,
	"invoice.voided":               sdk.InvoiceVoid,
	"invoice.marked_uncollectible": sdk.InvoiceUncollectible,
}

// settled statuses are not moved by a later event: Stripe does not promise
// order, and an invoice.payment_failed that arrives after invoice.paid
// (a first try failed, the retry succeeded) must not undo it.
func settled(status string) bool {
	return status == sdk.InvoicePaid || status == sdk.InvoiceVoid
}

// WebhookResult says what an event did.
type WebhookResult struct {
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// Replayed is an event applied before: nothing changed.
	Replayed bool `json:"replayed"`
}

// HandleWebhook verifies a Stripe event (its Stripe-Signature header, with
// the webhook secret, inside the replay window) and applies it: payment
// status onto the invoice it names, a saved card onto the tenant's billing
// account. The event's id is recorded with the change in one transaction,
// so a replay changes nothing. Events of other types are recorded and
// otherwise ignored.
//
// The replay window is checked against the system clock by stripe-go
// (it takes no injected clock), so tests sign with the real time.
func (s *Service) HandleWebhook(ctx context.Context, payload []byte, signature string) (*WebhookResult, error) {
	if s.cfg.WebhookSecret == "" {
		return nil, ErrOff
	}
	if len(payload) > MaxWebhookBody {
		return nil, &InvalidError{fmt.Sprintf("the event is over %d bytes", MaxWebhookBody), "Stripe's events are far smaller; this did not come from Stripe"}
	}
	ev, err := webhook.ConstructEventWithOptions(payload, signature, s.cfg.WebhookSecret, webhook.ConstructEventOptions{
		Tolerance: s.cfg.Tolerance,
		// The event is read for a few fields that every API version has; an
		// account on a newer version than stripe-go's must not be refused.
		IgnoreAPIVersionMismatch: true,
	})
	if err != nil {
		// Which check failed (no header, old timestamp, wrong signature) is
		// stripe-go's message; it carries no secret.
		return nil, fmt.Errorf("%w: %s", ErrBadSignature, err.Error())
	}
	if ev.ID == "" || len(ev.ID) > 255 {
		return nil, &InvalidError{"the event has no usable id", "Stripe's events have ids evt_..."}
	}
	res := &WebhookResult{EventID: ev.ID, Type: string(ev.Type)}
	var (
		invoiceID string
		invFn     func(*sdk.Invoice)
		tenant    string
		acctFn    func(*sdk.BillingAccount)
	)
	if status, ok := invoiceStatus[ev.Type]; ok && ev.Data != nil {
		var si stripe.Invoice
		if err := json.Unmarshal(ev.Data.Raw, &si); err != nil {
			return nil, &InvalidError{"the event's invoice does not decode: " + err.Error(), "Stripe's invoice events carry an invoice object"}
		}
		invoiceID = si.ID
		invFn = func(x *sdk.Invoice) {
			if si.HostedInvoiceURL != "" {
				x.HostedURL = si.HostedInvoiceURL
			}
			if !settled(x.Status) && !(status == sdk.InvoiceOpen && x.Status != sdk.InvoiceCreating) {
				x.Status = status
			}
			x.UpdatedAt = s.now().UTC()
		}
	}
	if ev.Type == "checkout.session.completed" && ev.Data != nil {
		var cs stripe.CheckoutSession
		if err := json.Unmarshal(ev.Data.Raw, &cs); err != nil {
			return nil, &InvalidError{"the event's Checkout session does not decode: " + err.Error(), "Stripe's checkout events carry a session object"}
		}
		if cs.Mode == stripe.CheckoutSessionModeSetup && store.ValidName(cs.ClientReferenceID) {
			tenant = cs.ClientReferenceID
			customer := ""
			if cs.Customer != nil {
				customer = cs.Customer.ID
			}
			acctFn = func(a *sdk.BillingAccount) {
				// Only the session of the tenant's own customer counts.
				if customer == "" || customer == a.StripeCustomer {
					a.PaymentMethodSaved = true
				}
			}
		}
	}
	err = s.st.ApplyStripeEvent(ctx, ev.ID, invoiceID, invFn, tenant, acctFn)
	if errors.Is(err, store.ErrEventSeen) {
		res.Replayed = true
		return res, nil
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("stripe event applied", "event", ev.ID, "type", string(ev.Type), "stripe_invoice", invoiceID)
	return res, nil
}
