package billing

import (
	"bytes"
	"encoding/csv"
	"reflect"
	"testing"
	"time"
)

func TestCSVCellDefusesFormulas(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"=1+1", "'=1+1"}, {"+1", "'+1"}, {"-1", "'-1"}, {"@SUM(A1)", "'@SUM(A1)"},
		{"\t=1+1", "'\t=1+1"}, {"\r=1+1", "'\r=1+1"},
		{"acme", "acme"}, {"", ""}, {"a=b", "a=b"}, {"'quoted", "'quoted"}, {"0.85", "0.85"},
	} {
		if got := CSVCell(c.in); got != c.want {
			t.Errorf("CSVCell(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

const hyperlink = `=HYPERLINK("http://x","y")`

func readCSV(t *testing.T, b []byte) [][]string {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("written CSV does not parse: %v\n%s", err, b)
	}
	return recs
}

func TestStatementsCSVHasLinesTotalsAndNoFormulas(t *testing.T) {
	start := at("2026-10-05T09:00:00Z")
	l := lease24("-lease", hyperlink, "@mac", 850_000, start)
	l.Class = "+Mini"
	l.ReleasedAt = start.Add(time.Hour)
	vm := VM{ID: "v", Tenant: hyperlink, Node: "shared-1", Name: hyperlink, VCPUs: 1, MemoryMiB: 1024,
		Start: start, End: start.Add(90 * time.Minute)}
	sts := ComputeStatements(october, since(specPrices()), []VM{vm}, []Lease{l}, at("2026-11-02T00:00:00Z"))
	var buf bytes.Buffer
	if err := WriteStatementsCSV(&buf, sts); err != nil {
		t.Fatal(err)
	}
	tenant := "'" + hyperlink
	// 20.40 + 0.015 + 0.03 + 0.006 = 20.451, shown 20.45: the missing cent
	// goes to memory's 0.006 before VM time's 0.015.
	want := [][]string{
		{"tenant", "month", "kind", "description", "lease_id", "node", "quantity", "unit", "unit_price", "amount", "currency"},
		{tenant, "2026-10", "lease", "Lease of @mac (+Mini)", "'-lease", "'@mac", "24.000000", "hour", "0.85", "20.40", "USD"},
		{tenant, "2026-10", "vm", "VM time", "", "", "1.500000", "hour", "0.01", "0.01", "USD"},
		{tenant, "2026-10", "vcpu", "vCPU time", "", "", "1.500000", "vCPU-hour", "0.02", "0.03", "USD"},
		{tenant, "2026-10", "memory", "Memory", "", "", "1.500000", "GiB-hour", "0.004", "0.01", "USD"},
		{tenant, "2026-10", "total", "Total", "", "", "", "", "", "20.45", "USD"},
	}
	if got := readCSV(t, buf.Bytes()); !reflect.DeepEqual(got, want) {
		t.Fatalf("CSV\n%q\nwant\n%q", got, want)
	}
}

func TestUsageCSVShowsHoursFromIntegers(t *testing.T) {
	us := []Usage{
		{Tenant: hyperlink, VMSeconds: 5400, VCPUSeconds: 1, MemoryMiBSeconds: 1024 * 5400, MacOSVMSeconds: 7200,
			LeaseSeconds: 3 * 3600, BillableLeaseSeconds: 24 * 3600, VMsStarted: 3, LeasesStarted: 1},
		{Tenant: ""},
	}
	var buf bytes.Buffer
	if err := WriteUsageCSV(&buf, us); err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"tenant", "vm_hours", "vcpu_hours", "memory_gib_hours", "macos_vm_hours", "lease_hours", "billable_lease_hours", "vms_started", "leases_started"},
		{"'" + hyperlink, "1.500000", "0.000278", "1.500000", "2.000000", "3.000000", "24.000000", "3", "1"},
		{"", "0.000000", "0.000000", "0.000000", "0.000000", "0.000000", "0.000000", "0", "0"},
	}
	if got := readCSV(t, buf.Bytes()); !reflect.DeepEqual(got, want) {
		t.Fatalf("CSV\n%q\nwant\n%q", got, want)
	}
}
