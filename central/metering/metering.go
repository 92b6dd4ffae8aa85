// Package metering reads central's ledger of VMs and its leases into usage
// reports and monthly statements, priced by the operator's price list and
// named by tenant. It keeps each tenant's monthly budget and records
// budget.near and budget.over once a month when the spend reaches them.
package metering

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Store is what metering needs of central's store.
type Store interface {
	// PriceHistory reads every version of the price list, oldest first.
	PriceHistory(ctx context.Context) ([]billing.PriceVersion, error)
	// PricesVersion reads the price list's store version (its ETag).
	PricesVersion(ctx context.Context) (int64, error)
	// PutPrices adds a price list in effect from at (store.ErrStale when ifVersion is not the list's version).
	PutPrices(ctx context.Context, p billing.Prices, at time.Time, ifVersion ...int64) (*billing.PriceVersion, error)
	// GetTenant reads one tenant by id.
	GetTenant(ctx context.Context, id string) (*store.Tenant, error)
	// ListTenants reads every tenant.
	ListTenants(ctx context.Context) ([]store.Tenant, error)
	// UpdateTenant rewrites a tenant in one transaction.
	UpdateTenant(ctx context.Context, id string, fn func(*store.Tenant) error) (*store.Tenant, error)
	// TenantEntriesIn reads the entries of a tenant ("" every tenant) that ran in [from, to),
	// through the ledger's month index.
	TenantEntriesIn(ctx context.Context, tenant string, from, to time.Time) ([]store.LedgerEntry, error)
	// ListLeases reads the leases keep accepts.
	ListLeases(ctx context.Context, keep func(*store.Lease) bool) ([]store.Lease, error)
	// ListSnapshotRecords reads the snapshot records keep accepts.
	ListSnapshotRecords(ctx context.Context, keep func(*store.Snapshot) bool) ([]store.Snapshot, error)
	// ListVolumes reads the volume records keep accepts.
	ListVolumes(ctx context.Context, keep func(*store.Volume) bool) ([]store.Volume, error)
	// GetEntry reads one ledger entry.
	GetEntry(ctx context.Context, id string) (*store.LedgerEntry, error)
}

// Service meters the fleet and keeps the budgets. It is safe for concurrent
// use.
type Service struct {
	st     Store
	events notify.Sink
	now    func() time.Time
	log    hclog.Logger
}

// New makes a Service over st that records budget events in events.
func New(st Store, events notify.Sink, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, events: events, now: now, log: log}
}

// ---- prices ----

// PriceList is every version of the price list, oldest first, and the
// list's store version.
type PriceList struct {
	Versions []billing.PriceVersion
	// Version is the ETag of the whole list.
	Version int64
}

// Prices reads the price list.
func (s *Service) Prices(ctx context.Context) (*PriceList, error) {
	version, err := s.st.PricesVersion(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "read the prices", Err: err}
	}
	vs, err := s.st.PriceHistory(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "read the prices", Err: err}
	}
	return &PriceList{Versions: vs, Version: version}, nil
}

// PutPrices publishes p, in effect from now; given ifVersion, only while the
// list is still at that version (an error wrapping store.ErrStale
// otherwise). It returns the new version and the list's store version after
// the write, 0 when that could not be read: the write stands all the same.
func (s *Service) PutPrices(ctx context.Context, p billing.Prices, ifVersion ...int64) (*billing.PriceVersion, int64, error) {
	if p.MacClasses == nil {
		p.MacClasses = []billing.MacClass{}
	}
	v, err := s.st.PutPrices(ctx, p, s.now(), ifVersion...)
	if err != nil {
		return nil, 0, &store.OpError{Op: "set the prices", Err: err}
	}
	version, err := s.st.PricesVersion(ctx)
	if err != nil {
		version = 0
	}
	return v, version, nil
}

// ---- usage ----

// Usage is the usage of tenant (by id; "" every tenant) over [from, to).
func (s *Service) Usage(ctx context.Context, tenant string, from, to time.Time) (*sdk.UsageReport, error) {
	now := s.now().UTC()
	rows, names, err := s.billingRows(ctx, tenant, from, to)
	if err != nil {
		return nil, &store.OpError{Op: "read the ledger", Err: err}
	}
	us := billing.ComputeUsage(rows.VMs, rows.Leases, from, to, now)
	asOf := now
	if to.Before(now) {
		asOf = to
	}
	rep := &sdk.UsageReport{From: from, To: to, AsOf: asOf, Tenants: make([]sdk.UsageRow, 0, len(us))}
	for _, u := range us {
		rep.Tenants = append(rep.Tenants, sdk.UsageRow{TenantName: names[u.Tenant], Usage: u})
	}
	return rep, nil
}

// ---- statements ----

// StatementQuery asks for a month's statements.
type StatementQuery struct {
	// Tenant is the tenant's id; "" asks for every tenant's statement.
	Tenant string
	// Month is the first instant of the month, in UTC.
	Month time.Time
	// Budgets adds to the statements of the month under way each tenant's
	// budget, and records the budget events due (the CSV export goes
	// without).
	Budgets bool
}

// Statements computes the statements q asks for: exactly one with a
// tenant, else one per tenant billed in the month.
func (s *Service) Statements(ctx context.Context, q StatementQuery) (*sdk.StatementList, error) {
	now := s.now().UTC()
	prices, err := s.st.PriceHistory(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "read the prices", Err: err}
	}
	end := q.Month.AddDate(0, 1, 0)
	rows, names, err := s.billingRows(ctx, q.Tenant, q.Month, end)
	if err != nil {
		return nil, &store.OpError{Op: "read the ledger", Err: err}
	}
	var sts []billing.Statement
	if q.Tenant != "" {
		sts = []billing.Statement{billing.ComputeStatementOf(q.Tenant, q.Month, prices, rows, now)}
	} else {
		sts = billing.ComputeStatementsOf(q.Month, prices, rows, now)
	}
	current := !now.Before(q.Month) && now.Before(end)
	list := &sdk.StatementList{Month: q.Month.Format("2006-01"), Statements: make([]sdk.Statement, 0, len(sts))}
	for _, st := range sts {
		v := sdk.Statement{TenantName: names[st.Tenant], Statement: st}
		if current && q.Budgets {
			v.Budget = s.budgetOf(ctx, st)
		}
		list.Statements = append(list.Statements, v)
		list.Total += st.Total
	}
	list.TotalDisplay = list.Total.Cents()
	return list, nil
}

// ---- budgets ----

// SetBudget sets tenant's monthly budget (0 removes it) and answers it
// against this month's spend, recording the budget events due.
func (s *Service) SetBudget(ctx context.Context, tenant string, monthly billing.Micros) (*sdk.Budget, error) {
	t, err := s.st.UpdateTenant(ctx, tenant, func(t *store.Tenant) error {
		t.SetBudget(monthly)
		return nil
	})
	if err != nil {
		return nil, &store.OpError{Op: "set the budget", Err: err}
	}
	return s.MonthToDate(ctx, t)
}

// MonthToDate is t's budget against its spend in the month under way,
// recording the budget events due.
func (s *Service) MonthToDate(ctx context.Context, t *store.Tenant) (*sdk.Budget, error) {
	now := s.now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	prices, err := s.st.PriceHistory(ctx)
	if err != nil {
		return nil, &store.OpError{Op: "read this month's spend", Err: err}
	}
	rows, _, err := s.billingRows(ctx, t.ID, month, month.AddDate(0, 1, 0))
	if err != nil {
		return nil, &store.OpError{Op: "read this month's spend", Err: err}
	}
	return s.budgetFor(ctx, t, billing.ComputeStatementOf(t.ID, month, prices, rows, now)), nil
}

// CheckBudgets computes this month's spend of every tenant with a budget and
// records the budget events due (the leader runs it with each reconcile
// pass, so an event does not wait for someone to read a statement).
func (s *Service) CheckBudgets(ctx context.Context) error {
	ts, err := s.st.ListTenants(ctx)
	if err != nil {
		return err
	}
	budgeted := map[string]*store.Tenant{}
	for i := range ts {
		if ts[i].Budget() > 0 {
			budgeted[ts[i].ID] = &ts[i]
		}
	}
	if len(budgeted) == 0 {
		return nil
	}
	now := s.now().UTC()
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	prices, err := s.st.PriceHistory(ctx)
	if err != nil {
		return err
	}
	rows, _, err := s.billingRows(ctx, "", month, month.AddDate(0, 1, 0))
	if err != nil {
		return err
	}
	for _, st := range billing.ComputeStatementsOf(month, prices, rows, now) {
		if t := budgeted[st.Tenant]; t != nil {
			s.budgetFor(ctx, t, st)
		}
	}
	return nil
}

// budgetOf reads the statement's tenant's budget and records the budget
// events due. It returns nil when the tenant is gone.
func (s *Service) budgetOf(ctx context.Context, st billing.Statement) *sdk.Budget {
	t, err := s.st.GetTenant(ctx, st.Tenant)
	if err != nil {
		return nil
	}
	return s.budgetFor(ctx, t, st)
}

// budgetFor is t's budget against st, the statement of the month under way,
// recording the budget events due.
func (s *Service) budgetFor(ctx context.Context, t *store.Tenant, st billing.Statement) *sdk.Budget {
	b := &sdk.Budget{Month: st.Month, MonthToDate: st.Total, MonthToDateDisplay: st.Total.Cents(),
		State: billing.BudgetState(st.Total, t.Budget()), Currency: st.Currency}
	if budget := t.Budget(); budget > 0 {
		b.Monthly = &budget
	}
	s.noteBudget(ctx, t, b)
	return b
}

// noteBudget emits budget.near (from 80 %) and budget.over (from 100 %) once
// per tenant and month. A tenant that jumps past both gets both.
func (s *Service) noteBudget(ctx context.Context, t *store.Tenant, b *sdk.Budget) {
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
		e := notify.Event{Type: kind, Time: s.now(), Tenant: t.ID,
			Title: fmt.Sprintf("tenant %s's spend in %s (%s %s) %s its monthly budget of %s %s",
				t.Name, b.Month, b.MonthToDateDisplay, b.Currency, what, b.Monthly.Cents(), b.Currency),
			Detail: fmt.Sprintf("month %s, spent %s %s of a budget of %s %s", b.Month, b.MonthToDate.String(), b.Currency, b.Monthly.String(), b.Currency),
			Link:   "/fleet/billing?month=" + b.Month}
		if _, err := s.events.Emit(ctx, e, kind+"/"+t.ID+"/"+b.Month); err != nil {
			s.log.Warn("record budget event; the next check records it", "tenant", t.Name, "kind", kind, "error", err)
		}
	}
}

// ---- rows ----

// billingRows reads the ledger entries, leases and snapshot records of
// tenant ("" every tenant) that may count in [from, to), as package
// billing's rows, and the tenants' names by id. The operator's own VMs and
// snapshots are not billed and not read. A released lease counts up to its
// minimum term, so it is read if that reaches into the window. The entries
// come through the ledger's month index: the window's rows, not the whole
// ledger.
func (s *Service) billingRows(ctx context.Context, tenant string, from, to time.Time) (billing.Rows, map[string]string, error) {
	var rows billing.Rows
	es, err := s.st.TenantEntriesIn(ctx, tenant, from, to)
	if err != nil {
		return rows, nil, err
	}
	ls, err := s.st.ListLeases(ctx, func(l *store.Lease) bool {
		if tenant != "" && l.Tenant != tenant || !l.StartedAt.Before(to) {
			return false
		}
		return l.Active() || l.ReleasedAt.After(from) || l.MinEnd.After(from)
	})
	if err != nil {
		return rows, nil, err
	}
	// A snapshot counts from when it was taken (a pending one is not yet
	// taken) until it was deleted.
	ss, err := s.st.ListSnapshotRecords(ctx, func(sn *store.Snapshot) bool {
		if sn.Tenant == "" || tenant != "" && sn.Tenant != tenant || sn.Pending || sn.TakenAt.IsZero() || !sn.TakenAt.Before(to) {
			return false
		}
		return sn.Live() || sn.DeletedAt.After(from)
	})
	if err != nil {
		return rows, nil, err
	}
	rows.VMs = make([]billing.VM, 0, len(es))
	for _, e := range es {
		rows.VMs = append(rows.VMs, billingVM(&e))
	}
	rows.Leases = make([]billing.Lease, 0, len(ls))
	for _, l := range ls {
		rows.Leases = append(rows.Leases, billingLease(&l))
	}
	rows.Snapshots = make([]billing.Snapshot, 0, len(ss))
	for _, sn := range ss {
		end := sn.DeletedAt
		if sn.Live() {
			// A snapshot goes with its VM: one whose VM vanished without a
			// delete through central (the reconciler ended its entry) is
			// kept no longer than the VM.
			e, err := s.st.GetEntry(ctx, store.EntryID(sn.Node, sn.VMID))
			switch {
			case err == nil && !e.Running():
				end = e.EndedAt
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return rows, nil, err
			}
		}
		rows.Snapshots = append(rows.Snapshots, billing.Snapshot{ID: sn.ID, Tenant: sn.Tenant, Node: sn.Node, VM: sn.VM, Name: sn.Name,
			SizeGiB: sn.SizeGiB, Start: sn.TakenAt, End: end})
	}
	// A volume counts from its creation (a pending one is not yet made)
	// until its deletion, at each size it had.
	vs, err := s.st.ListVolumes(ctx, func(v *store.Volume) bool {
		if v.Tenant == "" || tenant != "" && v.Tenant != tenant || v.Pending || !v.CreatedAt.Before(to) {
			return false
		}
		return v.Live() || v.DeletedAt.After(from)
	})
	if err != nil {
		return rows, nil, err
	}
	for _, v := range vs {
		rows.Volumes = append(rows.Volumes, billingVolumes(&v)...)
	}
	names := map[string]string{}
	ts, err := s.st.ListTenants(ctx)
	if err != nil {
		return rows, nil, err
	}
	for _, t := range ts {
		names[t.ID] = t.Name
	}
	// A deleted tenant's rows stay billable under its id.
	for _, v := range rows.VMs {
		if names[v.Tenant] == "" {
			names[v.Tenant] = v.Tenant
		}
	}
	for _, l := range rows.Leases {
		if names[l.Tenant] == "" {
			names[l.Tenant] = l.Tenant
		}
	}
	for _, sn := range rows.Snapshots {
		if names[sn.Tenant] == "" {
			names[sn.Tenant] = sn.Tenant
		}
	}
	for _, v := range rows.Volumes {
		if names[v.Tenant] == "" {
			names[v.Tenant] = v.Tenant
		}
	}
	return rows, names, nil
}

// billingVolumes is a volume record as package billing's rows, one per size
// it had: each to the next size's start, the last to its deletion.
func billingVolumes(v *store.Volume) []billing.Volume {
	sizes := v.Sizes
	if len(sizes) == 0 { // a record without its history: its size from its creation
		sizes = []store.VolumeSize{{GiB: v.SizeGiB, From: v.CreatedAt}}
	}
	out := make([]billing.Volume, 0, len(sizes))
	for i, sz := range sizes {
		end := v.DeletedAt
		if i+1 < len(sizes) {
			end = sizes[i+1].From
		}
		out = append(out, billing.Volume{ID: v.ID, Tenant: v.Tenant, Node: v.Node, Name: v.Name, SizeGiB: sz.GiB, Start: sz.From, End: end})
	}
	return out
}

// billingVM is a ledger entry as package billing's row.
func billingVM(e *store.LedgerEntry) billing.VM {
	return billing.VM{ID: e.ID, Tenant: e.Tenant, Node: e.Node, Name: e.Name, Image: e.Image, VCPUs: e.VCPUs, MemoryMiB: e.MemoryMiB,
		MacOS: e.GuestOS == store.GuestMacOS, Start: e.StartedAt, End: e.EndedAt}
}

// billingLease is a lease as package billing's row.
func billingLease(l *store.Lease) billing.Lease {
	return billing.Lease{ID: l.ID, Tenant: l.Tenant, Node: l.Node, Class: l.PriceClass, PricePerHour: l.PricePerHour,
		Start: l.StartedAt, MinEnd: l.MinEnd, EndsAt: l.EndsAt, ReleasedAt: l.ReleasedAt}
}
