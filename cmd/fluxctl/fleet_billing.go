package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands for prices, monthly bills, budgets and metered usage, and what
// launch --dry-run and lease create --dry-run print.

const (
	hintMonth   = "--month is YYYY-MM, e.g. --month 2026-08 (default: this month)"
	hintOwnBill = "a tenant sees only its own: leave --tenant out"
)

// billingRefusal gives central's refusals of the billing routes fluxctl's
// hints: the flags to change instead of the query parameters.
func (f *fleet) billingRefusal(err error, tenant string) error {
	var api *sdk.APIError
	if !errors.As(err, &api) {
		return err
	}
	switch {
	case api.Status == 400 && strings.Contains(api.Message, "month"):
		return &cliError{msg: api.Message, hint: hintMonth}
	case api.Status == 400 && (strings.Contains(api.Message, "from") || strings.Contains(api.Message, "to ")):
		return &cliError{msg: api.Message, hint: "--from and --to are RFC 3339 times, like 2026-10-01T00:00:00Z, and --to comes after --from"}
	case api.Status == 403 && tenant != "" && f.asTenant():
		return &cliError{msg: api.Message, hint: hintOwnBill}
	case api.Status == 404 && tenant != "":
		return &cliError{msg: api.Message, hint: hintTenants}
	}
	return err
}

func (f *fleet) pricesCmd() *cobra.Command {
	var file string
	c := &cobra.Command{
		Use:   "prices [--set FILE]",
		Short: "Show the price list in effect; the operator publishes a new one with --set",
		Long: `Show the price list in effect now: the currency, what an hour of a leased
Mac costs by class, and the hourly rates of VMs on shared hosts.

The operator publishes a new list with --set FILE (- reads stdin): a JSON
object with currency, mac_classes, mac_per_hour, vm_per_hour, vcpu_per_hour,
memory_gib_per_hour, macos_vm_per_hour and charge_vms_on_leased_macs, amounts
written as plain numbers such as 0.85. It takes effect at once; leases already
running keep the price they started with. The output of
fluxctl fleet prices -o json may be edited and given back: its effective_from
is not needed, since a list always takes effect when it is published.`,
		Example: `  fluxctl fleet prices
  fluxctl fleet prices -o json > prices.json
  fluxctl fleet prices --set prices.json`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			if !c.Flags().Changed("set") {
				v, err := fc.Prices(c.Context())
				if err != nil {
					return err
				}
				if !f.a.human() {
					return f.a.printRaw(v)
				}
				return f.printPrices(v)
			}
			p, err := f.readPrices(file)
			if err != nil {
				return err
			}
			v, err := fc.SetPrices(c.Context(), p)
			if err != nil {
				return withHints(err, map[int]string{400: "fix the file and try again; fluxctl fleet prices -o json shows a valid list"})
			}
			if !f.a.human() {
				return f.a.printRaw(v)
			}
			classes := fmt.Sprintf("%d Mac classes", len(v.MacClasses))
			if len(v.MacClasses) == 1 {
				classes = "1 Mac class"
			}
			f.a.done("fluxctl fleet prices", "Published prices in %s (%s), in effect from %s; running leases keep their price",
				v.Currency, classes, when(v.EffectiveFrom))
			return nil
		}),
	}
	c.Flags().StringVar(&file, "set", "", "publish the price list in this JSON file, - for stdin (operator)")
	_ = c.MarkFlagFilename("set", "json")
	return c
}

// readPrices reads a price list from a file or, for "-", stdin. It accepts
// what GET /fleet/prices answers too, and refuses unknown fields, so a typo
// does not silently leave a rate at zero.
func (f *fleet) readPrices(name string) (billing.Prices, error) {
	data, name, err := f.a.readInput(name)
	switch {
	case errors.Is(err, errTooLarge):
		return billing.Prices{}, &cliError{msg: name + " is " + err.Error(), hint: "a price list is a small JSON object; fluxctl fleet prices -o json shows one"}
	case err != nil:
		return billing.Prices{}, &cliError{msg: fmt.Sprintf("read the price list: %v", err), hint: "give --set a JSON file, or - to read stdin"}
	}
	var v billing.PriceVersion
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err = dec.Decode(&v)
	if err == nil {
		if _, tail := dec.Token(); tail != io.EOF {
			err = errors.New("more than one JSON value")
		}
	}
	if err != nil {
		return billing.Prices{}, &cliError{msg: fmt.Sprintf("%s is not a price list: %v", name, err),
			hint: "write one JSON object with amounts as plain numbers, like 0.85; fluxctl fleet prices -o json shows the fields"}
	}
	if v.EffectiveFrom.After(time.Now()) {
		return billing.Prices{}, &cliError{msg: fmt.Sprintf("%s takes effect at %s, but a price list takes effect when it is published",
			name, v.EffectiveFrom.Format(time.RFC3339)), hint: "remove effective_from and publish the list at that time"}
	}
	return v.Prices, nil
}

// printPrices shows a price list as two tables: leases by Mac class, then
// the rates of VM time.
func (f *fleet) printPrices(v *billing.PriceVersion) error {
	a := f.a
	since := "since " + when(v.EffectiveFrom)
	if v.EffectiveFrom.IsZero() {
		since = "the default: no prices were published, nothing is charged"
	}
	fmt.Fprintf(a.stdout, "Prices in %s an hour (%s)\n", v.Currency, since)
	if v.Note != "" {
		fmt.Fprintf(a.stdout, "Note: %s\n", v.Note)
	}
	fmt.Fprintln(a.stdout)
	tw := newTable(a.stdout)
	row(tw, "LEASED MAC", "MIN VCPUS", "MIN MEMORY", "PER HOUR")
	for _, mc := range v.MacClasses {
		row(tw, mc.Name, fmt.Sprint(mc.MinVCPUs), mib(mc.MinMemoryGiB*1024), mc.PerHour.String())
	}
	other := "any Mac"
	if len(v.MacClasses) > 0 {
		other = "any other Mac"
	}
	row(tw, other, "", "", v.MacPerHour.String())
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	tw = newTable(a.stdout)
	row(tw, "VM ON A SHARED HOST", "PER HOUR")
	for _, r := range []struct {
		what string
		rate billing.Micros
	}{{"each VM", v.VMPerHour}, {"each vCPU", v.VCPUPerHour}, {"each GiB of memory", v.MemoryGiBPerHour},
		{"a macOS guest, on top", v.MacOSVMPerHour}} {
		row(tw, r.what, r.rate.String())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	if v.ChargeVMsOnLeasedMacs {
		fmt.Fprintln(a.stdout, "VMs on a Mac you lease are charged too, on top of the lease.")
	} else {
		fmt.Fprintln(a.stdout, "VMs on a Mac you lease cost nothing more: the lease covers them.")
	}
	if v.SnapshotGiBPerHour > 0 || v.VolumeGiBPerHour > 0 {
		fmt.Fprintf(a.stdout, "Snapshots (%s) and volumes (%s) per GiB-hour are listed but not charged yet.\n", v.SnapshotGiBPerHour, v.VolumeGiBPerHour)
	}
	if v.EffectiveFrom.IsZero() && !f.asTenant() {
		fmt.Fprintln(a.stdout, "next: fluxctl fleet prices --set prices.json")
	}
	return nil
}

func (f *fleet) billCmd() *cobra.Command {
	var (
		q     sdk.StatementQuery
		asCSV bool
	)
	c := &cobra.Command{
		Use:   "bill [--month YYYY-MM] [--tenant T] [--csv]",
		Short: "A month's statement: a line per lease and kind of VM time, the total, forecast and budget",
		Long: `Show what a month costs (default: this month, so far): a line per lease and
per kind of VM time with its quantity, unit price and amount, the total, and
for the month under way the forecast to its end and the budget, saying when
the spend is near it (80 %) or over it. Amounts are in the price list's
currency, rounded to cents so that the lines add up to the total.

A tenant sees its own bill. The operator names a tenant with --tenant, or
gets one line per tenant without it. --csv prints central's CSV, for
invoicing: a row per line and a total row per tenant.`,
		Example: `  fluxctl fleet bill
  fluxctl fleet bill --month 2026-08 --csv > 2026-08.csv
  fluxctl fleet bill --tenant acme   # operator`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			ctx := c.Context()
			if asCSV {
				out, err := fc.StatementCSV(ctx, q)
				if err != nil {
					return f.billingRefusal(err, q.Tenant)
				}
				_, err = f.a.stdout.Write(out)
				return err
			}
			if !f.asTenant() && q.Tenant == "" {
				list, err := fc.Statements(ctx, q.Month)
				if err != nil {
					return f.billingRefusal(err, "")
				}
				return f.showStatements(c, list)
			}
			st, err := fc.Statement(ctx, q)
			if err != nil {
				return f.billingRefusal(err, q.Tenant)
			}
			return f.showStatement(c, st, q.Tenant)
		}),
	}
	fl := c.Flags()
	fl.StringVar(&q.Month, "month", "", "the month, YYYY-MM (default: this month)")
	fl.StringVar(&q.Tenant, "tenant", "", "the tenant's bill, by name or ID (operator; default: every tenant's)")
	fl.BoolVar(&asCSV, "csv", false, "print central's CSV unchanged")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	_ = c.RegisterFlagCompletionFunc("month", cobra.NoFileCompletions)
	columnsFlag(c, lineColumns())
	moreColumns(c, "every tenant's (the operator without --tenant)", statementColumns())
	return c
}

// lineColumns are the columns of one tenant's bill.
func lineColumns() []column[billing.Line] {
	return []column[billing.Line]{
		{"description", "DESCRIPTION", false, func(l *billing.Line) string { return l.Description }},
		{"quantity", "QUANTITY", false, func(l *billing.Line) string { return l.Quantity }},
		{"unit", "UNIT", false, func(l *billing.Line) string { return l.Unit }},
		{"unit-price", "UNIT PRICE", false, func(l *billing.Line) string { return l.UnitPrice.String() }},
		{"amount", "AMOUNT", false, func(l *billing.Line) string { return l.AmountDisplay }},
		{"kind", "KIND", true, func(l *billing.Line) string { return l.Kind }},
		{"lease", "LEASE", true, func(l *billing.Line) string { return l.LeaseID }},
		{"node", "NODE", true, func(l *billing.Line) string { return l.Node }},
		{"from", "FROM", true, func(l *billing.Line) string { return when(l.From) }},
		{"to", "TO", true, func(l *billing.Line) string { return when(l.To) }},
	}
}

// showStatement shows one tenant's month: its lines, the total, and for
// the month under way the forecast and the budget.
func (f *fleet) showStatement(c *cobra.Command, st *sdk.Statement, tenantFlag string) error {
	total := st.TotalDisplay + " " + st.Currency
	after := ""
	if st.Forecast != nil {
		after += fmt.Sprintf("\nForecast for the whole month: %s %s, if what runs now keeps running\n", st.ForecastDisplay, st.Currency)
	}
	if st.Budget != nil {
		after += budgetLine(st.Budget) + "\n"
		if st.Budget.Monthly == nil && tenantFlag == "" {
			after += "next: fluxctl fleet budget AMOUNT, to be warned at 80 % of it\n"
		}
	}
	return show(f.a, c, table[billing.Line]{raw: st, rows: st.Lines, cols: lineColumns(),
		before: fmt.Sprintf("Bill of %s for %s, as of %s\n\n", st.TenantName, st.Month, when(st.AsOf)),
		empty:  "No charges.\nTotal  " + total + "\n", footer: map[string]string{"description": "Total", "amount": total}, after: after})
}

// budgetLine says how the month's spend stands against the budget.
func budgetLine(b *sdk.Budget) string {
	if b.Monthly == nil {
		return fmt.Sprintf("Budget: none (%s %s spent in %s)", b.MonthToDateDisplay, b.Currency, b.Month)
	}
	s := fmt.Sprintf("Budget: %s of %s %s spent in %s (%s)", b.MonthToDateDisplay, b.Monthly.Cents(), b.Currency, b.Month, share(b))
	switch b.State {
	case billing.BudgetNear:
		s += ": near the budget"
	case billing.BudgetOver:
		s += ": over the budget (nothing is stopped)"
	}
	return s
}

// share is the month's spend as a percentage of the budget, for display.
func share(b *sdk.Budget) string {
	if b.Monthly == nil || *b.Monthly <= 0 {
		return ""
	}
	return fmt.Sprintf("%.0f %%", float64(b.MonthToDate)*100/float64(*b.Monthly))
}

// statementColumns are the columns of every tenant's bill.
func statementColumns() []column[sdk.Statement] {
	return []column[sdk.Statement]{
		{"tenant", "TENANT", false, func(st *sdk.Statement) string { return st.TenantName }},
		{"total", "TOTAL", false, func(st *sdk.Statement) string { return st.TotalDisplay + " " + st.Currency }},
		{"forecast", "FORECAST", false, func(st *sdk.Statement) string {
			if st.Forecast == nil {
				return ""
			}
			return st.ForecastDisplay + " " + st.Currency
		}},
		{"budget", "BUDGET", false, func(st *sdk.Statement) string {
			b := st.Budget
			if b == nil || b.Monthly == nil {
				return ""
			}
			budget := b.Monthly.Cents() + " " + st.Currency + " (" + share(b) + ")"
			switch b.State {
			case billing.BudgetNear:
				budget += " near"
			case billing.BudgetOver:
				budget += " over"
			}
			return budget
		}},
		{"id", "ID", true, func(st *sdk.Statement) string { return st.Tenant }},
		{"lines", "LINES", true, func(st *sdk.Statement) string { return fmt.Sprint(len(st.Lines)) }},
	}
}

// showStatements shows every tenant's month, one line each.
func (f *fleet) showStatements(c *cobra.Command, list *sdk.StatementList) error {
	t := table[sdk.Statement]{raw: list, rows: list.Statements, cols: statementColumns(),
		empty: fmt.Sprintf("No charges in %s: no tenant has used anything.\n", list.Month)}
	if len(list.Statements) > 0 {
		t.before = fmt.Sprintf("Bills for %s\n\n", list.Month)
		t.footer = map[string]string{"tenant": "Total", "total": list.TotalDisplay + " " + list.Statements[0].Currency}
		t.after = "next: fluxctl fleet bill --tenant TENANT\n"
	}
	return show(f.a, c, t)
}

func (f *fleet) budgetCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:   "budget [AMOUNT|none] [--tenant T]",
		Short: "Show or set a monthly budget: bill warns near it and over it; nothing is stopped",
		Long: `Without an argument, show what this month has cost so far against the
monthly budget. With AMOUNT (in the price list's currency, like 500 or 99.90),
set the budget; "none" removes it. Central warns at 80 % of the budget and
when it is passed, and fluxctl fleet bill says so; nothing is ever stopped.

A tenant shows and sets its own budget. The operator names the tenant with
--tenant.`,
		Example: `  fluxctl fleet budget 500
  fluxctl fleet budget
  fluxctl fleet budget none
  fluxctl fleet budget 2000 --tenant acme   # operator`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError(c, fmt.Sprintf("fleet budget takes at most one amount, got %d arguments", len(args)))
			}
			return nil
		},
		ValidArgsFunction: cobra.FixedCompletions([]string{"none"}, cobra.ShellCompDirectiveNoFileComp),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if !f.asTenant() && tenant == "" {
				return &cliError{msg: "the operator has no budget of its own: name the tenant with --tenant",
					hint: "fluxctl fleet bill shows every tenant's month with its budget"}
			}
			var amount *billing.Micros
			if len(args) == 1 && args[0] != "none" {
				m, err := billing.ParseMicros(args[0])
				if err != nil {
					return usageError(c, strings.TrimPrefix(err.Error(), billing.ErrInvalid.Error()+": "))
				}
				amount = &m
			}
			ctx := c.Context()
			if len(args) == 0 {
				st, err := fc.Statement(ctx, sdk.StatementQuery{Tenant: tenant})
				if err != nil {
					return f.billingRefusal(err, tenant)
				}
				if st.Budget == nil {
					return &cliError{msg: "central's statement of the month under way has no budget", hint: "fluxctl fleet bill shows the month"}
				}
				if !f.a.human() {
					return f.a.printRaw(st.Budget)
				}
				return f.printBudget(st.TenantName, st.Budget, tenant)
			}
			var (
				b   *sdk.Budget
				err error
			)
			if tenant == "" {
				b, err = fc.SetBudget(ctx, amount)
			} else {
				b, err = fc.SetTenantBudget(ctx, tenant, amount)
			}
			if err != nil {
				return withHints(err, map[int]string{403: "a tenant sets its own budget: leave --tenant out", 404: hintTenants})
			}
			if !f.a.human() {
				return f.a.printRaw(b)
			}
			whose, next := "Budget", "fluxctl fleet bill"
			if tenant != "" {
				whose, next = "Budget of "+tenant, "fluxctl fleet bill --tenant "+tenant
			}
			if b.Monthly == nil {
				f.a.done(next, "%s removed (%s %s spent in %s)", whose, b.MonthToDateDisplay, b.Currency, b.Month)
				return nil
			}
			f.a.done(next, "%s set to %s %s a month (%s %s spent in %s, %s)", whose, b.Monthly.Cents(), b.Currency,
				b.MonthToDateDisplay, b.Currency, b.Month, share(b))
			return nil
		}),
	}
	c.Flags().StringVar(&tenant, "tenant", "", "the tenant, by name or ID (operator)")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	return c
}

// printBudget shows the month's spend against the budget.
func (f *fleet) printBudget(name string, b *sdk.Budget, tenantFlag string) error {
	a := f.a
	budget, state := "none", "no budget"
	if b.Monthly != nil {
		budget = fmt.Sprintf("%s %s a month (%s spent)", b.Monthly.Cents(), b.Currency, share(b))
		switch b.State {
		case billing.BudgetNear:
			state = "near the budget (80 % or more)"
		case billing.BudgetOver:
			state = "over the budget (nothing is stopped)"
		default:
			state = "within the budget"
		}
	}
	fmt.Fprint(a.stdout, fields([][2]string{{"tenant", name}, {"month", b.Month}, {"spent", b.MonthToDateDisplay + " " + b.Currency},
		{"budget", budget}, {"state", state}}))
	if b.Monthly == nil {
		next := "fluxctl fleet budget AMOUNT"
		if tenantFlag != "" {
			next += " --tenant " + tenantFlag
		}
		fmt.Fprintf(a.stdout, "next: %s\n", next)
	}
	return nil
}

func (f *fleet) usageCmd() *cobra.Command {
	var (
		from, to string
		q        sdk.UsageQuery
		asCSV    bool
	)
	c := &cobra.Command{
		Use:   "usage [--from RFC3339] [--to RFC3339] [--tenant T] [--csv]",
		Short: "Metered VM and lease time per tenant, in hours (default: this month so far)",
		Long: `Show what each tenant used from --from up to (not including) --to: VM hours,
weighted by vCPUs and memory, macOS guest hours, lease hours (actual, and
billed: a released lease counts to its minimum term) and how many VMs and
leases started. The window defaults to this month so far, in UTC.

A tenant sees its own row; the operator every tenant's, or one with
--tenant. --csv prints central's CSV unchanged.`,
		Example: `  fluxctl fleet usage
  fluxctl fleet usage --from 2026-08-01T00:00:00Z --to 2026-09-01T00:00:00Z --csv > august.csv`,
		Args: cobra.NoArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			for _, t := range []struct {
				flag, value string
				into        *time.Time
			}{{"from", from, &q.From}, {"to", to, &q.To}} {
				if t.value == "" {
					continue
				}
				v, err := time.Parse(time.RFC3339, t.value)
				if err != nil {
					return usageError(c, fmt.Sprintf("--%s %q is not an RFC 3339 time, like 2026-10-01T00:00:00Z", t.flag, t.value))
				}
				*t.into = v
			}
			if asCSV {
				out, err := fc.UsageCSV(c.Context(), q)
				if err != nil {
					return f.billingRefusal(err, q.Tenant)
				}
				_, err = f.a.stdout.Write(out)
				return err
			}
			rep, err := fc.Usage(c.Context(), q)
			if err != nil {
				return f.billingRefusal(err, q.Tenant)
			}
			window := fmt.Sprintf("from %s to %s", rep.From.UTC().Format(time.RFC3339), rep.To.UTC().Format(time.RFC3339))
			t := table[sdk.UsageRow]{raw: rep, rows: rep.Tenants, cols: usageColumns(), empty: "No usage " + window + ".\n"}
			if len(rep.Tenants) > 0 {
				t.before = "Usage " + window + ", in hours\n\n"
			}
			return show(f.a, c, t)
		}),
	}
	fl := c.Flags()
	fl.StringVar(&from, "from", "", "the window's start, RFC 3339 (default: the first of this month, UTC)")
	fl.StringVar(&to, "to", "", "the window's end, not included, RFC 3339 (default: now)")
	fl.StringVar(&q.Tenant, "tenant", "", "only this tenant, by name or ID (operator)")
	fl.BoolVar(&asCSV, "csv", false, "print central's CSV unchanged")
	_ = c.RegisterFlagCompletionFunc("tenant", f.completeTenants())
	columnsFlag(c, usageColumns())
	return c
}

// hours shows seconds as hours with two decimals.
func hours(secs int64) string { return fmt.Sprintf("%.2f", float64(secs)/3600) }

// usageColumns are the columns of fleet usage.
func usageColumns() []column[sdk.UsageRow] {
	return []column[sdk.UsageRow]{
		{"tenant", "TENANT", false, func(u *sdk.UsageRow) string { return u.TenantName }},
		{"vms", "VMS", false, func(u *sdk.UsageRow) string { return fmt.Sprint(u.VMsStarted) }},
		{"vm", "VM", false, func(u *sdk.UsageRow) string { return hours(u.VMSeconds) }},
		{"vcpu", "VCPU", false, func(u *sdk.UsageRow) string { return hours(u.VCPUSeconds) }},
		{"memory-gib", "MEMORY GIB", false, func(u *sdk.UsageRow) string { return hours(u.MemoryMiBSeconds / 1024) }},
		{"macos", "MACOS", false, func(u *sdk.UsageRow) string { return hours(u.MacOSVMSeconds) }},
		{"leases", "LEASES", false, func(u *sdk.UsageRow) string { return fmt.Sprint(u.LeasesStarted) }},
		{"leased", "LEASED", false, func(u *sdk.UsageRow) string { return hours(u.LeaseSeconds) }},
		{"lease-billed", "LEASE BILLED", false, func(u *sdk.UsageRow) string { return hours(u.BillableLeaseSeconds) }},
		{"id", "ID", true, func(u *sdk.UsageRow) string { return u.Tenant }},
	}
}

// printVMDryRun shows where a launch would land and what it would cost.
func (f *fleet) printVMDryRun(name string, d *sdk.VMDryRun) error {
	a := f.a
	e := d.Estimate
	fmt.Fprintf(a.stdout, "Would launch %s on %s\n", name, d.Node)
	tw := newTable(a.stdout)
	fmt.Fprintf(tw, "  placed\t%s\n", d.Reason)
	fmt.Fprintf(tw, "  per hour\t%s %s%s\n", e.PerHourDisplay, e.Currency, noted(e.Note))
	if d.ForTTL != nil {
		fmt.Fprintf(tw, "  for its TTL\t%s %s\n", d.ForTTLDisplay, e.Currency)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Central's note says what a dry run leaves unchecked.
	fmt.Fprintln(a.stdout, d.Note)
	fmt.Fprintln(a.stdout, "next: the same command without --dry-run launches it")
	return nil
}

// noted puts an estimate's note (why a price is zero) after the price.
func noted(note string) string {
	if note == "" {
		return ""
	}
	return " (" + note + ")"
}

// printLeaseDryRun shows which node a lease would take and what it would
// cost, at least.
func (f *fleet) printLeaseDryRun(d *sdk.LeaseDryRun) error {
	a := f.a
	e := d.Estimate
	class := ""
	if e.Class != "" {
		class = " (" + e.Class + ")"
	}
	fmt.Fprintf(a.stdout, "Would lease node %s%s\n", d.Node, class)
	tw := newTable(a.stdout)
	fmt.Fprintf(tw, "  per hour\t%s %s%s\n", e.PerHourDisplay, e.Currency, noted(e.Note))
	fmt.Fprintf(tw, "  minimum, %s\t%s %s, billed even if released sooner\n", plural(e.MinimumHours, "hour"), e.MinimumDisplay, e.Currency)
	fmt.Fprintf(tw, "  release from\t%s\n", when(d.MinEnd))
	ends := "open-ended, until released"
	if d.EndsAt != nil {
		ends = when(*d.EndsAt)
	}
	fmt.Fprintf(tw, "  ends\t%s\n", ends)
	if err := tw.Flush(); err != nil {
		return err
	}
	if d.Quota != "" {
		fmt.Fprintf(a.stdout, "! %s\n", d.Quota)
	}
	fmt.Fprintln(a.stdout, "Nothing was leased.")
	fmt.Fprintln(a.stdout, "next: the same command without --dry-run takes the lease")
	return nil
}
