package sdk

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/fluxvm/fluxvm/billing"
)

// Invoice statuses (docs/billing.md, "Stripe invoices"). An invoice starts
// "creating" while central talks to Stripe, is "open" once Stripe holds it
// finalized, and Stripe's webhook moves it on.
const (
	InvoiceCreating      = "creating"
	InvoiceOpen          = "open"
	InvoicePaid          = "paid"
	InvoicePaymentFailed = "payment_failed"
	InvoiceVoid          = "void"
	InvoiceUncollectible = "uncollectible"
)

// InvoiceLine is one line of an invoice: a statement's line in whole cents.
type InvoiceLine struct {
	Description string `json:"description"`
	// AmountCents is the statement line's AmountDisplay in cents: the lines'
	// cents add up to the invoice's TotalCents (docs/billing.md).
	AmountCents int64 `json:"amount_cents"`
}

// Invoice is one tenant's statement of one month sent to Stripe. There is
// at most one per tenant and month.
type Invoice struct {
	// ID is "<tenant id>-<month>".
	ID         string `json:"id"`
	Tenant     string `json:"tenant"`
	TenantName string `json:"tenant_name,omitempty"`
	Month      string `json:"month"`
	Currency   string `json:"currency"`
	// Total is the statement's exact total; TotalCents what Stripe bills,
	// the sum of the lines' cents.
	Total      billing.Micros `json:"total"`
	TotalCents int64          `json:"total_cents"`
	Lines      []InvoiceLine  `json:"lines"`
	// Status is one of the Invoice* constants.
	Status          string `json:"status"`
	StripeInvoiceID string `json:"stripe_invoice_id,omitempty"`
	StripeCustomer  string `json:"stripe_customer,omitempty"`
	// HostedURL is Stripe's page where the invoice is paid ("" until known).
	HostedURL string `json:"hosted_url,omitempty"`
	// Error is why the last run could not finish sending it to Stripe
	// (Status stays creating; the next run takes it up).
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// InvoiceList is GET /fleet/billing/invoices' answer, newest month first.
type InvoiceList struct {
	Invoices []Invoice `json:"invoices"`
}

// InvoiceRun is POST /fleet/billing/invoices?month='s answer: what was
// created now, what existed already, and the tenants skipped with why.
type InvoiceRun struct {
	Month    string        `json:"month"`
	Created  []Invoice     `json:"created"`
	Existing []Invoice     `json:"existing"`
	Skipped  []InvoiceSkip `json:"skipped"`
}

// InvoiceSkip is a tenant with a statement that got no invoice.
type InvoiceSkip struct {
	Tenant string `json:"tenant"`
	Reason string `json:"reason"`
}

// BillingAccount is a tenant's link to its Stripe customer.
type BillingAccount struct {
	Tenant         string    `json:"tenant"`
	StripeCustomer string    `json:"stripe_customer"`
	Email          string    `json:"email,omitempty"`
	UpdatedAt      time.Time `json:"updated_at"`
	// PaymentMethodSaved is set once a Checkout session saving a card
	// completed (Stripe's webhook said so).
	PaymentMethodSaved bool `json:"payment_method_saved"`
}

// SetBillingRequest is PUT /fleet/tenants/{id}/billing's body: either an
// existing customer's id, or CreateCustomer to have central make one
// (with Email, optional, on it).
type SetBillingRequest struct {
	StripeCustomer string `json:"stripe_customer,omitempty"`
	CreateCustomer bool   `json:"create_customer,omitempty"`
	Email          string `json:"email,omitempty"`
}

// PaymentMethodSession is POST /fleet/billing/payment-method's answer: the
// Stripe Checkout page (setup mode) where the tenant saves a card.
type PaymentMethodSession struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// SignupConfig is GET /signup/config's answer: whether sign-up is open and
// whether the address is confirmed by mail first.
type SignupConfig struct {
	Enabled                  bool `json:"enabled"`
	RequireEmailVerification bool `json:"require_email_verification"`
}

// SignupRequest is POST /signup's body.
type SignupRequest struct {
	// Email gets the confirmation link (at most 254 bytes).
	Email string `json:"email"`
	// Tenant is the new tenant's name (1-64 letters, digits, '.', '_', '-').
	Tenant string `json:"tenant"`
}

// SignupAccepted is POST /signup's answer when a link was mailed.
type SignupAccepted struct {
	Status string `json:"status"`
	// ExpiresAt is when the mailed link stops working.
	ExpiresAt time.Time `json:"expires_at"`
}

// SignupConfirmRequest is POST /signup/confirm's body: the token of the
// mailed link.
type SignupConfirmRequest struct {
	Token string `json:"token"`
}

// ListInvoices returns the invoices central sent to Stripe: a tenant's
// own, or every tenant's for the operator.
func (f *FleetClient) ListInvoices(ctx context.Context) ([]Invoice, error) {
	var out InvoiceList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/billing/invoices", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Invoices == nil {
		out.Invoices = []Invoice{}
	}
	return out.Invoices, nil
}

// CreateInvoices turns every tenant's statement of month ("YYYY-MM", a
// month that has ended) into a Stripe invoice (operator). A second call
// creates nothing new.
func (f *FleetClient) CreateInvoices(ctx context.Context, month string) (*InvoiceRun, error) {
	var out InvoiceRun
	if err := f.c.call(ctx, http.MethodPost, "/fleet/billing/invoices", url.Values{"month": {month}}, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetTenantBilling links tenant to a Stripe customer (operator).
func (f *FleetClient) SetTenantBilling(ctx context.Context, tenant string, req SetBillingRequest) (*BillingAccount, error) {
	var out BillingAccount
	if err := f.c.call(ctx, http.MethodPut, "/fleet/tenants/"+url.PathEscape(tenant)+"/billing", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PaymentMethodSession starts a Stripe Checkout session in which the
// tenant saves a card; open its URL in a browser.
func (f *FleetClient) PaymentMethodSession(ctx context.Context) (*PaymentMethodSession, error) {
	var out PaymentMethodSession
	if err := f.c.call(ctx, http.MethodPost, "/fleet/billing/payment-method", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SignupConfig says whether central takes self-service sign-ups (no token
// needed).
func (f *FleetClient) SignupConfig(ctx context.Context) (*SignupConfig, error) {
	var out SignupConfig
	if err := f.c.call(ctx, http.MethodGet, "/signup/config", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Signup asks for a tenant (no token needed). Central mails a link and
// answers Accepted; with email confirmation off in its policy it makes the
// tenant at once and answers Tenant, with its token.
func (f *FleetClient) Signup(ctx context.Context, req SignupRequest) (accepted *SignupAccepted, tenant *TenantWithToken, err error) {
	var raw json.RawMessage
	if err := f.c.call(ctx, http.MethodPost, "/signup", nil, req, &raw); err != nil {
		return nil, nil, err
	}
	var probe struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(raw, &probe); err == nil && probe.Token != "" {
		tenant = new(TenantWithToken)
		return nil, tenant, json.Unmarshal(raw, tenant)
	}
	accepted = new(SignupAccepted)
	return accepted, nil, json.Unmarshal(raw, accepted)
}

// ConfirmSignup follows a mailed link by its token (the link's token=
// parameter): central makes the tenant, once, and answers it with its token.
func (f *FleetClient) ConfirmSignup(ctx context.Context, token string) (*TenantWithToken, error) {
	var out TenantWithToken
	if err := f.c.call(ctx, http.MethodPost, "/signup/confirm", nil, SignupConfirmRequest{Token: token}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
