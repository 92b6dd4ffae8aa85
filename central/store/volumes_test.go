package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestParallelVolumesStopExactlyAtTheQuota: twenty 3 GiB volumes of one
// tenant recorded at once against max_volume_gib 10 leave exactly three,
// the others refused with a QuotaError naming max_volume_gib; a name the
// tenant has is ErrExists, another tenant's volumes neither count nor
// clash; a growth over the quota is refused and one within it recorded
// with the size's start; a deleted volume frees its GiB and its name.
func TestParallelVolumesStopExactlyAtTheQuota(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	now := time.Now().UTC()
	rec := func(tenant, name string, gib int64) *Volume {
		return &Volume{FleetVolume: sdk.FleetVolume{ID: NewVolumeID(), Name: name, Tenant: tenant, Node: "n1", SizeGiB: gib, CreatedAt: now},
			Sizes: []VolumeSize{{GiB: gib, From: now}}}
	}
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.AddVolume(ctx, rec("t-1", fmt.Sprintf("v%d", i), 3), 10) }()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		var qe *QuotaError
		switch {
		case err == nil:
			ok++
		case errors.As(err, &qe) && qe.Field == sdk.QuotaMaxVolumeGiB && qe.Limit == 10:
		default:
			t.Fatalf("a parallel volume: %v", err)
		}
	}
	if ok != 3 {
		t.Fatalf("%d volumes recorded, want exactly 3 under 10 GiB", ok)
	}
	all, err := s.ListVolumes(ctx, nil)
	if err != nil || TenantVolumeGiB(all, "t-1") != 9 {
		t.Fatalf("t-1 holds %d GiB (%v), want 9", TenantVolumeGiB(all, "t-1"), err)
	}
	if err := s.AddVolume(ctx, rec("t-1", all[0].Name, 1), 10); !errors.Is(err, ErrExists) {
		t.Fatalf("a name the tenant has: %v, want ErrExists", err)
	}
	if err := s.AddVolume(ctx, rec("t-2", all[0].Name, 10), 10); err != nil {
		t.Fatalf("another tenant's volume of the same name: %v", err)
	}
	var qe *QuotaError
	if _, err := s.GrowVolume(ctx, all[0].ID, 5, 10, now.Add(time.Hour)); !errors.As(err, &qe) {
		t.Fatalf("a growth to 12 GiB held: %v, want a QuotaError", err)
	}
	grown, err := s.GrowVolume(ctx, all[0].ID, 4, 10, now.Add(time.Hour))
	if err != nil || grown.SizeGiB != 4 || len(grown.Sizes) != 2 || !grown.Sizes[1].From.Equal(now.Add(time.Hour)) {
		t.Fatalf("a growth to 10 GiB held: %+v, %v", grown, err)
	}
	grown.DeletedAt = now.Add(2 * time.Hour)
	if err := s.PutVolume(ctx, grown); err != nil {
		t.Fatal(err)
	}
	if err := s.AddVolume(ctx, rec("t-1", grown.Name, 4), 10); err != nil {
		t.Fatalf("after a delete, its GiB and name are free again: %v", err)
	}
}
