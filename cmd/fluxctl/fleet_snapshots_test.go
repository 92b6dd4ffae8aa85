package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetSnapshotsTakeListRestoreRemoveAndClone: against a real central
// and a sim node, a tenant takes a disk and a memory snapshot, lists them
// as a table (kind, size, when) and as JSON with the limit, is refused a
// third over its max_snapshots_per_vm with what to do; restore and
// snapshot-rm ask on a terminal (n leaves everything) and need -y without
// one; clone makes a new VM from a snapshot; an unknown snapshot is a 404
// with the listing's hint.
func TestFleetSnapshotsTakeListRestoreRemoveAndClone(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", map[string]int64{"max_snapshots_per_vm": 2})
	tenant := fleetCLI(f, token)
	tenant.run(t, "fleet", "launch", "web-1", "--image", "debian-minimal").ok(t, "launch")

	tenant.tty().run(t, "fleet", "snapshot", "web-1", "--name", "before").ok(t, "snapshot").
		has(t, "snapshot", "✓ Took snapshot before of vm web-1 (disk)", "next: fluxctl fleet restore web-1 before")
	warm := decode[sdk.FleetSnapshot](t, "snapshot --memory -o json",
		tenant.run(t, "fleet", "snapshot", "web-1", "--name", "warm", "--memory", "-o", "json").ok(t, "snapshot --memory").stdout)
	if !warm.Memory || warm.Name != "warm" || warm.SizeGiB != 2 {
		t.Fatalf("snapshot --memory = %+v", warm)
	}
	// Completion: the VM's snapshots after the VM, and for clone --snapshot.
	for _, c := range []struct {
		args   []string
		before bool
	}{
		{[]string{"fleet", "restore", "web-1", ""}, true},
		{[]string{"fleet", "snapshot-rm", "web-1", "w"}, false},
		{[]string{"fleet", "clone", "web-1", "--snapshot", ""}, true},
	} {
		comp := tenant.run(t, append([]string{"__complete"}, c.args...)...).ok(t, "complete").stdout
		if !strings.Contains(comp, "warm\tdisk+memory, ") || strings.Contains(comp, "before\t") != c.before {
			t.Errorf("completing %v gave:\n%s", c.args, comp)
		}
	}
	tenant.run(t, "fleet", "snapshot", "web-1", "--name", "third").refused(t, "over the limit", "max_snapshots_per_vm", "fluxctl fleet snapshot-rm web-1 SNAPSHOT")

	table := tenant.tty().run(t, "fleet", "snapshots", "web-1").ok(t, "snapshots").stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME KIND SIZE TAKEN" ||
		!regexp.MustCompile(`^before\s+disk\s+1 GiB\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`).MatchString(lines[1]) ||
		!regexp.MustCompile(`^warm\s+disk\+memory\s+2 GiB\s`).MatchString(lines[2]) {
		t.Fatalf("fleet snapshots printed:\n%s", table)
	}
	list := decode[sdk.FleetSnapshotList](t, "snapshots -o json", tenant.run(t, "fleet", "snapshots", "web-1", "-o", "json").ok(t, "snapshots json").stdout)
	if list.Limit != 2 || len(list.Snapshots) != 2 {
		t.Fatalf("snapshots -o json = %+v", list)
	}

	// Destructive ones ask; without a terminal they need -y.
	tenant.run(t, "fleet", "restore", "web-1", "before").refused(t, "restore without a terminal", "without confirmation", "fluxctl fleet restore web-1 before -y")
	tenant.run(t, "fleet", "snapshot-rm", "web-1", "warm").refused(t, "snapshot-rm without a terminal", "without confirmation", "fluxctl fleet snapshot-rm web-1 warm -y")
	no := tenant.tty()
	no.stdin = "n\n"
	if r := no.run(t, "fleet", "snapshot-rm", "web-1", "warm"); r.code != 1 || !strings.Contains(r.stderr, "delete snapshot warm of vm web-1") ||
		!strings.Contains(r.stderr, "error: nothing done") {
		t.Fatalf("snapshot-rm answered n: exit %d\n%s", r.code, r.stderr)
	}
	yes := tenant.tty()
	yes.stdin = "y\n"
	yes.run(t, "fleet", "restore", "web-1", "before").ok(t, "restore answered y").has(t, "restore", "✓ Restored vm web-1 to snapshot before (running)")
	tenant.run(t, "fleet", "snapshot-rm", "web-1", "warm", "-y").ok(t, "snapshot-rm -y")
	tenant.run(t, "fleet", "restore", "web-1", "warm", "-y").refused(t, "restore of a deleted snapshot", "no snapshot warm", "fluxctl fleet snapshots VM")

	tenant.tty().run(t, "fleet", "clone", "web-1", "web-2", "--snapshot", "before").ok(t, "clone").has(t, "clone", "✓ Cloned vm web-1 as web-2")
	tenant.run(t, "fleet", "vms").ok(t, "vms").has(t, "vms after the clone", "web-2")
	tenant.run(t, "fleet", "clone", "web-1", "web-3").refused(t, "clone of a running VM's disk", "needs it stopped", "")
}
