package sdk

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/fluxvm/fluxvm/billing"
)

// Prices, metered usage, monthly statements, budgets and cost estimates. The
// money types are package billing's: amounts are billing.Micros, which read
// and write the API's decimal numbers exactly, and the price list, statement
// lines and estimates are billing's own structs, whose JSON is the API's.

// PriceHistory is GET /fleet/prices?history=true: every price list the
// operator published, oldest first.
type PriceHistory struct {
	Versions []billing.PriceVersion `json:"versions"`
}

// UsageQuery narrows Usage and UsageCSV. The window is [From, To): a zero
// From is the first instant of the month under way (UTC), a zero To is now.
// Tenant (id or name) picks one tenant for the operator; a tenant sees only
// its own row and may name only itself.
type UsageQuery struct {
	From, To time.Time
	Tenant   string
}

// UsageRow is one tenant's usage, in seconds and counts, with its name.
type UsageRow struct {
	TenantName string `json:"tenant_name"`
	billing.Usage
}

// UsageReport is GET /fleet/usage: a row per tenant with some usage in the
// window, sorted by tenant id. AsOf is the instant the running VMs and
// leases were counted up to (the earlier of now and To).
type UsageReport struct {
	From    time.Time  `json:"from"`
	To      time.Time  `json:"to"`
	AsOf    time.Time  `json:"as_of"`
	Tenants []UsageRow `json:"tenants"`
}

// Budget is a tenant's monthly budget and what the month under way has cost
// so far. State is "" without a budget, else billing.BudgetOK,
// billing.BudgetNear (from 80 %) or billing.BudgetOver.
type Budget struct {
	// Monthly is the budget in Currency (nil: none).
	Monthly            *billing.Micros `json:"monthly,omitempty"`
	Month              string          `json:"month"`
	MonthToDate        billing.Micros  `json:"month_to_date"`
	MonthToDateDisplay string          `json:"month_to_date_display"`
	State              string          `json:"state,omitempty"`
	Currency           string          `json:"currency"`
}

// BudgetRequest is PUT /fleet/tenants/me/budget and
// /fleet/tenants/{id}/budget. Monthly is always sent: nil (JSON null) and 0
// remove the budget.
type BudgetRequest struct {
	Monthly *billing.Micros `json:"monthly"`
}

// StatementQuery picks a statement: Month is "YYYY-MM" (empty: the month
// under way); Tenant (id or name) is the operator's, who must name one for
// Statement. A tenant gets its own and may name only itself.
type StatementQuery struct {
	Month  string
	Tenant string
}

// Statement is what one tenant owes for one calendar month (UTC), with its
// name and, for the month under way, its budget.
type Statement struct {
	TenantName string `json:"tenant_name"`
	billing.Statement
	Budget *Budget `json:"budget,omitempty"`
}

// StatementList is GET /fleet/billing for the operator without a tenant:
// every tenant with something counted in the month, and their sum.
type StatementList struct {
	Month        string         `json:"month"`
	Statements   []Statement    `json:"statements"`
	Total        billing.Micros `json:"total"`
	TotalDisplay string         `json:"total_display"`
}

// LeaseDryRun is POST /fleet/leases?dry_run=true: the node a lease would
// take now and what it would cost. Nothing is leased.
type LeaseDryRun struct {
	DryRun   bool             `json:"dry_run"`
	Tenant   string           `json:"tenant"`
	Node     string           `json:"node"`
	Estimate billing.Estimate `json:"estimate"`
	// EndsAt is when a lease with Hours would end (nil: open-ended); MinEnd
	// the earliest release, up to which it is billed in any case.
	EndsAt *time.Time `json:"ends_at,omitempty"`
	MinEnd time.Time  `json:"min_end"`
	// Quota is set when max_leased_hosts would refuse the real request.
	Quota string `json:"quota,omitempty"`
}

// VMDryRun is POST /fleet/vms?dry_run=true: the node the VM would land on,
// why, and what an hour of it would cost. Nothing is created, and quotas
// are not checked.
type VMDryRun struct {
	DryRun   bool             `json:"dry_run"`
	Node     string           `json:"node"`
	Reason   string           `json:"reason"`
	Estimate billing.Estimate `json:"estimate"`
	// ForTTL is the cost of the VM's whole life when the request has a TTL.
	ForTTL        *billing.Micros `json:"for_ttl,omitempty"`
	ForTTLDisplay string          `json:"for_ttl_display,omitempty"`
	Note          string          `json:"note"`
}

// Prices returns the price list in effect now.
func (f *FleetClient) Prices(ctx context.Context) (*billing.PriceVersion, error) {
	var out billing.PriceVersion
	if err := f.c.call(ctx, http.MethodGet, "/fleet/prices", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PriceHistory returns every price list published, oldest first (operator
// only).
func (f *FleetClient) PriceHistory(ctx context.Context) ([]billing.PriceVersion, error) {
	var out PriceHistory
	if err := f.c.call(ctx, http.MethodGet, "/fleet/prices", url.Values{"history": {"true"}}, nil, &out); err != nil {
		return nil, err
	}
	if out.Versions == nil {
		out.Versions = []billing.PriceVersion{}
	}
	return out.Versions, nil
}

// SetPrices publishes a new price list, in effect from now, and returns it
// as stored (operator only). Leases already running keep the price they
// started with. An invalid list is a 400 whose message names every field at
// fault.
func (f *FleetClient) SetPrices(ctx context.Context, p billing.Prices) (*billing.PriceVersion, error) {
	var out billing.PriceVersion
	if err := f.c.call(ctx, http.MethodPut, "/fleet/prices", nil, p, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (q UsageQuery) values(format string) url.Values {
	instant := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return queryOf("from", instant(q.From), "to", instant(q.To), "tenant", q.Tenant, "format", format)
}

// queryOf is a query of the key-value pairs kv whose value is not empty.
func queryOf(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	return v
}

// Usage meters VM and lease time per tenant over q's window.
func (f *FleetClient) Usage(ctx context.Context, q UsageQuery) (*UsageReport, error) {
	var out UsageReport
	if err := f.c.call(ctx, http.MethodGet, "/fleet/usage", q.values(""), nil, &out); err != nil {
		return nil, err
	}
	if out.Tenants == nil {
		out.Tenants = []UsageRow{}
	}
	return &out, nil
}

// UsageCSV is Usage as central's CSV: a header, then a row per tenant with
// the figures in hours and memory in GiB-hours.
func (f *FleetClient) UsageCSV(ctx context.Context, q UsageQuery) ([]byte, error) {
	return f.c.blob(ctx, http.MethodGet, "/fleet/usage", q.values("csv"))
}

func (q StatementQuery) values(format string) url.Values {
	return queryOf("month", q.Month, "tenant", q.Tenant, "format", format)
}

// Statement returns one tenant's statement for a month: the caller's own,
// or, for the operator, that of q.Tenant. A malformed month is a 400; a
// tenant naming another tenant gets a 403.
func (f *FleetClient) Statement(ctx context.Context, q StatementQuery) (*Statement, error) {
	var out Statement
	if err := f.c.call(ctx, http.MethodGet, "/fleet/billing", q.values(""), nil, &out); err != nil {
		return nil, err
	}
	if out.Tenant == "" {
		// Without a tenant the operator gets the list form, which has none.
		return nil, errors.New("GET /fleet/billing: central answered with every tenant's statements: " +
			"as the operator, set StatementQuery.Tenant, or call Statements")
	}
	return &out, nil
}

// Statements returns every tenant's statement for month ("YYYY-MM"; empty:
// the month under way) and their total (operator only; a tenant calls
// Statement).
func (f *FleetClient) Statements(ctx context.Context, month string) (*StatementList, error) {
	var out StatementList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/billing", StatementQuery{Month: month}.values(""), nil, &out); err != nil {
		return nil, err
	}
	if out.Statements == nil {
		// A tenant's token gets its own statement, which has no list.
		return nil, errors.New("GET /fleet/billing: central answered with one statement, not the list: " +
			"every tenant's statements are the operator's; a tenant calls Statement")
	}
	return &out, nil
}

// StatementCSV is a month's statement as central's CSV, for invoicing: a row
// per line and a total row per tenant, amounts in cents. The operator gets
// every tenant's without q.Tenant.
func (f *FleetClient) StatementCSV(ctx context.Context, q StatementQuery) ([]byte, error) {
	return f.c.blob(ctx, http.MethodGet, "/fleet/billing", q.values("csv"))
}

// SetBudget sets the calling tenant's monthly budget; nil or zero removes
// it. The answer is the budget with the month's spend so far. Budgets only
// warn: nothing is stopped.
func (f *FleetClient) SetBudget(ctx context.Context, monthly *billing.Micros) (*Budget, error) {
	var out Budget
	if err := f.c.call(ctx, http.MethodPut, "/fleet/tenants/me/budget", nil, BudgetRequest{Monthly: monthly}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetTenantBudget is SetBudget for a tenant named by id or name (operator
// only).
func (f *FleetClient) SetTenantBudget(ctx context.Context, tenant string, monthly *billing.Micros) (*Budget, error) {
	var out Budget
	if err := f.c.call(ctx, http.MethodPut, tenantPath(tenant, "budget"), nil, BudgetRequest{Monthly: monthly}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LeaseEstimate asks where CreateLease(req) would lease now and what the
// lease would cost, without leasing anything. No eligible node is
// IsConflict, as for CreateLease.
func (f *FleetClient) LeaseEstimate(ctx context.Context, req CreateLeaseRequest) (*LeaseDryRun, error) {
	var out LeaseDryRun
	if err := f.c.call(ctx, http.MethodPost, "/fleet/leases", url.Values{"dry_run": {"true"}}, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// VMEstimate asks where CreateVM(req) would place the VM now and what an
// hour of it would cost, without creating it. No fitting node is
// IsConflict, as for CreateVM.
func (f *FleetClient) VMEstimate(ctx context.Context, req FleetCreateVMRequest) (*VMDryRun, error) {
	var out VMDryRun
	if err := f.c.call(ctx, http.MethodPost, "/fleet/vms", url.Values{"dry_run": {"true"}}, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
