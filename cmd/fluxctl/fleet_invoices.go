package main

import (
	"cmp"
	"fmt"
	"strconv"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for Stripe invoices (docs/billing.md, "Stripe invoices"):
// fleet invoices (list, or --month to create), fleet billing-customer and
// fleet card.

const hintStripeOff = "the operator starts central with -stripe-secret-key (docs/billing.md, \"Stripe invoices\")"

// centsDisplay writes cents as an amount: 1234 is "12.34".
func centsDisplay(c int64) string { return fmt.Sprintf("%d.%02d", c/100, c%100) }

// invoiceColumns are the columns of fleet invoices.
func invoiceColumns(tenants *tenantNames) []column[sdk.Invoice] {
	return []column[sdk.Invoice]{
		{"month", "MONTH", false, func(i *sdk.Invoice) string { return i.Month }},
		{"tenant", "TENANT", false, func(i *sdk.Invoice) string { return cmp.Or(i.TenantName, tenants.name(i.Tenant), i.Tenant) }},
		{"total", "TOTAL", false, func(i *sdk.Invoice) string { return centsDisplay(i.TotalCents) + " " + i.Currency }},
		{"status", "STATUS", false, func(i *sdk.Invoice) string { return i.Status }},
		{"lines", "LINES", true, func(i *sdk.Invoice) string { return strconv.Itoa(len(i.Lines)) }},
		{"stripe", "STRIPE INVOICE", true, func(i *sdk.Invoice) string { return cmp.Or(i.StripeInvoiceID, "-") }},
		{"url", "PAY AT", true, func(i *sdk.Invoice) string { return cmp.Or(i.HostedURL, "-") }},
	}
}

func (f *fleet) invoicesCmd() *cobra.Command {
	var month string
	c := &cobra.Command{
		Use:     "invoices [--month YYYY-MM]",
		Aliases: []string{"invoice"},
		Short:   "Stripe invoices of the monthly statements; the operator creates a month's with --month",
		Long: `List the invoices central sent to Stripe, newest month first, with their
payment status (open, paid, payment_failed, void, uncollectible) as Stripe's
webhook reported it. A tenant sees its own, the operator every tenant's.

The operator turns a month that has ended into invoices with --month: each
tenant with a Stripe customer (fluxctl fleet billing-customer) gets one
invoice whose lines and total are its statement's, in cents. Running it
again for the same month creates nothing new. -o wide adds the Stripe
invoice and the page where it is paid.`,
		Example: `  fluxctl fleet invoices
  fluxctl fleet invoices --month 2026-10   # operator`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ctx := c.Context()
			hints := func(err error) error {
				return withHints(err, map[int]string{409: hintStripeOff + "; a month is invoiced once it has ended",
					403: "only the operator creates invoices; fluxctl fleet invoices lists yours", 502: "retry: nothing is invoiced twice"})
			}
			if month == "" {
				is, err := fc.ListInvoices(ctx)
				if err != nil {
					return hints(err)
				}
				return show(f.a, c, table[sdk.Invoice]{raw: sdk.InvoiceList{Invoices: is}, rows: is,
					cols: invoiceColumns(f.tenantNames(ctx, fc)), empty: "no invoices\n"})
			}
			if _, err := billing.MonthOf(month); err != nil {
				return usageError(c, "--month is YYYY-MM, e.g. --month 2026-10")
			}
			run, err := fc.CreateInvoices(ctx, month)
			if err != nil {
				return hints(err)
			}
			if !f.a.human() {
				return f.a.printRaw(run)
			}
			for _, i := range run.Created {
				f.a.done("", "Invoiced %s for %s: %s %s in %d lines (%s)", cmp.Or(i.TenantName, i.Tenant), i.Month, centsDisplay(i.TotalCents), i.Currency, len(i.Lines), i.StripeInvoiceID)
			}
			for _, i := range run.Existing {
				fmt.Fprintf(f.a.stdout, "  %s was invoiced for %s already (%s, %s)\n", cmp.Or(i.TenantName, i.Tenant), i.Month, i.Status, i.StripeInvoiceID)
			}
			for _, s := range run.Skipped {
				fmt.Fprintf(f.a.stdout, "  skipped %s: %s\n", s.Tenant, s.Reason)
			}
			if len(run.Created)+len(run.Existing)+len(run.Skipped) == 0 {
				fmt.Fprintf(f.a.stdout, "no tenant has a statement for %s\n", month)
			}
			return nil
		}),
	}
	c.Flags().StringVar(&month, "month", "", "create the invoices of this month, YYYY-MM (operator; the month must have ended)")
	columnsFlag(c, invoiceColumns(nil))
	return c
}

func (f *fleet) billingCustomerCmd() *cobra.Command {
	var customer, email string
	var create bool
	c := &cobra.Command{
		Use:   "billing-customer TENANT (--customer cus_... | --create [--email ADDRESS])",
		Short: "Link a tenant to its Stripe customer, or have central create one (operator)",
		Long: `Invoices go to the tenant's Stripe customer. Link one that exists with
--customer, or have central create it with --create (and --email for the
address Stripe mails invoices to).`,
		Example: `  fluxctl fleet billing-customer acme --customer cus_Q8x2hF0aZk
  fluxctl fleet billing-customer acme --create --email billing@acme.example`,
		Args: cobra.ExactArgs(1),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if create == (customer != "") {
				return usageError(c, "give --customer cus_... or --create, and only one")
			}
			a, err := fc.SetTenantBilling(c.Context(), args[0], sdk.SetBillingRequest{StripeCustomer: customer, CreateCustomer: create, Email: email})
			if err != nil {
				return withHints(err, map[int]string{409: hintStripeOff, 404: hintTenants})
			}
			if !f.a.human() {
				return f.a.printRaw(a)
			}
			f.a.done("fluxctl fleet invoices --month YYYY-MM", "Tenant %s bills to Stripe customer %s", args[0], a.StripeCustomer)
			return nil
		}),
	}
	c.Flags().StringVar(&customer, "customer", "", "an existing Stripe customer's id (cus_...)")
	c.Flags().BoolVar(&create, "create", false, "have central create the Stripe customer")
	c.Flags().StringVar(&email, "email", "", "with --create: the customer's billing address")
	return c
}

func (f *fleet) cardCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "card",
		Short: "Open Stripe's page to save a card for your invoices; prints its URL",
		Long: `Start a Stripe Checkout session in which you save a card; Stripe charges
it for your invoices. Open the printed URL in a browser.`,
		Example: `  fluxctl fleet card`,
		Args:    cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			s, err := fc.PaymentMethodSession(c.Context())
			if err != nil {
				return withHints(err, map[int]string{409: "the operator first links your tenant to Stripe (fluxctl fleet billing-customer), with Stripe on",
					400: "the operator cannot save a card for itself"})
			}
			if !f.a.human() {
				return f.a.printRaw(s)
			}
			f.a.done("", "Open this page to save a card:\n  %s", s.URL)
			return nil
		}),
	}
	return c
}
