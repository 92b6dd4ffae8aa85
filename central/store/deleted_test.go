package store

import (
	"errors"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestADeletedVMIsNeverRecorded covers both orders of a create's ledger
// write and a delete that found no entry: a commit after the mark writes
// nothing (ErrDeleted) and frees the reservation's room with Release; a
// commit before the mark is ended by MarkDeleted. Either way nothing runs
// and nothing is counted.
func TestADeletedVMIsNeverRecorded(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 16, 65536, 0)
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	now := time.Now()

	// Mark first: the commit is refused and the reservation released.
	res, err := s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 2, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if e, err := s.MarkDeleted(ctx, "n1", "vm-late", "deleted", now); err != nil || e != nil {
		t.Fatalf("mark without entry = %+v, %v; want nothing ended", e, err)
	}
	if _, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-late", Name: "late"}); !errors.Is(err, ErrDeleted) {
		t.Fatalf("commit after the mark: %v, want ErrDeleted", err)
	}
	if _, err := s.RecordEntry(ctx, LedgerEntry{Tenant: acme.ID, Node: "n1", VMID: "vm-late", VCPUs: 2, MemoryMiB: 512}); !errors.Is(err, ErrDeleted) {
		t.Fatalf("adopting a marked vm: %v, want ErrDeleted", err)
	}
	if err := s.Release(ctx, res); err != nil {
		t.Fatal(err)
	}

	// Commit first: the mark ends the entry.
	res, err = s.Reserve(ctx, ReserveRequest{Tenant: acme.ID, Node: "n1", VCPUs: 2, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-early", Name: "early"}); err != nil {
		t.Fatal(err)
	}
	e, err := s.MarkDeleted(ctx, "n1", "vm-early", "deleted", now)
	if err != nil || e == nil || e.Running() || e.ID != EntryID("n1", "vm-early") || e.EndReason != "deleted" {
		t.Fatalf("mark after the commit = %+v, %v; want the entry ended", e, err)
	}

	for _, u := range []func() (UsageView, error){
		func() (UsageView, error) { return s.TenantUsage(ctx, acme.ID) },
		func() (UsageView, error) { return s.NodeUsage(ctx, "n1") },
	} {
		if got, err := u(); err != nil || got.Total() != (Usage{}) {
			t.Errorf("usage = %+v, %v; want nothing running or reserved", got, err)
		}
	}
	if rs, err := s.RunningOnNode(ctx, "n1"); err != nil || len(rs) != 0 {
		t.Errorf("running on n1 = %+v, %v", rs, err)
	}
}
