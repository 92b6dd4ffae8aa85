package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Warm pools (docs/warm-pools.md). Keys, next to those listed in crud.go:
//
//	P pools/<owner>/<name>                   Pool (owner: the tenant's id, or "_shared")
//	P pool-members/<owner>/<name>/<member>   PoolMember (one VM of the pool, by its VM name)
//
// "_shared" is not a valid tenant id (ValidName wants a letter or digit first), so a shared
// pool and a tenant's pool of the same name never collide.
//
// A member's VM is created through the ordinary Reserve and Commit, so while it waits it
// holds node capacity and, for a tenant's pool, the tenant's quota, like any VM. What this
// file adds is the member record, whose state says whether the VM may be handed out, and
// ClaimMember, which hands one out in one transaction that compares the member's revision:
// of two claims of the same member, the second fails its compare and tries another.

// sharedOwner is the key segment of the operator's shared pools.
const sharedOwner = "_shared"

// Pool member states.
const (
	// MemberCreating: the pool loop reserved room and is creating the VM on Node.
	MemberCreating = "creating"
	// MemberBooting: the VM exists; its guest agent has not answered yet.
	MemberBooting = "booting"
	// MemberWarm: booted, guest agent ready, idle: a launch may claim it.
	MemberWarm = "warm"
	// MemberClaimed: handed out to a launch; the record is kept a while to measure demand.
	MemberClaimed = "claimed"
	// MemberRetiring: the pool shrank or is being deleted; the VM is being deleted.
	MemberRetiring = "retiring"
)

// ErrNoWarm: the pool has no warm member to hand out now.
var ErrNoWarm = errors.New("no warm vm in the pool")

// MaxPoolSize bounds a pool's size and max_size.
const MaxPoolSize = 100

// Pool keeps VMs of a catalog image booted and idle: the pool the API shows (sdk.Pool, the
// one definition of its fields) less what is derived. Image is the catalog image's name, and
// GuestOS (and the image's path) are resolved from it when the pool is made; MaxSize ==
// Size does not grow; Deleting says DELETE was asked, its members are being deleted and the
// record goes last; Blocked says why the pool loop could not fill it on its last try ("" when
// it could).
//
// sdk.Pool's Shared (the pool has no tenant) is derived: the record never stores it
// (MarshalJSON) and central/pools.Wire fills it. Mode is stored; a record without one
// (written before snapshot mode) is a running pool.
type Pool struct {
	sdk.Pool
}

// MarshalJSON writes the record without sdk.Pool's derived "shared".
func (p Pool) MarshalJSON() ([]byte, error) {
	type record Pool // the same fields, without this method
	if p.Mode == "" {
		return marshalWithout(record(p), "shared", "mode")
	}
	return marshalWithout(record(p), "shared")
}

// Validate checks what the store relies on.
func (p *Pool) Validate() error {
	if err := checkName("pool", p.Name); err != nil {
		return err
	}
	if p.Tenant != "" {
		if err := checkName("tenant id", p.Tenant); err != nil {
			return err
		}
	}
	if err := checkName("image", p.Image); err != nil {
		return err
	}
	switch {
	case p.GuestOS != GuestLinux && p.GuestOS != GuestMacOS:
		return fmt.Errorf("%w: pool %s: guest_os %q: want %q or %q", ErrInvalid, p.Name, jsonapi.Echo(p.GuestOS), GuestLinux, GuestMacOS)
	case p.VCPUs < 1 || p.MemoryMiB < 1:
		return fmt.Errorf("%w: pool %s: vcpus and memory_mib must be at least 1", ErrInvalid, p.Name)
	case p.Size < 0 || p.Size > MaxPoolSize:
		return fmt.Errorf("%w: pool %s: size must be between 0 and %d, not %d", ErrInvalid, p.Name, MaxPoolSize, p.Size)
	case p.MaxSize < p.Size || p.MaxSize > MaxPoolSize:
		return fmt.Errorf("%w: pool %s: max_size must be between size (%d) and %d, not %d", ErrInvalid, p.Name, p.Size, MaxPoolSize, p.MaxSize)
	}
	return nil
}

// PoolMember is one VM of a pool.
type PoolMember struct {
	// ID is the VM's name on its node: pool-<pool>-<random>.
	ID        string    `json:"id"`
	Pool      string    `json:"pool"`
	Tenant    string    `json:"tenant,omitempty"` // the pool's owner ("" shared)
	Node      string    `json:"node"`
	VMID      string    `json:"vm_id,omitempty"`
	EntryID   string    `json:"entry_id,omitempty"` // the running ledger entry of the VM
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ReadyAt   time.Time `json:"ready_at,omitzero"`
	// ClaimedAt and ClaimedBy (the claiming tenant's id, "" the operator) are set by a claim.
	ClaimedAt time.Time `json:"claimed_at,omitzero"`
	ClaimedBy string    `json:"claimed_by,omitempty"`
	// Central is the central whose pool loop created it (a creating or booting member of a
	// central that is no longer leader is cleaned up by the next leader).
	Central string `json:"central,omitempty"`
}

func (s *Store) poolKey(tenant, name string) string {
	return s.prefix + "pools/" + ownerOf(tenant) + "/" + name
}

func (s *Store) memberPrefix(tenant, pool string) string {
	return s.prefix + "pool-members/" + ownerOf(tenant) + "/" + pool + "/"
}

func ownerOf(tenant string) string {
	if tenant == "" {
		return sharedOwner
	}
	return tenant
}

// CreatePool stores a new pool; one of the same owner and name is ErrExists.
func (s *Store) CreatePool(ctx context.Context, p *Pool) error {
	if p.CreatedAt.IsZero() {
		p.CreatedAt = time.Now().UTC()
	}
	if p.GuestOS == "" {
		p.GuestOS = GuestLinux
	}
	if err := p.Validate(); err != nil {
		return err
	}
	k := s.poolKey(p.Tenant, p.Name)
	r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, mustJSON(p))).Commit()
	if err != nil {
		return fmt.Errorf("create pool %s: %w", p.Name, err)
	}
	if !r.Succeeded {
		return fmt.Errorf("create pool %s: %w", p.Name, ErrExists)
	}
	return nil
}

// GetPool reads a pool of a tenant ("" the shared pool of that name).
func (s *Store) GetPool(ctx context.Context, tenant, name string) (*Pool, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("get pool %s: %w", name, ErrNotFound)
	}
	p, _, err := getJSON[Pool](ctx, s, s.poolKey(tenant, name))
	if err != nil {
		return nil, fmt.Errorf("get pool %s: %w", name, err)
	}
	return p, nil
}

// ListPools reads every pool (shared and every tenant's).
func (s *Store) ListPools(ctx context.Context) ([]Pool, error) {
	ps, err := listJSON[Pool](ctx, s, s.prefix+"pools/")
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return ps, nil
}

// UpdatePool applies fn to a pool in a compare-and-swap loop (fn may run more than once).
func (s *Store) UpdatePool(ctx context.Context, tenant, name string, fn func(*Pool) error) (*Pool, error) {
	k := s.poolKey(tenant, name)
	var out *Pool
	err := s.casLoop(ctx, "update pool "+name, func(bool) (bool, error) {
		p, rev, err := getJSON[Pool](ctx, s, k)
		if err != nil {
			return false, fmt.Errorf("update pool %s: %w", name, err)
		}
		if err := fn(p); err != nil {
			return false, err
		}
		p.Name, p.Tenant = name, tenant
		if err := p.Validate(); err != nil {
			return false, err
		}
		r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, mustJSON(p))).Commit()
		if err != nil {
			return false, fmt.Errorf("update pool %s: %w", name, err)
		}
		out = p
		return r.Succeeded, nil
	})
	return out, err
}

// RemovePool deletes a pool's record and its member records. The caller has deleted the
// members' VMs (see Pool.Deleting).
func (s *Store) RemovePool(ctx context.Context, tenant, name string) error {
	_, err := s.kv(ctx).Txn(ctx).Then(clientv3.OpDelete(s.poolKey(tenant, name)),
		clientv3.OpDelete(s.memberPrefix(tenant, name), clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("remove pool %s: %w", name, err)
	}
	return nil
}

// ListMembers reads a pool's member records, by id.
func (s *Store) ListMembers(ctx context.Context, tenant, pool string) ([]PoolMember, error) {
	ms, err := listJSON[PoolMember](ctx, s, s.memberPrefix(tenant, pool))
	if err != nil {
		return nil, fmt.Errorf("list members of pool %s: %w", pool, err)
	}
	return ms, nil
}

// CreateMember stores a new member record (ErrExists if its id is taken).
func (s *Store) CreateMember(ctx context.Context, m *PoolMember) error {
	if err := checkName("pool member", m.ID); err != nil {
		return err
	}
	k := s.memberPrefix(m.Tenant, m.Pool) + m.ID
	r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, mustJSON(m))).Commit()
	if err != nil {
		return fmt.Errorf("create pool member %s: %w", m.ID, err)
	}
	if !r.Succeeded {
		return fmt.Errorf("create pool member %s: %w", m.ID, ErrExists)
	}
	return nil
}

// UpdateMember applies fn to a member whose state is one of from, in a compare-and-swap
// loop. A member in another state (a claim won) is ErrConflict; a missing one ErrNotFound.
func (s *Store) UpdateMember(ctx context.Context, tenant, pool, id string, from []string, fn func(*PoolMember)) (*PoolMember, error) {
	k := s.memberPrefix(tenant, pool) + id
	var out *PoolMember
	err := s.casLoop(ctx, "update pool member "+id, func(bool) (bool, error) {
		m, rev, err := getJSON[PoolMember](ctx, s, k)
		if err != nil {
			return false, fmt.Errorf("update pool member %s: %w", id, err)
		}
		if !slices.Contains(from, m.State) {
			return false, fmt.Errorf("update pool member %s: it is %s: %w", id, m.State, ErrConflict)
		}
		fn(m)
		r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", rev)).
			Then(clientv3.OpPut(k, mustJSON(m))).Commit()
		if err != nil {
			return false, fmt.Errorf("update pool member %s: %w", id, err)
		}
		out = m
		return r.Succeeded, nil
	})
	return out, err
}

// DeleteMember deletes a member record.
func (s *Store) DeleteMember(ctx context.Context, tenant, pool, id string) error {
	if _, err := s.kv(ctx).Delete(ctx, s.memberPrefix(tenant, pool)+id); err != nil {
		return fmt.Errorf("delete pool member %s: %w", id, err)
	}
	return nil
}

// ClaimRequest asks for one warm VM of a pool.
type ClaimRequest struct {
	// PoolTenant and Pool name the pool ("" PoolTenant: a shared pool).
	PoolTenant, Pool string
	// Tenant claims it ("" the operator). A tenant claiming from a shared pool takes the
	// VM into its quota and its bill from now on (see ClaimMember).
	Tenant string
	// Node, when set, takes only a member on that node (ErrNoWarm when it has none).
	Node string
	Now  time.Time
}

// Claim is what ClaimMember handed out.
type Claim struct {
	Member PoolMember
	// Entry is the VM's running ledger entry after the claim.
	Entry LedgerEntry
}

// ClaimMember hands out one warm member of a pool, in one transaction that compares the
// member's and the pool's revisions: a member is handed out at most once, and never after
// its pool began to be deleted. It picks at random among the warm members, so concurrent
// claims mostly go for different members instead of all racing for the first.
//
// When a tenant claims from a shared pool, the same transaction ends the operator's ledger
// entry of the VM (reason "claimed") and starts one for the tenant, started now: the tenant
// is billed from the claim on, and its quota counts the VM. The quota is checked in that
// transaction as Reserve checks it (running plus reserved, comparing the tenant's counter
// and record), so a claim cannot overshoot a quota either: *QuotaError when it would.
// ErrNoWarm when no member is warm; ErrNotFound when the pool is gone or being deleted.
func (s *Store) ClaimMember(ctx context.Context, req ClaimRequest) (*Claim, error) {
	what := "claim a warm vm of pool " + req.Pool
	if req.Now.IsZero() {
		req.Now = time.Now()
	}
	pk := s.poolKey(req.PoolTenant, req.Pool)
	mp := s.memberPrefix(req.PoolTenant, req.Pool)
	var out *Claim
	err := s.casLoop(ctx, what, func(bool) (bool, error) { // reads afresh every time
		r, err := s.kv(ctx).Txn(ctx).Then(clientv3.OpGet(pk), clientv3.OpGet(mp, clientv3.WithPrefix())).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		var pool Pool
		prev, err := decodeOne(r.Responses[0].GetResponseRange().Kvs, &pool)
		if err != nil {
			return false, err
		}
		if prev == 0 || pool.Deleting {
			return false, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		type cand struct {
			m   PoolMember
			rev int64
		}
		var warm []cand
		for _, kv := range r.Responses[1].GetResponseRange().Kvs {
			var c cand
			if c.rev, err = decodeOne([]*mvccpb.KeyValue{kv}, &c.m); err != nil {
				return false, err
			}
			if c.m.State == MemberWarm && c.m.EntryID != "" && (req.Node == "" || c.m.Node == req.Node) {
				warm = append(warm, c)
			}
		}
		if len(warm) == 0 {
			return false, fmt.Errorf("%s: %w", what, ErrNoWarm)
		}
		c := warm[rand.IntN(len(warm))]
		m := c.m
		mk := mp + m.ID
		m.State, m.ClaimedAt, m.ClaimedBy = MemberClaimed, req.Now.UTC(), req.Tenant
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(mk), "=", c.rev),
			clientv3.Compare(clientv3.ModRevision(pk), "=", prev),
		}
		var ops []clientv3.Op
		entry, lrev, err := getJSON[LedgerEntry](ctx, s, s.ledgerKey(m.EntryID))
		if err != nil {
			return false, fmt.Errorf("%s: ledger entry %s of member %s: %w", what, m.EntryID, m.ID, err)
		}
		if !entry.Running() {
			// The VM went (deleted on its node, reconciled): not warm any more.
			m.State = MemberRetiring
			_, _ = s.kv(ctx).Txn(ctx).If(cmps[0]).Then(clientv3.OpPut(mk, mustJSON(&m))).Commit()
			return false, nil
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.ledgerKey(entry.ID)), "=", lrev))
		final := *entry
		if entry.Tenant != req.Tenant {
			if entry.Tenant != "" || req.Tenant == "" {
				return false, fmt.Errorf("%w: %s: member %s belongs to tenant %s", ErrInvalid, what, m.ID, entry.Tenant)
			}
			moveCmps, moveOps, moved, err := s.moveToTenant(ctx, entry, req.Tenant, req.Now)
			if err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			cmps, ops, final = append(cmps, moveCmps...), moveOps, moved
			m.EntryID = moved.ID
		}
		ops = append(ops, clientv3.OpPut(mk, mustJSON(&m)))
		tr, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if !tr.Succeeded {
			return false, nil
		}
		out = &Claim{Member: m, Entry: final}
		return true, nil
	})
	return out, err
}

// moveToTenant is the part of a claim that takes a shared VM into a tenant: the operator's
// entry ends, a tenant's entry for the same VM starts now, and the tenant's counter grows,
// on condition that the tenant's counter and record are unchanged and the quota allows it.
func (s *Store) moveToTenant(ctx context.Context, e *LedgerEntry, tenant string, now time.Time) ([]clientv3.Cmp, []clientv3.Op, LedgerEntry, error) {
	r, err := s.kv(ctx).Txn(ctx).Then(
		clientv3.OpGet(s.usageTenantKey(tenant)),
		clientv3.OpGet(s.resTenantPrefix(tenant), clientv3.WithPrefix()),
		clientv3.OpGet(s.tenantKey(tenant))).Commit()
	if err != nil {
		return nil, nil, LedgerEntry{}, err
	}
	var tc counter
	crev, err := decodeOne(r.Responses[0].GetResponseRange().Kvs, &tc)
	if err != nil {
		return nil, nil, LedgerEntry{}, err
	}
	reserved, err := sumReservations(r.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return nil, nil, LedgerEntry{}, err
	}
	var t Tenant
	trev, err := decodeOne(r.Responses[2].GetResponseRange().Kvs, &t)
	if err != nil {
		return nil, nil, LedgerEntry{}, err
	}
	switch {
	case trev == 0:
		return nil, nil, LedgerEntry{}, fmt.Errorf("tenant %s %w", tenant, ErrNotFound)
	case t.Disabled:
		return nil, nil, LedgerEntry{}, fmt.Errorf("%w: tenant %s is disabled", ErrInvalid, tenant)
	}
	u := e.usage()
	if err := checkQuota(t.Quota, tc.Usage.Add(reserved), u); err != nil {
		return nil, nil, LedgerEntry{}, err
	}
	ended := *e
	ended.EndedAt, ended.EndReason = now.UTC(), "claimed"
	moved := *e
	moved.ID, moved.Tenant, moved.StartedAt = newID("l-"), tenant, now.UTC()
	tc.Usage, tc.Gen = tc.Usage.Add(u), tc.Gen+1
	body := mustJSON(&moved)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(s.usageTenantKey(tenant)), "=", crev),
		clientv3.Compare(clientv3.ModRevision(s.tenantKey(tenant)), "=", trev),
		clientv3.Compare(clientv3.CreateRevision(s.ledgerKey(moved.ID)), "=", 0),
	}
	// The node's usage does not change (one VM ends, the same VM starts), so its counter
	// is left alone; the tenant's grows, which makes concurrent Reserves of it decide again.
	ops := []clientv3.Op{
		clientv3.OpPut(s.ledgerKey(e.ID), mustJSON(&ended)),
		clientv3.OpDelete(s.runningNodePrefix(e.Node) + e.ID),
		clientv3.OpPut(s.ledgerKey(moved.ID), body),
		clientv3.OpPut(s.runningNodePrefix(e.Node)+moved.ID, body),
		clientv3.OpPut(s.runningTenantPrefix(tenant)+moved.ID, body),
		clientv3.OpPut(s.usageTenantKey(tenant), mustJSON(tc)),
	}
	return cmps, ops, moved, nil
}
