package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/metering"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
)

// Metering and billing (docs/billing.md): the ledger of VMs and the leases
// become usage figures and monthly statements, priced by the operator's price
// list. The arithmetic is package billing's and reading the rows is package
// metering's; this file checks who may see what, decodes and answers.

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
	pl, err := s.metering.Prices(r.Context())
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	setETag(w, pl.Version)
	if history {
		if PrincipalOf(r.Context()).Tenant != nil {
			jsonapi.WriteError(w, http.StatusForbidden, "the price history is for the operator", "leave history out for the prices in effect now")
			return
		}
		jsonapi.Write(w, http.StatusOK, priceHistory{Versions: pl.Versions})
		return
	}
	jsonapi.Write(w, http.StatusOK, pl.Versions[len(pl.Versions)-1])
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
	v, etag, err := s.metering.PutPrices(r.Context(), p, version...)
	if stale(w, err, "price list") {
		return
	}
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	if etag != 0 {
		setETag(w, etag)
	}
	jsonapi.Write(w, http.StatusOK, v)
}

// ---- usage ----

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
	rep, err := s.metering.Usage(r.Context(), who, from, to)
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	if format == "json" {
		jsonapi.Write(w, http.StatusOK, rep)
		return
	}
	// The CSV names each tenant in its tenant column.
	named := make([]billing.Usage, len(rep.Tenants))
	for i, row := range rep.Tenants {
		named[i] = row.Usage
		named[i].Tenant = row.TenantName
	}
	var buf bytes.Buffer
	if err := billing.WriteUsageCSV(&buf, named); err != nil {
		s.storeError(w, "write the usage", err)
		return
	}
	writeCSV(w, fmt.Sprintf("usage-%s-%s.csv", from.Format("20060102T150405Z"), to.Format("20060102T150405Z")), buf.Bytes())
}

// ---- statements ----

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
	list, err := s.metering.Statements(r.Context(), metering.StatementQuery{Tenant: who, Month: month, Budgets: format == "json"})
	if err != nil {
		s.storeError(w, "read the ledger", err)
		return
	}
	switch {
	case format == "json" && who != "":
		jsonapi.Write(w, http.StatusOK, list.Statements[0])
		return
	case format == "json":
		jsonapi.Write(w, http.StatusOK, list)
		return
	}
	// The CSV names each tenant in its tenant column, and the file the one
	// asked for.
	named := make([]billing.Statement, len(list.Statements))
	for i, st := range list.Statements {
		named[i] = st.Statement
		named[i].Tenant = st.TenantName
	}
	var buf bytes.Buffer
	if err := billing.WriteStatementsCSV(&buf, named); err != nil {
		s.storeError(w, "write the statement", err)
		return
	}
	name := "statement-" + list.Month
	if who != "" {
		name += "-" + list.Statements[0].TenantName
	}
	writeCSV(w, name+".csv", buf.Bytes())
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
	nameTarget(r, p.Tenant.Name)
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

// putBudget decodes a budget for t and sets it.
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
	b, err := s.metering.SetBudget(r.Context(), t.ID, budget)
	if err != nil {
		s.storeError(w, "read the ledger", err)
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
