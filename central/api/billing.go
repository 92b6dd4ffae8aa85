package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
)

// Metering and billing (docs/billing.md): the ledger of VMs and the leases
// become usage figures and monthly statements, priced by the operator's price
// list. The arithmetic is package billing's; this file reads the rows from
// etcd, checks who may see what, and answers.

// ---- prices ----

// priceHistory is GET /fleet/prices?history=true (operator).
type priceHistory struct {
	Versions []billing.PriceVersion `json:"versions"`
}

// getPrices is GET /fleet/prices: the price list in effect now; the operator
// may ask for every version with ?history=true.
func (s *Server) getPrices(w http.ResponseWriter, r *http.Request) {
	history, ok := boolParam(w, r, "history")
	if !ok {
		return
	}
	version, err := s.opts.Store.PricesVersion(r.Context())
	if err != nil {
		s.storeError(w, "read the prices", err)
		return
	}
	vs, err := s.opts.Store.PriceHistory(r.Context())
	if err != nil {
		s.storeError(w, "read the prices", err)
		return
	}
	setETag(w, version)
	if history {
		if PrincipalOf(r.Context()).Tenant != nil {
			jsonapi.WriteError(w, http.StatusForbidden, "the price history is for the operator", "leave history out for the prices in effect now")
			return
		}
		jsonapi.Write(w, http.StatusOK, priceHistory{Versions: vs})
		return
	}
	jsonapi.Write(w, http.StatusOK, vs[len(vs)-1])
}

// putPrices is PUT /fleet/prices: a new price list, in effect from now. A
// running lease keeps the price it started with. With If-Match it publishes
// only on the version read (412 otherwise).
func (s *Server) putPrices(w http.ResponseWriter, r *http.Request) {
	version, ok := ifMatch(w, r)
	if !ok {
		return
	}
	var p billing.Prices
	if e := jsonapi.ReadBody(w, r, &p, true, "see docs/billing.md for the price list's fields"); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	if p.MacClasses == nil {
		p.MacClasses = []billing.MacClass{}
	}
	v, err := s.opts.Store.PutPrices(r.Context(), p, s.opts.Now(), version...)
	if stale(w, err, "price list") {
		return
	}
	if err != nil {
		s.storeError(w, "set the prices", err)
		return
	}
	if now, err := s.opts.Store.PricesVersion(r.Context()); err == nil {
		setETag(w, now)
	}
	jsonapi.Write(w, http.StatusOK, v)
}

// ---- usage ----

// usageRow is one tenant's usage.
type usageRow struct {
	TenantName string `json:"tenant_name"`
	billing.Usage
}

// usageReport is GET /fleet/usage.
type usageReport struct {
	From    time.Time  `json:"from"`
	To      time.Time  `json:"to"`
	AsOf    time.Time  `json:"as_of"`
	Tenants []usageRow `json:"tenants"`
}

// usage is GET /fleet/usage?from=&to=&tenant=&format=json|csv: per tenant over
// [from, to) (default: this month so far).
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	now := s.opts.Now().UTC()
	q := r.URL.Query()
	from, ok := timeParam(w, q.Get("from"), "from", time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC))
	if !ok {
		return
	}
	to, ok := timeParam(w, q.Get("to"), "to", now)
	if !ok {
		return
	}
	if !to.After(from) {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("to (%s) must be after from (%s)", to.Format(time.RFC3339), from.Format(time.RFC3339)),
			"the window is [from, to), in RFC 3339, e.g. from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z")
		return
	}
	format, ok := formatParam(w, r)
	if !ok {
		return
	}
	who, ok := s.billedTenant(w, r, "usage")
	if !ok {
		return
	}
	vms, leases, names, err := s.billingRows(r.Context(), who, from, to)
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	us := billing.ComputeUsage(vms, leases, from, to, now)
	if format == "csv" {
		named := make([]billing.Usage, len(us))
		for i, u := range us {
			u.Tenant = names[u.Tenant]
			named[i] = u
		}
		var buf bytes.Buffer
		if err := billing.WriteUsageCSV(&buf, named); err != nil {
			s.storeError(w, "write the usage", err)
			return
		}
		writeCSV(w, fmt.Sprintf("usage-%s-%s.csv", from.Format("20060102T150405Z"), to.Format("20060102T150405Z")), buf.Bytes())
		return
	}
	rep := usageReport{From: from, To: to, AsOf: earliest(now, to), Tenants: make([]usageRow, 0, len(us))}
	for _, u := range us {
		rep.Tenants = append(rep.Tenants, usageRow{TenantName: names[u.Tenant], Usage: u})
	}
	jsonapi.Write(w, http.StatusOK, rep)
}

// ---- statements ----

// budgetView is a tenant's budget and this month's spend against it.
type budgetView struct {
	// Monthly is the budget (absent: none).
	Monthly *billing.Micros `json:"monthly,omitempty"`
	Month   string          `json:"month"`
	// MonthToDate is what the month has cost so far; State is "", "ok",
	// "near" (80 %) or "over".
	MonthToDate        billing.Micros `json:"month_to_date"`
	MonthToDateDisplay string         `json:"month_to_date_display"`
	State              string         `json:"state,omitempty"`
	Currency           string         `json:"currency"`
}

// statementView is one tenant's statement as the API shows it.
type statementView struct {
	TenantName string `json:"tenant_name"`
	billing.Statement
	// Budget is set on the month under way.
	Budget *budgetView `json:"budget,omitempty"`
}

// statementList is GET /fleet/billing for every tenant (operator).
type statementList struct {
	Month      string          `json:"month"`
	Statements []statementView `json:"statements"`
	// Total is the sum over the tenants.
	Total        billing.Micros `json:"total"`
	TotalDisplay string         `json:"total_display"`
}

// billingStatement is GET /fleet/billing?month=YYYY-MM&tenant=T&format=csv.
// A tenant gets its own statement; the operator one tenant's, or every
// tenant's without tenant.
func (s *Server) billingStatement(w http.ResponseWriter, r *http.Request) {
	now := s.opts.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if m := r.URL.Query().Get("month"); m != "" {
		var err error
		if month, err = billing.MonthOf(m); err != nil {
			jsonapi.WriteError(w, http.StatusBadRequest, err.Error(),
				"month is written YYYY-MM, e.g. month=2026-10")
			return
		}
	}
	format, ok := formatParam(w, r)
	if !ok {
		return
	}
	who, ok := s.billedTenant(w, r, "statement")
	if !ok {
		return
	}
	ctx := r.Context()
	prices, err := s.opts.Store.PriceHistory(ctx)
	if err != nil {
		s.storeError(w, "read the prices", err)
		return
	}
	vms, leases, names, err := s.billingRows(ctx, who, month, month.AddDate(0, 1, 0))
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	var sts []billing.Statement
	if who != "" {
		sts = []billing.Statement{billing.ComputeStatement(who, month, prices, vms, leases, now)}
	} else {
		sts = billing.ComputeStatements(month, prices, vms, leases, now)
	}
	if format == "csv" {
		named := make([]billing.Statement, len(sts))
		for i, st := range sts {
			st.Tenant = names[st.Tenant]
			named[i] = st
		}
		var buf bytes.Buffer
		if err := billing.WriteStatementsCSV(&buf, named); err != nil {
			s.storeError(w, "write the statement", err)
			return
		}
		name := "statement-" + month.Format("2006-01")
		if who != "" {
			name += "-" + names[who]
		}
		writeCSV(w, name+".csv", buf.Bytes())
		return
	}
	current := !now.Before(month) && now.Before(month.AddDate(0, 1, 0))
	views := make([]statementView, 0, len(sts))
	var total billing.Micros
	for _, st := range sts {
		v := statementView{TenantName: names[st.Tenant], Statement: st}
		if current {
			v.Budget = s.budgetOf(ctx, st)
		}
		views = append(views, v)
		total += st.Total
	}
	if who != "" {
		jsonapi.Write(w, http.StatusOK, views[0])
		return
	}
	jsonapi.Write(w, http.StatusOK, statementList{Month: month.Format("2006-01"), Statements: views, Total: total, TotalDisplay: total.Cents()})
}

// budgetOf reads the statement's tenant's budget and, for a budget near or
// over, records the month's budget.near / budget.over event (once each). It
// returns nil when the tenant is gone.
func (s *Server) budgetOf(ctx context.Context, st billing.Statement) *budgetView {
	t, err := s.opts.Store.GetTenant(ctx, st.Tenant)
	if err != nil {
		return nil
	}
	return s.budgetFor(ctx, t, st)
}

// budgetFor is t's budget against st, the statement of the month under way,
// recording the budget events due.
func (s *Server) budgetFor(ctx context.Context, t *store.Tenant, st billing.Statement) *budgetView {
	b := &budgetView{Month: st.Month, MonthToDate: st.Total, MonthToDateDisplay: st.Total.Cents(),
		State: billing.BudgetState(st.Total, t.Budget), Currency: st.Currency}
	if t.Budget > 0 {
		budget := t.Budget
		b.Monthly = &budget
	}
	s.noteBudget(ctx, t, b)
	return b
}

// noteBudget emits budget.near (from 80 %) and budget.over (from 100 %) once
// per tenant and month. A tenant that jumps past both gets both.
func (s *Server) noteBudget(ctx context.Context, t *store.Tenant, b *budgetView) {
	if b.Monthly == nil || (b.State != billing.BudgetNear && b.State != billing.BudgetOver) {
		return
	}
	kinds := []string{notify.BudgetNear}
	if b.State == billing.BudgetOver {
		kinds = append(kinds, notify.BudgetOver)
	}
	for _, kind := range kinds {
		what := "reached 80 % of"
		if kind == notify.BudgetOver {
			what = "reached"
		}
		e := notify.Event{Kind: kind, At: s.opts.Now(), Tenant: t.ID,
			Summary: fmt.Sprintf("tenant %s's spend in %s (%s %s) %s its monthly budget of %s %s",
				t.Name, b.Month, b.MonthToDateDisplay, b.Currency, what, b.Monthly.Cents(), b.Currency),
			Data: map[string]string{"month": b.Month, "month_to_date": b.MonthToDate.String(), "budget": b.Monthly.String(), "currency": b.Currency}}
		if _, err := s.events.Emit(ctx, e, kind+"/"+t.ID+"/"+b.Month); err != nil {
			s.log.Warn("record budget event; the next check records it", "tenant", t.ID, "kind", kind, "error", err)
		}
	}
}

// CheckBudgets computes this month's spend of every tenant with a budget and
// records the budget events due (the leader runs it with each reconcile
// pass, so an event does not wait for someone to read a statement).
func (s *Server) CheckBudgets(ctx context.Context) error {
	ts, err := s.opts.Store.ListTenants(ctx)
	if err != nil {
		return err
	}
	budgeted := map[string]*store.Tenant{}
	for i := range ts {
		if ts[i].Budget > 0 {
			budgeted[ts[i].ID] = &ts[i]
		}
	}
	if len(budgeted) == 0 {
		return nil
	}
	now := s.opts.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	prices, err := s.opts.Store.PriceHistory(ctx)
	if err != nil {
		return err
	}
	vms, leases, _, err := s.billingRows(ctx, "", month, month.AddDate(0, 1, 0))
	if err != nil {
		return err
	}
	for _, st := range billing.ComputeStatements(month, prices, vms, leases, now) {
		if t := budgeted[st.Tenant]; t != nil {
			s.budgetFor(ctx, t, st)
		}
	}
	return nil
}

// monthToDate is a tenant's budget view for the month under way.
func (s *Server) monthToDate(ctx context.Context, t *store.Tenant) (*budgetView, error) {
	now := s.opts.Now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	prices, err := s.opts.Store.PriceHistory(ctx)
	if err != nil {
		return nil, err
	}
	vms, leases, _, err := s.billingRows(ctx, t.ID, month, month.AddDate(0, 1, 0))
	if err != nil {
		return nil, err
	}
	return s.budgetFor(ctx, t, billing.ComputeStatement(t.ID, month, prices, vms, leases, now)), nil
}

// ---- budgets ----

// budgetRequest is PUT /fleet/tenants/me/budget and /fleet/tenants/{id}/budget.
type budgetRequest struct {
	// Monthly is the budget in the price list's currency; 0 or null removes
	// it. It is required (raw here to tell a null from a missing field).
	Monthly json.RawMessage `json:"monthly"`
}

// putMyBudget is PUT /fleet/tenants/me/budget (a tenant's own).
func (s *Server) putMyBudget(w http.ResponseWriter, r *http.Request) {
	p := PrincipalOf(r.Context())
	if p.Tenant == nil {
		jsonapi.WriteError(w, http.StatusBadRequest, "the operator is not a tenant",
			"set a tenant's budget with PUT /fleet/tenants/{id}/budget, or call this with the tenant's token")
		return
	}
	s.putBudget(w, r, p.Tenant)
}

// putTenantBudget is PUT /fleet/tenants/{id}/budget (operator).
func (s *Server) putTenantBudget(w http.ResponseWriter, r *http.Request) {
	t, ok := s.tenantFromPath(w, r)
	if !ok {
		return
	}
	s.putBudget(w, r, t)
}

func (s *Server) putBudget(w http.ResponseWriter, r *http.Request, t *store.Tenant) {
	var req budgetRequest
	if e := jsonapi.ReadBody(w, r, &req, true, `the body is {"monthly": 500} (0 or null removes the budget)`); e != nil {
		jsonapi.WriteError(w, e.Status, e.Msg, e.Hint)
		return
	}
	var budget billing.Micros
	switch {
	case req.Monthly == nil:
		jsonapi.WriteError(w, http.StatusBadRequest, "monthly is required", `send {"monthly": 500}, or {"monthly": null} to remove the budget`)
		return
	case string(req.Monthly) != "null":
		if err := json.Unmarshal(req.Monthly, &budget); err != nil {
			jsonapi.WriteError(w, http.StatusBadRequest, "monthly: "+err.Error(),
				`send {"monthly": 500}, or {"monthly": null} to remove the budget`)
			return
		}
	}
	nt, err := s.opts.Store.UpdateTenant(r.Context(), t.ID, func(t *store.Tenant) error {
		t.Budget = budget
		return nil
	})
	if err != nil {
		s.storeError(w, "set the budget", err)
		return
	}
	b, err := s.monthToDate(r.Context(), nt)
	if err != nil {
		s.storeError(w, "read this month's spend", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, b)
}

// ---- helpers ----

// billedTenant is the tenant whose figures the request asks for ("" all,
// for the operator without ?tenant=). A tenant sees only its own: a
// ?tenant= naming another is a 403.
func (s *Server) billedTenant(w http.ResponseWriter, r *http.Request, what string) (string, bool) {
	p := PrincipalOf(r.Context())
	ref := r.URL.Query().Get("tenant")
	if p.Tenant != nil {
		if ref != "" && ref != p.Tenant.ID && ref != p.Tenant.Name {
			jsonapi.WriteError(w, http.StatusForbidden, "a tenant sees only its own "+what, "leave tenant out")
			return "", false
		}
		return p.Tenant.ID, true
	}
	if ref == "" {
		return "", true
	}
	t, err := s.findTenant(r.Context(), ref)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			jsonapi.WriteError(w, http.StatusNotFound, "no tenant "+jsonapi.Echo(ref), "GET /fleet/tenants lists the tenants, by id and name")
			return "", false
		}
		s.storeError(w, "read tenant "+jsonapi.Echo(ref), err)
		return "", false
	}
	return t.ID, true
}

// billingRows reads the ledger entries and leases of tenant ("" every
// tenant) that may count in [from, to), as package billing's rows, and the
// tenants' names by id. The operator's own VMs are not billed and not read.
// A released lease counts up to its minimum term, so it is read if that
// reaches into the window.
func (s *Server) billingRows(ctx context.Context, tenant string, from, to time.Time) ([]billing.VM, []billing.Lease, map[string]string, error) {
	es, err := s.opts.Store.ListEntries(ctx, func(e *store.LedgerEntry) bool {
		return e.Tenant != "" && (tenant == "" || e.Tenant == tenant) && e.StartedAt.Before(to) && (e.Running() || e.EndedAt.After(from))
	})
	if err != nil {
		return nil, nil, nil, err
	}
	ls, err := s.opts.Store.ListLeases(ctx, func(l *store.Lease) bool {
		if tenant != "" && l.Tenant != tenant || !l.StartedAt.Before(to) {
			return false
		}
		return l.Active() || l.ReleasedAt.After(from) || l.MinEnd.After(from)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	vms := make([]billing.VM, 0, len(es))
	for _, e := range es {
		vms = append(vms, billingVM(&e))
	}
	leases := make([]billing.Lease, 0, len(ls))
	for _, l := range ls {
		leases = append(leases, billingLease(&l))
	}
	names := map[string]string{}
	ts, err := s.opts.Store.ListTenants(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, t := range ts {
		names[t.ID] = t.Name
	}
	// A deleted tenant's rows stay billable under its id.
	for _, v := range vms {
		if names[v.Tenant] == "" {
			names[v.Tenant] = v.Tenant
		}
	}
	for _, l := range leases {
		if names[l.Tenant] == "" {
			names[l.Tenant] = l.Tenant
		}
	}
	return vms, leases, names, nil
}

func billingVM(e *store.LedgerEntry) billing.VM {
	return billing.VM{ID: e.ID, Tenant: e.Tenant, Node: e.Node, Name: e.Name, Image: e.Image, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB,
		MacOS: e.GuestOS == store.GuestMacOS, Start: e.StartedAt, End: e.EndedAt}
}

func billingLease(l *store.Lease) billing.Lease {
	return billing.Lease{ID: l.ID, Tenant: l.Tenant, Node: l.Node, Class: l.PriceClass, PricePerHour: l.PricePerHour,
		Start: l.StartedAt, MinEnd: l.MinEnd, EndsAt: l.EndsAt, ReleasedAt: l.ReleasedAt}
}

// timeParam parses an RFC 3339 query parameter (def when empty).
func timeParam(w http.ResponseWriter, v, name string, def time.Time) (time.Time, bool) {
	if v == "" {
		return def, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s %q is not an RFC 3339 time", name, jsonapi.Echo(v)),
			"write it like 2026-10-01T00:00:00Z")
		return time.Time{}, false
	}
	return t.UTC(), true
}

// formatParam is ?format=json|csv (json when absent).
func formatParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	switch f := r.URL.Query().Get("format"); f {
	case "", "json":
		return "json", true
	case "csv":
		return "csv", true
	default:
		jsonapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("format %q is not json or csv", jsonapi.Echo(f)), "use format=json (the default) or format=csv")
		return "", false
	}
}

func writeCSV(w http.ResponseWriter, filename string, data []byte) {
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", filename))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
