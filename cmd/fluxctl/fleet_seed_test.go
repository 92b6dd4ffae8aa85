package main

import (
	"os"
	"path/filepath"
	"strings"
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

// TestFleetTenantQuotasForLeasedHostsVolumesAndMemoryInMiB sets every
// quota the API has, as the seed's example does, and changes them.
func TestFleetTenantQuotasForLeasedHostsVolumesAndMemoryInMiB(t *testing.T) {
	f := fleettest.Start(t)
	op := fleetCLI(f, f.OperatorToken)

	created := decode[sdk.TenantWithToken](t, "tenant create", op.run(t, "fleet", "tenant", "create", "acme",
		"--max-leased-hosts", "2", "--max-vms", "20", "--max-memory-mib", "98304").ok(t, "tenant create").stdout)
	if q := created.Tenant.Quota; q.MaxLeasedHosts != 2 || q.MaxVMs != 20 || q.MaxMemoryMiB != 98304 || q.MaxVolumeGiB != 0 {
		t.Fatalf("tenant create set the quota %+v", q)
	}
	op.tty().run(t, "fleet", "tenant", "create", "globex", "--max-volume-gib", "500", "--max-memory-gib", "4").ok(t, "tenant create on a tty").has(t,
		"tenant create on a tty", "✓ Created tenant globex (", "quota: 4 GiB, 500 GiB of volumes")

	upd := decode[sdk.Tenant](t, "tenant update", op.run(t, "fleet", "tenant", "update", "acme",
		"--max-volume-gib", "500", "--max-memory-gib", "64", "--max-leased-hosts", "1").ok(t, "tenant update").stdout)
	if q := upd.Quota; q.MaxVolumeGiB != 500 || q.MaxMemoryMiB != 65536 || q.MaxLeasedHosts != 1 || q.MaxVMs != 20 {
		t.Fatalf("tenant update set the quota %+v", q)
	}
	op.tty().run(t, "fleet", "tenant", "update", "acme", "--max-leased-hosts", "none", "--max-memory-mib", "1536").ok(t, "update on a tty").has(t,
		"update on a tty", "quota: 20 VMs, 1.5 GiB, 500 GiB of volumes\n")

	for _, c := range []struct {
		what string
		args []string
		msg  string
	}{
		{"both memory flags on create", []string{"fleet", "tenant", "create", "initech", "--max-memory-gib", "4", "--max-memory-mib", "4096"}, "give one of them"},
		{"both memory flags on update", []string{"fleet", "tenant", "update", "acme", "--max-memory-mib", "4096", "--max-memory-gib", "4"}, "give one of them"},
		{"part of a GiB of volumes", []string{"fleet", "tenant", "update", "acme", "--max-volume-gib", "1.5"}, "want a whole number"},
		{"negative leased hosts", []string{"fleet", "tenant", "create", "initech", "--max-leased-hosts", "-1"}, "want a whole number"},
	} {
		op.run(t, c.args...).refused(t, c.what, c.msg, "usage: fluxctl fleet tenant")
	}
	if got := decode[sdk.Tenant](t, "tenant get", op.run(t, "fleet", "tenant", "get", "acme").ok(t, "tenant get").stdout); got.Quota.MaxMemoryMiB != 1536 {
		t.Fatalf("a refused update changed the quota: %+v", got.Quota)
	}
}

// TestFleetCreateSpecTakesTheRequestFromAFileAndFlagsOverrideIt launches
// from a YAML file and from JSON on stdin.
func TestFleetCreateSpecTakesTheRequestFromAFileAndFlagsOverrideIt(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	tenant := fleetCLI(f, token)
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	spec := write("ci.yaml", "name: from-spec\nimage: debian-minimal\nvcpus: 2\nmemory_mib: 512\nlabels:\n  team: ci\n  job: \"1\"\nnetwork: none\n")

	// The file's request, with --vcpus and --label on top.
	r := decode[sdk.FleetCreateVMResponse](t, "create --spec", tenant.run(t, "fleet", "create", "--spec", spec,
		"--vcpus", "1", "--label", "job=9").ok(t, "create --spec").stdout)
	if v := r.VM; v.Name != "from-spec" || v.VCPUs != 1 || v.MemoryMiB != 512 || v.Network != "none" || v.Labels["team"] != "ci" || v.Labels["job"] != "9" {
		t.Fatalf("create --spec with flags launched %+v", v)
	}
	// JSON on stdin; NAME overrides the file's name, and on a terminal it
	// is a launch like any other.
	c := tenant.tty()
	c.stdin = `{"name": "ignored", "image": "debian-minimal", "memory_mib": 256}`
	c.run(t, "fleet", "create", "web-2", "--spec", "-").ok(t, "create --spec -").has(t, "create --spec -",
		"✓ Launched web-2 on "+f.Node+" (debian-minimal, 1 vCPU, 256 MiB)")
	if help := tenant.run(t, "fleet", "create", "--help").ok(t, "create --help").stdout; !strings.Contains(help, "Flags given as well override the file's fields") {
		t.Fatalf("fleet create --help does not say that flags override --spec:\n%s", help)
	}

	for _, c := range []struct {
		what, spec, msg, hint string
	}{
		{"a misspelt field", write("typo.json", `{"image": "debian-minimal", "vcpu": 2}`), `unknown field "vcpu"`, "fields of POST /fleet/vms"},
		{"no image", write("empty.yaml", "name: x\n"), "needs --image", "usage: fluxctl fleet launch"},
		{"no such file", filepath.Join(dir, "nope.yaml"), "read the create request", "give --spec a JSON or YAML file"},
	} {
		tenant.run(t, "fleet", "create", "--spec", c.spec).refused(t, c.what, c.msg, c.hint)
	}
}

// TestFleetMacOSPoolChecksOutAWarmGuestAndTakesItBack runs on fleettest's
// sim node, which takes macOS guests.
func TestFleetMacOSPoolChecksOutAWarmGuestAndTakesItBack(t *testing.T) {
	f := fleettest.Start(t)
	_, token := f.Tenant(t, "acme", nil)
	op, tenant := fleetCLI(f, f.OperatorToken), fleetCLI(f, token)

	op.run(t, "fleet", "macos-pool", "checkout").refused(t, "checkout without a macOS pool", "no shared pool of macOS guests",
		"fluxctl fleet pools create macos-ci --image MACOS-IMAGE")
	tenant.run(t, "fleet", "macos-pool", "checkout").refused(t, "a tenant checking out", "this route is for the operator",
		"this command is for the operator")

	op.run(t, "fleet", "images", "add", "macos-ci-img", "--image", f.Image, "--guest-os", "macos", "--vcpus", "1", "--memory-mib", "512").ok(t, "images add")
	op.run(t, "fleet", "pools", "create", "macos-ci", "--image", "macos-ci-img", "--size", "1").ok(t, "pools create")
	waitWarm(t, op, "macos-ci", 1)

	// Piped: the API's answer, the VM and how to give it back.
	out := decode[sdk.MacOSCheckout](t, "checkout", op.run(t, "fleet", "macos-pool", "checkout", "--image", "macos-ci-img").ok(t, "checkout").stdout)
	if out.Node != f.Node || out.Pool != "macos-ci" || out.VM.GuestOS != "macos" || out.ID != out.VM.ID || out.Reason == "" {
		t.Fatalf("checkout = %+v", out)
	}
	op.run(t, "fleet", "macos-pool", "return", out.VM.Name).refused(t, "return piped without -y", "without confirmation",
		"fluxctl fleet macos-pool return "+out.VM.Name+" -y")
	back := decode[sdk.MacOSReturn](t, "return", op.run(t, "fleet", "macos-pool", "return", out.VM.Name, "-y").ok(t, "return").stdout)
	if !back.Returned || back.ID != out.ID || back.Pool != "macos-ci" {
		t.Fatalf("return = %+v", back)
	}
	op.run(t, "fleet", "macos-pool", "return", out.ID, "-y").refused(t, "return twice", `no vm "`+out.ID+`"`, hintListVMs)

	// On a terminal: a ✓ with where it runs, and how to give it back.
	waitWarm(t, op, "macos-ci", 1)
	r := op.tty().run(t, "fleet", "macos-pool", "checkout", "--pool", "macos-ci").ok(t, "checkout on a tty")
	r.has(t, "checkout on a tty", "✓ Checked out vm pool-macos-ci-", " on "+f.Node+" from pool macos-ci\n", "  placed  ",
		"next: fluxctl fleet macos-pool return pool-macos-ci-")
	name := strings.Fields(strings.TrimPrefix(r.stdout, "✓ Checked out vm "))[0]
	op.tty().run(t, "fleet", "macos-pool", "return", name, "-y").ok(t, "return on a tty").has(t, "return on a tty",
		"✓ Returned vm "+name+" (", " to pool macos-ci: deleted; the pool boots a clean VM in its place")

	// Only a checked-out pool VM goes back.
	f.CatalogImage(t, "plain")
	op.run(t, "fleet", "launch", "plain-1", "--image", "plain").ok(t, "launch")
	op.run(t, "fleet", "macos-pool", "return", "plain-1", "-y").refused(t, "return of a plain VM", "not a macOS pool VM", "fluxctl fleet rm")
}
