package store

import (
	"errors"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestADeposedLeaderWritesNothing: writes made with a Fenced context go
// through while the leadership holds, and every kind of write (a plain put,
// a transaction with and without compares of its own, a reservation, a pool
// member) fails with ErrNotLeader and changes nothing once the leader's
// lease is gone, even though the old leader never noticed and a new one
// now leads.
func TestADeposedLeaderWritesNothing(t *testing.T) {
	ctx := testCtx(t)
	host := openEmbedded(t, Options{ID: "host"})
	a := openPeer(t, host, Options{ID: "central-a", SessionTTL: 2})
	b := openPeer(t, host, Options{ID: "central-b", SessionTTL: 2})
	testNode(t, host, "n1", 16, 65536, 0)
	acme := testTenant(t, host, "acme", sdk.Quotas{})

	la, err := a.Campaign(ctx, "loops")
	if err != nil {
		t.Fatal(err)
	}
	fenced := Fenced(ctx, la)
	if err := a.CreateMember(fenced, &PoolMember{ID: "pool-p-1", Pool: "p", Tenant: acme.ID, Node: "n1", State: MemberCreating, CreatedAt: time.Now()}); err != nil {
		t.Fatalf("a write while leading: %v", err)
	}

	// A reservation made while leading can still be given back below.
	held, err := a.Reserve(fenced, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 1, MemoryMiB: 64})
	if err != nil {
		t.Fatal(err)
	}
	// The lease behind the leadership goes (as when etcd stops hearing from
	// a stalled central), and b wins.
	if _, err := a.client.Revoke(ctx, la.session.Lease()); err != nil {
		t.Fatal(err)
	}
	lb, err := b.Campaign(ctx, "loops")
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Resign(ctx)

	before := dumpKeys(t, host)
	writes := map[string]func() error{
		"create a pool member": func() error {
			return a.CreateMember(fenced, &PoolMember{ID: "pool-p-2", Pool: "p", Tenant: acme.ID, Node: "n1", State: MemberCreating, CreatedAt: time.Now()})
		},
		"delete a pool member": func() error { return a.DeleteMember(fenced, acme.ID, "p", "pool-p-1") },
		"reserve": func() error {
			_, err := a.Reserve(fenced, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 1, MemoryMiB: 64})
			return err
		},
		"put a drain": func() error { return a.PutDrain(fenced, &Drain{Drain: sdk.Drain{Node: "n1", Mode: "cordon"}}) },
		"update a node": func() error {
			_, err := a.UpdateNode(fenced, "n1", false, func(n *Node) error { n.Cordoned = true; return nil })
			return err
		},
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, ErrNotLeader) {
			t.Errorf("%s after losing the election: %v, want ErrNotLeader", name, err)
		}
	}
	if after := dumpKeys(t, host); len(after) != len(before) {
		t.Errorf("keys before %d, after %d: the deposed leader wrote", len(before), len(after))
	} else {
		for k, v := range before {
			if after[k] != v {
				t.Errorf("key %s changed after the leader was deposed", k)
			}
		}
	}
	if err := a.Release(fenced, held); err != nil {
		t.Errorf("release after losing the election: %v; room must always be given back", err)
	}
	if u, err := host.NodeUsage(ctx, "n1"); err != nil || u.Reserved.VMs != 0 {
		t.Errorf("node usage after the release: %+v, %v", u, err)
	}
	// The new leader's fenced writes go through.
	if err := b.CreateMember(Fenced(ctx, lb), &PoolMember{ID: "pool-p-3", Pool: "p", Tenant: acme.ID, Node: "n1", State: MemberCreating, CreatedAt: time.Now()}); err != nil {
		t.Fatalf("the new leader's write: %v", err)
	}
}

func dumpKeys(t *testing.T, s *Store) map[string]string {
	t.Helper()
	r, err := s.client.Get(testCtx(t), s.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range r.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}
