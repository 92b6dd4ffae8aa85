package main

import (
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// The commands of the seed's command table that the fleet API already
// had: lease create --min-vcpus, the tenant quotas for leased hosts,
// volumes and memory in MiB, fleet create --spec, and the macOS pool.

// TestFleetLeaseCreateMinVCPUsTakesOnlyANodeThatBig leases on fleettest's
// sim node, which has 8 vCPUs.
func TestFleetLeaseCreateMinVCPUsTakesOnlyANodeThatBig(t *testing.T) {
	f := fleettest.Start(t)
	_, token := f.Tenant(t, "acme", map[string]int64{"max_leased_hosts": 1})
	tenant := fleetCLI(f, token)

	tenant.run(t, "fleet", "lease", "create", "--min-vcpus", "9").refused(t, "more vCPUs than any node has",
		"no Mac can be leased now", "fluxctl fleet capacity")
	tenant.run(t, "fleet", "lease", "create", "--min-vcpus", "-1").refused(t, "negative --min-vcpus",
		"must not be negative", "usage: fluxctl fleet lease create")
	d := decode[sdk.LeaseDryRun](t, "dry run", tenant.run(t, "fleet", "lease", "create", "--min-vcpus", "8", "--dry-run").ok(t, "dry run").stdout)
	if d.Node != f.Node {
		t.Fatalf("lease create --min-vcpus 8 --dry-run = %+v", d)
	}
	l := decode[sdk.Lease](t, "lease create", tenant.run(t, "fleet", "lease", "create", "--min-vcpus", "8").ok(t, "lease create").stdout)
	if l.Node != f.Node || !l.Active {
		t.Fatalf("lease create --min-vcpus 8 = %+v", l)
	}
}
