package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetVolumesCreateListAttachResizeRemove: against a real central and a
// sim node, a tenant creates a volume, is refused one over max_volume_gib
// with what to do, lists them as a table and as JSON with its use, launches
// a VM with --volume (which then shows in the listing), is refused resize
// and volume-rm while it is attached; after the VM goes it grows it, and
// volume-rm asks on a terminal (n leaves it) and needs -y without one.
func TestFleetVolumesCreateListAttachResizeRemove(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", map[string]int64{"max_volume_gib": 10})
	tenant := fleetCLI(f, token)

	tenant.tty().run(t, "fleet", "volume-create", "pg-data", "--size", "4").ok(t, "volume-create").
		has(t, "volume-create", "✓ Created volume pg-data (4 GiB on ", "next: fluxctl fleet launch --image IMAGE --volume pg-data")
	tenant.run(t, "fleet", "volume-create", "big", "--size", "7").refused(t, "over the quota", "max_volume_gib", "fluxctl fleet volume-rm NAME")

	tenant.run(t, "fleet", "launch", "db-1", "--image", "debian-minimal", "--volume", "pg-data").ok(t, "launch --volume")
	table := tenant.tty().run(t, "fleet", "volumes").ok(t, "volumes").stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "NAME SIZE NODE ATTACHED TO" ||
		!regexp.MustCompile(`^pg-data\s+4 GiB\s+\S+\s+vm-\S+$`).MatchString(lines[1]) {
		t.Fatalf("fleet volumes printed:\n%s", table)
	}
	list := decode[sdk.FleetVolumeList](t, "volumes -o json", tenant.run(t, "fleet", "volumes", "-o", "json").ok(t, "volumes json").stdout)
	if list.UsedGiB != 4 || list.LimitGiB != 10 || len(list.Volumes) != 1 || list.Volumes[0].AttachedTo == "" {
		t.Fatalf("volumes -o json = %+v", list)
	}
	tenant.run(t, "fleet", "volume-resize", "pg-data", "--size", "5").refused(t, "resize while attached", "attached", "delete the VM that uses it first")
	tenant.run(t, "fleet", "volume-rm", "pg-data", "-y").refused(t, "volume-rm while attached", "attached", "delete the VM that uses it first")

	tenant.run(t, "fleet", "rm", "db-1", "-y").ok(t, "rm the VM")
	tenant.run(t, "fleet", "volume-resize", "pg-data", "--size", "3").refused(t, "shrink", "only grow", "")
	tenant.tty().run(t, "fleet", "volume-resize", "pg-data", "--size", "6").ok(t, "volume-resize").has(t, "volume-resize", "✓ Volume pg-data is 6 GiB now")
	tenant.run(t, "fleet", "volume-rm", "pg-data").refused(t, "volume-rm without a terminal", "without confirmation", "fluxctl fleet volume-rm pg-data -y")
	no := tenant.tty()
	no.stdin = "n\n"
	if r := no.run(t, "fleet", "volume-rm", "pg-data"); r.code != 1 || !strings.Contains(r.stderr, "delete volume pg-data (6 GiB on ") ||
		!strings.Contains(r.stderr, "error: nothing done") {
		t.Fatalf("volume-rm answered n: exit %d\n%s", r.code, r.stderr)
	}
	tenant.run(t, "fleet", "volume-rm", "pg-data", "-y").ok(t, "volume-rm -y")
	tenant.run(t, "fleet", "volume-rm", "pg-data", "-y").refused(t, "volume-rm of a deleted volume", "no volume", "fluxctl fleet volumes")
	tenant.tty().run(t, "fleet", "volumes").ok(t, "volumes when none").has(t, "no volumes", "no volumes", "fluxctl fleet volume-create NAME --size GiB")
}
