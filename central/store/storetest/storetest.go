// Package storetest opens central's store on a real embedded etcd for the
// tests of the packages built on it, in a temporary directory that goes away
// with the test.
package storetest

import (
	"context"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
)

// Open starts an embedded etcd (without fsync: the data is thrown away) and
// opens the store on it; both stop when the test ends.
func Open(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{DataDir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatalf("open the embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
