package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// pricesJSON is a price list as an operator writes it.
const pricesJSON = `{"currency": "EUR",
 "mac_classes": [{"name": "Mac mini", "min_vcpus": 8, "min_memory_gib": 8, "per_hour": 0.85},
                 {"name": "Mac Studio", "min_vcpus": 20, "min_memory_gib": 64, "per_hour": 1.95}],
 "mac_per_hour": 0.6,
 "vm_per_hour": 3.6, "vcpu_per_hour": 0.36, "memory_gib_per_hour": 0.004, "macos_vm_per_hour": 0.1,
 "charge_vms_on_leased_macs": false}`

// publish has the operator publish pricesJSON from a file and returns the
// list as published.
func publish(t *testing.T, f *fleettest.Fleet) billing.PriceVersion {
	t.Helper()
	v := decode[billing.PriceVersion](t, "prices --set", fleetCLI(f, f.OperatorToken).run(t, "fleet", "prices", "--set", pricesPath(t)).ok(t, "prices --set").stdout)
	if v.Currency != "EUR" || len(v.MacClasses) != 2 || v.MacClasses[0].PerHour != 850_000 || v.VCPUPerHour != 360_000 || v.EffectiveFrom.IsZero() {
		t.Fatalf("prices --set printed %+v", v)
	}
	return v
}

func TestFleetPricesAndDryRunsShowWhatThingsCostAndCreateNothing(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	op, tenant := fleetCLI(f, f.OperatorToken), fleetCLI(f, token)

	// Before any list is published, nothing is charged and the operator is
	// told how to publish one.
	op.tty().run(t, "fleet", "prices").ok(t, "default prices").has(t, "default prices", "Prices in USD an hour (the default",
		"next: fluxctl fleet prices --set prices.json")
	v := publish(t, f)

	// The operator publishes from stdin too; on a terminal that is a ✓.
	fromStdin := op.tty()
	fromStdin.stdin = pricesJSON
	fromStdin.run(t, "fleet", "prices", "--set", "-").ok(t, "prices --set -").has(t, "prices --set -",
		"✓ Published prices in EUR (2 Mac classes), in effect from ", "next: fluxctl fleet prices")

	// A tenant reads the list: a table on a terminal, the API's JSON piped.
	tenant.tty().run(t, "fleet", "prices").ok(t, "prices").has(t, "prices on a terminal", "Prices in EUR an hour (since ",
		"LEASED MAC", "Mac mini", "8 GiB", "0.85", "Mac Studio", "1.95", "any other Mac", "0.6",
		"each VM", "3.6", "each vCPU", "0.36", "each GiB of memory", "0.004", "a macOS guest, on top", "0.1", "the lease covers them")
	got := decode[billing.PriceVersion](t, "prices piped", tenant.run(t, "fleet", "prices").ok(t, "prices piped").stdout)
	if got.Prices.MacClasses[1].PerHour != v.MacClasses[1].PerHour || got.MemoryGiBPerHour != v.MemoryGiBPerHour || got.Currency != "EUR" {
		t.Fatalf("prices piped = %+v, want %+v", got, v)
	}

	// What launch and lease create would cost, on a terminal and piped.
	vm := v.VMEstimate(1, 256, false, false)
	tenant.tty().run(t, "fleet", "launch", "--image", "debian-minimal", "--ttl", "2h", "--dry-run").ok(t, "launch --dry-run").has(t,
		"launch --dry-run", "Would launch debian-minimal-1 on "+f.Node+"\n", "  placed ", "bin-pack", "  per hour ", " "+vm.PerHourDisplay+" EUR\n",
		"  for its TTL ", " "+(2*vm.PerHour).Cents()+" EUR\n", "nothing was created", "next: the same command without --dry-run")
	vd := decode[sdk.VMDryRun](t, "launch --dry-run piped",
		tenant.run(t, "fleet", "launch", "web-1", "--image", "debian-minimal", "--dry-run").ok(t, "launch --dry-run piped").stdout)
	if !vd.DryRun || vd.Node != f.Node || vd.Estimate != vm || vd.ForTTL != nil {
		t.Fatalf("launch --dry-run piped = %+v, want %+v", vd, vm)
	}
	tenant.tty().run(t, "fleet", "lease", "create", "--hours", "48", "--dry-run").ok(t, "lease create --dry-run").has(t,
		"lease create --dry-run", "Would lease node "+f.Node+" (Mac mini)", "  per hour ", " 0.85 EUR\n",
		"  minimum, 24 hours ", " 20.40 EUR, billed even if released sooner\n", "  release from ", "  ends ", "Nothing was leased.")
	ld := decode[sdk.LeaseDryRun](t, "lease create --dry-run piped",
		tenant.run(t, "fleet", "lease", "create", "--dry-run").ok(t, "lease create --dry-run piped").stdout)
	if !ld.DryRun || ld.Node != f.Node || ld.Estimate.PerHour != 850_000 || ld.Estimate.Minimum != 24*850_000 || ld.EndsAt != nil {
		t.Fatalf("lease create --dry-run piped = %+v", ld)
	}
	if vms := decode[sdk.FleetVMList](t, "vms", tenant.run(t, "fleet", "vms", "-o", "json").ok(t, "vms").stdout); len(vms.VMs) != 0 {
		t.Fatalf("a dry run launched %+v", vms.VMs)
	}
	if ls := decode[sdk.LeaseList](t, "lease list", tenant.run(t, "fleet", "lease", "list", "-o", "json").ok(t, "lease list").stdout); len(ls.Leases) != 0 {
		t.Fatalf("a dry run leased %+v", ls.Leases)
	}

	// A real lease keeps the price the dry run showed, which lease get shows.
	l := decode[sdk.Lease](t, "lease create", tenant.run(t, "fleet", "lease", "create").ok(t, "lease create").stdout)
	if l.PricePerHour != ld.Estimate.PerHour || l.PriceClass != "Mac mini" || l.Currency != "EUR" {
		t.Fatalf("lease create = %+v, want the dry run's %s EUR an hour", l, ld.Estimate.PerHour)
	}
	tenant.tty().run(t, "fleet", "lease", "get", l.ID).ok(t, "lease get").has(t, "lease get", "price         0.85 EUR an hour (Mac mini)")

	// Refusals: central's message and fluxctl's hint, or fluxctl's own.
	typo := filepath.Join(t.TempDir(), "typo.json")
	if err := os.WriteFile(typo, []byte(`{"currency": "EUR", "vm_per_hr": 0.01}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what      string
		cli       cli
		stdin     string
		args      []string
		msg, hint string
	}{
		{"a tenant publishing prices", tenant, "", []string{"fleet", "prices", "--set", pricesPath(t)},
			"this route is for the operator", "this command is for the operator"},
		{"a misspelt rate", op, "", []string{"fleet", "prices", "--set", typo},
			`unknown field "vm_per_hr"`, "fluxctl fleet prices -o json shows the fields"},
		{"an invalid currency", op, strings.Replace(pricesJSON, `"EUR"`, `"euro"`, 1), []string{"fleet", "prices", "--set", "-"},
			`currency "euro" is not three uppercase letters`, "fix the file"},
		{"a missing file", op, "", []string{"fleet", "prices", "--set", filepath.Join(t.TempDir(), "nope.json")},
			"read the price list", "give --set a JSON file"},
		{"dry run and wait", tenant, "", []string{"fleet", "launch", "--image", "debian-minimal", "--dry-run", "--wait"},
			"drop --wait", "usage: fluxctl fleet launch"},
	} {
		c.cli.stdin = c.stdin
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}
}

// pricesPath is pricesJSON in a file.
func pricesPath(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "prices.json")
	if err := os.WriteFile(path, []byte(pricesJSON), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestFleetBillBudgetAndUsageOfATenantsVM(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	acme, token := f.Tenant(t, "acme", nil)
	f.Tenant(t, "other", nil)
	op, tenant := fleetCLI(f, f.OperatorToken), fleetCLI(f, token)
	publish(t, f)
	month := time.Now().UTC().Format("2006-01")

	// A VM runs a few seconds: the bill has a line per kind of VM time.
	tenant.run(t, "fleet", "launch", "--image", "debian-minimal", "--wait").ok(t, "launch")
	var st sdk.Statement
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out := tenant.run(t, "fleet", "bill").ok(t, "bill piped").stdout
		// Piped, bill prints the API's statement: every field decodes into
		// the SDK's type, which holds exactly central's JSON.
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		st = sdk.Statement{}
		if err := dec.Decode(&st); err != nil || !strings.Contains(out, `"tenant_name": "acme"`) {
			t.Fatalf("bill piped is not central's statement (%v):\n%s", err, out)
		}
		if len(st.Lines) == 3 && st.Lines[0].QuantitySeconds >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bill never had two seconds of VM time:\n%s", out)
		}
	}
	if st.Tenant != acme || st.Month != month || st.Currency != "EUR" || st.Forecast == nil || st.Budget == nil || st.Budget.Monthly != nil {
		t.Fatalf("bill piped = %+v", st)
	}
	tenant.tty().run(t, "fleet", "bill").ok(t, "bill").has(t, "bill on a terminal", "Bill of acme for "+month+", as of ",
		"DESCRIPTION", "QUANTITY", "UNIT PRICE", "AMOUNT", "VM time", "hour", "3.6", "vCPU time", "vCPU-hour", "0.36",
		"Memory", "GiB-hour", "0.004", "Total", " EUR\n", "Forecast for the whole month: ", "Budget: none (",
		"next: fluxctl fleet budget AMOUNT")
	tenant.tty().run(t, "fleet", "bill", "-o", "wide").ok(t, "bill -o wide").has(t, "bill -o wide", "KIND", "vcpu", "memory")

	// --csv is central's CSV: a header, the lines, a total row.
	rows, err := csv.NewReader(strings.NewReader(tenant.run(t, "fleet", "bill", "--csv").ok(t, "bill --csv").stdout)).ReadAll()
	if err != nil || len(rows) != 5 || rows[0][0] != "tenant" || rows[0][9] != "amount" {
		t.Fatalf("bill --csv = %q, %v", rows, err)
	}
	for _, r := range rows[1:] {
		if r[0] != "acme" || r[1] != month || r[10] != "EUR" {
			t.Fatalf("bill --csv row %q, want acme's in EUR", r)
		}
	}
	if rows[4][2] != "total" || rows[1][2] != billing.KindVM {
		t.Fatalf("bill --csv rows = %q, want the VM lines then the total", rows)
	}

	// A budget: set, shown, seen on the bill, over when the operator makes
	// it tiny, removed.
	tenant.tty().run(t, "fleet", "budget", "500").ok(t, "budget 500").has(t, "budget 500",
		"✓ Budget set to 500.00 EUR a month (", "next: fluxctl fleet bill")
	tenant.tty().run(t, "fleet", "budget").ok(t, "budget").has(t, "budget", "tenant  acme", "month   "+month, " EUR",
		"500.00 EUR a month", "within the budget")
	b := decode[sdk.Budget](t, "budget piped", tenant.run(t, "fleet", "budget").ok(t, "budget piped").stdout)
	if b.Monthly == nil || *b.Monthly != 500_000_000 || b.State != billing.BudgetOK || b.Month != month {
		t.Fatalf("budget piped = %+v", b)
	}
	tenant.tty().run(t, "fleet", "bill").ok(t, "bill with a budget").has(t, "bill with a budget", " of 500.00 EUR spent in "+month)
	op.tty().run(t, "fleet", "budget", "0.000001", "--tenant", "acme").ok(t, "a tiny budget").has(t, "a tiny budget",
		"✓ Budget of acme set to 0.00 EUR a month", "next: fluxctl fleet bill --tenant acme")
	tenant.tty().run(t, "fleet", "bill").ok(t, "bill over budget").has(t, "bill over budget", ": over the budget (nothing is stopped)")
	tenant.tty().run(t, "fleet", "budget").ok(t, "budget over").has(t, "budget over", "over the budget")
	tenant.tty().run(t, "fleet", "status").ok(t, "status over budget").has(t, "status over budget", "of a 0.00 budget (over budget)")
	tenant.tty().run(t, "fleet", "budget", "none").ok(t, "budget none").has(t, "budget none", "✓ Budget removed (")
	if b := decode[sdk.Budget](t, "budget after none", tenant.run(t, "fleet", "budget").ok(t, "budget after none").stdout); b.Monthly != nil || b.State != "" {
		t.Fatalf("budget after none = %+v", b)
	}

	// The operator's bill: a line per tenant and the total; one tenant's
	// with --tenant.
	op.tty().run(t, "fleet", "bill").ok(t, "operator bill").has(t, "operator bill", "Bills for "+month, "TENANT", "acme", "Total",
		"next: fluxctl fleet bill --tenant TENANT")
	list := decode[sdk.StatementList](t, "operator bill piped", op.run(t, "fleet", "bill").ok(t, "operator bill piped").stdout)
	if len(list.Statements) != 1 || list.Statements[0].Tenant != acme || list.Month != month {
		t.Fatalf("operator bill piped = %+v", list)
	}
	op.tty().run(t, "fleet", "bill", "--tenant", "acme").ok(t, "operator bill --tenant").has(t, "operator bill --tenant", "Bill of acme", "VM time")

	// Usage: the tenant's row, in hours on a terminal, and central's CSV.
	tenant.tty().run(t, "fleet", "usage").ok(t, "usage").has(t, "usage", "Usage from "+month+"-01T00:00:00Z to ", "in hours",
		"TENANT", "VMS", "LEASE BILLED", "\nacme ")
	rep := decode[sdk.UsageReport](t, "usage piped", tenant.run(t, "fleet", "usage").ok(t, "usage piped").stdout)
	if len(rep.Tenants) != 1 || rep.Tenants[0].Tenant != acme || rep.Tenants[0].VMsStarted != 1 || rep.Tenants[0].VMSeconds < 2 {
		t.Fatalf("usage piped = %+v", rep)
	}
	from := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	rows, err = csv.NewReader(strings.NewReader(op.run(t, "fleet", "usage", "--from", from, "--tenant", "acme", "--csv").ok(t, "usage --csv").stdout)).ReadAll()
	if err != nil || len(rows) != 2 || rows[0][1] != "vm_hours" || rows[1][0] != "acme" || rows[1][7] != "1" {
		t.Fatalf("usage --csv = %q, %v", rows, err)
	}

	// --tenant completes tenant names for the operator.
	if comp := op.run(t, "__complete", "fleet", "bill", "--tenant", "").stdout; !strings.Contains(comp, "acme\t") || !strings.Contains(comp, "other\t") {
		t.Fatalf("completion of bill --tenant: %q", comp)
	}

	// Refusals: central's message with fluxctl's hint, or fluxctl's own.
	for _, c := range []struct {
		what      string
		cli       cli
		args      []string
		msg, hint string
	}{
		{"a month that does not exist", tenant, []string{"fleet", "bill", "--month", "2026-13"},
			`month "2026-13" is not in the form YYYY-MM`, "--month is YYYY-MM"},
		{"another tenant's bill", tenant, []string{"fleet", "bill", "--tenant", "other"},
			"a tenant sees only its own statement", "leave --tenant out"},
		{"another tenant's bill as CSV", tenant, []string{"fleet", "bill", "--tenant", "other", "--csv"},
			"a tenant sees only its own statement", "leave --tenant out"},
		{"an unknown tenant", op, []string{"fleet", "bill", "--tenant", "nope"},
			"no tenant nope", "fluxctl fleet tenant list"},
		{"another tenant's budget", tenant, []string{"fleet", "budget", "100", "--tenant", "other"},
			"this route is for the operator", "a tenant sets its own budget"},
		{"the operator's own budget", op, []string{"fleet", "budget", "100"},
			"name the tenant with --tenant", "fluxctl fleet bill"},
		{"an amount that is no number", tenant, []string{"fleet", "budget", "lots"},
			"amount lots is not a number", "usage: fluxctl fleet budget"},
		{"a window that is not RFC 3339", tenant, []string{"fleet", "usage", "--from", "yesterday"},
			`--from "yesterday" is not an RFC 3339 time`, "usage: fluxctl fleet usage"},
		{"an empty window", tenant, []string{"fleet", "usage", "--from", from, "--to", from},
			"must be after", "--to comes after --from"},
	} {
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}
	// The CSV is written as central sent it, byte for byte (a month long
	// past, so that nothing changes between the two calls).
	fc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	want, err := fc.StatementCSV(t.Context(), sdk.StatementQuery{Month: "2020-01"})
	if err != nil {
		t.Fatal(err)
	}
	if out := tenant.run(t, "fleet", "bill", "--month", "2020-01", "--csv").ok(t, "bill --csv of 2020-01").stdout; !bytes.Equal([]byte(out), want) ||
		!strings.HasPrefix(out, "tenant,month,kind,") || !strings.Contains(out, "\nacme,2020-01,total,Total,") {
		t.Fatalf("bill --csv of 2020-01 = %q, central sent %q", out, want)
	}
}
