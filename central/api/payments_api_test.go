package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/internal/testservers"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/stripe/stripe-go/v82/webhook"
)

// pxClock is an injected clock the tests move.
type pxClock struct{ ns atomic.Int64 }

func (c *pxClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *pxClock) advance(d time.Duration) { c.ns.Add(int64(d)) }
func newPxClock(t time.Time) *pxClock {
	c := &pxClock{}
	c.ns.Store(t.UnixNano())
	return c
}

const pxWebhookSecret = "whsec_api_test"

// pxCents reads a display amount ("12.34") as cents, independently of
// package payments.
func pxCents(t *testing.T, s string) int64 {
	t.Helper()
	whole, frac, _ := strings.Cut(s, ".")
	w, err1 := strconv.ParseInt(whole, 10, 64)
	f, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil || len(frac) != 2 {
		t.Fatalf("amount %q", s)
	}
	return w*100 + f
}

// TestStripeInvoicesThroughCentral plays a month through the API with
// Stripe played by stripe-mock: October's statement of a tenant with VM time
// at odd prices becomes an invoice whose lines and total are the
// statement's cents, once; Checkout opens for the tenant's customer; the
// webhook refuses a bad signature, applies a payment once and a replay
// changes nothing. Every answer is checked against the OpenAPI description.
func TestStripeInvoicesThroughCentral(t *testing.T) {
	base := testservers.StripeMock(t)
	clock := newPxClock(time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, func(o *Options) {
		o.Now = clock.now
		o.PublicURL = "https://cloud.example.com"
		o.Payments = payments.Config{SecretKey: "sk_test_api", WebhookSecret: pxWebhookSecret, APIBase: base}
	})
	ctx := context.Background()
	acme, acmeToken := e.createTenant("acme", "")
	_, otherToken := e.createTenant("other", "")
	e.must(req{method: "PUT", path: "/fleet/prices", token: testFleetToken, body: `{"currency": "USD", "vm_per_hour": 0.010007,
		"vcpu_per_hour": 0.020003, "memory_gib_per_hour": 0.004001, "macos_vm_per_hour": 0.100009}`}, 200)
	for i, v := range []struct {
		tenant     string
		vcpus, mib int64
		from, to   time.Time
	}{
		{acme.ID, 3, 3000, time.Date(2026, 10, 3, 10, 17, 23, 0, time.UTC), time.Date(2026, 10, 19, 8, 1, 5, 0, time.UTC)},
		{acme.ID, 1, 700, time.Date(2026, 10, 7, 1, 2, 3, 0, time.UTC), time.Date(2026, 10, 7, 23, 59, 59, 0, time.UTC)},
	} {
		if _, err := e.store.RecordEntry(ctx, store.LedgerEntry{Tenant: v.tenant, Node: "shared-1", VMID: fmt.Sprintf("vm-%d", i), Name: fmt.Sprintf("vm-%d", i),
			VCPUs: v.vcpus, MemoryMiB: v.mib, GuestOS: "linux", StartedAt: v.from, EndedAt: v.to}); err != nil {
			t.Fatal(err)
		}
	}
	clock.advance(33 * 24 * time.Hour) // November 3rd

	// Before the month ends there is nothing to invoice; a bad month is 400.
	e.must(req{method: "POST", path: "/fleet/billing/invoices?month=2026-11", token: testFleetToken}, 409)
	e.must(req{method: "POST", path: "/fleet/billing/invoices?month=2026-13", token: testFleetToken}, 400)
	// Outside the spec (month is required there), still answered for people.
	if r := e.call(req{method: "POST", path: "/fleet/billing/invoices", token: testFleetToken}); r.status != 400 {
		t.Fatalf("no month: %d", r.status)
	}
	// A tenant without a customer cannot open Checkout.
	e.must(req{method: "POST", path: "/fleet/billing/payment-method", token: acmeToken}, 409)

	var st sdk.Statement
	e.must(req{method: "GET", path: "/fleet/billing?month=2026-10", token: acmeToken}, 200).decode(t, &st)
	if len(st.Lines) < 3 || st.Total == 0 {
		t.Fatalf("October's statement: %+v", st)
	}
	var acct sdk.BillingAccount
	e.must(req{method: "PUT", path: "/fleet/tenants/acme/billing", token: testFleetToken, body: `{"create_customer": true, "email": "billing@acme.example"}`}, 200).decode(t, &acct)
	if !strings.HasPrefix(acct.StripeCustomer, "cus_") || acct.Tenant != acme.ID {
		t.Fatalf("billing account: %+v", acct)
	}
	for _, bad := range []string{`{}`, `{"stripe_customer": "acct_1"}`, `{"stripe_customer": "cus_1", "create_customer": true}`, `{"stripe_customer": 1}`, `{"x": 1}`} {
		if r := e.call(req{method: "PUT", path: "/fleet/tenants/acme/billing", token: testFleetToken, body: bad}); r.status != 400 {
			t.Errorf("PUT billing %s: %d, want 400", bad, r.status)
		}
	}
	e.must(req{method: "PUT", path: "/fleet/tenants/nobody/billing", token: testFleetToken, body: `{"stripe_customer": "cus_1"}`}, 404)

	var run sdk.InvoiceRun
	e.must(req{method: "POST", path: "/fleet/billing/invoices?month=2026-10", token: testFleetToken}, 200).decode(t, &run)
	if len(run.Created) != 1 || len(run.Skipped) != 0 {
		t.Fatalf("run = %+v, want acme's invoice (other has no statement)", run)
	}
	inv := run.Created[0]
	var sum int64
	for _, l := range inv.Lines {
		sum += l.AmountCents
	}
	want := pxCents(t, st.TotalDisplay)
	if inv.TotalCents != want || sum != want || inv.Total != st.Total || inv.Status != sdk.InvoiceOpen || inv.Currency != "usd" {
		t.Fatalf("invoice %+v: total %d cents, lines %d, want %d (statement %s, %v)", inv, inv.TotalCents, sum, want, st.TotalDisplay, st.Total)
	}
	if exact := (int64(st.Total) + 5000) / 10000; want != exact {
		t.Fatalf("statement total %s is not the exact %d millionths rounded (%d cents)", st.TotalDisplay, st.Total, exact)
	}
	// Again: nothing new.
	e.must(req{method: "POST", path: "/fleet/billing/invoices?month=2026-10", token: testFleetToken}, 200).decode(t, &run)
	if len(run.Created) != 0 || len(run.Existing) != 1 {
		t.Fatalf("second run = %+v", run)
	}
	var list sdk.InvoiceList
	e.must(req{method: "GET", path: "/fleet/billing/invoices", token: acmeToken}, 200).decode(t, &list)
	if len(list.Invoices) != 1 || list.Invoices[0].ID != inv.ID {
		t.Fatalf("acme's invoices: %+v", list)
	}
	e.must(req{method: "GET", path: "/fleet/billing/invoices", token: otherToken}, 200).decode(t, &list)
	if len(list.Invoices) != 0 {
		t.Fatalf("other sees %+v", list)
	}
	e.must(req{method: "GET", path: "/fleet/billing/invoices", token: testFleetToken}, 200).decode(t, &list)
	if len(list.Invoices) != 1 {
		t.Fatalf("the operator sees %+v", list)
	}

	// Checkout for the tenant's customer; the operator names the tenant.
	var sess sdk.PaymentMethodSession
	e.must(req{method: "POST", path: "/fleet/billing/payment-method", token: acmeToken}, 201).decode(t, &sess)
	if sess.URL == "" {
		t.Fatalf("session: %+v", sess)
	}
	e.must(req{method: "POST", path: "/fleet/billing/payment-method", token: testFleetToken}, 400)
	e.must(req{method: "POST", path: "/fleet/billing/payment-method?tenant=acme", token: testFleetToken}, 201)
	e.must(req{method: "POST", path: "/fleet/billing/payment-method?tenant=nobody", token: testFleetToken}, 404)
	e.must(req{method: "POST", path: "/fleet/billing/payment-method", token: otherToken}, 409)
	e.must(req{method: "POST", path: "/fleet/billing/payment-method?tenant=acme", token: otherToken}, 403)

	// The webhook.
	status := func() string {
		var l sdk.InvoiceList
		e.must(req{method: "GET", path: "/fleet/billing/invoices", token: acmeToken}, 200).decode(t, &l)
		return l.Invoices[0].Status
	}
	event := func(id, typ string) (string, http.Header) {
		body := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":{"id":%q,"object":"invoice"}}}`, id, typ, inv.StripeInvoiceID)
		p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: pxWebhookSecret})
		return body, http.Header{"Stripe-Signature": {p.Header}}
	}
	body, h := event("evt_paid", "invoice.paid")
	bad := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: "whsec_wrong"})
	e.must(req{method: "POST", path: "/stripe/webhook", body: body, header: http.Header{"Stripe-Signature": {bad.Header}}}, 400)
	e.must(req{method: "POST", path: "/stripe/webhook", body: body}, 400)
	old := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: pxWebhookSecret, Timestamp: time.Now().Add(-time.Hour)})
	e.must(req{method: "POST", path: "/stripe/webhook", body: body, header: http.Header{"Stripe-Signature": {old.Header}}}, 400)
	if s := status(); s != sdk.InvoiceOpen {
		t.Fatalf("refused events changed the status to %s", s)
	}
	var res payments.WebhookResult
	e.must(req{method: "POST", path: "/stripe/webhook", body: body, header: h}, 200).decode(t, &res)
	if res.Replayed || status() != sdk.InvoicePaid {
		t.Fatalf("invoice.paid: %+v, status %s", res, status())
	}
	// The same event id replayed, as a failure this time: nothing changes.
	body2, h2 := event("evt_paid", "invoice.payment_failed")
	e.must(req{method: "POST", path: "/stripe/webhook", body: body2, header: h2}, 200).decode(t, &res)
	if !res.Replayed || status() != sdk.InvoicePaid {
		t.Fatalf("replay: %+v, status %s", res, status())
	}
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", payments.MaxWebhookBody) + `"}`
	e.must(req{method: "POST", path: "/stripe/webhook", body: big, header: h}, 413)
	if raw, _ := json.Marshal(e.logs.String()); strings.Contains(string(raw), "sk_test_api") || strings.Contains(string(raw), pxWebhookSecret) {
		t.Error("a Stripe secret is in central's log")
	}
}
