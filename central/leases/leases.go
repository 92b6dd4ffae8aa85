// Package leases gives a tenant a whole node for at least min_lease_hours:
// it judges which nodes may be leased, takes the smallest eligible one at its
// price, and ends leases on release or once their end time has passed. An
// ended lease's node waits for a scrub and the lessee's VMs on it are deleted.
package leases

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Store is what leases need of central's store.
type Store interface {
	// TenantName is a tenant's name for logs (its id when unknown).
	TenantName(ctx context.Context, id string) string
	// GetPolicy reads the fleet policy (min_lease_hours).
	GetPolicy(ctx context.Context) (sdk.Policy, error)
	// ListNodes reads every node record.
	ListNodes(ctx context.Context) ([]store.Node, error)
	// GetNode reads one node record.
	GetNode(ctx context.Context, name string) (*store.Node, error)
	// NodeUsage reads what central runs and reserves on a node.
	NodeUsage(ctx context.Context, node string) (store.UsageView, error)
	// CurrentPrices reads the price list in force.
	CurrentPrices(ctx context.Context) (*billing.PriceVersion, error)
	// CreateLease leases a node in one transaction (see store.CreateLease).
	CreateLease(ctx context.Context, req store.CreateLeaseRequest) (*store.Lease, error)
	// GetLease reads one lease.
	GetLease(ctx context.Context, id string) (*store.Lease, error)
	// ListLeases reads the leases keep accepts, newest first.
	ListLeases(ctx context.Context, keep func(*store.Lease) bool) ([]store.Lease, error)
	// EndLease ends a lease; endedNow is false when it had ended already.
	EndLease(ctx context.Context, id, reason string, at time.Time) (l *store.Lease, endedNow bool, err error)
	// MarkLeaseVMsRemoved records that an ended lease's VMs are deleted.
	MarkLeaseVMsRemoved(ctx context.Context, id string) error
}

// ErrNoNode is a lease asked for a node that is not registered.
var ErrNoNode = errors.New("no such node")

// ErrDisabled is a lease refused because its tenant is disabled; it comes
// joined with the store's *store.OpError.
var ErrDisabled = errors.New("tenant is disabled")

// ShortError is a lease asked for fewer hours than min_lease_hours.
type ShortError struct{ Hours, Min int }

func (e *ShortError) Error() string {
	return fmt.Sprintf("hours %d is below the minimum lease of %d hours", e.Hours, e.Min)
}

// RefusedError says why no node could be leased.
type RefusedError struct {
	// Node is the node asked for ("" when any eligible one would do).
	Node string
	// Kind is "Mac", or "node" for an any_node request.
	Kind string
	// Reason is why Node cannot be leased, or the refusals counted by reason.
	Reason string
}

func (e *RefusedError) Error() string {
	if e.Node != "" {
		return fmt.Sprintf("node %s cannot be leased: %s", e.Node, e.Reason)
	}
	return fmt.Sprintf("no %s can be leased now: %s", e.Kind, e.Reason)
}

// EndedError is a release of a lease that has already ended.
type EndedError struct{ Lease *store.Lease }

func (e *EndedError) Error() string {
	return fmt.Sprintf("lease %s already ended at %s (%s)", e.Lease.ID, e.Lease.ReleasedAt.Format(time.RFC3339), e.Lease.EndReason)
}

// EarlyError is a release, not forced, before the lease's minimum is over.
type EarlyError struct {
	Lease *store.Lease
	Now   time.Time
}

func (e *EarlyError) Error() string {
	return fmt.Sprintf("lease %s cannot be released before %s (in %s): a lease lasts at least its minimum (min_lease_hours)",
		e.Lease.ID, e.Lease.MinEnd.Format(time.RFC3339), e.Lease.MinEnd.Sub(e.Now).Round(time.Minute))
}

// Request is a lease asked for.
type Request struct {
	// Tenant is the lessee.
	Tenant *store.Tenant
	// Node names the node to lease; empty picks the smallest eligible one.
	Node string
	// Hours sets an end (at least min_lease_hours); 0 is open-ended.
	Hours int
	// NodeSelector are labels the node must carry.
	NodeSelector map[string]string
	// Nested asks for nested virtualisation.
	Nested bool
	// MinMemoryMiB and MinVCPUs are the least size the node must offer.
	MinMemoryMiB int64
	MinVCPUs     int64
	// AllowBusy accepts a node that runs VMs (the operator's).
	AllowBusy bool
	// AnyNode accepts a node that runs no macOS (the operator's).
	AnyNode bool
}

// Service creates and ends leases. It is safe for concurrent use.
type Service struct {
	st  Store
	vms *vms.Remover
	now func() time.Time
	log hclog.Logger
	// Notify receives lease.created, lease.released, lease.ending,
	// lease.ended and node.scrub (nil: nothing is sent). Set it before use.
	Notify notify.Sink
}

// New makes a Service over st; it deletes lessees' VMs through vms.
func New(st Store, vms *vms.Remover, now func() time.Time, log hclog.Logger) *Service {
	return &Service{st: st, vms: vms, now: now, log: log}
}

// candidate is a node judged for a lease.
type candidate struct {
	node   *store.Node
	reason string // "" when it may be leased
}

// judge says why n cannot be leased for req ("" when it can). used is what
// central runs and reserves there.
func judge(n *store.Node, used store.Usage, req *Request) string {
	switch {
	case n.Unavailable() != "":
		return n.Unavailable()
	case !n.Healthy():
		return "unhealthy"
	case !req.AnyNode && !slices.Contains(n.GuestOS, store.GuestMacOS):
		return "not a Mac"
	case n.LeasedBy != "":
		return "leased"
	case !req.AllowBusy && (used.VMs > 0 || len(n.VMs) > 0):
		return "running VMs"
	case n.Capacity.Total.MemoryMiB < req.MinMemoryMiB:
		return "too little memory"
	case n.Capacity.Total.VCPUs < req.MinVCPUs:
		return "too few vCPUs"
	case req.Nested && !n.Nested:
		return "no nested virtualisation"
	}
	for k, v := range req.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return "node_selector does not match"
		}
	}
	return ""
}

// candidates reads the policy and the nodes req may lease, judged and
// smallest first, with the minimum lease in hours and the prices in force.
func (s *Service) candidates(ctx context.Context, req *Request) ([]candidate, int, *billing.PriceVersion, error) {
	pol, err := s.st.GetPolicy(ctx)
	if err != nil {
		return nil, 0, nil, &store.OpError{Op: "read the policy", Err: err}
	}
	minHours := max(pol.MinLeaseHours, store.MinLeaseHoursFloor)
	if req.Hours > 0 && req.Hours < minHours {
		return nil, 0, nil, &ShortError{Hours: req.Hours, Min: minHours}
	}
	ns, err := s.st.ListNodes(ctx)
	if err != nil {
		return nil, 0, nil, &store.OpError{Op: "list nodes", Err: err}
	}
	var cands []candidate
	for i := range ns {
		n := &ns[i]
		if req.Node != "" && n.Name != req.Node {
			continue
		}
		u, err := s.st.NodeUsage(ctx, n.Name)
		if err != nil {
			return nil, 0, nil, &store.OpError{Op: "read the fleet", Err: err}
		}
		cands = append(cands, candidate{node: n, reason: judge(n, u.Total(), req)})
	}
	if req.Node != "" && len(cands) == 0 {
		return nil, 0, nil, ErrNoNode
	}
	// Smallest first: whole big hosts stay free for those who need them.
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i].node.Capacity.Total, cands[j].node.Capacity.Total
		return cmp.Or(cmp.Compare(a.MemoryMiB, b.MemoryMiB), cmp.Compare(a.VCPUs, b.VCPUs),
			strings.Compare(cands[i].node.Name, cands[j].node.Name)) < 0
	})
	prices, err := s.st.CurrentPrices(ctx)
	if err != nil {
		return nil, 0, nil, &store.OpError{Op: "read the prices", Err: err}
	}
	return cands, minHours, prices, nil
}

// Create leases the smallest eligible node to req.Tenant at the price of its
// size. A node taken since it was judged is skipped for the next one. The
// errors are ErrNoNode, *ShortError, *RefusedError, ErrDisabled, the store's
// *store.QuotaError and *store.OpError.
func (s *Service) Create(ctx context.Context, req Request) (*store.Lease, error) {
	cands, minHours, prices, err := s.candidates(ctx, &req)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	for i := range cands {
		c := &cands[i]
		if c.reason != "" {
			continue
		}
		size := c.node.Capacity.Total
		perHour, class := prices.LeasePrice(size.VCPUs, size.MemoryMiB)
		l, err := s.st.CreateLease(ctx, store.CreateLeaseRequest{Tenant: req.Tenant.ID, Node: c.node.Name,
			Start: now, MinHours: minHours, Hours: req.Hours, AllowBusy: req.AllowBusy,
			PricePerHour: perHour, PriceClass: class, Currency: prices.Currency})
		var qe *store.QuotaError
		var lr *store.LeaseRefusal
		switch {
		case err == nil:
			s.log.Info("lease created", "lease", l.ID, "tenant", req.Tenant.Name, "node", l.Node, "ends_at", l.EndsAt)
			detail := "open-ended; at least until " + l.MinEnd.Format(time.RFC3339)
			if !l.EndsAt.IsZero() {
				detail = "ends at " + l.EndsAt.Format(time.RFC3339)
			}
			notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyLeaseCreated, Tenant: l.Tenant,
				Title: fmt.Sprintf("node %s is leased (lease %s)", l.Node, l.ID), Detail: detail, Link: "/fleet/leases/" + l.ID},
				"lease.created/"+l.ID, now)
			return l, nil
		case errors.As(err, &qe):
			return nil, err
		case errors.As(err, &lr):
			c.reason = lr.Reason // taken since the snapshot: try the next one
		case errors.Is(err, store.ErrNotFound):
			c.reason = "gone"
		case errors.Is(err, store.ErrInvalid): // the store's word for a disabled tenant
			return nil, fmt.Errorf("%w: %w", ErrDisabled, &store.OpError{Op: "create the lease", Err: err})
		default:
			return nil, &store.OpError{Op: "create the lease", Err: err}
		}
	}
	return nil, refused(cands, &req)
}

// Estimate says which node Create would lease now and what it would cost.
// Its errors are Create's, but for quota: the estimate says whether
// max_leased_hosts leaves room.
func (s *Service) Estimate(ctx context.Context, req Request) (*sdk.LeaseDryRun, error) {
	cands, minHours, prices, err := s.candidates(ctx, &req)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	i := slices.IndexFunc(cands, func(c candidate) bool { return c.reason == "" })
	if i < 0 {
		return nil, refused(cands, &req)
	}
	t, n := req.Tenant, cands[i].node
	size := n.Capacity.Total
	out := &sdk.LeaseDryRun{DryRun: true, Tenant: t.ID, Node: n.Name, Estimate: prices.LeaseEstimate(size.VCPUs, size.MemoryMiB, int64(minHours)),
		MinEnd: now.Add(time.Duration(minHours) * time.Hour)}
	if req.Hours > 0 {
		end := now.Add(time.Duration(req.Hours) * time.Hour)
		out.EndsAt = &end
	}
	if q := t.Quota.MaxLeasedHosts; q > 0 {
		active, err := s.st.ListLeases(ctx, func(l *store.Lease) bool { return l.Tenant == t.ID && l.Active() })
		if err != nil {
			return nil, &store.OpError{Op: "read the leases", Err: err}
		}
		if int64(len(active)) >= q {
			out.Quota = fmt.Sprintf("max_leased_hosts is %d and %d leases are active: a real request would be refused", q, len(active))
		}
	}
	return out, nil
}

// refused says why none of cands could be leased.
func refused(cands []candidate, req *Request) *RefusedError {
	kind := "Mac"
	if req.AnyNode {
		kind = "node"
	}
	if req.Node != "" {
		return &RefusedError{Node: req.Node, Kind: kind, Reason: cands[0].reason}
	}
	return &RefusedError{Kind: kind, Reason: breakdown(cands)}
}

// breakdown counts the refused nodes by reason, most common first.
func breakdown(cands []candidate) string {
	if len(cands) == 0 {
		return "no node is registered"
	}
	counts := map[string]int{}
	for _, c := range cands {
		counts[c.reason]++
	}
	reasons := make([]string, 0, len(counts))
	for r := range counts {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		return cmp.Or(counts[reasons[j]]-counts[reasons[i]], strings.Compare(reasons[i], reasons[j])) < 0
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%d %s", counts[r], r)
	}
	return fmt.Sprintf("of %d nodes, %s", len(cands), strings.Join(parts, ", "))
}

// List reads the leases of tenant (every lease for ""), newest first;
// onlyActive leaves out ended ones.
func (s *Service) List(ctx context.Context, tenant string, onlyActive bool) ([]store.Lease, error) {
	ls, err := s.st.ListLeases(ctx, func(l *store.Lease) bool {
		return (tenant == "" || l.Tenant == tenant) && (!onlyActive || l.Active())
	})
	if err != nil {
		return nil, &store.OpError{Op: "list leases", Err: err}
	}
	return ls, nil
}

// Get reads lease id as tenant sees it ("" for the operator): another
// tenant's lease is store.ErrNotFound.
func (s *Service) Get(ctx context.Context, id, tenant string) (*store.Lease, error) {
	l, err := s.st.GetLease(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && tenant != "" && l.Tenant != tenant) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, &store.OpError{Op: "read lease " + jsonapi.Echo(id), Err: err}
	}
	return l, nil
}

// Release ends lease id for tenant ("" for the operator) at once: the node
// becomes scrub pending and the lessee's VMs on it are deleted (a node that
// does not answer keeps them for the reconciler, and the lease returned says
// VMsRemoved false). Before the lease's minimum it is an *EarlyError unless
// forced (billing still counts the minimum); an ended lease is an
// *EndedError; another tenant's is store.ErrNotFound.
func (s *Service) Release(ctx context.Context, id, tenant string, force bool) (*store.Lease, error) {
	l, err := s.Get(ctx, id, tenant)
	if err != nil {
		return nil, err
	}
	now := s.now().UTC()
	if !l.Active() {
		return nil, &EndedError{Lease: l}
	}
	reason := "released"
	if now.Before(l.MinEnd) {
		if !force {
			return nil, &EarlyError{Lease: l, Now: now}
		}
		reason = "released-forced"
	}
	// Once begun, a release finishes even if its caller goes away.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	ended, endedNow, err := s.st.EndLease(ctx, l.ID, reason, now)
	if err != nil {
		return nil, &store.OpError{Op: "end lease " + l.ID, Err: err}
	}
	if !endedNow {
		return nil, &EndedError{Lease: ended}
	}
	s.log.Info("lease ended", "lease", l.ID, "tenant", s.st.TenantName(ctx, l.Tenant), "node", l.Node, "reason", reason)
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyLeaseReleased, Tenant: l.Tenant,
		Title: fmt.Sprintf("lease %s of node %s was released", l.ID, l.Node), Detail: "reason: " + reason, Link: "/fleet/leases/" + l.ID},
		"lease.released/"+l.ID, now)
	s.notifyScrub(ctx, ended)
	if _, err := s.removeVMs(ctx, ended); err != nil {
		s.log.Warn("delete the lessee's VMs after a release; the reconciler retries", "lease", l.ID, "error", err)
	} else {
		ended.VMsRemoved = true
	}
	return ended, nil
}

// removeVMs deletes the lessee's VMs on the node of an ended lease (ending
// their ledger entries) and records that it did. It returns the deleted VMs'
// ids. A node that is down or does not answer is an error: the reconciler
// tries again.
func (s *Service) removeVMs(ctx context.Context, l *store.Lease) ([]string, error) {
	if l.VMsRemoved {
		return nil, nil
	}
	n, err := s.st.GetNode(ctx, l.Node)
	if errors.Is(err, store.ErrNotFound) {
		return nil, s.st.MarkLeaseVMsRemoved(ctx, l.ID) // no node, no VMs
	}
	if err != nil {
		return nil, err
	}
	if !n.ScrubPending || (n.LeaseID != "" && n.LeaseID != l.ID) {
		// Scrubbed since (which removed every VM), and maybe leased again:
		// what runs there now is not this lease's.
		return nil, s.st.MarkLeaseVMsRemoved(ctx, l.ID)
	}
	deleted, err := s.vms.DeleteMatching(ctx, n, func(tenant string) bool { return tenant == l.Tenant }, "lease-ended")
	if err != nil {
		return deleted, err
	}
	return deleted, s.st.MarkLeaseVMsRemoved(ctx, l.ID)
}

// EndExpired ends every active lease whose end time has passed, and
// finishes ended leases whose VMs were not all deleted yet (a central that
// died mid-end, a node that did not answer). It returns the ids of the
// leases it ended. The leader runs it with each reconcile pass; two at once
// are harmless (only one EndLease ends a lease).
func (s *Service) EndExpired(ctx context.Context) (ended []string, err error) {
	now := s.now().UTC()
	ls, err := s.st.ListLeases(ctx, func(l *store.Lease) bool {
		return (l.Active() && !l.EndsAt.IsZero() && !now.Before(l.EndsAt)) || (!l.Active() && !l.VMsRemoved)
	})
	if err != nil {
		return nil, err
	}
	ended = []string{}
	var errs []error
	for i := range ls {
		l := &ls[i]
		if l.Active() {
			e, endedNow, err := s.st.EndLease(ctx, l.ID, "expired", l.EndsAt)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if endedNow {
				s.log.Info("lease expired", "lease", l.ID, "tenant", s.st.TenantName(ctx, l.Tenant), "node", l.Node)
				ended = append(ended, l.ID)
				notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyLeaseEnded, Tenant: l.Tenant,
					Title:  fmt.Sprintf("lease %s of node %s ended at its end time", l.ID, l.Node),
					Detail: "ended at " + l.EndsAt.UTC().Format(time.RFC3339) + "; your VMs on the node are deleted", Link: "/fleet/leases/" + l.ID},
					"lease.ended/"+l.ID, now)
				s.notifyScrub(ctx, e)
			}
			l = e
		}
		if _, err := s.removeVMs(ctx, l); err != nil {
			s.log.Warn("delete the VMs of an ended lease; retrying next pass", "lease", l.ID, "node", l.Node, "error", err)
		}
	}
	return ended, errors.Join(errs...)
}

// Warnings before a lease's end (lease.ending): at 24 hours left, then at 1 hour.
const (
	EndingFirst = 24 * time.Hour
	EndingLast  = time.Hour
)

// NotifyEnding sends lease.ending for every active lease with an end time
// that has EndingFirst, then EndingLast, left: each once per lease, through
// once keys in etcd, so a leader that takes over does not send them again.
// A lease found already inside the last hour gets only the last warning.
// The leader runs it with each reconcile pass.
func (s *Service) NotifyEnding(ctx context.Context) error {
	if s.Notify == nil {
		return nil
	}
	now := s.now().UTC()
	ls, err := s.st.ListLeases(ctx, func(l *store.Lease) bool {
		return l.Active() && !l.EndsAt.IsZero() && now.Before(l.EndsAt) && !now.Before(l.EndsAt.Add(-EndingFirst))
	})
	if err != nil {
		return &store.OpError{Op: "list leases", Err: err}
	}
	var errs []error
	for i := range ls {
		l := &ls[i]
		left, key, words := EndingFirst, "24h", "24 hours"
		if !now.Before(l.EndsAt.Add(-EndingLast)) {
			left, key, words = EndingLast, "1h", "1 hour"
		}
		e := notify.Event{Type: sdk.NotifyLeaseEnding, Tenant: l.Tenant, Time: now,
			Title:  fmt.Sprintf("lease %s of node %s ends in %s", l.ID, l.Node, words),
			Detail: fmt.Sprintf("it ends at %s (%s left); your VMs on the node are deleted then", l.EndsAt.UTC().Format(time.RFC3339), left),
			Link:   "/fleet/leases/" + l.ID}
		sent, err := s.Notify.Emit(ctx, e, "lease.ending/"+l.ID+"/"+key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sent {
			s.log.Info("lease ending: notified", "lease", l.ID, "tenant", s.st.TenantName(ctx, l.Tenant), "left", key)
		}
	}
	return errors.Join(errs...)
}

// notifyScrub tells the operator that the node of an ended lease waits for
// a scrub.
func (s *Service) notifyScrub(ctx context.Context, l *store.Lease) {
	if l == nil {
		return
	}
	notify.Send(ctx, s.Notify, s.log, notify.Event{Type: sdk.NotifyNodeScrub,
		Title:  fmt.Sprintf("node %s needs a scrub: lease %s ended", l.Node, l.ID),
		Detail: "scrub it before it is leased again (fluxctl fleet scrub " + l.Node + ")", Link: "/fleet/nodes/" + l.Node},
		"node.scrub/"+l.ID, s.now().UTC())
}
