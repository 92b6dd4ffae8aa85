package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestDeleteTenantRefusesWhileVMsRunOrAreBeingCreated: a live reservation
// or a running ledger entry makes DeleteTenant refuse with ErrConflict and
// change nothing; once they end, the delete goes through.
func TestDeleteTenantRefusesWhileVMsRunOrAreBeingCreated(t *testing.T) {
	s := openEmbedded(t, Options{UnsafeNoFsync: true})
	ctx := testCtx(t)
	testNode(t, s, "node-1", 8, 8192, 0)
	tn := testTenant(t, s, "busy", sdk.Quotas{})

	res, err := s.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "node-1", VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, tn.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete with a reservation in flight: %v, want ErrConflict", err)
	}
	e, err := s.Commit(ctx, res, LedgerEntry{VMID: "vm-1", Name: "vm-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, tn.ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("delete with a running VM: %v, want ErrConflict", err)
	}
	if _, err := s.TenantByToken(ctx, tn.TokenSHA256); err != nil {
		t.Fatalf("a refused delete removed the token index: %v", err)
	}
	if _, err := s.EndEntry(ctx, e.ID, "deleted", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, tn.ID); err != nil {
		t.Fatalf("delete once the VM ended: %v", err)
	}
	if err := s.DeleteTenant(ctx, tn.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

// TestDeleteTenantAndReserveNeverBothWin races a Reserve against a
// DeleteTenant of the same tenant, many times, from two centrals: either
// the reservation lands and the delete is refused, or the tenant is gone
// and the reservation refused. Never a reservation held for a deleted
// tenant.
func TestDeleteTenantAndReserveNeverBothWin(t *testing.T) {
	a := openEmbedded(t, Options{UnsafeNoFsync: true})
	b := openPeer(t, a, Options{})
	ctx := testCtx(t)
	testNode(t, a, "node-1", 1024, 1<<20, 0)
	outcomes := map[string]int{}
	for i := range 40 {
		tn := testTenant(t, a, fmt.Sprintf("racer-%d", i), sdk.Quotas{})
		var resErr, delErr error
		var res *Reservation
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			res, resErr = a.Reserve(ctx, ReserveRequest{Tenant: tn.ID, Node: "node-1", VCPUs: 1, MemoryMiB: 64})
		}()
		go func() { defer wg.Done(); delErr = b.DeleteTenant(ctx, tn.ID) }()
		wg.Wait()
		switch {
		case resErr == nil && errors.Is(delErr, ErrConflict):
			outcomes["reserved, delete refused"]++
			if err := a.Release(ctx, res); err != nil {
				t.Fatal(err)
			}
		case errors.Is(resErr, ErrNotFound) && delErr == nil:
			outcomes["deleted, reserve refused"]++
		default:
			t.Fatalf("round %d: reserve %v, delete %v: want exactly one to win", i, resErr, delErr)
		}
		if _, err := a.GetTenant(ctx, tn.ID); err == nil {
			if u, err := a.TenantUsage(ctx, tn.ID); err != nil || u.Total().VMs != 0 {
				t.Fatalf("round %d: usage after release %+v, %v", i, u, err)
			}
		} else if u, err := a.TenantUsage(ctx, tn.ID); err != nil || u.Reserved.VMs != 0 {
			t.Fatalf("round %d: the deleted tenant holds reservations: %+v, %v", i, u, err)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}
