package api_test

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// Metering and billing through central: the worked example of
// docs/billing.md (billing.TestWorkedExample) played on a real central with
// real sim nodes and an injected clock.

// bxSpecPrices is the spec's example price list.
const bxSpecPrices = `{"currency": "USD",
 "mac_classes": [{"name": "Mac mini", "min_vcpus": 8, "min_memory_gib": 16, "per_hour": 0.85},
                 {"name": "Mac Studio", "min_vcpus": 20, "min_memory_gib": 64, "per_hour": 1.95}],
 "mac_per_hour": 0.60,
 "vm_per_hour": 0.01, "vcpu_per_hour": 0.02, "memory_gib_per_hour": 0.004, "macos_vm_per_hour": 0.10,
 "charge_vms_on_leased_macs": false}`

type bxLine struct {
	Kind, Description, Node, Quantity, Unit string
	UnitPrice                               json.Number `json:"unit_price"`
	Amount                                  json.Number
	AmountDisplay                           string `json:"amount_display"`
}

type bxStatement struct {
	Tenant, Month, Currency string
	TenantName              string `json:"tenant_name"`
	Lines                   []bxLine
	Total                   json.Number
	TotalDisplay            string       `json:"total_display"`
	Forecast                *json.Number `json:"forecast"`
	Budget                  *bxBudget
}

type bxBudget struct {
	Monthly     *json.Number
	MonthToDate json.Number `json:"month_to_date"`
	State       string
}

func bxDecode(t *testing.T, data []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
}

func TestBillingThroughCentral(t *testing.T) {
	clock := newLxClock(time.Date(2026, 10, 5, 9, 0, 0, 0, time.UTC))
	c := newLxCentral(t, fxStore(t, nil), clock)
	images, img := fxImages(t)
	var wg sync.WaitGroup
	for _, n := range []struct {
		name       string
		vcpus, mem int64
		os         []string
	}{{"mac-studio-1", 20, 65536, []string{"linux", "macos"}}, {"shared-1", 16, 32768, []string{"linux"}}} {
		wg.Add(1)
		go func() { defer wg.Done(); startLxNode(t, n.name, c.url, images, n.vcpus, n.mem, n.os...) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fxWaitUp(t, c.url, "mac-studio-1", "shared-1")
	fxMust(t, "PUT", c.url+"/fleet/images/debian-13", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 4, "memory_mib": 8192}, http.StatusCreated, nil)
	fxMust(t, "PUT", c.url+"/fleet/images/macos-15", fxToken, map[string]any{"guest_os": "macos", "image": img, "vcpus": 8, "memory_mib": 16384}, http.StatusCreated, nil)
	acmeID, acme := fxTenant(t, c.url, "acme", nil)
	otherID, other := fxTenant(t, c.url, "other", nil)

	// Before the operator sets prices, everything is free, in USD.
	var p map[string]any
	fxMust(t, "GET", c.url+"/fleet/prices", other, nil, http.StatusOK, &p)
	if p["currency"] != "USD" || p["mac_per_hour"] != 0.0 {
		t.Fatalf("default prices: %v", p)
	}
	fxMust(t, "PUT", c.url+"/fleet/prices", fxToken, bxSpecPrices, http.StatusOK, nil)
	var set string
	{
		_, b := fxCall(t, "GET", c.url+"/fleet/prices", acme, nil)
		set = string(b)
	}
	// Bad price lists: refused with the field named, and nothing changes.
	for _, bad := range []struct{ body, want string }{
		{`{"currency": "USD", "vm_per_hour": -1}`, `field \"vm_per_hour\" must be from 0`},
		{`{"currency": "USD", "vm_per_hour": 0.0000001}`, "6 decimals"},
		{`{"currency": "usd"}`, "currency"},
		{`{"currency": "USD", "mac_classes": [{"name": "A", "per_hour": 1}, {"name": "A", "per_hour": 2}]}`, "twice"},
		{`{"currency": "USD", "vm_per_hour": "0.01"}`, "is a string"},
		{`{"currency": "USD", "cpu_per_hour": 1}`, "cpu_per_hour"},
		{`{"currency": "USD", "vm_per_hour": 1e3}`, "exponent"},
		{`not json`, "JSON"},
	} {
		code, body := fxCall(t, "PUT", c.url+"/fleet/prices", fxToken, bad.body)
		if code != http.StatusBadRequest || !strings.Contains(string(body), bad.want) || !strings.Contains(string(body), `"hint"`) {
			t.Errorf("PUT prices %s: %d %s, want 400 naming %q with a hint", bad.body, code, body, bad.want)
		}
	}
	if _, b := fxCall(t, "GET", c.url+"/fleet/prices", acme, nil); string(b) != set {
		t.Fatalf("a refused price list changed the prices:\n%s\nwas\n%s", b, set)
	}
	if code, _ := fxCall(t, "GET", c.url+"/fleet/prices?history=true", acme, nil); code != http.StatusForbidden {
		t.Fatalf("a tenant read the price history: %d", code)
	}

	// A lease's cost before taking it: the Mac Studio class, 24 hours minimum.
	var dry struct {
		DryRun   bool `json:"dry_run"`
		Node     string
		Estimate struct {
			PerHour        json.Number `json:"per_hour"`
			Minimum        json.Number
			MinimumHours   int64  `json:"minimum_hours"`
			MinimumDisplay string `json:"minimum_display"`
			Class, Note    string
		}
		ForTTL *json.Number `json:"for_ttl"`
	}
	_, b := fxCall(t, "POST", c.url+"/fleet/leases?dry_run=true", acme, map[string]any{"node": "mac-studio-1"})
	bxDecode(t, b, &dry)
	if !dry.DryRun || dry.Node != "mac-studio-1" || dry.Estimate.PerHour != "1.95" || dry.Estimate.Class != "Mac Studio" ||
		dry.Estimate.MinimumHours != 24 || dry.Estimate.Minimum != "46.8" || dry.Estimate.MinimumDisplay != "46.80" {
		t.Fatalf("lease dry run: %s", b)
	}
	var leases struct{ Leases []lxLease }
	fxMust(t, "GET", c.url+"/fleet/leases", acme, nil, http.StatusOK, &leases)
	if len(leases.Leases) != 0 {
		t.Fatalf("a dry run leased: %+v", leases.Leases)
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/leases?dry_run=maybe", acme, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "dry_run") {
		t.Fatalf("dry_run=maybe: %d %s", code, body)
	}

	// Oct 5 09:00: the lease, priced now.
	var lease struct {
		ID           string
		PricePerHour json.Number `json:"price_per_hour"`
		PriceClass   string      `json:"price_class"`
	}
	_, b = fxCall(t, "POST", c.url+"/fleet/leases", acme, map[string]any{"node": "mac-studio-1"})
	bxDecode(t, b, &lease)
	if lease.PricePerHour != "1.95" || lease.PriceClass != "Mac Studio" {
		t.Fatalf("lease: %s", b)
	}
	// A price change while it runs does not touch it: Mac Studio doubles
	// (nothing else changes, so the example's VM figures stay).
	clock.advance(time.Hour)
	fxMust(t, "PUT", c.url+"/fleet/prices", fxToken, strings.Replace(bxSpecPrices, "1.95", "3.90", 1), http.StatusOK, nil)

	// Oct 5 10:00: a macOS VM on the leased Mac costs nothing while leased.
	_, b = fxCall(t, "POST", c.url+"/fleet/vms?dry_run=true", acme, map[string]any{"name": "xcode-1", "image": "macos-15", "node": "mac-studio-1"})
	bxDecode(t, b, &dry)
	if dry.Node != "mac-studio-1" || dry.Estimate.PerHour != "0" || !strings.Contains(dry.Estimate.Note, "lease") {
		t.Fatalf("macOS VM dry run on the tenant's lease: %s", b)
	}
	var mac sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", acme, map[string]any{"name": "xcode-1", "image": "macos-15", "node": "mac-studio-1"}, http.StatusCreated, &mac)

	// Oct 6 14:00 it goes; 15:00 (30 h) the lease is released.
	clock.advance(28 * time.Hour)
	fxMust(t, "DELETE", c.url+"/fleet/vms/mac-studio-1/"+mac.VM.ID, acme, nil, http.StatusNoContent, nil)
	clock.advance(time.Hour)
	fxMust(t, "POST", c.url+"/fleet/leases/"+lease.ID+"/release", acme, nil, http.StatusOK, nil)

	// Oct 12 08:00-18:00: a Linux VM on the shared host, 4 vCPUs and 8 GiB.
	clock.advance(5*24*time.Hour + 17*time.Hour)
	body := map[string]any{"name": "build-1", "image": "debian-13", "node": "shared-1", "ttl_seconds": 36000}
	_, b = fxCall(t, "POST", c.url+"/fleet/vms?dry_run=true", acme, body)
	bxDecode(t, b, &dry)
	if dry.Node != "shared-1" || dry.Estimate.PerHour != "0.122" || dry.ForTTL == nil || *dry.ForTTL != "1.22" {
		t.Fatalf("linux VM dry run: %s", b)
	}
	var vms sdk.FleetVMList
	fxMust(t, "GET", c.url+"/fleet/vms", acme, nil, http.StatusOK, &vms)
	if len(vms.VMs) != 0 {
		t.Fatalf("a dry run created a VM: %+v", vms.VMs)
	}
	delete(body, "ttl_seconds")
	var build sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", acme, body, http.StatusCreated, &build)
	clock.advance(10 * time.Hour)
	fxMust(t, "DELETE", c.url+"/fleet/vms/shared-1/"+build.VM.ID, acme, nil, http.StatusNoContent, nil)

	// Oct 20: October is under way: the example's figures, and a forecast.
	clock.advance(8*24*time.Hour - 18*time.Hour)
	check := func(who string, st bxStatement, forecast bool) {
		t.Helper()
		type line struct{ kind, qty, amount string }
		var got []line
		for _, l := range st.Lines {
			got = append(got, line{l.Kind, l.Quantity, l.AmountDisplay})
		}
		want := []line{{"lease", "30.000000", "58.50"}, {"vm", "10.000000", "0.10"}, {"vcpu", "40.000000", "0.80"}, {"memory", "80.000000", "0.32"}}
		if len(got) != len(want) || st.TotalDisplay != "59.72" || st.Total != "59.72" || st.Tenant != acmeID || st.TenantName != "acme" {
			t.Fatalf("%s: statement %+v, want lines %v and 59.72", who, st, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: line %d is %v, want %v", who, i, got[i], want[i])
			}
		}
		if st.Lines[0].UnitPrice != "1.95" || st.Lines[0].Node != "mac-studio-1" {
			t.Fatalf("%s: the lease line was re-priced: %+v", who, st.Lines[0])
		}
		if forecast != (st.Forecast != nil) {
			t.Fatalf("%s: forecast %v, want one: %v", who, st.Forecast, forecast)
		}
	}
	var st bxStatement
	_, b = fxCall(t, "GET", c.url+"/fleet/billing", acme, nil)
	bxDecode(t, b, &st)
	check("acme, October under way", st, true)
	if *st.Forecast != st.Total { // nothing runs any more
		t.Fatalf("forecast %s with nothing running, want the total %s", *st.Forecast, st.Total)
	}
	if st.Budget == nil || st.Budget.Monthly != nil || st.Budget.State != "" || st.Budget.MonthToDate != "59.72" {
		t.Fatalf("budget view without a budget: %+v", st.Budget)
	}
	// The operator sees the same by tenant name, and every tenant's.
	_, b = fxCall(t, "GET", c.url+"/fleet/billing?month=2026-10&tenant=acme", fxToken, nil)
	bxDecode(t, b, &st)
	check("operator, acme", st, true)
	var all struct {
		Statements []bxStatement
		Total      json.Number
	}
	_, b = fxCall(t, "GET", c.url+"/fleet/billing?month=2026-10", fxToken, nil)
	bxDecode(t, b, &all)
	if len(all.Statements) != 1 || all.Total != "59.72" {
		t.Fatalf("every tenant's statements: %s", b)
	}

	// Usage, October so far.
	var usage struct {
		Tenants []map[string]any
	}
	fxMust(t, "GET", c.url+"/fleet/usage?from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z", acme, nil, http.StatusOK, &usage)
	if len(usage.Tenants) != 1 {
		t.Fatalf("acme's usage: %+v", usage)
	}
	u := usage.Tenants[0]
	h := 3600.0
	for k, want := range map[string]float64{"vm_seconds": 38 * h, "vcpu_seconds": 28*8*h + 10*4*h, "memory_mib_seconds": 28*16384*h + 10*8192*h,
		"macos_vm_seconds": 28 * h, "lease_seconds": 30 * h, "billable_lease_seconds": 30 * h, "vms_started": 2, "leases_started": 1} {
		if u[k] != want {
			t.Errorf("usage %s = %v, want %v", k, u[k], want)
		}
	}
	if u["tenant"] != acmeID || u["tenant_name"] != "acme" {
		t.Errorf("usage row names %v %v", u["tenant"], u["tenant_name"])
	}
	// Split at any instant, the window adds up.
	var first, second struct{ Tenants []map[string]any }
	fxMust(t, "GET", c.url+"/fleet/usage?from=2026-10-01T00:00:00Z&to=2026-10-06T00:00:00.5Z", acme, nil, http.StatusOK, &first)
	fxMust(t, "GET", c.url+"/fleet/usage?from=2026-10-06T00:00:00.5Z&to=2026-11-01T00:00:00Z", acme, nil, http.StatusOK, &second)
	for _, k := range []string{"vm_seconds", "vcpu_seconds", "memory_mib_seconds", "lease_seconds", "billable_lease_seconds", "vms_started"} {
		if first.Tenants[0][k].(float64)+second.Tenants[0][k].(float64) != u[k] {
			t.Errorf("usage %s: %v + %v != %v", k, first.Tenants[0][k], second.Tenants[0][k], u[k])
		}
	}

	// Another tenant sees only itself: its own empty statement and usage,
	// and 403 for acme's.
	for _, path := range []string{"/fleet/billing?tenant=acme", "/fleet/billing?tenant=" + acmeID, "/fleet/usage?tenant=acme"} {
		if code, body := fxCall(t, "GET", c.url+path, other, nil); code != http.StatusForbidden || !strings.Contains(string(body), "only its own") {
			t.Errorf("other GET %s: %d %s", path, code, body)
		}
	}
	_, b = fxCall(t, "GET", c.url+"/fleet/billing", other, nil)
	st = bxStatement{}
	bxDecode(t, b, &st)
	if st.Tenant != otherID || len(st.Lines) != 0 || st.Total != "0" {
		t.Fatalf("other's statement: %s", b)
	}
	fxMust(t, "GET", c.url+"/fleet/usage", other, nil, http.StatusOK, &usage)
	if len(usage.Tenants) != 0 {
		t.Fatalf("other's usage shows %+v", usage.Tenants)
	}

	// Budgets: 70 is near (85 %), 50 over; each event once a month.
	var bud bxBudget
	_, b = fxCall(t, "PUT", c.url+"/fleet/tenants/me/budget", acme, map[string]any{"monthly": 70})
	bxDecode(t, b, &bud)
	if bud.State != "near" || bud.Monthly == nil || *bud.Monthly != "70" || bud.MonthToDate != "59.72" {
		t.Fatalf("budget 70: %s", b)
	}
	fxMust(t, "PUT", c.url+"/fleet/tenants/acme/budget", fxToken, map[string]any{"monthly": 50}, http.StatusOK, &bud)
	if bud.State != "over" {
		t.Fatalf("budget 50: %+v", bud)
	}
	var me struct {
		Tenant struct {
			Budget json.Number `json:"budget_monthly"`
		}
		Billing bxBudget
	}
	_, b = fxCall(t, "GET", c.url+"/fleet/tenants/me", acme, nil)
	bxDecode(t, b, &me)
	if me.Tenant.Budget != "50" || me.Billing.State != "over" || me.Billing.MonthToDate != "59.72" {
		t.Fatalf("tenants/me: %s", b)
	}
	if _, err := c.srv.Reconcile(context.Background()); err != nil { // the leader's budget check
		t.Fatal(err)
	}
	evs, err := c.st.Events(context.Background(), acmeID)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		if strings.HasPrefix(e.Type, "budget.") { // the others: vm.created, lease.created, ...
			kinds = append(kinds, e.Type)
		}
	}
	if strings.Join(kinds, ",") != "budget.near,budget.over" {
		t.Fatalf("budget events %v, want budget.near then budget.over, once each", kinds)
	}
	for _, bad := range []any{map[string]any{"monthly": -5}, map[string]any{"monthly": "500"}, map[string]any{"month": 5}, `{}`, nil} {
		code, body := fxCall(t, "PUT", c.url+"/fleet/tenants/me/budget", acme, bad)
		if code != http.StatusBadRequest && code != http.StatusUnsupportedMediaType {
			t.Errorf("budget %v: %d %s, want a 4xx", bad, code, body)
		}
	}
	if code, body := fxCall(t, "PUT", c.url+"/fleet/tenants/me/budget", fxToken, map[string]any{"monthly": 5}); code != http.StatusBadRequest ||
		!strings.Contains(string(body), "/fleet/tenants/{id}/budget") {
		t.Errorf("the operator's own budget: %d %s", code, body)
	}
	if code, _ := fxCall(t, "PUT", c.url+"/fleet/tenants/nobody/budget", fxToken, map[string]any{"monthly": 5}); code != http.StatusNotFound {
		t.Errorf("budget of no tenant: %d", code)
	}
	bud = bxBudget{}
	fxMust(t, "PUT", c.url+"/fleet/tenants/me/budget", acme, map[string]any{"monthly": nil}, http.StatusOK, &bud)
	if bud.Monthly != nil || bud.State != "" {
		t.Fatalf("budget removed: %+v", bud)
	}

	// November 3: October is closed (no forecast); its CSV adds up.
	clock.advance(14 * 24 * time.Hour)
	_, b = fxCall(t, "GET", c.url+"/fleet/billing?month=2026-10", acme, nil)
	st = bxStatement{}
	bxDecode(t, b, &st)
	check("acme, October closed", st, false)
	code, data := fxCall(t, "GET", c.url+"/fleet/billing?month=2026-10&format=csv", acme, nil)
	if code != http.StatusOK {
		t.Fatalf("csv: %d %s", code, data)
	}
	rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatalf("the statement CSV does not parse: %v\n%s", err, data)
	}
	if len(rows) != 6 || rows[0][0] != "tenant" || rows[1][0] != "acme" || rows[5][2] != "total" || rows[5][9] != "59.72" {
		t.Fatalf("statement CSV:\n%s", data)
	}
	for _, bad := range []struct{ path, want string }{
		{"/fleet/billing?month=2026-13", "month"},
		{"/fleet/billing?month=October", "YYYY-MM"},
		{"/fleet/billing?format=xml", "format"},
		{"/fleet/usage?from=yesterday", "RFC 3339"},
		{"/fleet/usage?from=2026-11-01T00:00:00Z&to=2026-10-01T00:00:00Z", "must be after"},
		{"/fleet/usage?format=pdf", "format"},
	} {
		if code, body := fxCall(t, "GET", c.url+bad.path, acme, nil); code != http.StatusBadRequest || !strings.Contains(string(body), bad.want) {
			t.Errorf("GET %s: %d %s, want 400 naming %q", bad.path, code, body, bad.want)
		}
	}
	if code, _ := fxCall(t, "GET", c.url+"/fleet/billing?tenant=nobody", fxToken, nil); code != http.StatusNotFound {
		t.Errorf("statement of no tenant: %d", code)
	}
}
