package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/sdk"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// How leases stay exclusive and within max_leased_hosts
//
// A lease is a record under leases/<id> (kept after it ends, for billing), an
// index key under lease-tenant/<tenant>/<id> while it is active, and the
// node record's LeasedBy/LeaseID fields. CreateLease reads, in one
// transaction (one revision), the node record, the node's usage counter and
// reservations, the tenant record, the tenant's lease generation key and its
// active-lease index; it checks there, and writes the lease, the index entry,
// the node record (now naming the lessee) and the generation key (gen + 1) in
// one transaction on condition that everything it read is unchanged (txn.go):
// the node record, the node counter, the tenant record and the generation key
// have the revisions it read, and nothing under the node's reservations or
// the tenant's active leases was written since.
//
//   - Two leases of one node: both rewrite the node record, so the second
//     one's compare fails; on its retry it reads LeasedBy and refuses.
//   - max_leased_hosts: every CreateLease of a tenant rewrites its generation
//     key, so two creates that counted the same active leases cannot both
//     commit; the loser counts again. EndLease only shrinks the count and
//     needs no bump (a stale read over-counts, never under-counts).
//   - A VM racing a lease: Reserve compares the node record too, and every
//     Reserve or Commit rewrites the node counter, which CreateLease compares,
//     so "running no VMs" and "leased by another tenant" are each decided on
//     the state the other left (ReserveRequest.ExclusiveLeases).
//
// EndLease marks the lease ended, drops its index entry and, in the same
// transaction, clears the node's lessee and sets ScrubPending, so no lease or
// placement takes the node until it is scrubbed. Only the call whose
// transaction ended it reports so, which keeps a lease from being ended
// twice by two centrals.

// ErrUnavailable: the node cannot be leased now. The error is a *LeaseRefusal.
var ErrUnavailable = errors.New("node cannot be leased")

// LeaseRefusal says why a node cannot be leased. It wraps ErrUnavailable.
type LeaseRefusal struct {
	Node   string
	Reason string // "leased", "running VMs", or Node.Unavailable's reason
}

func (e *LeaseRefusal) Error() string {
	return fmt.Sprintf("node %s cannot be leased: %s", e.Node, e.Reason)
}

func (e *LeaseRefusal) Unwrap() error { return ErrUnavailable }

// Lease is a tenant's sole use of a whole node: the lease the API shows (sdk.Lease, the one
// definition of its fields) less what is derived from them. EndsAt is when the reconciler
// ends it; MinEnd (StartedAt + the policy's min_lease_hours) is the earliest release but an
// operator's forced one, and billing counts at least until it; PricePerHour, PriceClass and
// Currency are fixed when it starts, so a price list changed later does not touch it; the
// reconciler finishes an end that was interrupted before VMsRemoved.
//
// sdk.Lease.Active is derived from ReleasedAt: the method Active answers it, the record never
// stores it (MarshalJSON) and the field stays unset here; leaseOf in central/api fills it.
type Lease struct {
	sdk.Lease
}

// Active reports whether the lease has not ended.
func (l *Lease) Active() bool { return l.ReleasedAt.IsZero() }

// MarshalJSON writes the record without sdk.Lease's derived "active".
func (l Lease) MarshalJSON() ([]byte, error) {
	type record Lease // the same fields, without this method
	return marshalWithout(record(l), "active")
}

// CreateLeaseRequest asks for a lease of one node.
type CreateLeaseRequest struct {
	Tenant string
	Node   string
	// Start is the lease's start (now); MinHours the policy's min_lease_hours
	// (held to MinLeaseHoursFloor..MaxMinLeaseHours); Hours, when positive,
	// sets EndsAt and must be from MinHours to MaxLeaseHours.
	Start    time.Time
	MinHours int
	Hours    int
	// AllowBusy leases a node that runs VMs (the operator's choice).
	AllowBusy bool
	// PricePerHour, PriceClass and Currency are recorded with the lease.
	PricePerHour billing.Micros
	PriceClass   string
	Currency     string
}

func (s *Store) leaseKey(id string) string { return s.prefix + "leases/" + id }
func (s *Store) leaseTenantPrefix(tenant string) string {
	return s.prefix + "lease-tenant/" + tenant + "/"
}
func (s *Store) leaseGenKey(tenant string) string { return s.prefix + "lease-gen/" + tenant }
func (s *Store) drainKey(node string) string      { return s.prefix + "drains/" + node }

// CreateLease leases a node to a tenant in one transaction: the node must be
// up, not cordoned or draining, not leased, not waiting for a scrub, and run
// no VM (none through central, none reserved, none in its last heartbeat)
// unless AllowBusy; the tenant must exist, be enabled and stay within
// max_leased_hosts. Errors: *LeaseRefusal (ErrUnavailable), *QuotaError
// (ErrQuota, field max_leased_hosts), ErrNotFound (node or tenant),
// ErrInvalid, ErrConflict after MaxTxnRetries lost races.
func (s *Store) CreateLease(ctx context.Context, req CreateLeaseRequest) (*Lease, error) {
	if err := checkName("node", req.Node); err != nil {
		return nil, err
	}
	if err := checkName("tenant id", req.Tenant); err != nil {
		return nil, err
	}
	minHours := clamp(req.MinHours, MinLeaseHoursFloor, MaxMinLeaseHours)
	if req.Hours < 0 || (req.Hours > 0 && req.Hours < minHours) {
		return nil, fmt.Errorf("%w: hours %d: a lease lasts at least %d hours (min_lease_hours); leave hours out for an open-ended lease",
			ErrInvalid, req.Hours, minHours)
	}
	if req.Hours > MaxLeaseHours {
		return nil, fmt.Errorf("%w: hours %d: a lease with an end lasts at most %d hours; leave hours out for an open-ended lease",
			ErrInvalid, req.Hours, MaxLeaseHours)
	}
	if req.Start.IsZero() {
		req.Start = time.Now()
	}
	start := req.Start.UTC()
	what := fmt.Sprintf("lease node %s to tenant %s", req.Node, req.Tenant)
	nk, uk, tk, gk := s.nodeKey(req.Node), s.usageNodeKey(req.Node), s.tenantKey(req.Tenant), s.leaseGenKey(req.Tenant)
	reads := []clientv3.Op{
		clientv3.OpGet(nk), clientv3.OpGet(uk), clientv3.OpGet(s.resNodePrefix(req.Node), clientv3.WithPrefix()),
		clientv3.OpGet(tk), clientv3.OpGet(gk), clientv3.OpGet(s.leaseTenantPrefix(req.Tenant), clientv3.WithPrefix(), clientv3.WithCountOnly()),
	}
	var out *Lease
	var resp *clientv3.TxnResponse
	err := s.casLoop(ctx, what, func(afterPause bool) (bool, error) {
		if resp == nil || afterPause {
			r, err := s.kv(ctx).Txn(ctx).Then(reads...).Commit()
			if err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			resp = r
		}
		rs := resp.Responses
		kvs := func(i int) []*mvccpb.KeyValue { return rs[i].GetResponseRange().Kvs }
		var n Node
		nrev, err := decodeOne(kvs(0), &n)
		if err != nil {
			return false, err
		}
		if nrev == 0 {
			return false, fmt.Errorf("%s: node %w", what, ErrNotFound)
		}
		var nc counter
		urev, err := decodeOne(kvs(1), &nc)
		if err != nil {
			return false, err
		}
		reserved, err := sumReservations(kvs(2))
		if err != nil {
			return false, err
		}
		var t Tenant
		trev, err := decodeOne(kvs(3), &t)
		if err != nil {
			return false, err
		}
		if trev == 0 {
			return false, fmt.Errorf("%s: tenant %w", what, ErrNotFound)
		}
		if t.Disabled {
			return false, fmt.Errorf("%w: %s: tenant %s is disabled", ErrInvalid, what, t.Name)
		}
		var gen counter
		grev, err := decodeOne(kvs(4), &gen)
		if err != nil {
			return false, err
		}
		active := rs[5].GetResponseRange().Count
		if reason := leasable(&n, nc.Usage.Add(reserved), req.AllowBusy); reason != "" {
			return false, &LeaseRefusal{Node: n.Name, Reason: reason}
		}
		if q := t.Quota.MaxLeasedHosts; q > 0 && active+1 > q {
			return false, &QuotaError{Field: "max_leased_hosts", Limit: q, Used: active, Asked: 1}
		}
		l := &Lease{Lease: sdk.Lease{ID: newID("lease-"), Tenant: req.Tenant, Node: req.Node, StartedAt: start,
			MinEnd: start.Add(time.Duration(minHours) * time.Hour), PricePerHour: req.PricePerHour,
			PriceClass: req.PriceClass, Currency: req.Currency}}
		if req.Hours > 0 {
			l.EndsAt = start.Add(time.Duration(req.Hours) * time.Hour)
		}
		n.LeasedBy, n.LeaseID = l.Tenant, l.ID
		gen.Gen++
		// Every one of the six reads is compared: the four keys, and the node's
		// reservations and the tenant's active leases as prefixes.
		r, err := s.kv(ctx).Txn(ctx).If(unchanged(resp.Header.Revision,
			[]readKey{{nk, nrev}, {uk, urev}, {tk, trev}, {gk, grev}},
			s.resNodePrefix(req.Node), s.leaseTenantPrefix(req.Tenant))...,
		).Then(
			clientv3.OpPut(s.leaseKey(l.ID), mustJSON(l)),
			clientv3.OpPut(s.leaseTenantPrefix(l.Tenant)+l.ID, l.ID),
			clientv3.OpPut(nk, mustJSON(&n)),
			clientv3.OpPut(gk, mustJSON(gen)),
		).Else(reads...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if r.Succeeded {
			out = l
			return true, nil
		}
		resp = r
		return false, nil
	})
	return out, err
}

// leasable says why n cannot be leased ("" when it can), given what central
// runs and reserves there.
func leasable(n *Node, used Usage, allowBusy bool) string {
	switch {
	case n.LeasedBy != "":
		return "leased"
	case n.Unavailable() != "":
		return n.Unavailable()
	case !allowBusy && (used.VMs > 0 || len(n.VMs) > 0):
		return "running VMs"
	}
	return ""
}

// checkLessee applies ReserveRequest.ExclusiveLeases and RequireLease.
func checkLessee(n *Node, req ReserveRequest) error {
	if req.RequireLease && (n.LeasedBy == "" || n.LeasedBy != req.Tenant) {
		return &CapacityError{Node: n.Name, Resource: "state", Reason: "it is not leased by " + req.Tenant + " (require_lease_for_macos)"}
	}
	if req.ExclusiveLeases && n.LeasedBy != "" && n.LeasedBy != req.Tenant {
		return &CapacityError{Node: n.Name, Resource: "state", Reason: "it is leased by another tenant (exclusive_leased_hosts)"}
	}
	return nil
}

// EndLease ends an active lease at `at` with reason: the lease record says
// so, its index entry goes, and the node (if it still exists and names this
// lease) loses its lessee and becomes scrub pending, all in one transaction.
// It returns the lease as stored and whether this call ended it (false: it
// had already ended, and nothing changed).
func (s *Store) EndLease(ctx context.Context, id, reason string, at time.Time) (*Lease, bool, error) {
	what := "end lease " + id
	lk := s.leaseKey(id)
	var out *Lease
	ended := false
	err := s.casLoop(ctx, what, func(bool) (bool, error) {
		l, lrev, err := getJSON[Lease](ctx, s, lk)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if !l.Active() {
			out = l
			return true, nil
		}
		nk := s.nodeKey(l.Node)
		n, nrev, err := getJSON[Node](ctx, s, nk)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		l.ReleasedAt, l.EndReason = at.UTC(), reason
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(lk), "=", lrev),
			clientv3.Compare(clientv3.ModRevision(nk), "=", nrev), // 0: still no node
		}
		ops := []clientv3.Op{clientv3.OpPut(lk, mustJSON(l)), clientv3.OpDelete(s.leaseTenantPrefix(l.Tenant) + id)}
		if n != nil && n.LeaseID == id {
			n.LeasedBy, n.LeaseID, n.ScrubPending = "", "", true
			ops = append(ops, clientv3.OpPut(nk, mustJSON(n)))
		}
		r, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if r.Succeeded {
			out, ended = l, true
		}
		return r.Succeeded, nil
	})
	return out, ended, err
}

// MarkLeaseVMsRemoved records that the lessee's VMs on the node were deleted
// after the lease ended.
func (s *Store) MarkLeaseVMsRemoved(ctx context.Context, id string) error {
	lk := s.leaseKey(id)
	return s.casLoop(ctx, "mark lease "+id+" cleaned", func(bool) (bool, error) {
		l, rev, err := getJSON[Lease](ctx, s, lk)
		if err != nil {
			return false, fmt.Errorf("mark lease %s cleaned: %w", id, err)
		}
		if l.VMsRemoved {
			return true, nil
		}
		l.VMsRemoved = true
		r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(lk), "=", rev)).
			Then(clientv3.OpPut(lk, mustJSON(l))).Commit()
		if err != nil {
			return false, fmt.Errorf("mark lease %s cleaned: %w", id, err)
		}
		return r.Succeeded, nil
	})
}

// GetLease reads one lease, active or ended.
func (s *Store) GetLease(ctx context.Context, id string) (*Lease, error) {
	if !ValidName(id) {
		return nil, fmt.Errorf("get lease %s: %w", id, ErrNotFound)
	}
	l, _, err := getJSON[Lease](ctx, s, s.leaseKey(id))
	if err != nil {
		return nil, fmt.Errorf("get lease %s: %w", id, err)
	}
	return l, nil
}

// ListLeases reads the leases keep accepts (all with keep nil), newest first.
func (s *Store) ListLeases(ctx context.Context, keep func(*Lease) bool) ([]Lease, error) {
	var out []Lease
	_, err := s.scan(ctx, s.prefix+"leases/", 0, func(kv *mvccpb.KeyValue) error {
		var l Lease
		if err := json.Unmarshal(kv.Value, &l); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		if keep == nil || keep(&l) {
			out = append(out, l)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.After(out[j].StartedAt) })
	return out, nil
}

// ActiveLeaseOfNode is the node's active lease, or nil when it has none.
func (s *Store) ActiveLeaseOfNode(ctx context.Context, node string) (*Lease, error) {
	n, err := s.GetNode(ctx, node)
	if err != nil {
		return nil, err
	}
	if n.LeaseID == "" {
		return nil, nil
	}
	l, err := s.GetLease(ctx, n.LeaseID)
	if err != nil {
		return nil, err
	}
	if !l.Active() {
		return nil, nil
	}
	return l, nil
}

// ---- drains ----

// Drain is the state of a node's latest drain: the drain the API shows (sdk.Drain, the one
// definition of its fields, with one sdk.DrainVM for each VM the drain handled). A VM's
// action "moved" means recreated on MovedTo, then deleted here, and "pending" a move to
// MovedTo under way.
//
// sdk.Drain.Draining is the node's (Node.Draining, which uncordon ends), not the drain's: the
// record never stores a copy (MarshalJSON) and DrainStatus reads it from the node.
type Drain struct {
	sdk.Drain
}

// MarshalJSON writes the record without sdk.Drain's "draining".
func (d Drain) MarshalJSON() ([]byte, error) {
	type record Drain // the same fields, without this method
	return marshalWithout(record(d), "draining")
}

// PutDrain writes a node's drain record whole.
func (s *Store) PutDrain(ctx context.Context, d *Drain) error {
	if err := checkName("node", d.Node); err != nil {
		return err
	}
	if d.VMs == nil {
		d.VMs = []sdk.DrainVM{}
	}
	if _, err := s.kv(ctx).Put(ctx, s.drainKey(d.Node), mustJSON(d)); err != nil {
		return fmt.Errorf("put drain of node %s: %w", d.Node, err)
	}
	return nil
}

// GetDrain reads a node's latest drain (ErrNotFound: never drained).
func (s *Store) GetDrain(ctx context.Context, node string) (*Drain, error) {
	d, _, err := getJSON[Drain](ctx, s, s.drainKey(node))
	if err != nil {
		return nil, fmt.Errorf("get drain of node %s: %w", node, err)
	}
	return d, nil
}

// ListDrains reads every node's latest drain.
func (s *Store) ListDrains(ctx context.Context) ([]Drain, error) {
	ds, err := listJSON[Drain](ctx, s, s.prefix+"drains/")
	if err != nil {
		return nil, fmt.Errorf("list drains: %w", err)
	}
	return ds, nil
}
