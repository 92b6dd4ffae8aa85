package store

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestParallelSnapshotsStopExactlyAtTheLimit: twenty snapshots of one VM
// recorded at once against a limit of five leave exactly five, the others
// refused with a QuotaError naming max_snapshots_per_vm; a name the VM has
// (in another case) is ErrExists; a deleted snapshot frees its place and
// its name, and another VM's snapshots do not count.
func TestParallelSnapshotsStopExactlyAtTheLimit(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	now := time.Now().UTC()
	rec := func(vm, name string) *Snapshot {
		return &Snapshot{FleetSnapshot: sdk.FleetSnapshot{Name: name, Node: "n1", VMID: vm, VM: vm}, ID: NewSnapshotID(), Tenant: "t-1", CreatedAt: now}
	}
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.AddSnapshot(ctx, rec("vm-1", "s"+string(rune('a'+i))), 5) }()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		var qe *QuotaError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &qe) && qe.Field == sdk.QuotaMaxSnapshotsPerVM && qe.Limit == 5:
		default:
			t.Fatalf("a parallel snapshot: %v", err)
		}
	}
	if ok != 5 {
		t.Fatalf("%d of 20 parallel snapshots were recorded against a limit of 5", ok)
	}
	recs, err := s.VMSnapshots(ctx, "n1", "vm-1")
	if err != nil || len(recs) != 5 {
		t.Fatalf("records: %d %v", len(recs), err)
	}
	if err := s.AddSnapshot(ctx, rec("vm-2", "other"), 5); err != nil {
		t.Fatalf("another VM's first snapshot: %v", err)
	}
	if err := s.AddSnapshot(ctx, rec("vm-2", "OTHER"), 5); !errors.Is(err, ErrExists) {
		t.Fatalf("a name the VM has, in capitals: %v, want ErrExists", err)
	}
	gone := recs[0]
	gone.DeletedAt = now
	if err := s.PutSnapshot(ctx, &gone); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSnapshot(ctx, rec("vm-1", gone.Name), 5); err != nil {
		t.Fatalf("the name and place of a deleted snapshot: %v", err)
	}
	if err := s.AddSnapshot(ctx, rec("vm-1", "sixth"), 5); !errors.Is(err, ErrQuota) {
		t.Fatalf("over the limit again: %v", err)
	}
	if err := s.AddSnapshot(ctx, rec("vm-1", "bad/name"), 5); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad name: %v", err)
	}
}
