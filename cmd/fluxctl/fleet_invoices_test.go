package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/internal/testservers"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestFleetInvoicesAgainstCentralWithStripeMock: a central (in this
// process, on a real embedded etcd) with Stripe played by stripe-mock. The
// operator links a tenant to a new Stripe customer, invoices a month (no
// statement here: nothing is billed, and it says so), the tenant lists its
// invoices and opens Checkout; bad input and a tenant creating invoices
// are refused with hints. The invoice arithmetic is central/payments'
// and central/api's tests'.
func TestFleetInvoicesAgainstCentralWithStripeMock(t *testing.T) {
	base := testservers.StripeMock(t)
	st := storetest.Open(t)
	const opToken = "fleet-op-token"
	srv := httptest.NewServer(api.New(api.Options{Store: st, FleetToken: opToken, PublicURL: "https://cloud.example.com",
		Payments: payments.Config{SecretKey: "sk_test_cli", APIBase: base}}))
	defer srv.Close()
	tenantToken := store.NewToken("fvt_")
	if err := st.CreateTenant(context.Background(), &store.Tenant{Tenant: sdk.Tenant{Name: "acme"}, TokenSHA256: store.HashToken(tenantToken)}); err != nil {
		t.Fatal(err)
	}
	op := cli{env: map[string]string{envCentral: srv.URL, envFleetToken: opToken}}
	tenant := cli{env: map[string]string{envCentral: srv.URL, envFleetToken: tenantToken}}

	tenant.tty().run(t, "fleet", "card").refused(t, "card before a customer", "no Stripe customer", "billing-customer")
	op.tty().run(t, "fleet", "billing-customer", "acme", "--create", "--email", "billing@acme.example").ok(t, "billing-customer").
		has(t, "billing-customer", "✓ Tenant acme bills to Stripe customer cus_", "next: fluxctl fleet invoices --month")
	op.tty().run(t, "fleet", "invoices", "--month", "2026-10").ok(t, "invoices --month").has(t, "invoices --month", "no tenant has a statement for 2026-10")
	tenant.tty().run(t, "fleet", "invoices").ok(t, "invoices").has(t, "invoices", "no invoices")
	list := decode[sdk.InvoiceList](t, "invoices piped", tenant.run(t, "fleet", "invoices").ok(t, "invoices piped").stdout)
	if list.Invoices == nil || len(list.Invoices) != 0 {
		t.Fatalf("invoices piped: %+v", list)
	}
	r := tenant.tty().run(t, "fleet", "card").ok(t, "card")
	if !strings.Contains(r.stdout, "✓ Open this page to save a card:\n  http") {
		t.Fatalf("card printed:\n%s", r.stdout)
	}
	for _, c := range []struct {
		what      string
		cli       cli
		args      []string
		msg, hint string
	}{
		{"a tenant creating invoices", tenant, []string{"fleet", "invoices", "--month", "2026-10"}, "operator", "only the operator creates invoices"},
		{"a month under way", op, []string{"fleet", "invoices", "--month", "2999-01"}, "has not ended", "once it has ended"},
		{"a bad month", op, []string{"fleet", "invoices", "--month", "October"}, "--month is YYYY-MM", "usage:"},
		{"both customer flags", op, []string{"fleet", "billing-customer", "acme", "--create", "--customer", "cus_1"}, "only one", "usage:"},
		{"no customer flag", op, []string{"fleet", "billing-customer", "acme"}, "only one", "usage:"},
		{"an unknown tenant", op, []string{"fleet", "billing-customer", "nobody", "--customer", "cus_1"}, "no tenant nobody", "tenant list"},
		{"not a customer id", op, []string{"fleet", "billing-customer", "acme", "--customer", "acct_1"}, "cus_", "dashboard"},
	} {
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}
}
