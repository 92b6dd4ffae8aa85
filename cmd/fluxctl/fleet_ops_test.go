package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetLeasesDrainsAndPools drives leases, cordons, drains, scrubs and
// warm pools against a real central with a sim node.
func TestFleetLeasesDrainsAndPools(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", map[string]int64{"max_leased_hosts": 1})
	op, tenant := fleetCLI(f, f.OperatorToken), fleetCLI(f, token)

	// Cordon and uncordon, piped and on a terminal.
	n := decode[sdk.FleetNode](t, "cordon", op.run(t, "fleet", "cordon", f.Node).ok(t, "cordon").stdout)
	if !n.Cordoned {
		t.Fatalf("cordon: %+v", n)
	}
	tenant.run(t, "fleet", "lease", "create").refused(t, "lease a cordoned node", "no Mac can be leased now", "fluxctl fleet capacity")
	op.tty().run(t, "fleet", "uncordon", f.Node).ok(t, "uncordon").has(t, "uncordon", "✓ Node "+f.Node+" uncordoned (takes VMs)")
	op.run(t, "fleet", "cordon", "nope").refused(t, "cordon an unknown node", "no node nope", "fluxctl fleet nodes")

	// Drain: none yet, then a cordon-mode drain of an empty node.
	op.run(t, "fleet", "drain-status", f.Node).refused(t, "drain-status before a drain", "has not been drained", "fluxctl fleet drain "+f.Node)
	d := decode[sdk.Drain](t, "drain", op.run(t, "fleet", "drain", f.Node, "--wait").ok(t, "drain").stdout)
	if d.Node != f.Node || d.Mode != sdk.DrainCordon || !d.Finished {
		t.Fatalf("drain: %+v", d)
	}
	op.tty().run(t, "fleet", "drain-status", f.Node).ok(t, "drain-status").has(t, "drain-status",
		"Drain of "+f.Node+" (mode cordon)", "finished", "no VMs were on the node")
	op.run(t, "fleet", "drain", f.Node, "--mode", "reschedule").refused(t, "drain piped without -y", "without confirmation", "-y")
	op.run(t, "fleet", "uncordon", f.Node).ok(t, "uncordon after drain")

	// A lease: created by the tenant, listed, and not released before its
	// minimum; the hint says when it can be.
	l := decode[sdk.Lease](t, "lease create", tenant.run(t, "fleet", "lease", "create", "--hours", "48").ok(t, "lease create").stdout)
	if l.Node != f.Node || !l.Active || l.MinEnd.Sub(l.StartedAt) < 24*time.Hour {
		t.Fatalf("lease create: %+v", l)
	}
	tenant.tty().run(t, "fleet", "lease", "list").ok(t, "lease list").has(t, "lease list", "ID", l.ID, f.Node, "active")
	tenant.run(t, "fleet", "lease", "release", l.ID).refused(t, "release piped without -y", "without confirmation", "lease release "+l.ID+" -y")
	tenant.run(t, "fleet", "lease", "release", l.ID, "-y").refused(t, "release before the minimum", "cannot be released before",
		"it can be released from "+when(l.MinEnd))
	tenant.run(t, "fleet", "lease", "release", l.ID, "-y", "--force").refused(t, "a tenant forcing", "force is for the operator", "ask the operator")
	op.run(t, "fleet", "scrub", f.Node, "-y").refused(t, "scrub a leased node", "is leased", "release the lease first")
	rel := decode[sdk.Lease](t, "forced release", op.run(t, "fleet", "lease", "release", l.ID, "--force", "-y").ok(t, "forced release").stdout)
	if rel.Active || rel.EndReason != "released-forced" {
		t.Fatalf("forced release: %+v", rel)
	}
	op.tty().run(t, "fleet", "scrub", f.Node, "-y").ok(t, "scrub").has(t, "scrub", "✓ Scrubbed node "+f.Node, "the node lists no VM and no VM workspace")

	// Pools: create, status until a member is warm, delete.
	p := decode[sdk.Pool](t, "pools create", tenant.run(t, "fleet", "pools", "create", "ci", "--image", "debian-minimal", "--size", "1").ok(t, "pools create").stdout)
	if p.Name != "ci" || p.Size != 1 || p.Image != "debian-minimal" {
		t.Fatalf("pools create: %+v", p)
	}
	tenant.run(t, "fleet", "pools", "create", "ci", "--image", "debian-minimal", "--size", "1").refused(t, "pool name in use", "exists", "pick another name")
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := decode[sdk.PoolStatus](t, "pools status", tenant.run(t, "fleet", "pools", "status", "ci").ok(t, "pools status").stdout)
		if st.Warm == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never got a warm member: %+v", st)
		}
		time.Sleep(200 * time.Millisecond)
	}
	tenant.tty().run(t, "fleet", "pools", "status", "ci").ok(t, "pools status tty").has(t, "pools status", "Pool ci: 1 warm", "MEMBER", f.Node)
	tenant.tty().run(t, "fleet", "pools").ok(t, "pools").has(t, "pools", "NAME", "ci", "debian-minimal")
	tenant.run(t, "fleet", "pools", "delete", "ci", "-y").ok(t, "pools delete")
	if r := tenant.run(t, "fleet", "pools", "get", "ci"); r.code == 0 {
		if p := decode[sdk.Pool](t, "pools get", r.stdout); !p.Deleting {
			t.Fatalf("pool still there after delete: %+v", p)
		}
	} else if !strings.Contains(r.stderr, "no pool ci") {
		t.Fatalf("pools get after delete: %s", r.stderr)
	}

	// The rebalance plan of an idle fleet has no moves.
	op.tty().run(t, "fleet", "rebalance-plan", "--high-water", "0.5").ok(t, "rebalance-plan").has(t, "rebalance-plan", "no moves")
}
