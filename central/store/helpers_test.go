package store

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// testCtx is a context that ends with the test (and at most after a minute).
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openEmbedded starts a store with its own embedded etcd in a temporary directory.
func openEmbedded(t testing.TB, opts Options) *Store {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = t.TempDir()
	}
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "store", Level: hclog.Warn, Output: os.Stderr})
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open embedded store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// openPeer opens another "central" on the etcd of host.
func openPeer(t testing.TB, host *Store, opts Options) *Store {
	t.Helper()
	opts.Endpoints = host.Endpoints()
	if opts.Logger == nil {
		opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "peer", Level: hclog.Warn, Output: os.Stderr})
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("open peer store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// killAbruptly simulates a central that dies: its client goes away without revoking its
// lease, so its reservations stay until the lease's TTL runs out.
func killAbruptly(s *Store) {
	s.mu.Lock()
	s.closed = true
	s.session = nil
	s.mu.Unlock()
	s.client.Close()
}

// testNode puts an up node with the given capacity.
func testNode(t testing.TB, s *Store, name string, vcpus, memMiB, macSlots int64) *Node {
	t.Helper()
	n := &Node{FleetNode: sdk.FleetNode{Name: name, URL: "http://" + name + ":7777", State: NodeUp,
		Capacity:      sdk.FleetNodeCapacity{Total: sdk.Resources{VCPUs: vcpus, MemoryMiB: memMiB, MacOSSlots: macSlots}},
		LastHeartbeat: time.Now().UTC()}}
	if err := s.PutNode(context.Background(), n); err != nil {
		t.Fatalf("put node: %v", err)
	}
	return n
}

// testTenant creates a tenant with quotas and a token derived from its name.
func testTenant(t testing.TB, s *Store, name string, q sdk.Quotas) *Tenant {
	t.Helper()
	tn := &Tenant{Tenant: sdk.Tenant{Name: name, Quota: q}, TokenSHA256: HashToken("fvt_" + name)}
	if err := s.CreateTenant(context.Background(), tn); err != nil {
		t.Fatalf("create tenant: %v", err)
	}
	return tn
}
