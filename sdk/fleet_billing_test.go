package sdk_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/sdk"
)

// testPrices is a price list as an operator writes it: decimal amounts that
// a float would not hold exactly.
const testPrices = `{"currency": "EUR",
 "mac_classes": [{"name": "Mac mini", "min_vcpus": 8, "min_memory_gib": 8, "per_hour": 0.85},
                 {"name": "Mac Studio", "min_vcpus": 20, "min_memory_gib": 64, "per_hour": 1.95}],
 "mac_per_hour": 0.6,
 "vm_per_hour": 3.6, "vcpu_per_hour": 0.36, "memory_gib_per_hour": 0.004, "macos_vm_per_hour": 0.1,
 "charge_vms_on_leased_macs": false}`

// publishPrices has the operator publish testPrices and puts the default
// (all zero) list back when the test ends, so the other tests and the
// examples meet a fleet that charges nothing.
func publishPrices(t *testing.T, op *sdk.FleetClient) billing.Prices {
	t.Helper()
	var p billing.Prices
	if err := json.Unmarshal([]byte(testPrices), &p); err != nil {
		t.Fatal(err)
	}
	v, err := op.SetPrices(t.Context(), p)
	if err != nil {
		t.Fatalf("set prices: %v", err)
	}
	if v.EffectiveFrom.IsZero() || v.Currency != "EUR" || v.MacClasses[1].PerHour != 1_950_000 || v.MemoryGiBPerHour != 4_000 {
		t.Fatalf("set prices answered %+v", v)
	}
	t.Cleanup(func() {
		if _, err := op.SetPrices(context.Background(), billing.DefaultPrices()); err != nil {
			t.Errorf("put the default prices back: %v", err)
		}
	})
	return p
}

// lineOf is the statement's line of kind, or nil.
func lineOf(st *sdk.Statement, kind string) *billing.Line {
	for i := range st.Lines {
		if st.Lines[i].Kind == kind {
			return &st.Lines[i]
		}
	}
	return nil
}

func TestBillingCallsPriceMeterAndBillATenantsVMOnARealCentral(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)
	prices := publishPrices(t, op)
	liveFleet.CatalogImage(t, "bill-img")
	name := unique("billed")
	id, token := liveFleet.Tenant(t, name, nil)
	tenant := fleetClient(t, token)

	// Prices: a tenant reads the list in effect, exactly as published; the
	// history and publishing are the operator's.
	now, err := tenant.Prices(ctx)
	if err != nil || !reflect.DeepEqual(now.Prices, prices) {
		t.Fatalf("prices as a tenant = %+v, %v; want %+v", now, err, prices)
	}
	hist, err := op.PriceHistory(ctx)
	if err != nil || len(hist) == 0 || !reflect.DeepEqual(hist[len(hist)-1].Prices, prices) || hist[len(hist)-1].EffectiveFrom != now.EffectiveFrom {
		t.Fatalf("price history = %+v, %v; want ours last", hist, err)
	}
	_, err = tenant.PriceHistory(ctx)
	wantStatus(t, "a tenant asks for the price history", err, http.StatusForbidden)
	_, err = tenant.SetPrices(ctx, prices)
	wantStatus(t, "a tenant publishes prices", err, http.StatusForbidden)
	bad := prices
	bad.Currency = "euro"
	_, err = op.SetPrices(ctx, bad)
	if ae := wantStatus(t, "an invalid price list", err, http.StatusBadRequest); !strings.Contains(ae.Message, "currency") {
		t.Fatalf("invalid price list refused with %q; want the field named", ae.Message)
	}

	// Dry runs name the node and price it as billing does, and create
	// nothing.
	node, err := op.GetNode(ctx, liveFleet.Node)
	if err != nil {
		t.Fatal(err)
	}
	le, err := tenant.LeaseEstimate(ctx, sdk.CreateLeaseRequest{Hours: 48})
	wantLease := prices.LeaseEstimate(node.Capacity.Total.VCPUs, node.Capacity.Total.MemoryMiB, 24)
	if err != nil || !le.DryRun || le.Node != liveFleet.Node || le.Tenant != id || le.Estimate != wantLease ||
		le.Estimate.Class != "Mac mini" || le.EndsAt == nil || le.EndsAt.Sub(le.MinEnd) != 24*time.Hour {
		t.Fatalf("lease estimate = %+v, %v; want %+v", le, err, wantLease)
	}
	ve, err := tenant.VMEstimate(ctx, sdk.FleetCreateVMRequest{Name: "bill-1", Image: "bill-img", TTLSeconds: 7200})
	wantVM := prices.VMEstimate(1, 256, false, false)
	if err != nil || !ve.DryRun || ve.Node != liveFleet.Node || ve.Reason == "" || ve.Estimate != wantVM ||
		ve.ForTTL == nil || *ve.ForTTL != 2*wantVM.PerHour || ve.Note == "" {
		t.Fatalf("vm estimate = %+v, %v; want %+v for 2 hours", ve, err, wantVM)
	}
	if ls, err := tenant.ListLeases(ctx, sdk.LeaseQuery{}); err != nil || len(ls) != 0 {
		t.Fatalf("leases after a dry run = %+v, %v", ls, err)
	}
	if vms, err := tenant.ListVMs(ctx); err != nil || len(vms.VMs) != 0 {
		t.Fatalf("VMs after a dry run = %+v, %v", vms, err)
	}

	// A VM runs for a few seconds: the statement has its lines, priced at
	// the list's rates, that add up to the total.
	vm, err := tenant.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: "bill-1", Image: "bill-img"}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.DeleteVM(context.Background(), vm.Node, vm.VM.ID) })
	var st *sdk.Statement
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, err = tenant.Statement(ctx, sdk.StatementQuery{})
		if err != nil {
			t.Fatal(err)
		}
		if lineOf(st, billing.KindVM) != nil && lineOf(st, billing.KindVM).QuantitySeconds >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the statement never had two seconds of VM time: %+v", st)
		}
	}
	month := time.Now().UTC().Format("2006-01")
	if st.Tenant != id || st.TenantName != name || st.Month != month || st.Currency != "EUR" || st.Forecast == nil || *st.Forecast < st.Total {
		t.Fatalf("statement = %+v", st)
	}
	var sum billing.Micros
	for _, l := range st.Lines {
		sum += l.Amount
	}
	if sum != st.Total || st.Total == 0 {
		t.Fatalf("the lines add up to %s, the total is %s", sum, st.Total)
	}
	for kind, price := range map[string]billing.Micros{billing.KindVM: prices.VMPerHour, billing.KindVCPU: prices.VCPUPerHour,
		billing.KindMemory: prices.MemoryGiBPerHour} {
		if l := lineOf(st, kind); l == nil || l.UnitPrice != price {
			t.Fatalf("%s line = %+v, want unit price %s", kind, l, price)
		}
	}
	if lineOf(st, billing.KindMacOSVM) != nil || lineOf(st, billing.KindLease) != nil {
		t.Fatalf("a Linux VM on a shared host billed as macOS or a lease: %+v", st.Lines)
	}
	if st.Budget == nil || st.Budget.Monthly != nil || st.Budget.State != "" || st.Budget.Month != month {
		t.Fatalf("statement budget without a budget = %+v", st.Budget)
	}

	// Budgets: set, seen everywhere, over when the month passes it, removed.
	five := billing.Micros(500_000_000)
	b, err := tenant.SetBudget(ctx, &five)
	if err != nil || b.Monthly == nil || *b.Monthly != five || b.State != billing.BudgetOK || b.Currency != "EUR" || b.MonthToDate == 0 {
		t.Fatalf("set budget 500 = %+v, %v", b, err)
	}
	me, err := tenant.TenantMe(ctx)
	if err != nil || me.Billing == nil || me.Billing.Monthly == nil || *me.Billing.Monthly != five ||
		me.Tenant.BudgetMonthly == nil || *me.Tenant.BudgetMonthly != five {
		t.Fatalf("tenant me after a budget = %+v, %v", me, err)
	}
	tiny := billing.Micros(1)
	if b, err := op.SetTenantBudget(ctx, name, &tiny); err != nil || b.State != billing.BudgetOver {
		t.Fatalf("operator sets a budget of 0.000001 = %+v, %v; want over", b, err)
	}
	if got, err := op.GetTenant(ctx, id); err != nil || got.BudgetMonthly == nil || *got.BudgetMonthly != tiny {
		t.Fatalf("tenant after the operator's budget = %+v, %v", got, err)
	}
	if b, err := tenant.SetBudget(ctx, nil); err != nil || b.Monthly != nil || b.State != "" {
		t.Fatalf("remove the budget = %+v, %v", b, err)
	}
	_, err = tenant.SetTenantBudget(ctx, name, &five)
	wantStatus(t, "a tenant uses the operator's budget route", err, http.StatusForbidden)

	// Refusals: another tenant's statement, a month that does not exist,
	// and each form of the statement asked of the wrong caller.
	_, err = tenant.Statement(ctx, sdk.StatementQuery{Tenant: "example"})
	wantStatus(t, "a tenant asks for another's statement", err, http.StatusForbidden)
	_, err = tenant.Statement(ctx, sdk.StatementQuery{Month: "2026-13"})
	if ae := wantStatus(t, "month 2026-13", err, http.StatusBadRequest); !strings.Contains(ae.Message, "2026-13") {
		t.Fatalf("month 2026-13 refused with %q", ae.Message)
	}
	if _, err := op.Statement(ctx, sdk.StatementQuery{}); err == nil || !strings.Contains(err.Error(), "call Statements") {
		t.Fatalf("operator Statement without a tenant = %v, want a pointer to Statements", err)
	}
	if _, err := tenant.Statements(ctx, ""); err == nil || !strings.Contains(err.Error(), "a tenant calls Statement") {
		t.Fatalf("tenant Statements = %v, want a pointer to Statement", err)
	}

	// The operator's views: the tenant's statement by name, and the list
	// with everyone's, whose total is their sum.
	if got, err := op.Statement(ctx, sdk.StatementQuery{Tenant: name}); err != nil || got.Tenant != id || len(got.Lines) == 0 {
		t.Fatalf("operator's statement of %s = %+v, %v", name, got, err)
	}
	list, err := op.Statements(ctx, month)
	if err != nil || list.Month != month {
		t.Fatalf("statements = %+v, %v", list, err)
	}
	var total billing.Micros
	for _, s := range list.Statements {
		total += s.Total
	}
	if total != list.Total || !slices.ContainsFunc(list.Statements, func(s sdk.Statement) bool { return s.Tenant == id }) {
		t.Fatalf("statements = %+v; want %s among them and the total the sum", list, name)
	}

	// CSV: a header, the lines under the tenant's name, then its total.
	raw, err := tenant.StatementCSV(ctx, sdk.StatementQuery{Month: month})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil || len(rows) < 3 || rows[0][0] != "tenant" || rows[0][9] != "amount" {
		t.Fatalf("statement CSV = %q, %v", raw, err)
	}
	last := rows[len(rows)-1]
	if last[0] != name || last[2] != "total" || last[10] != "EUR" {
		t.Fatalf("the CSV's last row = %q, want %s's total in EUR", last, name)
	}

	// Usage: the tenant's own row, in JSON and CSV.
	u, err := tenant.Usage(ctx, sdk.UsageQuery{})
	if err != nil || len(u.Tenants) != 1 || u.Tenants[0].Tenant != id || u.Tenants[0].TenantName != name ||
		u.Tenants[0].VMSeconds < 2 || u.Tenants[0].VCPUSeconds != u.Tenants[0].VMSeconds || u.Tenants[0].VMsStarted != 1 {
		t.Fatalf("usage = %+v, %v", u, err)
	}
	from := time.Now().Add(-time.Hour)
	raw, err = tenant.UsageCSV(ctx, sdk.UsageQuery{From: from, To: time.Now().Add(time.Minute), Tenant: name})
	if err != nil {
		t.Fatal(err)
	}
	rows, err = csv.NewReader(bytes.NewReader(raw)).ReadAll()
	if err != nil || len(rows) != 2 || rows[0][1] != "vm_hours" || rows[1][0] != name {
		t.Fatalf("usage CSV = %q, %v", raw, err)
	}
	_, err = tenant.Usage(ctx, sdk.UsageQuery{From: from, To: from})
	wantStatus(t, "an empty usage window", err, http.StatusBadRequest)

	// Every billing answer decodes strictly into the SDK's types and gives
	// central's JSON back, so fluxctl's -o json prints the API's JSON.
	for _, c := range []struct {
		method, path, token, body string
		into                      any
	}{
		{"GET", "/fleet/prices", token, "", &billing.PriceVersion{}},
		{"GET", "/fleet/prices?history=true", liveFleet.OperatorToken, "", &sdk.PriceHistory{}},
		{"GET", "/fleet/usage", token, "", &sdk.UsageReport{}},
		{"GET", "/fleet/usage", liveFleet.OperatorToken, "", &sdk.UsageReport{}},
		{"GET", "/fleet/billing", token, "", &sdk.Statement{}},
		{"GET", "/fleet/billing?tenant=" + name, liveFleet.OperatorToken, "", &sdk.Statement{}},
		{"GET", "/fleet/billing", liveFleet.OperatorToken, "", &sdk.StatementList{}},
		{"GET", "/fleet/billing?month=2020-01", token, "", &sdk.Statement{}},
		{"GET", "/fleet/tenants/me", token, "", &sdk.TenantMe{}},
		{"PUT", "/fleet/tenants/me/budget", token, `{"monthly": 12.5}`, &sdk.Budget{}},
		{"GET", "/fleet/tenants/" + name, liveFleet.OperatorToken, "", &sdk.Tenant{}},
		{"POST", "/fleet/vms?dry_run=true", token, `{"name": "x", "image": "bill-img", "ttl_seconds": 60}`, &sdk.VMDryRun{}},
		{"POST", "/fleet/leases?dry_run=true", liveFleet.OperatorToken, `{"tenant": "` + name + `", "hours": 30, "allow_busy": true}`, &sdk.LeaseDryRun{}},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		roundTrips(t, c.method+" "+c.path, rawDo(t, c.method, c.path, c.token, body), c.into)
	}
}

func TestALeaseKeepsItsDecimalPriceAndIsBilledItsMinimumTerm(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)
	prices := publishPrices(t, op)
	name := unique("lessee")
	_, token := liveFleet.Tenant(t, name, nil)
	tenant := fleetClient(t, token)

	// A node is leased only once its heartbeat lists no VM: the earlier
	// tests' VMs are gone from it within a heartbeat or two.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, err := op.GetNode(ctx, liveFleet.Node)
		if err != nil {
			t.Fatal(err)
		}
		if len(n.VMs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s still reports VMs: %+v", n.Name, n.VMs)
		}
	}
	est, err := tenant.LeaseEstimate(ctx, sdk.CreateLeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := tenant.CreateLease(ctx, sdk.CreateLeaseRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// The node must take VMs again for the tests after this one: release
	// the lease (forced, it is within its minimum) and scrub the node.
	t.Cleanup(func() {
		ctx := context.Background()
		if _, err := op.ReleaseLease(ctx, l.ID, true); err != nil {
			t.Errorf("release lease %s: %v", l.ID, err)
		}
		if _, err := op.ScrubNode(ctx, l.Node, false); err != nil {
			t.Errorf("scrub node %s: %v", l.Node, err)
		}
	})
	if l.PricePerHour != est.Estimate.PerHour || l.PricePerHour != prices.MacClasses[0].PerHour || l.PriceClass != "Mac mini" || l.Currency != "EUR" {
		t.Fatalf("lease = %+v; want the estimate's %s EUR an hour of class Mac mini", l, est.Estimate.PerHour)
	}
	// A new price list does not reach a running lease.
	dearer := prices
	dearer.MacClasses = slices.Clone(prices.MacClasses)
	dearer.MacClasses[0].PerHour *= 2
	if _, err := op.SetPrices(ctx, dearer); err != nil {
		t.Fatal(err)
	}
	got, err := tenant.GetLease(ctx, l.ID)
	if err != nil || got.PricePerHour != prices.MacClasses[0].PerHour {
		t.Fatalf("lease after a price change = %+v, %v; want its price kept", got, err)
	}
	roundTrips(t, "GET /fleet/leases", rawGet(t, "/fleet/leases", token), &sdk.LeaseList{})

	// Billed up to its minimum end even though it has only begun: in the
	// month it started, unless that month ends within the minimum.
	st, err := tenant.Statement(ctx, sdk.StatementQuery{Month: l.StartedAt.UTC().Format("2006-01")})
	if err != nil {
		t.Fatal(err)
	}
	line := lineOf(st, billing.KindLease)
	if line == nil || line.LeaseID != l.ID || line.UnitPrice != l.PricePerHour || line.Unit != "hour" ||
		!strings.Contains(line.Description, "Mac mini") {
		t.Fatalf("statement lines = %+v; want lease %s at %s", st.Lines, l.ID, l.PricePerHour)
	}
	if l.MinEnd.UTC().Format("2006-01") == st.Month && (line.Quantity != "24.000000" || line.Amount != 24*l.PricePerHour) {
		t.Fatalf("lease line = %+v; want 24 hours at %s", line, l.PricePerHour)
	}
}
