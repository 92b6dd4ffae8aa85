package main

import (
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetNetworksCreateShowRefuseAndDelete: against a real central and a
// sim node without a network plugin, under an allowlist floor, a tenant's
// network that asks for open egress is made with the floor and the refusal
// listed; show prints it; a node without a network plugin cannot join (409
// with what to do); a launch into the network without a member node is
// refused; rotate of a network without nodes changes nothing; delete
// removes it.
func TestFleetNetworksCreateShowRefuseAndDelete(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	tenant := fleetCLI(f, token)
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := op.GetPolicy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pol.Egress = &sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"192.0.2.0/24"}}
	if _, err := op.PutPolicy(t.Context(), *pol); err != nil {
		t.Fatal(err)
	}

	tenant.tty().run(t, "fleet", "networks", "create", "backend", "--egress", "open").ok(t, "networks create").
		has(t, "networks create", "✓ Created private network backend (10.231.", "refused: mode open would loosen the floor's allowlist")
	shown := tenant.tty().run(t, "fleet", "networks", "show", "backend").ok(t, "networks show").stdout
	if !strings.Contains(shown, "egress allowlist allow 192.0.2.0/24") || !strings.Contains(shown, "no member nodes") {
		t.Fatalf("networks show printed:\n%s", shown)
	}
	list := decode[sdk.OverlayList](t, "networks -o json", tenant.run(t, "fleet", "networks", "-o", "json").ok(t, "networks json").stdout)
	if len(list.Overlays) != 1 || list.Overlays[0].Egress.Mode != "allowlist" || len(list.Overlays[0].EgressRefused) != 1 {
		t.Fatalf("networks -o json = %+v", list)
	}
	tenant.run(t, "fleet", "networks", "add-node", "backend", f.Node).refused(t, "add-node without a plugin", "no network plugin up", "overlay_address")
	tenant.run(t, "fleet", "networks", "create", "Bad Name").refused(t, "a bad name", "not valid", "")
	tenant.run(t, "fleet", "launch", "vm-1", "--image", "debian-minimal", "--network", "backend").refused(t, "launch without a node", "names its node", "")
	tenant.run(t, "fleet", "launch", "vm-1", "--image", "debian-minimal", "--network", "backend", "--node", f.Node).refused(t, "launch on a non-member", "not a member", "")
	tenant.run(t, "fleet", "networks", "rotate", "backend").ok(t, "rotate")
	tenant.run(t, "fleet", "networks", "delete", "backend").ok(t, "delete")
	tenant.run(t, "fleet", "networks", "show", "backend").refused(t, "show after delete", "no overlay", "fluxctl fleet networks")
}
