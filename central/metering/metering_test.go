package metering

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// The worked example of docs/billing.md, written into a real etcd through
// the store's own writes: a Mac Studio leased by acme for 30 hours at the
// price it had then, and a Linux VM of acme's for 10 hours.

// specPrices is the spec's example price list.
const specPrices = `{"currency": "USD",
 "mac_classes": [{"name": "Mac mini", "min_vcpus": 8, "min_memory_gib": 16, "per_hour": 0.85},
                 {"name": "Mac Studio", "min_vcpus": 20, "min_memory_gib": 64, "per_hour": 1.95}],
 "mac_per_hour": 0.60,
 "vm_per_hour": 0.01, "vcpu_per_hour": 0.02, "memory_gib_per_hour": 0.004, "macos_vm_per_hour": 0.10,
 "charge_vms_on_leased_macs": false}`

var (
	october   = time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
	leaseFrom = time.Date(2026, 10, 5, 9, 0, 0, 0, time.UTC)
	leaseTo   = time.Date(2026, 10, 6, 15, 0, 0, 0, time.UTC)
	vmFrom    = time.Date(2026, 10, 12, 8, 0, 0, 0, time.UTC)
	vmTo      = time.Date(2026, 10, 12, 18, 0, 0, 0, time.UTC)
)

// clock is a settable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time)     { c.mu.Lock(); c.t = t; c.mu.Unlock() }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newTenant(t *testing.T, st *store.Store, name string) *store.Tenant {
	t.Helper()
	tn := &store.Tenant{Tenant: sdk.Tenant{Name: name}, TokenSHA256: store.HashToken("fvt_" + name)}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatal(err)
	}
	return tn
}

// runVM records a VM of tenant ("" the operator) on node and, with a
// non-zero to, ends it then.
func runVM(t *testing.T, st *store.Store, tenant, node, vmID string, vcpus, memMiB int64, from, to time.Time) *store.LedgerEntry {
	t.Helper()
	ctx := context.Background()
	e, err := st.RecordEntry(ctx, store.LedgerEntry{Tenant: tenant, Node: node, VMID: vmID, Name: vmID, Image: "debian-13",
		VCPUs: vcpus, MemoryMiB: memMiB, StartedAt: from})
	if err != nil {
		t.Fatalf("record VM %s: %v", vmID, err)
	}
	if !to.IsZero() {
		if e, err = st.EndEntry(ctx, e.ID, "deleted", to); err != nil {
			t.Fatalf("end VM %s: %v", vmID, err)
		}
	}
	return e
}

// putMac registers a healthy, idle Mac of the given size.
func putMac(t *testing.T, st *store.Store, name string, vcpus, memMiB int64) {
	t.Helper()
	if err := st.PutNode(context.Background(), &store.Node{FleetNode: sdk.FleetNode{Name: name, URL: "http://" + name + ":7777", State: store.NodeUp,
		GuestOS: []string{store.GuestMacOS}, Drivers: []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}},
		Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: vcpus, MemoryMiB: memMiB, MacOSSlots: 2}},
		LastHeartbeat: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
}

// leaseNode leases node to tenant from from (24 hours at least) at perHour
// and releases it at to.
func leaseNode(t *testing.T, st *store.Store, tenant, node, class string, perHour billing.Micros, from, to time.Time) *store.Lease {
	t.Helper()
	ctx := context.Background()
	l, err := st.CreateLease(ctx, store.CreateLeaseRequest{Tenant: tenant, Node: node, Start: from, MinHours: 24,
		PricePerHour: perHour, PriceClass: class, Currency: "USD"})
	if err != nil {
		t.Fatalf("lease %s: %v", node, err)
	}
	if l, _, err = st.EndLease(ctx, l.ID, "released", to); err != nil {
		t.Fatalf("release %s: %v", node, err)
	}
	return l
}

// example writes the worked example for a new tenant acme, with prices in
// effect from October 1, and returns acme and the lease.
func example(t *testing.T, st *store.Store) (*store.Tenant, *store.Lease) {
	t.Helper()
	var p billing.Prices
	if err := json.Unmarshal([]byte(specPrices), &p); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutPrices(context.Background(), p, october); err != nil {
		t.Fatal(err)
	}
	acme := newTenant(t, st, "acme")
	putMac(t, st, "mac-studio-1", 20, 65536)
	l := leaseNode(t, st, acme.ID, "mac-studio-1", "Mac Studio", 1_950_000, leaseFrom, leaseTo)
	runVM(t, st, acme.ID, "shared-1", "build-1", 4, 8192, vmFrom, vmTo)
	return acme, l
}

// TestStatementOfLedgerAndLeaseIsBillingsOwn: a month's statement read from
// etcd is what package billing computes from the same rows written out by
// hand (the spec's 59.72; a lease released early is billed to its
// minimum, into the next month), the operator's own VMs and another month's are left out, and the
// month under way carries a budget only when asked.
func TestStatementOfLedgerAndLeaseIsBillingsOwn(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	clk := &clock{t: time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)}
	acme, studio := example(t, st)
	other := newTenant(t, st, "other")
	runVM(t, st, "", "shared-1", "operators-own", 8, 16384, vmFrom, vmTo)
	runVM(t, st, other.ID, "shared-1", "september", 2, 2048, october.Add(-48*time.Hour), october.Add(-time.Hour))
	putMac(t, st, "mac-mini-1", 8, 16384)
	early := leaseNode(t, st, other.ID, "mac-mini-1", "Mac mini", 850_000, time.Date(2026, 9, 30, 20, 0, 0, 0, time.UTC),
		time.Date(2026, 9, 30, 22, 0, 0, 0, time.UTC))
	m := New(st, st, clk.now, hclog.NewNullLogger())

	got, err := m.Statements(ctx, StatementQuery{Tenant: acme.ID, Month: october})
	if err != nil {
		t.Fatal(err)
	}
	prices, err := st.PriceHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	vms := []billing.VM{{ID: store.EntryID("shared-1", "build-1"), Tenant: acme.ID, Node: "shared-1", Name: "build-1", Image: "debian-13",
		VCPUs: 4, MemoryMiB: 8192, Start: vmFrom, End: vmTo}}
	leases := []billing.Lease{{ID: studio.ID, Tenant: acme.ID, Node: "mac-studio-1", Class: "Mac Studio", PricePerHour: 1_950_000,
		Start: leaseFrom, MinEnd: leaseFrom.Add(24 * time.Hour), ReleasedAt: leaseTo}}
	want := billing.ComputeStatement(acme.ID, october, prices, vms, leases, clk.now())
	if len(got.Statements) != 1 || !reflect.DeepEqual(got.Statements[0].Statement, want) {
		t.Fatalf("acme's statement:\n%+v\nwant billing's\n%+v", got.Statements, want)
	}
	if s := got.Statements[0]; s.TenantName != "acme" || s.Total.Cents() != "59.72" || s.Budget != nil {
		t.Fatalf("acme's statement is named %q, totals %s, budget %+v; want acme, 59.72 and no budget unasked", s.TenantName, s.Total.Cents(), s.Budget)
	}

	// other's October: the lease released on September 30 after 2 hours
	// is billed to its minimum, 20 hours of which fall in October (17.00);
	// its September VM is not October's.
	got, err = m.Statements(ctx, StatementQuery{Tenant: other.ID, Month: october})
	if err != nil {
		t.Fatal(err)
	}
	leases = []billing.Lease{{ID: early.ID, Tenant: other.ID, Node: "mac-mini-1", Class: "Mac mini", PricePerHour: 850_000,
		Start: early.StartedAt, MinEnd: early.StartedAt.Add(24 * time.Hour), ReleasedAt: early.ReleasedAt}}
	want = billing.ComputeStatement(other.ID, october, prices, nil, leases, clk.now())
	if len(got.Statements) != 1 || !reflect.DeepEqual(got.Statements[0].Statement, want) || want.Total.Cents() != "17.00" {
		t.Fatalf("other's statement:\n%+v\nwant billing's 17.00\n%+v", got.Statements, want)
	}

	// Every tenant's October: acme and other (the operator is not
	// billed), and the month under way shows the budgets.
	all, err := m.Statements(ctx, StatementQuery{Month: october, Budgets: true})
	if err != nil {
		t.Fatal(err)
	}
	if all.Month != "2026-10" || len(all.Statements) != 2 || all.TotalDisplay != "76.72" {
		t.Fatalf("every tenant's October: %+v", all)
	}
	for _, s := range all.Statements {
		if b := s.Budget; b == nil || b.Monthly != nil || b.MonthToDate != s.Total || b.State != "" {
			t.Fatalf("%s's October budget without a budget: %+v", s.TenantName, b)
		}
	}
	sept, err := m.Statements(ctx, StatementQuery{Month: october.AddDate(0, -1, 0), Budgets: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sept.Statements) != 1 || sept.Statements[0].TenantName != "other" || sept.Statements[0].Budget != nil {
		t.Fatalf("September, closed: %+v", sept.Statements)
	}
}

// TestBudgetCrossingIsRecordedOncePerMonth: near and over are recorded
// through the store's Emit the first time the spend reaches them in a
// month, however often the budget is checked, and again in the next month.
func TestBudgetCrossingIsRecordedOncePerMonth(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	clk := &clock{t: time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)}
	acme, _ := example(t, st)
	m := New(st, st, clk.now, hclog.NewNullLogger())
	kinds := func() string {
		t.Helper()
		evs, err := st.Events(ctx, acme.ID)
		if err != nil {
			t.Fatal(err)
		}
		var ks []string
		for _, e := range evs {
			ks = append(ks, e.Type+"/"+strings.TrimPrefix(e.Link, "/fleet/billing?month="))
		}
		return strings.Join(ks, " ")
	}

	if err := m.CheckBudgets(ctx); err != nil || kinds() != "" {
		t.Fatalf("without a budget: %v, events %q", err, kinds())
	}
	b, err := m.SetBudget(ctx, acme.ID, 70_000_000) // 59.72 is 85 %
	if err != nil || b.State != billing.BudgetNear || b.Monthly == nil || *b.Monthly != 70_000_000 || b.MonthToDateDisplay != "59.72" {
		t.Fatalf("budget 70: %+v %v", b, err)
	}
	for range 2 {
		if err := m.CheckBudgets(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := kinds(); got != "budget.near/2026-10" {
		t.Fatalf("after near and two checks: %q, want budget.near once", got)
	}
	if b, err = m.SetBudget(ctx, acme.ID, 50_000_000); err != nil || b.State != billing.BudgetOver {
		t.Fatalf("budget 50: %+v %v", b, err)
	}
	if _, err := m.Statements(ctx, StatementQuery{Tenant: acme.ID, Month: october, Budgets: true}); err != nil {
		t.Fatal(err)
	}
	if err := m.CheckBudgets(ctx); err != nil {
		t.Fatal(err)
	}
	if got := kinds(); got != "budget.near/2026-10 budget.over/2026-10" {
		t.Fatalf("after over, a statement and a check: %q, want near then over, once each", got)
	}

	// November: a VM runs from the 1st; 10 hours of it (0.122 an hour)
	// pass 1.00 and jump past both marks at once.
	november := october.AddDate(0, 1, 0)
	clk.set(november)
	runVM(t, st, acme.ID, "shared-1", "build-2", 4, 8192, november, time.Time{})
	if _, err := m.SetBudget(ctx, acme.ID, 1_000_000); err != nil {
		t.Fatal(err)
	}
	if got := kinds(); got != "budget.near/2026-10 budget.over/2026-10" {
		t.Fatalf("November before any spend: %q", got)
	}
	clk.add(10 * time.Hour)
	if err := m.CheckBudgets(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := st.GetTenant(ctx, acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	b, err = m.MonthToDate(ctx, fresh)
	if err != nil || b.Month != "2026-11" || b.MonthToDateDisplay != "1.22" || b.State != billing.BudgetOver {
		t.Fatalf("November to date: %+v %v", b, err)
	}
	if got := kinds(); got != "budget.near/2026-10 budget.over/2026-10 budget.near/2026-11 budget.over/2026-11" {
		t.Fatalf("November over: %q, want near and over for November once each", got)
	}
}

// TestUsageOverARange: usage read from etcd counts what ran inside the
// window, a window split anywhere adds up, a deleted tenant's rows stay
// under its id, and the figures stop at now.
func TestUsageOverARange(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	clk := &clock{t: time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)}
	acme, _ := example(t, st)
	gone := newTenant(t, st, "gone")
	runVM(t, st, gone.ID, "shared-1", "gone-1", 1, 1024, vmFrom, vmTo)
	if err := st.DeleteTenant(ctx, gone.ID); err != nil {
		t.Fatalf("delete tenant gone: %v", err)
	}
	runVM(t, st, "", "shared-1", "operators-own", 8, 16384, vmFrom, vmTo)
	m := New(st, st, clk.now, hclog.NewNullLogger())

	rep, err := m.Usage(ctx, acme.ID, october, october.AddDate(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	const h = 3600
	if !rep.AsOf.Equal(clk.now()) || len(rep.Tenants) != 1 {
		t.Fatalf("acme's October so far: as of %s, %d rows", rep.AsOf, len(rep.Tenants))
	}
	u := rep.Tenants[0]
	if u.TenantName != "acme" || u.Tenant != acme.ID || u.VMSeconds != 10*h || u.VCPUSeconds != 40*h || u.MemoryMiBSeconds != 10*8192*h ||
		u.LeaseSeconds != 30*h || u.BillableLeaseSeconds != 30*h || u.VMsStarted != 1 || u.LeasesStarted != 1 {
		t.Fatalf("acme's October: %+v", u)
	}

	split := time.Date(2026, 10, 12, 13, 0, 0, 500_000_000, time.UTC)
	first, err := m.Usage(ctx, acme.ID, october, split)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.Usage(ctx, acme.ID, split, october.AddDate(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	a, b := first.Tenants[0], second.Tenants[0]
	if !first.AsOf.Equal(split) || a.VMSeconds+b.VMSeconds != u.VMSeconds || a.VCPUSeconds+b.VCPUSeconds != u.VCPUSeconds ||
		a.LeaseSeconds+b.LeaseSeconds != u.LeaseSeconds || a.VMsStarted+b.VMsStarted != u.VMsStarted {
		t.Fatalf("split at %s: %+v + %+v, want %+v", split, a, b, u)
	}

	// Every tenant: acme and the deleted one under its id; the operator's
	// VM is not billed. Before anything ran, nobody.
	all, err := m.Usage(ctx, "", october, october.AddDate(0, 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, r := range all.Tenants {
		names[r.Tenant] = r.TenantName
	}
	if len(all.Tenants) != 2 || names[acme.ID] != "acme" || names[gone.ID] != gone.ID {
		t.Fatalf("every tenant's October: %+v", all.Tenants)
	}
	early, err := m.Usage(ctx, "", october, leaseFrom)
	if err != nil || len(early.Tenants) != 0 {
		t.Fatalf("before anything ran: %+v %v", early, err)
	}
}

// TestPricesPublishOnlyOnTheVersionRead: a price list sent for the version
// read is published and answers the new version; sent again for that old
// version it is refused as stale, as a store failure the API can name.
func TestPricesPublishOnlyOnTheVersionRead(t *testing.T) {
	ctx := context.Background()
	st := storetest.Open(t)
	clk := &clock{t: october}
	m := New(st, st, clk.now, hclog.NewNullLogger())
	pl, err := m.Prices(ctx)
	if err != nil || len(pl.Versions) != 1 || pl.Versions[0].Currency != "USD" {
		t.Fatalf("default prices: %+v %v", pl, err)
	}
	var p billing.Prices
	if err := json.Unmarshal([]byte(`{"currency": "USD", "vm_per_hour": 0.01}`), &p); err != nil {
		t.Fatal(err)
	}
	v, etag, err := m.PutPrices(ctx, p, pl.Version)
	if err != nil || v.MacClasses == nil || etag == 0 || etag == pl.Version {
		t.Fatalf("put on the version read: %+v etag %d (was %d) %v", v, etag, pl.Version, err)
	}
	clk.add(time.Hour)
	_, _, err = m.PutPrices(ctx, p, pl.Version)
	var oe *store.OpError
	if !errors.Is(err, store.ErrStale) || !errors.As(err, &oe) || oe.Op != "set the prices" {
		t.Fatalf("put on an old version: %v, want a stale *store.OpError", err)
	}
	now, err := m.Prices(ctx)
	if err != nil || now.Version != etag || len(now.Versions) != 2 {
		t.Fatalf("prices after: %+v %v, want version %d with two entries", now, err, etag)
	}
}
