package payments_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/billing/billingtest"
	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/internal/testservers"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/stripe/stripe-go/v82/webhook"
)

// What stripe-mock can and cannot prove. It checks every request against
// Stripe's OpenAPI description (an unknown or mistyped parameter is a 400,
// as at Stripe) and reflects a POST's top-level parameters into its answer,
// but it keeps no state: every invoice it returns has the same canned id,
// lines are not attached to invoices, and totals are not computed. So these
// tests record what FluxVM sent (a transport in front of the HTTP client)
// and check those requests, and what stripe-mock reflected back, against
// the statements; they cannot see Stripe sum the lines itself.

// sent is one request to stripe-mock and its answer.
type sent struct {
	Method, Path string
	Form         url.Values
	Idempotency  string
	Status       int
	Answer       map[string]any
}

type recorder struct {
	mu   sync.Mutex
	reqs []sent
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	ans, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(ans))
	form, _ := url.ParseQuery(string(body))
	s := sent{Method: req.Method, Path: req.URL.Path, Form: form, Idempotency: req.Header.Get("Idempotency-Key"), Status: resp.StatusCode}
	_ = json.Unmarshal(ans, &s.Answer)
	r.mu.Lock()
	r.reqs = append(r.reqs, s)
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) posts(path string) []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sent
	for _, s := range r.reqs {
		if s.Method == http.MethodPost && s.Path == path {
			out = append(out, s)
		}
	}
	return out
}

var october = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)

const webhookSecret = "whsec_test_fluxvm"

type env struct {
	st    *store.Store
	svc   *payments.Service
	rec   *recorder
	stmts []sdk.Statement
	now   time.Time
}

// newEnv makes two tenants whose October statements come from a generated
// ledger priced with odd per-hour prices, so that amounts have fractions
// of a cent to round, and a Service that talks to a fresh stripe-mock.
func newEnv(t *testing.T) *env {
	t.Helper()
	base := testservers.StripeMock(t)
	st := storetest.Open(t)
	e := &env{st: st, rec: &recorder{}, now: time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)}
	prices := []billing.PriceVersion{{EffectiveFrom: october.AddDate(-1, 0, 0), Prices: billing.Prices{Currency: "USD",
		MacPerHour: 612_345, VMPerHour: 10_007, VCPUPerHour: 20_003, MemoryGiBPerHour: 4_001, MacOSVMPerHour: 100_009}}}
	vms, leases := billingtest.Ledger(7, 2, 20, october)
	ids := map[string]string{}
	for i, name := range []string{"acme", "globex"} {
		ids[fmt.Sprintf("tenant-%04d", i)] = storetest.Tenant(t, st, name).ID
	}
	for _, s := range billing.ComputeStatements(october, prices, vms, leases, e.now) {
		s.Tenant = ids[s.Tenant]
		e.stmts = append(e.stmts, sdk.Statement{Statement: s})
	}
	if len(e.stmts) != 2 {
		t.Fatalf("the ledger gave %d statements, want 2", len(e.stmts))
	}
	e.svc = payments.New(payments.Config{SecretKey: "sk_test_123", WebhookSecret: webhookSecret, APIBase: base,
		HTTPClient: &http.Client{Transport: e.rec, Timeout: 10 * time.Second}, PublicURL: "https://cloud.example.com"},
		st, func(context.Context, time.Time) ([]sdk.Statement, error) { return e.stmts, nil },
		func() time.Time { return e.now }, nil)
	return e
}

// centsOf is an independent reading of a display amount.
func centsOf(t *testing.T, s string) int64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("amount %q: %v", s, err)
	}
	return int64(f*100 + 0.5)
}

func TestInvoicesThroughStripeMockMatchStatementsToTheCent(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	acme, globex := e.stmts[0].Tenant, e.stmts[1].Tenant
	if _, err := e.svc.SetCustomer(ctx, acme, sdk.SetBillingRequest{CreateCustomer: true, Email: "Billing@Acme.example"}); err != nil {
		t.Fatalf("create a customer through stripe-mock: %v", err)
	}
	if _, err := e.svc.SetCustomer(ctx, globex, sdk.SetBillingRequest{StripeCustomer: "cus_globex"}); err != nil {
		t.Fatal(err)
	}
	run, err := e.svc.CreateInvoices(ctx, october)
	if err != nil {
		t.Fatalf("create invoices: %v", err)
	}
	if len(run.Created) != 2 || len(run.Existing) != 0 || len(run.Skipped) != 0 {
		t.Fatalf("run = %+v, want two created", run)
	}
	items := e.rec.posts("/v1/invoiceitems")
	for _, st := range e.stmts {
		// The exact total in millionths, rounded half-up to cents here, is
		// what the invoice must come to.
		wantTotal := (int64(st.Total) + 5000) / 10000
		if got := centsOf(t, st.TotalDisplay); got != wantTotal {
			t.Fatalf("statement total %s is not %d cents", st.TotalDisplay, wantTotal)
		}
		customer := "cus_globex"
		if st.Tenant == acme {
			acct, _ := e.st.GetBillingAccount(ctx, acme)
			customer = acct.StripeCustomer
		}
		var sum int64
		n := 0
		for _, it := range items {
			if it.Form.Get("metadata[fluxvm_tenant]") != st.Tenant {
				continue
			}
			if it.Status != http.StatusOK {
				t.Fatalf("stripe-mock refused an invoice item (%d): %v", it.Status, it.Answer)
			}
			amount, err := strconv.ParseInt(it.Form.Get("amount"), 10, 64)
			if err != nil || amount <= 0 {
				t.Fatalf("invoice item amount %q", it.Form.Get("amount"))
			}
			// stripe-mock reflects what it was sent: the amount it took.
			if got, _ := it.Answer["amount"].(float64); int64(got) != amount {
				t.Errorf("stripe-mock took amount %v, sent %d", it.Answer["amount"], amount)
			}
			if it.Form.Get("customer") != customer || it.Form.Get("currency") != "usd" || it.Form.Get("invoice") == "" {
				t.Errorf("invoice item sent with customer %q currency %q invoice %q", it.Form.Get("customer"), it.Form.Get("currency"), it.Form.Get("invoice"))
			}
			sum += amount
			n++
		}
		if sum != wantTotal {
			t.Errorf("tenant %s: invoice items add up to %d cents, the statement to %d", st.Tenant, sum, wantTotal)
		}
		// Each line is within a cent of its exact amount.
		var lines int
		for _, l := range st.Lines {
			if c := centsOf(t, l.AmountDisplay); c > 0 {
				lines++
				if d := c*10000 - int64(l.Amount); d <= -10000 || d >= 10000 {
					t.Errorf("line %q: %d cents for %d millionths", l.Description, c, l.Amount)
				}
			}
		}
		if n != lines {
			t.Errorf("tenant %s: %d invoice items for %d statement lines", st.Tenant, n, lines)
		}
		inv, err := e.st.ListInvoices(ctx, st.Tenant)
		if err != nil || len(inv) != 1 || inv[0].TotalCents != wantTotal || inv[0].Status != sdk.InvoiceOpen || inv[0].StripeInvoiceID == "" {
			t.Errorf("stored invoice of %s = %+v, %v; want open, %d cents", st.Tenant, inv, err, wantTotal)
		}
	}
	for _, p := range e.rec.posts("/v1/invoices") {
		if p.Form.Get("pending_invoice_items_behavior") != "exclude" || p.Form.Get("auto_advance") != "false" || !strings.HasPrefix(p.Idempotency, "fluxvm-invoice-") {
			t.Errorf("invoice created with %v (idempotency %q)", p.Form, p.Idempotency)
		}
	}
	finalized := map[string]bool{}
	for _, r := range e.rec.reqs {
		if id, ok := strings.CutSuffix(strings.TrimPrefix(r.Path, "/v1/invoices/"), "/finalize"); ok && r.Method == http.MethodPost {
			finalized[id] = true
		}
	}
	for _, st := range e.stmts {
		if id := mustInvoiceID(t, e, st.Tenant); !finalized[id] {
			t.Errorf("invoice %s of %s was not finalized (finalized: %v)", id, st.Tenant, finalized)
		}
	}
}

func mustInvoiceID(t *testing.T, e *env, tenant string) string {
	inv, err := e.st.ListInvoices(context.Background(), tenant)
	if err != nil || len(inv) == 0 {
		t.Fatalf("no invoice for %s: %v", tenant, err)
	}
	return inv[0].StripeInvoiceID
}

func TestASecondInvoiceRunForTheMonthSendsNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.SetCustomer(ctx, e.stmts[0].Tenant, sdk.SetBillingRequest{StripeCustomer: "cus_a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.CreateInvoices(ctx, october); err != nil {
		t.Fatal(err)
	}
	before := len(e.rec.reqs)
	run, err := e.svc.CreateInvoices(ctx, october)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Created) != 0 || len(run.Existing) != 1 || len(run.Skipped) != 1 {
		t.Fatalf("second run = %+v, want one existing and one skipped", run)
	}
	if len(e.rec.reqs) != before {
		t.Errorf("the second run sent %d requests to Stripe", len(e.rec.reqs)-before)
	}
	if !strings.Contains(run.Skipped[0].Reason, "no Stripe customer") {
		t.Errorf("skip reason %q", run.Skipped[0].Reason)
	}
}

func TestAMonthUnderWayIsNotInvoiced(t *testing.T) {
	e := newEnv(t)
	_, err := e.svc.CreateInvoices(context.Background(), time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	if !errors.Is(err, payments.ErrMonthOpen) {
		t.Fatalf("err = %v, want ErrMonthOpen", err)
	}
}

func TestStripeOffRefusesEveryCall(t *testing.T) {
	svc := payments.New(payments.Config{}, storetest.Open(t), nil, nil, nil)
	ctx := context.Background()
	if _, err := svc.CreateInvoices(ctx, october); !errors.Is(err, payments.ErrOff) {
		t.Errorf("CreateInvoices: %v", err)
	}
	if _, err := svc.SetCustomer(ctx, "x", sdk.SetBillingRequest{StripeCustomer: "cus_x"}); !errors.Is(err, payments.ErrOff) {
		t.Errorf("SetCustomer: %v", err)
	}
	if _, err := svc.CheckoutSession(ctx, "x"); !errors.Is(err, payments.ErrOff) {
		t.Errorf("CheckoutSession: %v", err)
	}
	if _, err := svc.HandleWebhook(ctx, []byte(`{}`), "t=1,v1=00"); !errors.Is(err, payments.ErrOff) {
		t.Errorf("HandleWebhook: %v", err)
	}
}

func TestSetCustomerRefusesWhatIsNotACustomer(t *testing.T) {
	e := newEnv(t)
	for _, req := range []sdk.SetBillingRequest{
		{},
		{StripeCustomer: "cus_a", CreateCustomer: true},
		{StripeCustomer: "acct_123"},
		{StripeCustomer: "cus_" + strings.Repeat("x", 300)},
		{CreateCustomer: true, Email: "not an address"},
	} {
		if _, err := e.svc.SetCustomer(context.Background(), e.stmts[0].Tenant, req); !errors.Is(err, payments.ErrInvalid) {
			t.Errorf("SetCustomer(%+v) = %v, want ErrInvalid", req, err)
		}
	}
	if _, err := e.svc.SetCustomer(context.Background(), "no-such-tenant", sdk.SetBillingRequest{StripeCustomer: "cus_a"}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown tenant: %v", err)
	}
}

func TestCheckoutSessionIsInSetupModeForTheTenantsCustomer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tenant := e.stmts[0].Tenant
	if _, err := e.svc.CheckoutSession(ctx, tenant); !errors.Is(err, payments.ErrNoCustomer) {
		t.Fatalf("without a customer: %v", err)
	}
	if _, err := e.svc.SetCustomer(ctx, tenant, sdk.SetBillingRequest{StripeCustomer: "cus_a"}); err != nil {
		t.Fatal(err)
	}
	s, err := e.svc.CheckoutSession(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if s.URL == "" || s.ID == "" {
		t.Errorf("session = %+v", s)
	}
	p := e.rec.posts("/v1/checkout/sessions")
	if len(p) != 1 || p[0].Form.Get("mode") != "setup" || p[0].Form.Get("customer") != "cus_a" || p[0].Form.Get("client_reference_id") != tenant ||
		p[0].Form.Get("success_url") != "https://cloud.example.com/console/billing?card=saved" {
		t.Errorf("checkout session sent as %+v", p)
	}
}

// signed is a Stripe event of type typ about object, signed as Stripe
// signs (stripe-go's own test helper) at time at.
func signed(id, typ string, object any, secret string, at time.Time) (body []byte, header string) {
	obj, _ := json.Marshal(object)
	body = []byte(fmt.Sprintf(`{"id":%q,"object":"event","api_version":"2025-01-27.acacia","type":%q,"data":{"object":%s}}`, id, typ, obj))
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	return body, p.Header
}

func invoicedEnv(t *testing.T) (*env, sdk.Invoice) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.SetCustomer(ctx, e.stmts[0].Tenant, sdk.SetBillingRequest{StripeCustomer: "cus_a"}); err != nil {
		t.Fatal(err)
	}
	run, err := e.svc.CreateInvoices(ctx, october)
	if err != nil || len(run.Created) != 1 {
		t.Fatalf("invoice: %+v %v", run, err)
	}
	return e, run.Created[0]
}

func TestWebhookWithABadSignatureChangesNothing(t *testing.T) {
	e, inv := invoicedEnv(t)
	ctx := context.Background()
	obj := map[string]any{"id": inv.StripeInvoiceID, "object": "invoice", "status": "paid"}
	good, header := signed("evt_1", "invoice.paid", obj, webhookSecret, time.Now())
	_, wrongSecret := signed("evt_1", "invoice.paid", obj, "whsec_other", time.Now())
	_, old := signed("evt_1", "invoice.paid", obj, webhookSecret, time.Now().Add(-10*time.Minute))
	for name, c := range map[string]struct {
		body   []byte
		header string
	}{
		"wrong secret":              {good, wrongSecret},
		"body changed":              {bytes.Replace(good, []byte("evt_1"), []byte("evt_2"), 1), header},
		"outside the replay window": {good, old},
		"no header":                 {good, ""},
		"not a header":              {good, "garbage"},
	} {
		if _, err := e.svc.HandleWebhook(ctx, c.body, c.header); !errors.Is(err, payments.ErrBadSignature) {
			t.Errorf("%s: err = %v, want ErrBadSignature", name, err)
		}
	}
	got, _ := e.st.ListInvoices(ctx, inv.Tenant)
	if got[0].Status != sdk.InvoiceOpen {
		t.Errorf("status = %s after refused events, want open", got[0].Status)
	}
}

func TestWebhookSetsPaymentStatusOnceAndAReplayChangesNothing(t *testing.T) {
	e, inv := invoicedEnv(t)
	ctx := context.Background()
	status := func() string {
		got, _ := e.st.ListInvoices(ctx, inv.Tenant)
		return got[0].Status
	}
	obj := map[string]any{"id": inv.StripeInvoiceID, "object": "invoice", "hosted_invoice_url": "https://invoice.example/x"}
	body, h := signed("evt_failed", "invoice.payment_failed", obj, webhookSecret, time.Now())
	if r, err := e.svc.HandleWebhook(ctx, body, h); err != nil || r.Replayed {
		t.Fatalf("payment_failed: %+v %v", r, err)
	}
	if s := status(); s != sdk.InvoicePaymentFailed {
		t.Fatalf("status = %s, want payment_failed", s)
	}
	paid, hp := signed("evt_paid", "invoice.paid", obj, webhookSecret, time.Now())
	if _, err := e.svc.HandleWebhook(ctx, paid, hp); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != sdk.InvoicePaid {
		t.Fatalf("status = %s, want paid", s)
	}
	// The first event again, newly signed as Stripe signs a retry: it was
	// applied already, so it does not undo the payment.
	again, ha := signed("evt_failed", "invoice.payment_failed", obj, webhookSecret, time.Now())
	r, err := e.svc.HandleWebhook(ctx, again, ha)
	if err != nil || !r.Replayed {
		t.Fatalf("replay: %+v %v, want replayed", r, err)
	}
	if s := status(); s != sdk.InvoicePaid {
		t.Errorf("status = %s after a replay, want paid", s)
	}
	// A later failure event (a new id) does not undo a settled payment either.
	late, hl := signed("evt_late", "invoice.payment_failed", obj, webhookSecret, time.Now())
	if _, err := e.svc.HandleWebhook(ctx, late, hl); err != nil {
		t.Fatal(err)
	}
	if s := status(); s != sdk.InvoicePaid {
		t.Errorf("status = %s after a late failure, want paid", s)
	}
}

func TestCheckoutCompletedMarksTheCardSaved(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tenant := e.stmts[0].Tenant
	if _, err := e.svc.SetCustomer(ctx, tenant, sdk.SetBillingRequest{StripeCustomer: "cus_a"}); err != nil {
		t.Fatal(err)
	}
	other, ho := signed("evt_c0", "checkout.session.completed", map[string]any{"id": "cs_0", "object": "checkout.session", "mode": "setup",
		"client_reference_id": tenant, "customer": "cus_someone_else"}, webhookSecret, time.Now())
	if _, err := e.svc.HandleWebhook(ctx, other, ho); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.st.GetBillingAccount(ctx, tenant); a.PaymentMethodSaved {
		t.Fatal("another customer's session marked the card saved")
	}
	body, h := signed("evt_c1", "checkout.session.completed", map[string]any{"id": "cs_1", "object": "checkout.session", "mode": "setup",
		"client_reference_id": tenant, "customer": "cus_a"}, webhookSecret, time.Now())
	if _, err := e.svc.HandleWebhook(ctx, body, h); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.st.GetBillingAccount(ctx, tenant); !a.PaymentMethodSaved {
		t.Error("the card is not marked saved")
	}
}

func TestLinesRefuseAStatementWhoseCentsDoNotAddUp(t *testing.T) {
	st := sdk.Statement{Statement: billing.Statement{Tenant: "t", TotalDisplay: "1.00",
		Lines: []billing.Line{{Description: "a", AmountDisplay: "0.50"}, {Description: "b", AmountDisplay: "0.49"}}}}
	if _, _, err := payments.Lines(st); err == nil {
		t.Error("lines of 99 cents for a total of 1.00 were taken")
	}
	st.Lines[1].AmountDisplay = "0.50"
	lines, total, err := payments.Lines(st)
	if err != nil || total != 100 || len(lines) != 2 {
		t.Errorf("Lines = %v %d %v", lines, total, err)
	}
	for _, bad := range []string{"-0.50", "0.5", "x.50", "1", ""} {
		st.Lines[1].AmountDisplay = bad
		if _, _, err := payments.Lines(st); err == nil {
			t.Errorf("amount %q taken", bad)
		}
	}
}

func TestARunThatStripeFailedIsResumedByTheNextRun(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tenant := e.stmts[0].Tenant
	if _, err := e.svc.SetCustomer(ctx, tenant, sdk.SetBillingRequest{StripeCustomer: "cus_a"}); err != nil {
		t.Fatal(err)
	}
	// The same central, with Stripe out of reach: nothing answers port 1.
	down := payments.New(payments.Config{SecretKey: "sk_test_123", APIBase: "http://127.0.0.1:1"}, e.st,
		func(context.Context, time.Time) ([]sdk.Statement, error) { return e.stmts, nil }, func() time.Time { return e.now }, nil)
	var se *payments.StripeError
	if _, err := down.CreateInvoices(ctx, october); !errors.As(err, &se) {
		t.Fatalf("with Stripe down: %v, want a StripeError", err)
	}
	inv, _ := e.st.ListInvoices(ctx, tenant)
	if len(inv) != 1 || inv[0].Status != sdk.InvoiceCreating || !strings.Contains(inv[0].Error, "Stripe did not answer") {
		t.Fatalf("after the failed run: %+v, want one invoice still creating, with why", inv)
	}
	run, err := e.svc.CreateInvoices(ctx, october)
	if err != nil || len(run.Created) != 1 || run.Created[0].Status != sdk.InvoiceOpen || run.Created[0].Error != "" {
		t.Fatalf("the next run: %+v %v, want the invoice finished", run, err)
	}
	// Its calls carried the same idempotency keys a first try would have.
	for _, p := range e.rec.posts("/v1/invoices") {
		if p.Idempotency != "fluxvm-invoice-"+tenant+"-2026-10" {
			t.Errorf("idempotency key %q", p.Idempotency)
		}
	}
}

func TestARunLeavesAnInvoiceAnotherRunIsSendingToIt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tenant := e.stmts[0].Tenant
	if _, err := e.svc.SetCustomer(ctx, tenant, sdk.SetBillingRequest{StripeCustomer: "cus_a"}); err != nil {
		t.Fatal(err)
	}
	// What another run's claim looks like while it talks to Stripe.
	lines, total, err := payments.Lines(e.stmts[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.st.ClaimInvoice(ctx, &sdk.Invoice{ID: tenant + "-2026-10", Tenant: tenant, Month: "2026-10", Currency: "usd",
		Total: e.stmts[0].Total, TotalCents: total, Lines: lines, StripeCustomer: "cus_a", Status: sdk.InvoiceCreating,
		CreatedAt: e.now, UpdatedAt: e.now}); err != nil {
		t.Fatal(err)
	}
	run, err := e.svc.CreateInvoices(ctx, october)
	if err != nil || len(run.Created) != 0 || len(run.Skipped) != 2 || !strings.Contains(run.Skipped[0].Reason+run.Skipped[1].Reason, "another run") {
		t.Fatalf("run = %+v %v, want the invoice left to the other run", run, err)
	}
	if n := len(e.rec.posts("/v1/invoices")); n != 0 {
		t.Errorf("%d invoices sent to Stripe", n)
	}
	// Ten minutes on, that run is taken to have died: this one finishes it.
	e.now = e.now.Add(payments.InProgressFor)
	run, err = e.svc.CreateInvoices(ctx, october)
	if err != nil || len(run.Created) != 1 || run.Created[0].TotalCents != total || run.Created[0].Status != sdk.InvoiceOpen {
		t.Fatalf("later run = %+v %v", run, err)
	}
	if n := len(e.rec.posts("/v1/invoiceitems")); n != len(lines) {
		t.Errorf("%d invoice items sent for %d lines", n, len(lines))
	}
}
