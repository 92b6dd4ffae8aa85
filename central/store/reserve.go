package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// How reservations keep quotas and node capacity exact
//
// What a tenant (or a node) has in use is running + reserved:
//
//   - running is the sum of its ledger entries that have not ended. It is kept in a counter
//     key (usage/tenant/<t>, usage/node/<n>) that is changed only in the same transaction
//     that changes the set of running entries: Commit and RecordEntry add, EndEntry
//     subtracts. So the counter is exact by construction, and Recount can prove it.
//   - reserved is the sum of the live reservation keys under reservations/tenant/<t>/ and
//     reservations/node/<n>/. Those keys are attached to the reserving central's etcd lease,
//     so they are NOT counted into any counter: a lease expiry deletes them without running
//     our code, and a counter that included them would then be wrong for ever. Reading them
//     by prefix costs O(creates in flight), which is small.
//
// Reserve reads, in one read-only transaction (one revision): both counters, both
// reservation prefixes, the node record and (when the caller did not pass quotas) the
// tenant record. It checks the quotas and the node's free capacity (total - running -
// reserved), and then writes, in one transaction, the two leased reservation keys and both
// counters again (same usage, generation + 1), on condition that the ModRevision of both
// counters, the node record and the tenant record are still those it read. (The counter
// doubles as the per-tenant and per-node "generation" key: etcd gives every put a new
// ModRevision even with an unchanged value; the gen field only makes the bump visible.)
// Comparing the node record means a heartbeat that shrinks capacity, or a cordon, between
// read and write makes Reserve decide again; comparing the tenant record does the same for
// a quota change or a disable. Quotas passed in by the caller are the caller's to keep
// fresh. The first read is serializable (any member answers from its own state): an
// admission decided on stale data fails its compare, and a refusal is confirmed by a
// linearizable read before it is returned, so staleness costs a retry, never a wrong answer.
// If the condition fails, the transaction's Else branch re-reads the same set at the new
// revision and the loop goes again at once, so a retry costs one round trip, not two (a
// commit decided on a watched view, ReserveRequest.Seen, has no Else branch and reads after
// a lost compare); after three lost races it waits a jittered, growing pause and reads
// afresh (at most MaxTxnRetries tries, then ErrConflict). Within one central, writers of the
// same counter also queue in process (locks.go) so a burst does not send transactions that
// are bound to lose; that is only an optimisation, since other centrals race through the
// transaction alone.
//
// Why comparing the counters is enough, although the reservation prefixes are ranges whose
// new keys no single ModRevision would reveal: every operation that can make running +
// reserved GROW for a tenant or a node (Reserve adds a reservation; Commit and RecordEntry
// add a running entry) rewrites that tenant's and that node's counter in the same
// transaction. So if both counters are unchanged at our write, nothing that increases usage
// committed between our read and our write, and the usage we checked against is an upper
// bound of the real one: no overshoot, however many goroutines or centrals race. Operations
// that only SHRINK usage need no bump and may be invisible to us: Release, EndEntry's
// effect on a counter we did not read, and, importantly, a lease expiry that deletes the
// reservation keys of a dead central. A read that misses such a shrink over-counts, which
// can refuse a request that would just have fitted an instant later, never admit one that
// does not fit. (EndEntry does
// rewrite the counters because it changes them; that only makes a concurrent Reserve retry.)
// Commit moves a reservation into running in one transaction, so no reader ever sees it in
// both or in neither.
//
// The price is that all creates of one tenant, and all creates on one node, serialise on
// that key: throughput per tenant and per node is one transaction per etcd round trip,
// while different tenants on different nodes do not contend. The scheduler spreads load over
// nodes; per-tenant bursts beyond a few hundred a second are not a use case.
//
// What the store does not guard: a central that stalls longer than its lease TTL after
// reserving and before committing has lost its reservation, and others may have taken the
// room. Its Commit still records the VM (it exists on the node; hiding it would be worse) and
// logs a warning; usage may then exceed a quota by that VM until it ends.

// counter is the stored form of a usage counter: running usage and a generation that every
// Reserve, Commit, RecordEntry and EndEntry touching it increments.
type counter struct {
	Usage
	Gen int64 `json:"gen"`
}

// ReserveRequest asks for room for one VM.
type ReserveRequest struct {
	// Tenant the VM is for; empty is the operator, who has no quota.
	Tenant string
	// Node to place it on.
	Node string
	// Size of the VM.
	VCPUs, MemoryMiB int64
	// MacOS takes one of the node's macOS slots.
	MacOS bool
	// ExclusiveLeases refuses a node leased by anyone but Tenant (the policy's
	// exclusive_leased_hosts; the operator placing on a host it named leaves
	// it off). The lessee is read from the node record the reservation
	// compares, so a lease made between placement and reservation is seen.
	ExclusiveLeases bool
	// RequireLease refuses a node Tenant does not lease (a tenant's macOS
	// guest under require_lease_for_macos).
	RequireLease bool
	// Replaces names a running ledger entry of Tenant that this VM replaces
	// (a drain recreating a reschedulable VM elsewhere before deleting the
	// old one). The tenant's quota is checked without that entry, so a
	// tenant at its quota can still be moved; node capacity counts both.
	// Only one live reservation may discount a given entry.
	Replaces string
	// Seen, when set, gives what a watched view of the fleet holds for Tenant and Node
	// (central/placement, fleetwatch.go). Reserve then decides on it instead of reading
	// first, and commits in one transaction that compares the ModRevisions of only the keys
	// the decision rests on: the node's counter and record, the tenant's counter and (when
	// Quotas is nil) record. A nil answer, a refusal on the view's data (confirmed by
	// reading) or a lost compare fall back to the reads below. Seen is called with this
	// process's locks of both counters held, and told this process's last writes of them,
	// which the view should hold first. Ignored for a replacement.
	Seen func(ctx context.Context, wrote Wrote) *Seen
	// Took, when set, is told of a reservation committed on what Seen gave, with the
	// revision of its write, while the counters' locks are still held: the view applies
	// the write at once (the counters and reservations it wrote are exactly the view's
	// plus this one, or the compare would have failed), so the next placement of this
	// process need not wait for the watch to bring it.
	Took func(rev int64, res *Reservation)
	// Quotas of the tenant (ignored for the operator). Nil: Reserve reads the tenant record in its transaction (and
	// compares its revision, so a quota change or a disable cannot slip in between) and
	// refuses a missing or disabled tenant.
	Quotas *sdk.Quotas
}

// Reserve holds quota and node capacity for one VM in flight, under this central's lease.
// Errors: *QuotaError (ErrQuota), *CapacityError (ErrNoCapacity), ErrNotFound (node or
// tenant), ErrInvalid, ErrConflict after MaxTxnRetries lost races. See the comment above
// for why it never overshoots.
func (s *Store) Reserve(ctx context.Context, req ReserveRequest) (*Reservation, error) {
	if err := checkName("node", req.Node); err != nil {
		return nil, err
	}
	if req.Tenant != "" {
		if err := checkName("tenant id", req.Tenant); err != nil {
			return nil, err
		}
	}
	if req.VCPUs < 1 || req.MemoryMiB < 1 {
		return nil, fmt.Errorf("%w: reserve: vcpus %d and memory_mib %d must be at least 1", ErrInvalid, req.VCPUs, req.MemoryMiB)
	}
	what := fmt.Sprintf("reserve %d vCPU %d MiB on node %s", req.VCPUs, req.MemoryMiB, req.Node)
	sess, err := s.Session(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	unlock, err := s.lockCounters(ctx, req.Tenant, req.Node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer unlock()
	readTenant := req.Tenant != "" && req.Quotas == nil
	// The reads are built when first needed: a reservation decided on a watched view
	// (Seen) usually commits without reading at all.
	readOps := func(opts ...clientv3.OpOption) []clientv3.Op {
		ops := s.reserveReads(req.Tenant, req.Node, readTenant, opts...)
		if req.Tenant != "" && req.Replaces != "" {
			ops = append(ops, clientv3.OpGet(s.runningTenantPrefix(req.Tenant)+req.Replaces, opts...))
		}
		return ops
	}
	var reads []clientv3.Op
	var resp *clientv3.TxnResponse
	stale := false // resp came from a serializable read
	read := func(serializable bool) error {
		var ops []clientv3.Op
		if serializable {
			// The first read may be served by any etcd member from its own state
			// (serializable): it can be stale, but an admission decided on stale
			// data fails its compare, and a refusal is confirmed with a
			// linearizable read before it is returned.
			ops = readOps(clientv3.WithSerializable())
		} else {
			if reads == nil {
				reads = readOps()
			}
			ops = reads
		}
		r, err := s.kv(ctx).Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		resp, stale = r, serializable
		return nil
	}
	var out *Reservation
	// One id for every try: a try after a write whose outcome is unknown (transient.go)
	// finds the reservation there if it was applied.
	res := &Reservation{
		ID: newID("r-"), Tenant: req.Tenant, Node: req.Node, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB,
		MacOS: req.MacOS, CreatedAt: time.Now().UTC(), Replaces: req.Replaces,
	}
	seen := req.Seen
	if req.Replaces != "" {
		seen = nil
	}
	err = s.repeatLoop(ctx, what, func(afterPause bool) (bool, error) {
		var snap *reserveSnapshot
		fromView := false
		if seen != nil && resp == nil && !afterPause {
			if sn := seen(ctx, s.usageWrote(req.Node, req.Tenant)); sn != nil {
				snap = sn.snapshot()
				fromView = admit(req, snap, what) == nil // a refusal is confirmed by reading
				if !fromView {
					snap = nil
				}
			}
			seen = nil
		}
		if !fromView && (resp == nil || afterPause) {
			if err := read(true); err != nil {
				return false, err
			}
		}
		for !fromView {
			if hasKey(resp.Responses[2].GetResponseRange().Kvs, s.resNodePrefix(req.Node)+res.ID) {
				out = res // an earlier try's write was applied
				return true, nil
			}
			var err error
			snap, err = parseReserveReads(resp.Responses, req.Tenant != "", readTenant)
			if err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			if err = snap.readReplaced(resp.Responses, req); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			if err = admit(req, snap, what); err == nil {
				break
			}
			if !stale {
				return false, err
			}
			if err := read(false); err != nil {
				return false, err
			}
		}
		res.Lease = int64(sess.Lease())
		lease := clientv3.WithLease(sess.Lease())
		// Everything read is compared (txn.go); the counters alone would do (see the
		// comment at the top), the rest keeps the rule "a write compares what it read".
		keys := []readKey{{s.usageNodeKey(req.Node), snap.nodeUsageRev}, {s.nodeKey(req.Node), snap.nodeRev}}
		prefixes := []string{s.resNodePrefix(req.Node)}
		if req.Tenant != "" {
			keys = append(keys, readKey{s.usageTenantKey(req.Tenant), snap.tenantUsageRev})
			prefixes = append(prefixes, s.resTenantPrefix(req.Tenant))
			if readTenant {
				keys = append(keys, readKey{s.tenantKey(req.Tenant), snap.tenantRev})
			}
			if req.Replaces != "" {
				keys = append(keys, readKey{s.runningTenantPrefix(req.Tenant) + req.Replaces, snap.replacedRev})
			}
		}
		var cmps []clientv3.Cmp
		if fromView {
			// The counters stand for the reservation prefixes (see the top of this file),
			// and the view holds no revision of its own to compare them against.
			cmps = unchanged(0, keys)
		} else {
			cmps = unchanged(resp.Header.Revision, keys, prefixes...)
		}
		snap.nodeUsage.Gen++
		ops := []clientv3.Op{
			clientv3.OpPut(s.resNodePrefix(req.Node)+res.ID, mustJSON(res), lease),
			clientv3.OpPut(s.usageNodeKey(req.Node), mustJSON(snap.nodeUsage)),
		}
		if req.Tenant != "" {
			snap.tenantUsage.Gen++
			ops = append(ops,
				clientv3.OpPut(s.resTenantPrefix(req.Tenant)+res.ID, mustJSON(res), lease),
				clientv3.OpPut(s.usageTenantKey(req.Tenant), mustJSON(snap.tenantUsage)))
		}
		// A commit on what the read gave carries the reads again as its Else branch, so a
		// lost compare costs one round trip. One on the view's data carries none: it
		// rarely loses (the view is this process's own and current to its last writes),
		// and a smaller transaction is less for etcd to take in on every placement.
		var elseReads []clientv3.Op
		if !fromView {
			if reads == nil {
				reads = readOps()
			}
			elseReads = reads
		}
		r, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Else(elseReads...).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Our lease expired (etcd unreachable past the TTL); take a new session and go again.
			s.dropSession(sess)
			if sess, err = s.Session(ctx); err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if r.Succeeded {
			s.noteUsageWrite(r.Header.Revision, req.Node, snap.nodeUsage, req.Tenant, snap.tenantUsage)
			if fromView && req.Took != nil {
				req.Took(r.Header.Revision, res)
			}
			out = res
			return true, nil
		}
		if fromView {
			// The view was behind: read what it missed, linearizably, and decide on that.
			return false, read(false)
		}
		resp, stale = r, false // the Else branch read the same set at the new revision
		return false, nil
	})
	return out, err
}

// Seen is what a watched view of the fleet holds for one reservation's decision: the node's
// record and counter with their ModRevisions and the sum of its live reservations, and the
// same of the tenant (see ReserveRequest.Seen). A nil Node or Tenant is one the view lacks.
type Seen struct {
	Node                        *Node
	NodeRev                     int64
	NodeUsage, NodeReserved     Usage
	NodeGen, NodeUsageRev       int64
	Tenant                      *Tenant
	TenantRev                   int64
	TenantUsage, TenantReserved Usage
	TenantGen, TenantUsageRev   int64
}

func (sn *Seen) snapshot() *reserveSnapshot {
	return &reserveSnapshot{
		nodeUsage: counter{Usage: sn.NodeUsage, Gen: sn.NodeGen}, nodeUsageRev: sn.NodeUsageRev,
		node: sn.Node, nodeRev: sn.NodeRev, nodeReserved: sn.NodeReserved,
		tenantUsage: counter{Usage: sn.TenantUsage, Gen: sn.TenantGen}, tenantUsageRev: sn.TenantUsageRev,
		tenantReserved: sn.TenantReserved, tenant: sn.Tenant, tenantRev: sn.TenantRev,
	}
}

// admit decides a reservation on a snapshot: nil, or why not.
func admit(req ReserveRequest, snap *reserveSnapshot, what string) error {
	if snap.node == nil {
		return fmt.Errorf("%s: node %w", what, ErrNotFound)
	}
	quotas := req.Quotas
	if req.Tenant == "" {
		quotas = nil // the operator has no quota
	} else if quotas == nil {
		if snap.tenant == nil {
			return fmt.Errorf("%s: tenant %s %w", what, req.Tenant, ErrNotFound)
		}
		if snap.tenant.Disabled {
			return fmt.Errorf("%w: %s: tenant %s is disabled", ErrInvalid, what, req.Tenant)
		}
		quotas = &snap.tenant.Quota
	}
	ask := req.ask()
	if quotas != nil {
		used := snap.tenantUsage.Usage.Add(snap.tenantReserved)
		if snap.replaced != nil {
			// A replacement: the old VM leaves once this one runs, so the
			// tenant's quota sees only one of them.
			used = used.Sub(snap.replaced.usage())
		}
		if err := checkQuota(*quotas, used, ask); err != nil {
			return err
		}
	}
	if err := checkNode(snap.node, snap.nodeUsage.Usage.Add(snap.nodeReserved), ask); err != nil {
		return err
	}
	return checkLessee(snap.node, req)
}

// reserveReads are the reads Reserve decides on: node counter, node record, node
// reservations, then for a tenant its counter, its reservations and maybe its record.
func (s *Store) reserveReads(tenant, node string, readTenant bool, opts ...clientv3.OpOption) []clientv3.Op {
	prefix := append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)
	ops := []clientv3.Op{
		clientv3.OpGet(s.usageNodeKey(node), opts...),
		clientv3.OpGet(s.nodeKey(node), opts...),
		clientv3.OpGet(s.resNodePrefix(node), prefix...),
	}
	if tenant != "" {
		ops = append(ops,
			clientv3.OpGet(s.usageTenantKey(tenant), opts...),
			clientv3.OpGet(s.resTenantPrefix(tenant), prefix...))
		if readTenant {
			ops = append(ops, clientv3.OpGet(s.tenantKey(tenant), opts...))
		}
	}
	return ops
}

type reserveSnapshot struct {
	nodeUsage, tenantUsage       counter
	nodeUsageRev, tenantUsageRev int64
	node                         *Node
	nodeRev                      int64
	nodeReserved, tenantReserved Usage
	tenant                       *Tenant
	tenantRev                    int64
	// replaced is the running entry a replacement discounts (nil: none,
	// ended, or already discounted by another live reservation), and
	// replacedRev the ModRevision its running-index key had (0: absent).
	replaced    *LedgerEntry
	replacedRev int64
}

// readReplaced fills snap.replaced from the last read of a replacement's
// reserve (the running entry it replaces), unless another live reservation
// of the tenant already replaces that entry.
func (snap *reserveSnapshot) readReplaced(rs []*pb.ResponseOp, req ReserveRequest) error {
	snap.replaced, snap.replacedRev = nil, 0
	if req.Tenant == "" || req.Replaces == "" {
		return nil
	}
	var e LedgerEntry
	rev, err := decodeOne(rs[len(rs)-1].GetResponseRange().Kvs, &e)
	snap.replacedRev = rev
	if err != nil || rev == 0 || !e.Running() {
		return err
	}
	for _, kv := range rs[4].GetResponseRange().Kvs { // the tenant's reservations
		var r Reservation
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		if r.Replaces == req.Replaces {
			return nil
		}
	}
	snap.replaced = &e
	return nil
}

func parseReserveReads(rs []*pb.ResponseOp, hasTenant, readTenant bool) (*reserveSnapshot, error) {
	var snap reserveSnapshot
	var err error
	kvs := func(i int) []*mvccpb.KeyValue { return rs[i].GetResponseRange().Kvs }
	if snap.nodeUsageRev, err = decodeOne(kvs(0), &snap.nodeUsage); err != nil {
		return nil, err
	}
	var n Node
	if snap.nodeRev, err = decodeOne(kvs(1), &n); err != nil {
		return nil, err
	}
	if snap.nodeRev != 0 {
		snap.node = &n
	}
	if snap.nodeReserved, err = sumReservations(kvs(2)); err != nil {
		return nil, err
	}
	if hasTenant {
		if snap.tenantUsageRev, err = decodeOne(kvs(3), &snap.tenantUsage); err != nil {
			return nil, err
		}
		if snap.tenantReserved, err = sumReservations(kvs(4)); err != nil {
			return nil, err
		}
		if readTenant {
			var t Tenant
			if snap.tenantRev, err = decodeOne(kvs(5), &t); err != nil {
				return nil, err
			}
			if snap.tenantRev != 0 {
				snap.tenant = &t
			}
		}
	}
	return &snap, nil
}

// hasKey reports whether kvs hold key.
func hasKey(kvs []*mvccpb.KeyValue, key string) bool {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return true
		}
	}
	return false
}

// decodeOne decodes the first kv into v and returns its ModRevision; no kv leaves v alone
// and returns 0.
func decodeOne(kvs []*mvccpb.KeyValue, v any) (int64, error) {
	if len(kvs) == 0 {
		return 0, nil
	}
	if err := json.Unmarshal(kvs[0].Value, v); err != nil {
		return 0, fmt.Errorf("decode %s: %w", kvs[0].Key, err)
	}
	clampStored(v)
	return kvs[0].ModRevision, nil
}

func sumReservations(kvs []*mvccpb.KeyValue) (Usage, error) {
	var u Usage
	for _, kv := range kvs {
		var r Reservation
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return Usage{}, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		u = u.Add(r.usage())
	}
	return u, nil
}

// ask is what the VM of req takes.
func (req ReserveRequest) ask() Usage {
	u := Usage{VMs: 1, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB}
	if req.MacOS {
		u.MacOS = 1
	}
	return u
}

// QuotaLeft tells, before any node is chosen, whether the tenant's quota
// has room for req's VM: a *QuotaError when it has none. Placement asks it
// first, so a tenant at its quota is told about its quota (and how to free
// some) rather than about a node that is full of its own VMs. It reads
// outside a transaction; Reserve still decides atomically. The operator, a
// replacement (a drain's) and a request carrying its quotas pass.
func (s *Store) QuotaLeft(ctx context.Context, req ReserveRequest) error {
	if req.Tenant == "" || req.Replaces != "" || req.Quotas != nil {
		return nil
	}
	t, err := s.GetTenant(ctx, req.Tenant)
	if err != nil {
		return nil // Reserve says what is wrong with the tenant
	}
	u, err := s.TenantUsage(ctx, req.Tenant)
	if err != nil {
		return err
	}
	return checkQuota(t.Quota, u.Running.Add(u.Reserved), req.ask())
}

// QuotaRoom is a *QuotaError when quotas q, with used in use, have no room
// for req's VM (a check on data the caller holds, such as a watched view).
func QuotaRoom(q sdk.Quotas, used Usage, req ReserveRequest) error {
	return checkQuota(q, used, req.ask())
}

func checkQuota(q sdk.Quotas, used, ask Usage) error {
	for _, c := range []struct {
		field             string
		limit, used, asks int64
	}{
		{"max_vms", q.MaxVMs, used.VMs, ask.VMs},
		{"max_vcpus", q.MaxVCPUs, used.VCPUs, ask.VCPUs},
		{"max_memory_mib", q.MaxMemoryMiB, used.MemoryMiB, ask.MemoryMiB},
	} {
		if c.limit > 0 && c.used+c.asks > c.limit {
			return &QuotaError{Field: c.field, Limit: c.limit, Used: c.used, Asked: c.asks}
		}
	}
	return nil
}

// checkNode checks the node takes new VMs and has room: its reported total minus what the
// ledger runs there minus what is reserved there. The node's own "free" figure is not used:
// it already subtracts central's VMs, so combining the two would count them twice.
func checkNode(n *Node, used, ask Usage) error {
	if reason := n.Unavailable(); reason != "" {
		return &CapacityError{Node: n.Name, Resource: "state", Reason: "it is " + reason}
	}
	t := n.Capacity.Total
	for _, c := range []struct {
		res         string
		total, used int64
		asks        int64
	}{
		{"vcpus", t.VCPUs, used.VCPUs, ask.VCPUs},
		{"memory_mib", t.MemoryMiB, used.MemoryMiB, ask.MemoryMiB},
		{"macos_slots", t.MacOSSlots, used.MacOS, ask.MacOS},
	} {
		if c.asks > 0 && c.used+c.asks > c.total {
			return &CapacityError{Node: n.Name, Resource: c.res, Free: max(c.total-c.used, 0), Asked: c.asks}
		}
	}
	return nil
}

func (s *Store) dropSession(sess *concurrency.Session) {
	s.mu.Lock()
	if s.session == sess {
		s.session = nil
	}
	s.mu.Unlock()
	sess.Orphan()
}

// Release gives a reservation back (the node refused or failed the create). Releasing one
// that is already gone (committed, released, or lost with its lease) is not an error.
// Counters are not touched: they hold only running entries, and freeing room needs no
// generation bump (see the comment at the top of this file).
func (s *Store) Release(ctx context.Context, res *Reservation) error {
	ops := []clientv3.Op{clientv3.OpDelete(s.resNodePrefix(res.Node) + res.ID)}
	if res.Tenant != "" {
		ops = append(ops, clientv3.OpDelete(s.resTenantPrefix(res.Tenant)+res.ID))
	}
	// Not fenced (fence.go): giving room back is right whoever does it, and a
	// deposed leader that could not release would hold the room for as long
	// as its central lives.
	err := s.retryTransient(ctx, "release reservation "+res.ID, func() error {
		_, err := s.client.Txn(ctx).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return fmt.Errorf("release reservation %s: %w", res.ID, err)
	}
	return nil
}

// Commit turns a reservation into a running ledger entry in one transaction: the reservation
// keys go, the entry (and its running-index copies) arrive, and both counters grow by the
// entry's size. Entry fields left empty are taken from the reservation (size, guest OS
// macos for a macOS reservation); tenant and node always are. The ID defaults to
// EntryID(node, VMID) (the reservation's ID for an entry without a VM id), and StartedAt to
// now. A ledger entry with the same ID already there is ErrExists (a retried Commit, or the
// reconciler adopted the VM first); a VM marked deleted (MarkDeleted) is ErrDeleted.
func (s *Store) Commit(ctx context.Context, res *Reservation, e LedgerEntry) (*LedgerEntry, error) {
	return s.record(ctx, res, fromReservation(res, e), nil)
}

// CommitSpec is Commit that also keeps the VM's create spec (an opaque
// JSON document) under specs/<entry id>, in the same transaction. Only
// VMs created "reschedulable" keep one: create bodies can carry secrets.
// EndEntry deletes it with the entry's end.
func (s *Store) CommitSpec(ctx context.Context, res *Reservation, e LedgerEntry, spec []byte) (*LedgerEntry, error) {
	return s.record(ctx, res, fromReservation(res, e), spec)
}

// fromReservation fills what a committed entry takes from its reservation.
func fromReservation(res *Reservation, e LedgerEntry) LedgerEntry {
	if e.ID == "" && e.VMID == "" {
		e.ID = res.ID
	}
	e.Tenant, e.Node = res.Tenant, res.Node
	if e.VCPUs == 0 {
		e.VCPUs = res.VCPUs
	}
	if e.MemoryMiB == 0 {
		e.MemoryMiB = res.MemoryMiB
	}
	if e.GuestOS == "" && res.MacOS {
		e.GuestOS = GuestMacOS
	}
	return e
}

// RecordEntry adds a running ledger entry without a reservation: the reconciler adopting a
// VM a node runs with a tenant stamp that the ledger lacks. No quota is checked (the VM
// exists); the counters grow as with Commit. The ID defaults as in Commit (a new one for an
// entry without a VM id); ErrExists and ErrDeleted as in Commit.
func (s *Store) RecordEntry(ctx context.Context, e LedgerEntry) (*LedgerEntry, error) {
	if e.ID == "" && e.VMID == "" {
		e.ID = newID("l-")
	}
	return s.record(ctx, nil, e, nil)
}

func (s *Store) record(ctx context.Context, res *Reservation, e LedgerEntry, spec []byte) (*LedgerEntry, error) {
	if e.StartedAt.IsZero() {
		e.StartedAt = time.Now().UTC()
	}
	e.EndedAt, e.EndReason = time.Time{}, ""
	if e.GuestOS == "" {
		e.GuestOS = GuestLinux
	}
	if e.ID == "" {
		e.ID = EntryID(e.Node, e.VMID)
	}
	if err := checkName("ledger entry id", e.ID); err != nil {
		return nil, err
	}
	if err := checkName("node", e.Node); err != nil {
		return nil, err
	}
	if e.Tenant != "" {
		if err := checkName("tenant id", e.Tenant); err != nil {
			return nil, err
		}
	}
	if e.VCPUs < 1 || e.MemoryMiB < 1 {
		return nil, fmt.Errorf("%w: ledger entry %s: vcpus and memory_mib must be at least 1", ErrInvalid, e.ID)
	}
	what := "record ledger entry " + e.ID
	unlock, err := s.lockCounters(ctx, e.Tenant, e.Node)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer unlock()
	lk := s.ledgerKey(e.ID)
	// The reads, by position: node counter, ledger key, deleted mark, then the tenant's
	// counter and the reservation when there are such.
	dk := s.deletedKey(e.ID)
	if e.VMID != "" {
		dk = s.deletedKey(EntryID(e.Node, e.VMID))
	}
	reads := []clientv3.Op{clientv3.OpGet(s.usageNodeKey(e.Node)), clientv3.OpGet(lk, clientv3.WithCountOnly()),
		clientv3.OpGet(dk, clientv3.WithCountOnly())}
	tenantAt, resAt := -1, -1
	if e.Tenant != "" {
		tenantAt = len(reads)
		reads = append(reads, clientv3.OpGet(s.usageTenantKey(e.Tenant)))
	}
	if res != nil {
		resAt = len(reads)
		reads = append(reads, clientv3.OpGet(s.resNodePrefix(res.Node)+res.ID, clientv3.WithCountOnly()))
	}
	var resp *clientv3.TxnResponse
	warned := false
	unknown := false // a write failed without saying whether it was applied (transient.go)
	// The first try writes on the counters as this process last wrote them, when it has
	// (the reservation being committed wrote them a moment ago, and this process's other
	// writers of them wrote their values too), without reading: the compare of their
	// ModRevisions proves nobody wrote them since, and a lost compare reads through the
	// Else branch and goes on as below. The reservation must then still exist (compared
	// too): a gone one is noticed and warned of on the read path.
	triedLast := false
	err = s.repeatLoop(ctx, what, func(afterPause bool) (bool, error) {
		var nc, tc counter
		var nrev, trev int64
		fromLast := false
		if resp == nil && !afterPause && !triedLast {
			triedLast = true
			nc, nrev, fromLast = s.lastWritten(s.usageNodeKey(e.Node))
			if fromLast && e.Tenant != "" {
				tc, trev, fromLast = s.lastWritten(s.usageTenantKey(e.Tenant))
			}
		}
		if !fromLast {
			if resp == nil || afterPause {
				r, err := s.kv(ctx).Txn(ctx).Then(reads...).Commit()
				if err != nil {
					return false, fmt.Errorf("%s: %w", what, err)
				}
				resp = r
			}
			rs := resp.Responses
			if rs[1].GetResponseRange().Count > 0 {
				if unknown {
					// The entry's id is the VM's: whoever wrote it, this VM is recorded
					// (most likely by our own write, applied before its answer was lost).
					return true, nil
				}
				return false, fmt.Errorf("%s: %w", what, ErrExists)
			}
			if rs[2].GetResponseRange().Count > 0 {
				return false, fmt.Errorf("%s: vm %s on node %s: %w", what, e.VMID, e.Node, ErrDeleted)
			}
			if res != nil && rs[resAt].GetResponseRange().Count == 0 && !warned {
				warned = true
				s.log.Warn("reservation was gone at commit (its central's lease expired); recording the VM anyway",
					"reservation", res.ID, "tenant", res.Tenant, "node", res.Node)
			}
			var err error
			if nrev, err = decodeOne(rs[0].GetResponseRange().Kvs, &nc); err != nil {
				return false, err
			}
			if e.Tenant != "" {
				if trev, err = decodeOne(rs[tenantAt].GetResponseRange().Kvs, &tc); err != nil {
					return false, err
				}
			}
		}
		u := e.usage()
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(s.usageNodeKey(e.Node)), "=", nrev),
			clientv3.Compare(clientv3.CreateRevision(lk), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(dk), "=", 0),
		}
		if fromLast && res != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.resNodePrefix(res.Node)+res.ID), ">", 0))
		}
		nc.Usage, nc.Gen = nc.Usage.Add(u), nc.Gen+1
		body := mustJSON(&e)
		ops := []clientv3.Op{
			clientv3.OpPut(lk, body),
			clientv3.OpPut(s.runningNodePrefix(e.Node)+e.ID, body),
			clientv3.OpPut(s.usageNodeKey(e.Node), mustJSON(nc)),
		}
		if spec != nil {
			ops = append(ops, clientv3.OpPut(s.specKey(e.ID), string(spec)))
		}
		if e.Tenant != "" {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.usageTenantKey(e.Tenant)), "=", trev))
			tc.Usage, tc.Gen = tc.Usage.Add(u), tc.Gen+1
			ops = append(ops,
				clientv3.OpPut(s.runningTenantPrefix(e.Tenant)+e.ID, body),
				clientv3.OpPut(s.usageTenantKey(e.Tenant), mustJSON(tc)))
		}
		if res != nil {
			ops = append(ops, clientv3.OpDelete(s.resNodePrefix(res.Node)+res.ID))
			if res.Tenant != "" {
				ops = append(ops, clientv3.OpDelete(s.resTenantPrefix(res.Tenant)+res.ID))
			}
		}
		r, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Else(reads...).Commit()
		if err != nil {
			unknown = unknown || transient(err)
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if r.Succeeded {
			s.noteUsageWrite(r.Header.Revision, e.Node, nc, e.Tenant, tc)
			return true, nil
		}
		resp = r
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// EndEntry closes a running ledger entry (the VM was deleted or vanished) and frees its
// usage, in one transaction. Ending an entry that has already ended changes nothing and
// returns it as stored (the first end wins).
func (s *Store) EndEntry(ctx context.Context, id, reason string, at time.Time) (*LedgerEntry, error) {
	what := "end ledger entry " + id
	lk := s.ledgerKey(id)
	var out *LedgerEntry
	err := s.repeatLoop(ctx, what, func(bool) (bool, error) { // reads afresh every time
		e, rev, err := getJSON[LedgerEntry](ctx, s, lk)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if !e.Running() {
			out = e
			return true, nil
		}
		unlock, err := s.lockCounters(ctx, e.Tenant, e.Node)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		defer unlock()
		reads := []clientv3.Op{clientv3.OpGet(s.usageNodeKey(e.Node))}
		if e.Tenant != "" {
			reads = append(reads, clientv3.OpGet(s.usageTenantKey(e.Tenant)))
		}
		rr, err := s.kv(ctx).Txn(ctx).Then(reads...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		u := e.usage()
		var nc, tc counter
		nrev, err := decodeOne(rr.Responses[0].GetResponseRange().Kvs, &nc)
		if err != nil {
			return false, err
		}
		ended := *e
		ended.EndedAt, ended.EndReason = at.UTC(), reason
		nc.Usage, nc.Gen = nc.Usage.Sub(u), nc.Gen+1
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(lk), "=", rev),
			clientv3.Compare(clientv3.ModRevision(s.usageNodeKey(e.Node)), "=", nrev),
		}
		body := mustJSON(&ended)
		ops := []clientv3.Op{
			clientv3.OpPut(lk, body),
			clientv3.OpDelete(s.runningNodePrefix(e.Node) + id),
			clientv3.OpPut(s.usageNodeKey(e.Node), mustJSON(nc)),
			clientv3.OpDelete(s.specKey(id)), // a kept create spec goes with the VM
		}
		if e.Tenant != "" {
			trev, err := decodeOne(rr.Responses[1].GetResponseRange().Kvs, &tc)
			if err != nil {
				return false, err
			}
			tc.Usage, tc.Gen = tc.Usage.Sub(u), tc.Gen+1
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.usageTenantKey(e.Tenant)), "=", trev))
			ops = append(ops,
				clientv3.OpDelete(s.runningTenantPrefix(e.Tenant)+id),
				clientv3.OpPut(s.usageTenantKey(e.Tenant), mustJSON(tc)))
			// The month index (ledgerindex.go) takes copies of the ended entry in the same
			// transaction. A VM that ran for years has more months than one transaction
			// holds: the earlier ones are written first, each batch while the entry is still
			// running as read, and hold its id, as another end may yet win with another time.
			months := s.monthKeys(&ended)
			if early := len(months) - (maxTxnOps - len(ops)); early > 0 {
				w := guardedWrite{key: lk, rev: rev}
				for _, k := range months[:early] {
					w.ops = append(w.ops, clientv3.OpPut(k, id))
				}
				if ok, err := s.commitGuarded(ctx, []guardedWrite{w}); err != nil || !ok {
					return false, err
				}
				months = months[early:]
			}
			for _, k := range months {
				ops = append(ops, clientv3.OpPut(k, body))
			}
		}
		r, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		out = &ended
		if r.Succeeded {
			s.noteUsageWrite(r.Header.Revision, e.Node, nc, e.Tenant, tc)
		}
		return r.Succeeded, nil
	})
	return out, err
}

// UsageView is what a tenant or node has in use: committed running VMs and reservations in
// flight.
type UsageView struct {
	Running  Usage `json:"running"`
	Reserved Usage `json:"reserved"`
}

// Total is running plus reserved, what quotas and capacity are checked against.
func (v UsageView) Total() Usage { return v.Running.Add(v.Reserved) }

// TenantUsage reads a tenant's usage at one revision.
func (s *Store) TenantUsage(ctx context.Context, tenant string) (UsageView, error) {
	return s.usageView(ctx, s.usageTenantKey(tenant), s.resTenantPrefix(tenant))
}

// NodeUsage reads a node's usage through central (all tenants and the operator) at one revision.
func (s *Store) NodeUsage(ctx context.Context, node string) (UsageView, error) {
	return s.usageView(ctx, s.usageNodeKey(node), s.resNodePrefix(node))
}

func (s *Store) usageView(ctx context.Context, counterKey, resPrefix string) (UsageView, error) {
	var r *clientv3.TxnResponse
	err := s.retryTransient(ctx, "read usage "+counterKey, func() (err error) {
		r, err = s.kv(ctx).Txn(ctx).Then(clientv3.OpGet(counterKey), clientv3.OpGet(resPrefix, clientv3.WithPrefix())).Commit()
		return err
	})
	if err != nil {
		return UsageView{}, fmt.Errorf("read usage %s: %w", counterKey, err)
	}
	var c counter
	if _, err := decodeOne(r.Responses[0].GetResponseRange().Kvs, &c); err != nil {
		return UsageView{}, err
	}
	reserved, err := sumReservations(r.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return UsageView{}, err
	}
	return UsageView{Running: c.Usage, Reserved: reserved}, nil
}

// ListReservations reads every live reservation (all centrals').
func (s *Store) ListReservations(ctx context.Context) ([]Reservation, error) {
	rs, err := listJSON[Reservation](ctx, s, s.prefix+"reservations/node/")
	if err != nil {
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	return rs, nil
}

// PutSpec keeps the create spec of a running entry's VM (see CommitSpec):
// a drain that recreated a VM whose entry it had to write itself. The
// entry must be running, else ErrNotFound.
func (s *Store) PutSpec(ctx context.Context, entryID string, spec []byte) error {
	if err := checkName("ledger entry id", entryID); err != nil {
		return err
	}
	lk := s.ledgerKey(entryID)
	e, rev, err := getJSON[LedgerEntry](ctx, s, lk)
	if err != nil {
		return fmt.Errorf("keep the spec of entry %s: %w", entryID, err)
	}
	if !e.Running() {
		return fmt.Errorf("keep the spec of entry %s: it ended: %w", entryID, ErrNotFound)
	}
	r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(lk), "=", rev)).
		Then(clientv3.OpPut(s.specKey(entryID), string(spec))).Commit()
	if err != nil {
		return fmt.Errorf("keep the spec of entry %s: %w", entryID, err)
	}
	if !r.Succeeded {
		return fmt.Errorf("keep the spec of entry %s: it changed: %w", entryID, ErrNotFound)
	}
	return nil
}

// GetSpec reads the create spec kept for a running entry (ErrNotFound: the
// VM was not created reschedulable, or it ended).
func (s *Store) GetSpec(ctx context.Context, entryID string) ([]byte, error) {
	resp, err := s.client.Get(ctx, s.specKey(entryID))
	if err != nil {
		return nil, fmt.Errorf("get the spec of entry %s: %w", entryID, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("get the spec of entry %s: %w", entryID, ErrNotFound)
	}
	return resp.Kvs[0].Value, nil
}
