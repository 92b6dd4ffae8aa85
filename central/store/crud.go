package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Key layout under the prefix P. Every name segment passed ValidName, so it holds no '/'.
//
//	P nodes/<name>                           Node
//	P tenants/<id>                           Tenant
//	P tenant-names/<name>                    tenant id (unique-name index)
//	P tenant-tokens/<sha256>                 tenant id (token index)
//	P policy                                 sdk.Policy (the wire document, records.go)
//	P images/<name>                          sdk.Image (the wire document)
//	P ledger/<id>                            LedgerEntry (running and ended)
//	P ledger-months/<month>/<tenant>/<id>    entry id of an ended tenant entry, per month it ran in (ledgerindex.go)
//	P running/node/<node>/<id>               LedgerEntry copy while it runs
//	P running/tenant/<tenant>/<id>           LedgerEntry copy while it runs (tenant VMs only)
//	P reservations/node/<node>/<id>          Reservation (leased)
//	P reservations/tenant/<tenant>/<id>      Reservation (leased; tenant reservations only)
//	P usage/node/<node>                      counter: running usage + generation
//	P usage/tenant/<tenant>                  counter: running usage + generation
//	P leases/<id>                            Lease (active and ended)
//	P lease-tenant/<tenant>/<id>             lease id, while the lease is active
//	P lease-gen/<tenant>                     counter: generation of the tenant's leases
//	P drains/<node>                          Drain (the node's latest)
//	P specs/<entry-id>                       create spec of a reschedulable VM, while it runs
//	P deleted-vms/<entry-id>                 mark of a deleted VM (leased, DeletedMarkTTL): see deleted.go
//	P election/<name>/                       concurrency.Election keys
//	P schedulers/<id>                        a dedicated scheduler's announcement (leased)
//	P pools/<owner>/<name>                   Pool (owner: tenant id, or _shared for the operator's)
//	P pool-members/<owner>/<pool>/<id>       PoolMember
//	P api-keys/<tenant>/<id>                 APIKey (a tenant's named API key: keys.go)
//	P api-key-names/<tenant>/<name>          key id (unique name within the tenant)
//	P api-key-tokens/<sha256>                <tenant>/<id> (key token index)
//	P team-members/<tenant>/<email>          TeamMember (a person of a tenant's team: team.go)
//	P sessions/<sha256>                      Session (a console session, leased: sessions.go)
//	P session-people/<email>/<sha256>        the session's created_at (a person's sessions)
//	P prices/<effective-from>                Prices, one version each (billing.go)
//	P notify-events/<id>                     sdk.Notification (notifications.go)
//	P notify-by-tenant/<tenant>/<id>         the same notification, for its tenant's listing
//	P notify-once/<key>                      notification id (JSON string): one recorded at most once per key
//	P notify-outbox/<id>                     "" while webhooks may still be owed the notification
//	P webhooks/<owner>/<id>                  Webhook (owner: tenant id, or _operator: webhooks.go)
//	P webhook-ids/<id>                       the webhook's owner
//	P webhook-done/<id>/<notification>       delivery id: the notification went to the webhook
//	P snapshots/<node>/<vm-id>/<id>            Snapshot record of a VM's snapshot (kept and deleted: snapshots.go)
//	P volumes/<id>                              Volume record (kept and deleted: volumes.go)
//	P previews/<owner>/<id>                     Preview of a guest port (owner: tenant id, or _operator: previews.go)
//	P migrations/<name>                      marker of a migration of stored data that has run (ledger-months)
//	P tenant-subnets/<tenant>                the tenant's subnet index n (subnets.go)
//	P subnet-indexes/<n>                     the tenant id holding index n
//	P overlays/<tenant>/<name>               Overlay: a tenant's network across nodes (overlays.go)
//	P overlay-indexes/<n>                    "<tenant>/<name>" holding overlay index n
//	P overlay-locks/<tenant>/<name>/<lease>  concurrency.Mutex key (leased) while a change of the overlay runs
//	P probe                                  read (never written) to check etcd answers
//
// Nothing else is written under P: TestKeyLayoutNamesEveryKey holds the store to this table.
func (s *Store) nodeKey(name string) string        { return s.prefix + "nodes/" + name }
func (s *Store) tenantKey(id string) string        { return s.prefix + "tenants/" + id }
func (s *Store) tenantNameKey(name string) string  { return s.prefix + "tenant-names/" + name }
func (s *Store) tenantTokenKey(hash string) string { return s.prefix + "tenant-tokens/" + hash }
func (s *Store) policyKey() string                 { return s.prefix + "policy" }
func (s *Store) imageKey(name string) string       { return s.prefix + "images/" + name }
func (s *Store) ledgerKey(id string) string        { return s.prefix + "ledger/" + id }
func (s *Store) specKey(id string) string          { return s.prefix + "specs/" + id }
func (s *Store) runningNodePrefix(node string) string {
	return s.prefix + "running/node/" + node + "/"
}
func (s *Store) runningTenantPrefix(tenant string) string {
	return s.prefix + "running/tenant/" + tenant + "/"
}
func (s *Store) resNodePrefix(node string) string {
	return s.prefix + "reservations/node/" + node + "/"
}
func (s *Store) resTenantPrefix(tenant string) string {
	return s.prefix + "reservations/tenant/" + tenant + "/"
}
func (s *Store) usageNodeKey(node string) string     { return s.prefix + "usage/node/" + node }
func (s *Store) usageTenantKey(tenant string) string { return s.prefix + "usage/tenant/" + tenant }

// HashToken is the SHA-256 hex digest under which a tenant token is stored and looked up.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("store: marshal %T: %v", v, err)) // only our own plain structs get here
	}
	return string(b)
}

// marshalWithout is v's JSON object less the derived keys. A record that embeds its sdk type
// stores it through this when some of that type's fields are derived from the others (a
// lease's "active", a pool's "shared"): the edge computes them for each answer, and a stored
// copy could only go stale.
func marshalWithout(v any, derived ...string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, err
	}
	for _, k := range derived {
		delete(fields, k)
	}
	return json.Marshal(fields)
}

// getJSON reads one record. It returns the key's mod revision (0 with ErrNotFound).
func getJSON[T any](ctx context.Context, s *Store, key string) (*T, int64, error) {
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, ErrNotFound
	}
	v := new(T)
	if err := json.Unmarshal(resp.Kvs[0].Value, v); err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", key, err)
	}
	clampStored(v)
	return v, resp.Kvs[0].ModRevision, nil
}

// listJSON reads every record under a prefix, in key order.
func listJSON[T any](ctx context.Context, s *Store, prefix string, opts ...clientv3.OpOption) ([]T, error) {
	resp, err := s.client.Get(ctx, prefix, append([]clientv3.OpOption{clientv3.WithPrefix()}, opts...)...)
	if err != nil {
		return nil, err
	}
	return decodeAll[T](resp.Kvs)
}

// decodeAll decodes records read, in the order read.
func decodeAll[T any](kvs []*mvccpb.KeyValue) ([]T, error) {
	out := make([]T, 0, len(kvs))
	for _, kv := range kvs {
		var v T
		if err := json.Unmarshal(kv.Value, &v); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		clampStored(&v)
		out = append(out, v)
	}
	return out, nil
}

// casLoop runs attempt until it reports done, at most s.retries times. The first
// immediateTries retries follow at once (the loser of a compare usually holds a fresh
// snapshot from the transaction's Else branch, and waiting would only make it stale); later
// ones wait a jittered, growing pause, so a herd of writers spreads out instead of colliding
// again, and attempt is told (afterPause) to read afresh.
func (s *Store) casLoop(ctx context.Context, what string, attempt func(afterPause bool) (done bool, err error)) error {
	const immediateTries = 3
	paused := false
	for try := 0; try < s.retries; try++ {
		done, err := attempt(paused)
		if err != nil || done {
			return err
		}
		paused = try+1 >= immediateTries
		if !paused {
			continue
		}
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(try, 5)))
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(pause):
		}
	}
	return fmt.Errorf("%s: %w (gave up after %d tries)", what, ErrConflict, s.retries)
}

// ---- nodes ----

// PutNode writes a node record whole. Heartbeats should use UpdateNode so fields central owns
// (cordoned, draining, scrub_pending) are kept.
func (s *Store) PutNode(ctx context.Context, n *Node) error {
	if err := n.Validate(); err != nil {
		return err
	}
	if _, err := s.kv(ctx).Put(ctx, s.nodeKey(n.Name), mustJSON(n)); err != nil {
		return fmt.Errorf("put node %s: %w", n.Name, err)
	}
	return nil
}

// GetNode reads a node.
func (s *Store) GetNode(ctx context.Context, name string) (*Node, error) {
	n, _, err := getJSON[Node](ctx, s, s.nodeKey(name))
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n, nil
}

// ListNodes reads every node, by name.
func (s *Store) ListNodes(ctx context.Context) ([]Node, error) {
	ns, err := listJSON[Node](ctx, s, s.prefix+"nodes/")
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return ns, nil
}

// UpdateNode applies fn to the node in a compare-and-swap loop. With create set, a missing
// node starts as &Node{Name: name} (a first heartbeat); otherwise it is ErrNotFound. fn may
// run more than once and must not keep the pointer.
func (s *Store) UpdateNode(ctx context.Context, name string, create bool, fn func(*Node) error) (*Node, error) {
	if err := checkName("node", name); err != nil {
		return nil, err
	}
	key := s.nodeKey(name)
	var out *Node
	err := s.casLoop(ctx, "update node "+name, func(bool) (bool, error) {
		n, rev, err := getJSON[Node](ctx, s, key)
		switch {
		case errors.Is(err, ErrNotFound) && create:
			n = &Node{FleetNode: sdk.FleetNode{Name: name, State: NodeUp}}
		case err != nil:
			return false, fmt.Errorf("update node %s: %w", name, err)
		}
		if err := fn(n); err != nil {
			return false, err
		}
		n.Name = name
		if err := n.Validate(); err != nil {
			return false, err
		}
		resp, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpPut(key, mustJSON(n))).Commit()
		if err != nil {
			return false, fmt.Errorf("update node %s: %w", name, err)
		}
		out = n
		return resp.Succeeded, nil
	})
	return out, err
}

// ForgetVM takes a VM its node has just deleted out of the node's record:
// off its VM list, and its size back into the free capacity the node last
// reported. Placement then sees the room at once instead of at the node's
// next heartbeat, which rewrites the record from the node's own count. A
// node or VM the record does not hold is no error.
func (s *Store) ForgetVM(ctx context.Context, node, vmID string) error {
	_, err := s.UpdateNode(ctx, node, false, func(n *Node) error {
		i := slices.IndexFunc(n.VMs, func(v sdk.HeartbeatVM) bool { return v.ID == vmID })
		if i < 0 {
			return errNothingToForget
		}
		vm := n.VMs[i]
		n.VMs = slices.Delete(n.VMs, i, i+1)
		f := &n.Capacity.Free
		f.VCPUs = min(f.VCPUs+vm.VCPUs, n.Capacity.Total.VCPUs)
		f.MemoryMiB = min(f.MemoryMiB+vm.MemoryMiB, n.Capacity.Total.MemoryMiB)
		if vm.GuestOS == GuestMacOS {
			f.MacOSSlots = min(f.MacOSSlots+1, n.Capacity.Total.MacOSSlots)
		}
		return nil
	})
	if errors.Is(err, ErrNotFound) || errors.Is(err, errNothingToForget) {
		return nil
	}
	return err
}

var errNothingToForget = errors.New("the node record does not list the vm")

// DeleteNode removes a node record. Its usage counter stays (it is zero once its ledger
// entries have ended) so a node that comes back keeps exact counts.
func (s *Store) DeleteNode(ctx context.Context, name string) error {
	resp, err := s.kv(ctx).Delete(ctx, s.nodeKey(name))
	if err != nil {
		return fmt.Errorf("delete node %s: %w", name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("delete node %s: %w", name, ErrNotFound)
	}
	return nil
}

// ---- tenants ----

// CreateTenant stores a new tenant with its name and token indexes in one transaction.
// An empty ID becomes "t-" + 16 random hex digits; a zero CreatedAt becomes now.
func (s *Store) CreateTenant(ctx context.Context, t *Tenant) error {
	if t.ID == "" {
		t.ID = newID("t-")
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().UTC()
	}
	if err := checkName("tenant id", t.ID); err != nil {
		return err
	}
	if err := t.Validate(); err != nil {
		return err
	}
	k, nk, tk := s.tenantKey(t.ID), s.tenantNameKey(t.Name), s.tenantTokenKey(t.TokenSHA256)
	resp, err := s.kv(ctx).Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(k), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(nk), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tk), "=", 0),
	).Then(
		clientv3.OpPut(k, mustJSON(t)), clientv3.OpPut(nk, t.ID), clientv3.OpPut(tk, t.ID),
	).Else(
		clientv3.OpGet(k, clientv3.WithCountOnly()), clientv3.OpGet(nk, clientv3.WithCountOnly()),
	).Commit()
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", t.Name, err)
	}
	if !resp.Succeeded {
		switch {
		case resp.Responses[0].GetResponseRange().Count > 0:
			return fmt.Errorf("create tenant %s: id %s: %w", t.Name, t.ID, ErrExists)
		case resp.Responses[1].GetResponseRange().Count > 0:
			return fmt.Errorf("create tenant %s: name %w", t.Name, ErrExists)
		default:
			return fmt.Errorf("create tenant %s: token %w", t.Name, ErrExists)
		}
	}
	return nil
}

// GetTenant reads a tenant by id.
func (s *Store) GetTenant(ctx context.Context, id string) (*Tenant, error) {
	t, _, err := getJSON[Tenant](ctx, s, s.tenantKey(id))
	if err != nil {
		return nil, fmt.Errorf("get tenant %s: %w", id, err)
	}
	return t, nil
}

// TenantName is a tenant's name for logs and messages: the name of tenant
// id, id itself when it cannot be read (a deleted tenant), and "operator"
// for "".
func (s *Store) TenantName(ctx context.Context, id string) string {
	if id == "" {
		return "operator"
	}
	if t, err := s.GetTenant(ctx, id); err == nil {
		return t.Name
	}
	return id
}

// TenantByName looks a tenant up through the unique-name index.
func (s *Store) TenantByName(ctx context.Context, name string) (*Tenant, error) {
	return s.tenantByIndex(ctx, s.tenantNameKey(name), func(t *Tenant) bool { return t.Name == name })
}

// TenantByToken looks a tenant up by the SHA-256 hex of its token. A disabled tenant is
// returned too: the caller decides (and must refuse it).
func (s *Store) TenantByToken(ctx context.Context, tokenSHA256 string) (*Tenant, error) {
	return s.tenantByIndex(ctx, s.tenantTokenKey(tokenSHA256), func(t *Tenant) bool { return t.TokenSHA256 == tokenSHA256 })
}

// tenantByIndex reads the index and then the tenant, and re-checks the tenant still matches:
// a rotation between the two reads must not let the old token in.
func (s *Store) tenantByIndex(ctx context.Context, indexKey string, matches func(*Tenant) bool) (*Tenant, error) {
	resp, err := s.client.Get(ctx, indexKey)
	if err != nil {
		return nil, fmt.Errorf("look up tenant: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("look up tenant: %w", ErrNotFound)
	}
	t, _, err := getJSON[Tenant](ctx, s, s.tenantKey(string(resp.Kvs[0].Value)))
	if err != nil {
		return nil, fmt.Errorf("look up tenant: %w", err)
	}
	if !matches(t) {
		return nil, fmt.Errorf("look up tenant: %w", ErrNotFound)
	}
	return t, nil
}

// ListTenants reads every tenant, by id.
func (s *Store) ListTenants(ctx context.Context) ([]Tenant, error) {
	ts, err := listJSON[Tenant](ctx, s, s.prefix+"tenants/")
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return ts, nil
}

// UpdateTenant applies fn in a compare-and-swap loop. A changed name or token digest moves its
// index entry in the same transaction (refused with ErrExists if another tenant holds it);
// the id and created_at cannot change. fn may run more than once.
func (s *Store) UpdateTenant(ctx context.Context, id string, fn func(*Tenant) error) (*Tenant, error) {
	key := s.tenantKey(id)
	var out *Tenant
	err := s.casLoop(ctx, "update tenant "+id, func(bool) (bool, error) {
		old, rev, err := getJSON[Tenant](ctx, s, key)
		if err != nil {
			return false, fmt.Errorf("update tenant %s: %w", id, err)
		}
		t := *old
		if err := fn(&t); err != nil {
			return false, err
		}
		t.ID, t.CreatedAt = old.ID, old.CreatedAt
		if err := t.Validate(); err != nil {
			return false, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", rev)}
		ops := []clientv3.Op{clientv3.OpPut(key, mustJSON(&t))}
		var taken []string // index keys that must be free
		if t.Name != old.Name {
			nk := s.tenantNameKey(t.Name)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(nk), "=", 0))
			ops = append(ops, clientv3.OpDelete(s.tenantNameKey(old.Name)), clientv3.OpPut(nk, id))
			taken = append(taken, "name")
		}
		if t.TokenSHA256 != old.TokenSHA256 {
			tk := s.tenantTokenKey(t.TokenSHA256)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(tk), "=", 0))
			ops = append(ops, clientv3.OpDelete(s.tenantTokenKey(old.TokenSHA256)), clientv3.OpPut(tk, id))
			taken = append(taken, "token")
		}
		resp, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).
			Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return false, fmt.Errorf("update tenant %s: %w", id, err)
		}
		if !resp.Succeeded {
			// Lost because the tenant changed (retry) or because a new name/token is taken.
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return false, fmt.Errorf("update tenant %s: %w", id, ErrNotFound)
			}
			if kvs[0].ModRevision == rev {
				return false, fmt.Errorf("update tenant %s: %s %w", id, strings.Join(taken, " or "), ErrExists)
			}
			return false, nil
		}
		out = &t
		return true, nil
	})
	return out, err
}

// RotateTenantToken replaces the tenant's token digest, swapping the token index atomically:
// from the transaction's revision on, the old token finds nothing and the new one the tenant.
func (s *Store) RotateTenantToken(ctx context.Context, id, newTokenSHA256 string) (*Tenant, error) {
	return s.UpdateTenant(ctx, id, func(t *Tenant) error {
		t.TokenSHA256 = newTokenSHA256
		return nil
	})
}

// DeleteTenant removes a tenant, its indexes, its API keys (with theirs) and its members in
// one transaction. Its ledger entries stay for metering until retention drops them.
//
// A tenant with VMs running (its usage counter) or being created (live reservations under
// its prefix) is refused with ErrConflict. The check and the delete are one decision: the
// delete compares the tenant record's and the usage counter's revisions as read, and every
// operation that adds to a tenant's usage (Reserve, Commit, RecordEntry) rewrites that
// counter, so a reservation landing between the read and the delete makes the delete decide
// again instead of orphaning the reservation. A reservation released (or lapsed) meanwhile
// only makes the refusal stale, never the delete wrong. A key created meanwhile makes it
// decide again too (the keys read are compared), so none outlives its tenant.
func (s *Store) DeleteTenant(ctx context.Context, id string) error {
	key, uk, rp, kp := s.tenantKey(id), s.usageTenantKey(id), s.resTenantPrefix(id), s.keyPrefix(id)
	wp := s.webhookPrefix(id)
	what := "delete tenant " + id
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(uk), clientv3.OpGet(rp, clientv3.WithPrefix()),
			clientv3.OpGet(kp, clientv3.WithPrefix()), clientv3.OpGet(wp, clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		var t Tenant
		rev, err := decodeOne(r.Responses[0].GetResponseRange().Kvs, &t)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if rev == 0 {
			return false, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		var c counter
		urev, err := decodeOne(r.Responses[1].GetResponseRange().Kvs, &c)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		reserved, err := sumReservations(r.Responses[2].GetResponseRange().Kvs)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if c.VMs > 0 || reserved.VMs > 0 {
			return false, fmt.Errorf("%s: %w: %d VMs running and %d being created", what, ErrConflict, c.VMs, reserved.VMs)
		}
		ops := []clientv3.Op{
			clientv3.OpDelete(key), clientv3.OpDelete(s.tenantNameKey(t.Name)), clientv3.OpDelete(s.tenantTokenKey(t.TokenSHA256)),
			clientv3.OpDelete(kp, clientv3.WithPrefix()), clientv3.OpDelete(s.keyNamePrefix(id), clientv3.WithPrefix()),
			clientv3.OpDelete(s.teamPrefix(id), clientv3.WithPrefix()),
		}
		for _, kv := range r.Responses[3].GetResponseRange().Kvs {
			var k APIKey
			if err := json.Unmarshal(kv.Value, &k); err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kv.Key, err)
			}
			ops = append(ops, clientv3.OpDelete(s.keyTokenKey(k.TokenSHA256)))
		}
		// Its webhooks go with it, with their id index and done marks.
		ops = append(ops, clientv3.OpDelete(wp, clientv3.WithPrefix()))
		for _, kv := range r.Responses[4].GetResponseRange().Kvs {
			hook := strings.TrimPrefix(string(kv.Key), wp)
			ops = append(ops, clientv3.OpDelete(s.webhookIDKey(hook)), clientv3.OpDelete(s.webhookDoneKey(hook, ""), clientv3.WithPrefix()))
		}
		// urev 0: no counter yet, and none may appear.
		resp, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, []readKey{{key, rev}, {uk, urev}}, kp, wp)...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return resp.Succeeded, nil
	})
}

// ---- policy ----

// GetPolicy reads the policy; before any PutPolicy it is DefaultPolicy().
func (s *Store) GetPolicy(ctx context.Context) (sdk.Policy, error) {
	p, _, err := getJSON[sdk.Policy](ctx, s, s.policyKey())
	if errors.Is(err, ErrNotFound) {
		return DefaultPolicy(), nil
	}
	if err != nil {
		return sdk.Policy{}, fmt.Errorf("get policy: %w", err)
	}
	return *p, nil
}

// PutPolicy validates (normalising min_lease_hours) and stores the policy. Given a version
// (PolicyVersion), it stores only while the policy is still at that version, else ErrStale.
func (s *Store) PutPolicy(ctx context.Context, p sdk.Policy, ifVersion ...int64) (sdk.Policy, error) {
	if err := checkPolicy(&p); err != nil {
		return sdk.Policy{}, err
	}
	v, given, err := onlyVersion("put policy", ifVersion)
	if err != nil {
		return sdk.Policy{}, err
	}
	txn := s.kv(ctx).Txn(ctx)
	if given {
		txn = txn.If(sameVersion(s.policyKey(), false, v))
	}
	r, err := txn.Then(clientv3.OpPut(s.policyKey(), mustJSON(p))).Commit()
	if err != nil {
		return sdk.Policy{}, fmt.Errorf("put policy: %w", err)
	}
	if !r.Succeeded {
		return sdk.Policy{}, fmt.Errorf("put policy: %w", ErrStale)
	}
	return p, nil
}

// ---- image catalog ----

// PutImage adds or replaces a catalog entry, filling its defaults.
func (s *Store) PutImage(ctx context.Context, im *sdk.Image) error {
	if err := checkImage(im); err != nil {
		return err
	}
	if _, err := s.kv(ctx).Put(ctx, s.imageKey(im.Name), mustJSON(im)); err != nil {
		return fmt.Errorf("put image %s: %w", im.Name, err)
	}
	return nil
}

// GetImage reads a catalog entry.
func (s *Store) GetImage(ctx context.Context, name string) (*sdk.Image, error) {
	im, _, err := getJSON[sdk.Image](ctx, s, s.imageKey(name))
	if err != nil {
		return nil, fmt.Errorf("get image %s: %w", name, err)
	}
	return im, nil
}

// ListImages reads the catalog, by name.
func (s *Store) ListImages(ctx context.Context) ([]sdk.Image, error) {
	ims, err := listJSON[sdk.Image](ctx, s, s.prefix+"images/")
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	sort.Slice(ims, func(i, j int) bool { return ims[i].Name < ims[j].Name })
	return ims, nil
}

// DeleteImage removes a catalog entry.
func (s *Store) DeleteImage(ctx context.Context, name string) error {
	resp, err := s.kv(ctx).Delete(ctx, s.imageKey(name))
	if err != nil {
		return fmt.Errorf("delete image %s: %w", name, err)
	}
	if resp.Deleted == 0 {
		return fmt.Errorf("delete image %s: %w", name, ErrNotFound)
	}
	return nil
}
