package overlays

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestClampTightensAndNeverLoosensTheFloor: what a tenant's policy may do
// under each floor, what it gets, and what is refused with which reason.
func TestClampTightensAndNeverLoosensTheFloor(t *testing.T) {
	allowFloor := &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24", "198.51.100.7"}, Block: []string{"192.0.2.66"}}
	openFloor := &sdk.EgressPolicy{Mode: "open", Block: []string{"203.0.113.0/24"}}
	for _, c := range []struct {
		name         string
		floor, local *sdk.EgressPolicy
		want         sdk.EgressPolicy
		refused      []string
	}{
		{"no floor, no policy: open", nil, nil, sdk.EgressPolicy{Mode: "open"}, nil},
		{"no policy: the floor", allowFloor, nil, *allowFloor, nil},
		{"allowlist under an open floor tightens", openFloor, &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"10.1.0.0/16"}},
			sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"10.1.0.0/16"}, Block: []string{"203.0.113.0/24"}}, nil},
		{"open under an allowlist floor is refused", allowFloor, &sdk.EgressPolicy{Mode: "open"},
			sdk.EgressPolicy{Mode: "allowlist", Allow: allowFloor.Allow, Block: allowFloor.Block},
			[]string{"mode open would loosen the floor's allowlist: the floor's allowlist applies"}},
		{"a narrower allowlist is kept, an entry outside is refused", allowFloor,
			&sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.128/25", "198.51.100.0/24"}},
			sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.128/25"}, Block: allowFloor.Block},
			[]string{"allow 198.51.100.0/24 is outside the floor's allowlist"}},
		{"an empty allowlist tightens to nothing", allowFloor, &sdk.EgressPolicy{Mode: "allowlist"},
			sdk.EgressPolicy{Mode: "allowlist", Block: allowFloor.Block}, nil},
		{"blocks add to the floor's, never drop them", openFloor, &sdk.EgressPolicy{Mode: "open", Block: []string{"192.0.2.9"}},
			sdk.EgressPolicy{Mode: "open", Block: []string{"203.0.113.0/24", "192.0.2.9"}}, nil},
	} {
		got, refused, err := Clamp(c.floor, c.local)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !reflect.DeepEqual(got, c.want) || !reflect.DeepEqual(refused, c.refused) {
			t.Errorf("%s:\n got %+v refused %q\nwant %+v refused %q", c.name, got, refused, c.want, c.refused)
		}
	}
	for _, bad := range []*sdk.EgressPolicy{{Mode: "closed"}, {Mode: "open", Block: []string{"example.com"}}, {Mode: "allowlist", Allow: []string{"10.0.0.1/8"}},
		{Mode: "open", Block: make([]string, sdk.MaxEgressEntries+1)}} {
		if _, _, err := Clamp(nil, bad); err == nil {
			t.Errorf("policy %+v was accepted", bad)
		} else if e, ok := err.(*jsonapi.Error); !ok || e.Status != http.StatusBadRequest {
			t.Errorf("policy %+v: %v, want a 400", bad, err)
		}
	}
}

// FuzzEgressEntry: any string is an entry or is refused, and no entry
// Clamp keeps lies outside an allowlist floor.
func FuzzEgressEntry(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "192.0.2.0/24", "0.0.0.0/0", "::1", "10.0.0.1/8", ""} {
		f.Add(s)
	}
	floor := &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}}
	f.Fuzz(func(t *testing.T, s string) {
		got, _, err := Clamp(floor, &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{s}})
		if err != nil {
			return
		}
		for _, a := range got.Allow {
			p, ok := sdk.EgressEntry(a)
			if !ok || !covers(floor.Allow, p) {
				t.Fatalf("kept %q outside the floor", a)
			}
		}
	})
}

// TestFloorIsTheFleetFloorTightenedByTheOperatorsOwn: on a central in no
// fleet the floor is the operator's; on a member it is the owner's with
// the operator's clamped to it, and CheckOwnEgress refuses (409) what of
// the operator's would loosen the owner's, with the reasons.
func TestFloorIsTheFleetFloorTightenedByTheOperatorsOwn(t *testing.T) {
	fleet := &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}, Block: []string{"192.0.2.66"}}
	narrower := &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/25"}, Block: []string{"192.0.2.9"}}
	for _, c := range []struct {
		name         string
		fleet, own   *sdk.EgressPolicy
		want         sdk.EgressPolicy
		overridden   int
		checkRefuses bool
	}{
		{"in no fleet, no egress: open", nil, nil, sdk.EgressPolicy{Mode: "open"}, 0, false},
		{"in no fleet: the operator's", nil, narrower, *narrower, 0, false},
		{"a member without its own: the owner's", fleet, nil, *fleet, 0, false},
		{"a member's own tightens the owner's", fleet, narrower,
			sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/25"}, Block: []string{"192.0.2.66", "192.0.2.9"}}, 0, false},
		{"a member's open is overridden by the owner's allowlist", fleet, &sdk.EgressPolicy{Mode: "open"}, *fleet, 1, true},
	} {
		s := &Service{}
		if c.fleet != nil {
			s.FleetFloor = func(context.Context) (*sdk.EgressPolicy, error) { return c.fleet, nil }
		}
		got, overridden, err := s.Floor(t.Context(), sdk.Policy{Egress: c.own})
		if err != nil || !reflect.DeepEqual(got, c.want) || len(overridden) != c.overridden {
			t.Errorf("%s: floor %+v, overridden %q, %v; want %+v", c.name, got, overridden, err, c.want)
		}
		err = s.CheckOwnEgress(t.Context(), c.own)
		var je *jsonapi.Error
		if refused := errors.As(err, &je) && je.Status == http.StatusConflict && strings.Contains(je.Msg, "would loosen") && je.Hint != ""; refused != c.checkRefuses || (!c.checkRefuses && err != nil) {
			t.Errorf("%s: CheckOwnEgress: %v", c.name, err)
		}
	}
	s := &Service{FleetFloor: func(context.Context) (*sdk.EgressPolicy, error) { return nil, errors.New("etcd down") }}
	if _, _, err := s.Floor(t.Context(), sdk.Policy{}); err == nil {
		t.Error("a fleet floor that cannot be read gave a floor")
	}
}
