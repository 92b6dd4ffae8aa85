// Package storetest opens central's store on a real embedded etcd for the
// tests of the packages built on it, in a temporary directory that goes away
// with the test, and makes the tenants those tests need. (The bare etcd
// transactions central's benchmarks compare themselves with are rawtxn's.)
package storetest

import (
	"context"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Open starts an embedded etcd and opens the store on it; both stop when the
// test ends. For a test the etcd skips fsync (the data is thrown away); for a
// benchmark it fsyncs, as central runs it (OpenDurable).
func Open(t testing.TB) *store.Store {
	t.Helper()
	if _, bench := t.(*testing.B); bench {
		return OpenDurable(t)
	}
	st, err := store.Open(context.Background(), store.Options{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("open the embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Tenant creates a tenant without quotas whose primary token is "fvt_" and
// its name.
func Tenant(t testing.TB, st *store.Store, name string) *store.Tenant {
	t.Helper()
	tn := &store.Tenant{Tenant: sdk.Tenant{Name: name}, TokenSHA256: store.HashToken("fvt_" + name)}
	if err := st.CreateTenant(context.Background(), tn); err != nil {
		t.Fatalf("create tenant %s: %v", name, err)
	}
	return tn
}

// OpenDurable is Open with fsync on, as central runs: for benchmarks, whose
// figures fsync decides.
func OpenDurable(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("open the embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
