package vms

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestChooseNetwork walks the rule of docs/networks.md: who gets which
// network under which policy, and who is refused.
func TestChooseNetwork(t *testing.T) {
	on := sdk.Policy{IsolateTenantNetworks: true, TenantSubnetPrefix: "10.230"}
	off := sdk.Policy{TenantSubnetPrefix: "10.230"}
	for _, c := range []struct {
		name          string
		pol           sdk.Policy
		tenant, asked string
		want          string
		refused       bool
		kind          int
	}{
		{"tenant, isolation on, default", on, "t-1", "", NetworkTenant, false, 0},
		{"tenant, isolation on, tenant", on, "t-1", NetworkTenant, NetworkTenant, false, 0},
		{"tenant, isolation on, none", on, "t-1", NetworkNone, NetworkNone, false, 0},
		{"tenant, isolation on, user", on, "t-1", NetworkUser, "", true, http.StatusForbidden},
		{"tenant, isolation off, default", off, "t-1", "", "", false, 0},
		{"tenant, isolation off, user", off, "t-1", NetworkUser, NetworkUser, false, 0},
		{"tenant, isolation off, tenant", off, "t-1", NetworkTenant, NetworkTenant, false, 0},
		{"operator, isolation on, default", on, "", "", "", false, 0},
		{"operator, isolation on, user", on, "", NetworkUser, NetworkUser, false, 0},
		{"operator, isolation on, tenant", on, "", NetworkTenant, "", true, http.StatusBadRequest},
		{"unknown mode", off, "t-1", "bridge", "", true, http.StatusBadRequest},
	} {
		got, err := ChooseNetwork(c.pol, c.tenant, c.asked)
		var rf *jsonapi.Error
		switch {
		case c.refused && (!errors.As(err, &rf) || rf.Status != c.kind || rf.Hint == ""):
			t.Errorf("%s: %q, %v; want a refusal of status %d with a hint", c.name, got, err, c.kind)
		case !c.refused && (err != nil || got != c.want):
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}

type fakeSubnets struct {
	n   int
	err error
}

func (f fakeSubnets) TenantSubnetIndex(context.Context, string) (int, error) { return f.n, f.err }

// TestTenantSubnet makes the subnet from the policy's prefix and the
// store's index, and refuses with a hint when there is none.
func TestTenantSubnet(t *testing.T) {
	ctx := context.Background()
	pol := sdk.Policy{IsolateTenantNetworks: true, TenantSubnetPrefix: "10.230"}
	if s, err := TenantSubnet(ctx, fakeSubnets{n: 7}, pol, "t-1"); err != nil || s != "10.230.7.0/24" {
		t.Fatalf("TenantSubnet = %q, %v; want 10.230.7.0/24", s, err)
	}
	for _, c := range []struct {
		name string
		f    fakeSubnets
		pol  sdk.Policy
		kind int
	}{
		{"all held", fakeSubnets{err: store.ErrNoSubnet}, pol, http.StatusServiceUnavailable},
		{"tenant gone", fakeSubnets{err: store.ErrNotFound}, pol, http.StatusForbidden},
		{"store down", fakeSubnets{err: errors.New("etcd: no leader")}, pol, http.StatusServiceUnavailable},
		{"bad prefix", fakeSubnets{n: 1}, sdk.Policy{TenantSubnetPrefix: "10"}, http.StatusServiceUnavailable},
	} {
		_, err := TenantSubnet(ctx, c.f, c.pol, "t-1")
		var rf *jsonapi.Error
		if !errors.As(err, &rf) || rf.Status != c.kind || rf.Hint == "" {
			t.Errorf("%s: %v; want a refusal of status %d with a hint", c.name, err, c.kind)
		}
	}
}
