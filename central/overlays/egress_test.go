package overlays

import (
	"net/http"
	"reflect"
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
