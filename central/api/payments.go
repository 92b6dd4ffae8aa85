package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/metering"
	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// Stripe invoices (docs/billing.md, "Stripe invoices"): the work is package
// payments'; these handlers check who may see what, decode and answer.

const stripeOffHint = "the operator turns Stripe on with central's -stripe-secret-key and -stripe-webhook-secret (docs/billing.md)"

// newPayments makes the Stripe service on the API's statements.
func (s *Server) newPayments() *payments.Service {
	cfg := s.opts.Payments
	if cfg.PublicURL == "" {
		cfg.PublicURL = s.opts.PublicURL
	}
	statements := func(ctx context.Context, month time.Time) ([]sdk.Statement, error) {
		l, err := s.metering.Statements(ctx, metering.StatementQuery{Month: month})
		if err != nil {
			return nil, err
		}
		return l.Statements, nil
	}
	return payments.New(cfg, s.opts.Store, statements, s.opts.Now, s.log.Named("payments"))
}

// paymentsError answers an error of package payments for people.
func (s *Server) paymentsError(w http.ResponseWriter, what string, err error) {
	var ie *payments.InvalidError
	var se *payments.StripeError
	switch {
	case errors.Is(err, payments.ErrOff):
		jsonapi.WriteError(w, http.StatusConflict, "Stripe is not configured on this central", stripeOffHint)
	case errors.As(err, &ie):
		jsonapi.WriteError(w, http.StatusBadRequest, ie.Msg, ie.Hint)
	case errors.Is(err, payments.ErrNoCustomer):
		jsonapi.WriteError(w, http.StatusConflict, "this tenant has no Stripe customer yet",
			"the operator links one: PUT /fleet/tenants/{id}/billing (fluxctl fleet invoices --help)")
	case errors.Is(err, payments.ErrMonthOpen):
		jsonapi.WriteError(w, http.StatusConflict, err.Error(), "invoice a month once it has ended; GET /fleet/billing?month= shows it so far")
	case errors.As(err, &se):
		s.log.Warn("stripe refused a call", "op", se.Op, "error", se.Msg)
		jsonapi.WriteError(w, http.StatusBadGateway, "Stripe: "+se.Error(), "retry; a second run creates nothing twice (calls carry idempotency keys)")
	case errors.Is(err, store.ErrNotFound):
		jsonapi.WriteError(w, http.StatusNotFound, "no such tenant", "GET /fleet/tenants lists the tenants, by id and name")
	default:
		s.storeError(w, what, err)
	}
}

// listInvoices is GET /fleet/billing/invoices: a tenant's own, or every
// tenant's for the operator. It answers with Stripe off too (none).
func (s *Server) listInvoices(w http.ResponseWriter, r *http.Request) {
	out, err := s.payments.Invoices(r.Context(), ownerOf(r))
	if err != nil {
		s.paymentsError(w, "list invoices", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, sdk.InvoiceList{Invoices: out})
}

// createInvoices is POST /fleet/billing/invoices?month=YYYY-MM (operator).
func (s *Server) createInvoices(w http.ResponseWriter, r *http.Request) {
	m := r.URL.Query().Get("month")
	if m == "" {
		jsonapi.WriteError(w, http.StatusBadRequest, "month is required", "POST /fleet/billing/invoices?month=2026-10 invoices October 2026")
		return
	}
	month, err := billing.MonthOf(m)
	if err != nil {
		jsonapi.WriteError(w, http.StatusBadRequest, err.Error(), "POST /fleet/billing/invoices?month=2026-10 invoices October 2026")
		return
	}
	run, err := s.payments.CreateInvoices(r.Context(), month)
	if err != nil {
		s.paymentsError(w, "create invoices", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, run)
}

// setTenantBilling is PUT /fleet/tenants/{id}/billing (operator).
func (s *Server) setTenantBilling(w http.ResponseWriter, r *http.Request) {
	var req sdk.SetBillingRequest
	if e := jsonapi.ReadBody(w, r, &req, true, `the body is {"stripe_customer": "cus_..."} or {"create_customer": true, "email": "billing@example.com"}`); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	t, ok := s.tenantFromPath(w, r)
	if !ok {
		return
	}
	a, err := s.payments.SetCustomer(r.Context(), t.ID, req)
	if err != nil {
		s.paymentsError(w, "set the billing of "+t.Name, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, a)
}

// paymentMethod is POST /fleet/billing/payment-method: a Checkout session
// where the tenant saves a card. The operator names the tenant
// (?tenant=), to send the link on.
func (s *Server) paymentMethod(w http.ResponseWriter, r *http.Request) {
	tenant, ok := s.billedTenant(w, r, "payment method")
	if !ok {
		return
	}
	if tenant == "" {
		jsonapi.WriteError(w, http.StatusBadRequest, "the operator names the tenant: ?tenant=ID or name",
			"the tenant itself calls this route without it")
		return
	}
	out, err := s.payments.CheckoutSession(r.Context(), tenant)
	if err != nil {
		s.paymentsError(w, "open a Checkout session", err)
		return
	}
	jsonapi.Write(w, http.StatusCreated, out)
}

// stripeWebhook is POST /stripe/webhook (public: Stripe signs it).
func (s *Server) stripeWebhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, payments.MaxWebhookBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		jsonapi.WriteError(w, http.StatusRequestEntityTooLarge, "the event is over 256 KiB", "Stripe's events are far smaller; this did not come from Stripe")
		return
	case err != nil:
		jsonapi.WriteError(w, http.StatusBadRequest, "could not read the body", "send the event as Stripe does")
		return
	}
	res, err := s.payments.HandleWebhook(r.Context(), body, r.Header.Get("Stripe-Signature"))
	switch {
	case errors.Is(err, payments.ErrOff):
		jsonapi.WriteError(w, http.StatusNotFound, "Stripe's webhook is not configured on this central", stripeOffHint)
	case errors.Is(err, payments.ErrBadSignature):
		// Which check failed is logged, not answered; never the secret.
		s.log.Warn("stripe webhook refused", "reason", err.Error(), "from", clientAddr(r))
		jsonapi.WriteError(w, http.StatusBadRequest, "the Stripe-Signature does not verify, or is outside the replay window",
			"this endpoint takes events signed by Stripe with the webhook secret central was given")
	case err != nil:
		s.paymentsError(w, "apply a Stripe event", err)
	default:
		jsonapi.Write(w, http.StatusOK, res)
	}
}

// clientAddr is the address a request came from (the TCP peer: a proxy in
// front of central counts as one client).
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
