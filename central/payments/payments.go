// Package payments sends tenants' monthly statements to Stripe as invoices,
// links tenants to Stripe customers, opens Checkout sessions to save a card
// and applies Stripe's signed webhook events to the invoices' payment status.
// It is off unless central is given a Stripe secret key; state is in etcd.
package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/stripe/stripe-go/v82"
)

// Bounds (docs/billing.md; schemas/fleet-openapi.yaml gives the same).
const (
	// MaxWebhookBody bounds a Stripe event's body; Stripe's events are far
	// smaller (an invoice with many lines is some tens of KiB).
	MaxWebhookBody = 256 << 10
	// DefaultTolerance is the replay window: a signature whose timestamp is
	// older (or further ahead) than this is refused.
	DefaultTolerance = 5 * time.Minute
	// MaxCustomerIDLen bounds a Stripe customer id given by the operator.
	MaxCustomerIDLen = 255
	// InProgressFor is how long an invoice another run is creating is left
	// to it: past that (or once it recorded an error) a run takes it up.
	InProgressFor = 10 * time.Minute
)

// Errors callers branch on.
var (
	// ErrOff is any call while Stripe is not configured (409).
	ErrOff = errors.New("stripe is not configured")
	// ErrBadSignature is a webhook whose signature does not verify, or is
	// outside the replay window (400).
	ErrBadSignature = errors.New("stripe webhook signature does not verify")
	// ErrNoCustomer is a tenant without a Stripe customer (409).
	ErrNoCustomer = errors.New("tenant has no stripe customer")
	// ErrInvalid wraps a request that cannot be taken (400).
	ErrInvalid = errors.New("invalid request")
	// ErrMonthOpen is invoicing a month that has not ended (409).
	ErrMonthOpen = errors.New("the month has not ended")
)

// InvalidError says what is wrong with a request.
type InvalidError struct{ Msg, Hint string }

func (e *InvalidError) Error() string { return e.Msg }
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// StripeError is Stripe refusing or failing a call; Msg is safe to show
// (Stripe's message, never the key).
type StripeError struct {
	Op  string
	Msg string
}

func (e *StripeError) Error() string { return e.Op + ": " + e.Msg }

// Config turns Stripe on. Neither secret is ever logged or answered.
type Config struct {
	// SecretKey is the Stripe API key (sk_ or rk_); empty leaves Stripe off.
	SecretKey string
	// WebhookSecret verifies POST /stripe/webhook (whsec_); empty refuses
	// every webhook.
	WebhookSecret string
	// APIBase replaces https://api.stripe.com (tests: stripe-mock's URL).
	APIBase string
	// HTTPClient makes the calls to Stripe (nil: a client with a 30 s
	// timeout). Tests give one that records what was sent.
	HTTPClient *http.Client
	// Tolerance is the webhook's replay window (DefaultTolerance when 0).
	Tolerance time.Duration
	// PublicURL is central's URL as browsers reach it; Checkout sends the
	// tenant back to its console there.
	PublicURL string
}

// Store is what payments needs of central's store.
type Store interface {
	PutBillingAccount(ctx context.Context, a *sdk.BillingAccount) error
	GetBillingAccount(ctx context.Context, tenant string) (*sdk.BillingAccount, error)
	ClaimInvoice(ctx context.Context, inv *sdk.Invoice) (*sdk.Invoice, bool, error)
	UpdateInvoice(ctx context.Context, tenant, month string, fn func(*sdk.Invoice)) (*sdk.Invoice, error)
	ListInvoices(ctx context.Context, tenant string) ([]sdk.Invoice, error)
	ApplyStripeEvent(ctx context.Context, id, stripeInvoice string, inv func(*sdk.Invoice), accountTenant string, acct func(*sdk.BillingAccount)) error
}

// Statements computes every tenant's statement of the month that starts at
// month (central/metering).
type Statements func(ctx context.Context, month time.Time) ([]sdk.Statement, error)

// Service is Stripe for central. It is safe for concurrent use.
type Service struct {
	cfg        Config
	st         Store
	statements Statements
	sc         *stripe.Client
	now        func() time.Time
	log        hclog.Logger
}

// New makes a Service; with cfg.SecretKey empty every call is ErrOff.
func New(cfg Config, st Store, statements Statements, now func() time.Time, log hclog.Logger) *Service {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Service{cfg: cfg, st: st, statements: statements, now: now, log: log}
	if cfg.SecretKey != "" {
		hc := cfg.HTTPClient
		if hc == nil {
			hc = &http.Client{Timeout: 30 * time.Second}
		}
		bc := &stripe.BackendConfig{HTTPClient: hc, MaxNetworkRetries: stripe.Int64(2),
			// stripe-go's own logger would print request details; ours says what failed.
			LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
		if cfg.APIBase != "" {
			bc.URL = stripe.String(strings.TrimSuffix(cfg.APIBase, "/"))
		}
		s.sc = stripe.NewClient(cfg.SecretKey, stripe.WithBackends(stripe.NewBackendsWithConfig(bc)))
	}
	return s
}

// Enabled says whether Stripe is configured.
func (s *Service) Enabled() bool { return s.sc != nil }

// stripeErr turns a failed Stripe call into a StripeError that carries
// Stripe's message and nothing of the request.
func stripeErr(op string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		msg := se.Msg
		if msg == "" {
			msg = string(se.Type)
		}
		return &StripeError{Op: op, Msg: msg}
	}
	return &StripeError{Op: op, Msg: "Stripe did not answer: " + err.Error()}
}

// SetCustomer links tenant to a Stripe customer: the one given, or a new
// one central creates (with the tenant's id in its metadata).
func (s *Service) SetCustomer(ctx context.Context, tenant string, req sdk.SetBillingRequest) (*sdk.BillingAccount, error) {
	if !s.Enabled() {
		return nil, ErrOff
	}
	switch {
	case req.CreateCustomer == (req.StripeCustomer != ""):
		return nil, &InvalidError{"give either stripe_customer or create_customer, and only one",
			`{"stripe_customer": "cus_..."} links an existing customer; {"create_customer": true, "email": "billing@example.com"} makes one`}
	case len(req.StripeCustomer) > MaxCustomerIDLen || req.StripeCustomer != "" && !strings.HasPrefix(req.StripeCustomer, "cus_"):
		return nil, &InvalidError{"stripe_customer must be a Stripe customer id (cus_...)", "find it in Stripe's dashboard under Customers"}
	case req.Email != "" && store.CheckEmail(store.NormalEmail(req.Email)) != nil:
		return nil, &InvalidError{"email is not an address", "use an address such as billing@example.com"}
	}
	a := &sdk.BillingAccount{Tenant: tenant, StripeCustomer: req.StripeCustomer, Email: store.NormalEmail(req.Email), UpdatedAt: s.now().UTC()}
	if req.CreateCustomer {
		p := &stripe.CustomerCreateParams{Metadata: map[string]string{"fluxvm_tenant": tenant}}
		if a.Email != "" {
			p.Email = stripe.String(a.Email)
		}
		// The same tenant asking twice within Stripe's idempotency window
		// gets the same customer.
		// (Stripe takes keys of up to 255 characters: a tenant id and an
		// address may be longer together, so they are hashed.)
		sum := sha256.Sum256([]byte(tenant + "\x00" + a.Email))
		p.SetIdempotencyKey("fluxvm-customer-" + hex.EncodeToString(sum[:16]))
		c, err := s.sc.V1Customers.Create(ctx, p)
		if err != nil {
			return nil, stripeErr("create a Stripe customer", err)
		}
		a.StripeCustomer = c.ID
	}
	if err := s.st.PutBillingAccount(ctx, a); err != nil {
		return nil, err
	}
	s.log.Info("tenant linked to a Stripe customer", "tenant", tenant, "customer", a.StripeCustomer)
	return a, nil
}

// Invoices lists tenant's invoices ("" every tenant's).
func (s *Service) Invoices(ctx context.Context, tenant string) ([]sdk.Invoice, error) {
	out, err := s.st.ListInvoices(ctx, tenant)
	if out == nil {
		out = []sdk.Invoice{}
	}
	return out, err
}

// Lines turns a statement into invoice lines in whole cents. The rule
// (docs/billing.md): a line's cents are the statement line's AmountDisplay,
// where the statement gave each line its amount rounded down to a cent and
// the cents still missing from the total (rounded half-up) to the lines
// with the largest remainders. So the lines add up to the statement's
// TotalDisplay exactly, and no line is off by a cent or more. Lines of 0
// cents are left out; they change no sum.
func Lines(st sdk.Statement) (lines []sdk.InvoiceLine, totalCents int64, err error) {
	for _, l := range st.Lines {
		c, err := cents(l.AmountDisplay)
		if err != nil {
			return nil, 0, fmt.Errorf("statement of %s, line %q: %w", st.Tenant, l.Description, err)
		}
		if c == 0 {
			continue
		}
		desc := l.Description
		if l.Quantity != "" && l.Unit != "" {
			desc += " (" + l.Quantity + " " + l.Unit + ")"
		}
		lines = append(lines, sdk.InvoiceLine{Description: desc, AmountCents: c})
		totalCents += c
	}
	want, err := cents(st.TotalDisplay)
	if err != nil {
		return nil, 0, fmt.Errorf("statement of %s, total: %w", st.Tenant, err)
	}
	if want != totalCents {
		// The statement's allocation guarantees this; a mismatch is a bug,
		// and no invoice goes out with it.
		return nil, 0, fmt.Errorf("statement of %s: lines add up to %d cents, the total is %d", st.Tenant, totalCents, want)
	}
	return lines, totalCents, nil
}

// cents reads a display amount "12.30" as 1230.
func cents(display string) (int64, error) {
	whole, frac, ok := strings.Cut(display, ".")
	if !ok || len(frac) != 2 || whole == "" || strings.HasPrefix(whole, "-") {
		return 0, fmt.Errorf("amount %q is not in whole cents", display)
	}
	w, err1 := strconv.ParseInt(whole, 10, 64)
	f, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil || w > (1<<62)/100 {
		return 0, fmt.Errorf("amount %q is not in whole cents", display)
	}
	return w*100 + f, nil
}

// CreateInvoices sends every tenant's statement of the month that starts
// at month to Stripe, once: a tenant whose invoice for the month exists is
// listed as existing and nothing is sent again. A tenant without a Stripe
// customer, or with nothing to bill, is skipped with the reason. Calls
// carry idempotency keys derived from tenant and month, so a run cut short
// and run again does not make a second invoice at Stripe either.
func (s *Service) CreateInvoices(ctx context.Context, month time.Time) (*sdk.InvoiceRun, error) {
	if !s.Enabled() {
		return nil, ErrOff
	}
	m := month.Format("2006-01")
	if end := month.AddDate(0, 1, 0); s.now().Before(end) {
		return nil, fmt.Errorf("%w: %s ends %s", ErrMonthOpen, m, end.Format(time.RFC3339))
	}
	sts, err := s.statements(ctx, month)
	if err != nil {
		return nil, err
	}
	run := &sdk.InvoiceRun{Month: m, Created: []sdk.Invoice{}, Existing: []sdk.Invoice{}, Skipped: []sdk.InvoiceSkip{}}
	for _, st := range sts {
		if st.Tenant == "" {
			continue // the operator's own VMs: nobody to invoice
		}
		acct, err := s.st.GetBillingAccount(ctx, st.Tenant)
		if errors.Is(err, store.ErrNotFound) {
			run.Skipped = append(run.Skipped, sdk.InvoiceSkip{Tenant: st.Tenant, Reason: "no Stripe customer: PUT /fleet/tenants/" + st.Tenant + "/billing"})
			continue
		}
		if err != nil {
			return run, err
		}
		lines, total, err := Lines(st)
		if err != nil {
			return run, err
		}
		if total == 0 {
			run.Skipped = append(run.Skipped, sdk.InvoiceSkip{Tenant: st.Tenant, Reason: "nothing to bill"})
			continue
		}
		now := s.now().UTC()
		inv := &sdk.Invoice{ID: st.Tenant + "-" + m, Tenant: st.Tenant, TenantName: st.TenantName, Month: m,
			Currency: strings.ToLower(st.Currency), Total: st.Total, TotalCents: total, Lines: lines,
			Status: sdk.InvoiceCreating, StripeCustomer: acct.StripeCustomer, CreatedAt: now, UpdatedAt: now}
		got, claimed, err := s.st.ClaimInvoice(ctx, inv)
		if err != nil {
			return run, err
		}
		if !claimed && got.Status != sdk.InvoiceCreating {
			run.Existing = append(run.Existing, *got)
			continue
		}
		if !claimed && got.Error == "" && s.now().Sub(got.UpdatedAt) < InProgressFor {
			// Another run (another operator, another central) is at it now.
			run.Skipped = append(run.Skipped, sdk.InvoiceSkip{Tenant: st.Tenant,
				Reason: "another run is sending this invoice now; if it stays creating, run again in a few minutes"})
			continue
		}
		// claimed now, or claimed by a run that stopped half-way: (re)send
		// what the record says, under the same idempotency keys.
		done, err := s.send(ctx, got)
		if err != nil {
			// Kept on the record, so the list says why it is stuck and the
			// next run takes it up at once.
			msg := err.Error()
			if _, uerr := s.st.UpdateInvoice(ctx, got.Tenant, got.Month, func(x *sdk.Invoice) { x.Error, x.UpdatedAt = msg, s.now().UTC() }); uerr != nil {
				s.log.Error("record a failed invoice", "invoice", got.ID, "error", uerr)
			}
			return run, fmt.Errorf("invoice %s: %w", got.ID, err)
		}
		run.Created = append(run.Created, *done)
	}
	return run, nil
}

// send creates the invoice at Stripe: a draft for the customer that takes
// no other pending items, one invoice item per line, then finalized.
func (s *Service) send(ctx context.Context, inv *sdk.Invoice) (*sdk.Invoice, error) {
	key := "fluxvm-invoice-" + inv.Tenant + "-" + inv.Month
	meta := map[string]string{"fluxvm_tenant": inv.Tenant, "fluxvm_month": inv.Month}
	p := &stripe.InvoiceCreateParams{Customer: stripe.String(inv.StripeCustomer), Currency: stripe.String(inv.Currency),
		AutoAdvance: stripe.Bool(false), CollectionMethod: stripe.String(string(stripe.InvoiceCollectionMethodChargeAutomatically)),
		PendingInvoiceItemsBehavior: stripe.String("exclude"),
		Description:                 stripe.String("FluxVM, " + inv.Month), Metadata: meta}
	p.SetIdempotencyKey(key)
	si, err := s.sc.V1Invoices.Create(ctx, p)
	if err != nil {
		return nil, stripeErr("create the Stripe invoice", err)
	}
	// The index from Stripe's id goes in before anything else, so that a
	// webhook event about the invoice that comes early finds it.
	if _, err := s.st.UpdateInvoice(ctx, inv.Tenant, inv.Month, func(x *sdk.Invoice) { x.StripeInvoiceID = si.ID }); err != nil {
		return nil, err
	}
	for i, l := range inv.Lines {
		ip := &stripe.InvoiceItemCreateParams{Customer: stripe.String(inv.StripeCustomer), Invoice: stripe.String(si.ID),
			Amount: stripe.Int64(l.AmountCents), Currency: stripe.String(inv.Currency), Description: stripe.String(l.Description), Metadata: meta}
		ip.SetIdempotencyKey(key + "-line-" + strconv.Itoa(i))
		if _, err := s.sc.V1InvoiceItems.Create(ctx, ip); err != nil {
			return nil, stripeErr("add line "+strconv.Itoa(i+1)+" to the Stripe invoice", err)
		}
	}
	fp := &stripe.InvoiceFinalizeInvoiceParams{AutoAdvance: stripe.Bool(true)}
	fp.SetIdempotencyKey(key + "-finalize")
	fi, err := s.sc.V1Invoices.FinalizeInvoice(ctx, si.ID, fp)
	if err != nil {
		return nil, stripeErr("finalize the Stripe invoice", err)
	}
	out, err := s.st.UpdateInvoice(ctx, inv.Tenant, inv.Month, func(x *sdk.Invoice) {
		x.StripeInvoiceID, x.HostedURL, x.UpdatedAt, x.Error = si.ID, fi.HostedInvoiceURL, s.now().UTC(), ""
		if x.Status == sdk.InvoiceCreating {
			x.Status = sdk.InvoiceOpen
		}
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("invoice sent to Stripe", "tenant", inv.Tenant, "month", inv.Month, "stripe_invoice", si.ID, "cents", inv.TotalCents)
	return out, nil
}

// CheckoutSession opens a Stripe Checkout session in setup mode, in which
// tenant saves a card for its customer; Stripe sends the browser back to
// the console's billing page.
func (s *Service) CheckoutSession(ctx context.Context, tenant string) (*sdk.PaymentMethodSession, error) {
	if !s.Enabled() {
		return nil, ErrOff
	}
	acct, err := s.st.GetBillingAccount(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrNoCustomer
	}
	if err != nil {
		return nil, err
	}
	back := strings.TrimSuffix(s.cfg.PublicURL, "/") + "/console/billing"
	p := &stripe.CheckoutSessionCreateParams{Mode: stripe.String(string(stripe.CheckoutSessionModeSetup)),
		Customer: stripe.String(acct.StripeCustomer), PaymentMethodTypes: []*string{stripe.String("card")},
		SuccessURL: stripe.String(back + "?card=saved"), CancelURL: stripe.String(back + "?card=cancelled"),
		ClientReferenceID: stripe.String(tenant), Metadata: map[string]string{"fluxvm_tenant": tenant}}
	cs, err := s.sc.V1CheckoutSessions.Create(ctx, p)
	if err != nil {
		return nil, stripeErr("open a Stripe Checkout session", err)
	}
	return &sdk.PaymentMethodSession{ID: cs.ID, URL: cs.URL}, nil
}
