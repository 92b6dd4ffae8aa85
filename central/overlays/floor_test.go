package overlays

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// TestOverlaysAreHeldToTheFleetFloorWhenMadeAndAtEachLaunch: on a member
// central (a real etcd), a tenant's overlay made under the fleet owner's
// allowlist has its open policy refused with the reason; one made before
// the central joined (open) sends its next VM the owner's floor all the
// same.
func TestOverlaysAreHeldToTheFleetFloorWhenMadeAndAtEachLaunch(t *testing.T) {
	st := storetest.Open(t)
	ctx := t.Context()
	s := New(st, nil, time.Now, hclog.NewNullLogger())
	before, err := s.Create(ctx, "acme", sdk.CreateOverlayRequest{Name: "before", Egress: &sdk.EgressPolicy{Mode: "open"}})
	if err != nil || before.Egress.Mode != "open" {
		t.Fatalf("an overlay in no fleet: %+v %v", before, err)
	}
	rec, err := st.GetOverlay(ctx, "acme", "before")
	if err != nil {
		t.Fatal(err)
	}
	rec.Members = []sdk.OverlayMember{{Node: "n1", Subnet: Part(rec.Index, 0)}}
	if err := st.PutOverlay(ctx, rec); err != nil {
		t.Fatal(err)
	}

	fleet := &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}, Block: []string{"192.0.2.66"}}
	s.FleetFloor = func(context.Context) (*sdk.EgressPolicy, error) { return fleet, nil }
	_, _, egress, err := s.Launch(ctx, "acme", "n1", []string{"before"})
	if err != nil || !reflect.DeepEqual(egress, *fleet) {
		t.Fatalf("a VM of an overlay made before joining gets %+v %v, want the owner's floor %+v", egress, err, *fleet)
	}
	after, err := s.Create(ctx, "acme", sdk.CreateOverlayRequest{Name: "after", Egress: &sdk.EgressPolicy{Mode: "open", Block: []string{"192.0.2.9"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := sdk.EgressPolicy{Mode: "allowlist", Allow: fleet.Allow, Block: []string{"192.0.2.66", "192.0.2.9"}}
	if !reflect.DeepEqual(after.Egress, want) || len(after.EgressRefused) != 1 || !strings.Contains(after.EgressRefused[0], "would loosen") {
		t.Fatalf("an overlay made under the fleet floor: %+v refused %q, want %+v", after.Egress, after.EgressRefused, want)
	}
}
