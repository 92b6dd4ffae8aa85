package main

import (
	"os/exec"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// fleetCLI is fluxctl pointed at a fleet's central through the
// environment, with token as FLUXVM_AGENT_TOKEN.
func fleetCLI(f *fleettest.Fleet, token string) cli {
	return cli{env: map[string]string{envCentral: f.URL, envFleetToken: token}}
}

// tty is c with every stream a terminal, as a person at a shell has.
func (c cli) tty() cli {
	c.stdinTTY, c.stdoutTTY, c.stderrTTY = true, true, true
	return c
}

func (r result) has(t *testing.T, what string, want ...string) result {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Fatalf("%s: stdout lacks %q:\n%s", what, w, r.stdout)
		}
	}
	return r
}

func TestFleetCommandsRunATenantsVMsAgainstARealCentral(t *testing.T) {
	// On TCP: fleet nodes -o wide shows the URL the node advertises.
	f := fleettest.Start(t, fleettest.WithNodeOnTCP())
	op := fleetCLI(f, f.OperatorToken)

	// The operator sets up a tenant and a catalog image.
	created := decode[sdk.TenantWithToken](t, "tenant create",
		op.run(t, "fleet", "tenant", "create", "acme", "--max-vms", "2", "--max-memory-gib", "4").ok(t, "tenant create").stdout)
	if !strings.HasPrefix(created.Token, "fvt_") || created.Tenant.Quota.MaxVMs != 2 || created.Tenant.Quota.MaxMemoryMiB != 4096 {
		t.Fatalf("tenant create printed %+v", created)
	}
	op.run(t, "fleet", "images", "add", "debian-minimal", "--image", f.Image, "--vcpus", "1", "--memory-mib", "256").ok(t, "images add")
	// The table names tenants; -o wide adds their IDs.
	op.tty().run(t, "fleet", "tenant", "list").ok(t, "tenant list").has(t, "tenant list", "NAME", "acme", "2 VMs, 4 GiB")
	op.tty().run(t, "fleet", "tenant", "list", "-o", "wide").ok(t, "tenant list -o wide").has(t, "tenant list -o wide", "NAME", "acme", created.Tenant.ID, "2 VMs, 4 GiB")
	op.tty().run(t, "fleet", "images", "-o", "wide").ok(t, "images").has(t, "images -o wide", "debian-minimal", "linux", "256 MiB", f.Image,
		"next: fluxctl fleet launch --image debian-minimal")

	tenant := fleetCLI(f, created.Token)
	// Piped, launch prints the API's answer; without a name it suggests
	// one from the image.
	launched := decode[sdk.FleetCreateVMResponse](t, "launch",
		tenant.run(t, "fleet", "launch", "--image", "debian-minimal", "--ttl", "8h", "--label", "job=7", "--wait").ok(t, "launch").stdout)
	if launched.VM.Name != "debian-minimal-1" || launched.Node != f.Node || !launched.VM.AgentReady || launched.Placement.Reason == "" ||
		launched.VM.Labels["job"] != "7" || launched.VM.ExpiresAt == nil {
		t.Fatalf("launch printed %+v", launched)
	}
	list := decode[sdk.FleetVMList](t, "vms", tenant.run(t, "fleet", "vms", "-o", "json").ok(t, "vms -o json").stdout)
	if len(list.VMs) != 1 || list.VMs[0].ID != launched.VM.ID || list.VMs[0].Node != f.Node {
		t.Fatalf("vms -o json = %+v", list)
	}

	// On a terminal: a ✓, where it landed and why, and the next command
	// (logs: the simulator cannot run commands). The name skips -1.
	r := tenant.tty().run(t, "fleet", "launch", "--image", "debian-minimal", "--memory-gib", "0.5").ok(t, "launch on a tty")
	r.has(t, "launch on a tty", "✓ Launched debian-minimal-2 on node-1 (debian-minimal, 1 vCPU, 512 MiB)", "placed  ",
		"next: fluxctl fleet logs debian-minimal-2")
	tenant.tty().run(t, "fleet", "status").ok(t, "status").has(t, "tenant status", "Tenant acme", "VMs     ████████████████  2 of 2",
		"768 MiB of 4 GiB", "debian-minimal-1", "debian-minimal-2", "next: fluxctl fleet rm VM",
		"This month ("+time.Now().UTC().Format("2006-01")+"): 0.00 USD; fluxctl fleet bill has the details")
	st := decode[tenantStatus](t, "status", tenant.run(t, "fleet", "status").ok(t, "status piped").stdout)
	if st.Me == nil || st.Me.Usage.Total.VMs != 2 || st.VMs == nil || len(st.VMs.VMs) != 2 {
		t.Fatalf("status piped = %+v", st)
	}
	tenant.tty().run(t, "fleet", "vms", "-o", "wide").ok(t, "vms -o wide").has(t, "vms -o wide", "NAME", "STATE", "NODE", launched.VM.ID, "job=7")
	tenant.tty().run(t, "fleet", "tenant", "me").ok(t, "tenant me").has(t, "tenant me", "acme", "BEING CREATED", "Snapshots per VM")

	// Names and IDs complete from the API.
	comp := tenant.run(t, "__complete", "fleet", "rm", "debian").ok(t, "complete")
	if !strings.Contains(comp.stdout, "debian-minimal-1\t") || !strings.Contains(comp.stdout, "debian-minimal-2\t") {
		t.Fatalf("completion of fleet rm: %q", comp.stdout)
	}
	comp = tenant.run(t, "__complete", "fleet", "launch", "--image", "")
	if !strings.Contains(comp.stdout, "debian-minimal") {
		t.Fatalf("completion of --image: %q", comp.stdout)
	}

	// Power, found by name, ID prefix and NODE/NAME: the API's FleetVM.
	for _, step := range []struct{ verb, ref, state string }{
		{"pause", "debian-minimal-1", sdk.StatePaused}, {"resume", launched.VM.ID[:8], sdk.StateRunning},
		{"stop", f.Node + "/debian-minimal-1", sdk.StateStopped}, {"start", "debian-minimal-1", sdk.StateRunning},
		{"restart", "debian-minimal-1", sdk.StateRunning},
	} {
		v := decode[sdk.FleetVM](t, step.verb, tenant.run(t, "fleet", step.verb, step.ref).ok(t, step.verb).stdout)
		if v.State != step.state || v.ID != launched.VM.ID {
			t.Fatalf("%s: %+v, want state %s", step.verb, v, step.state)
		}
	}
	tenant.tty().run(t, "fleet", "pause", "debian-minimal-1").ok(t, "pause on a tty").has(t, "pause on a tty",
		"✓ Paused vm debian-minimal-1 on node-1 (paused)", "next: fluxctl fleet resume debian-minimal-1")
	tenant.run(t, "fleet", "resume", "debian-minimal-1").ok(t, "resume")
	logs := tenant.run(t, "fleet", "logs", "debian-minimal-1", "--lines", "2").ok(t, "logs")
	if strings.Count(logs.stdout, "\n") != 2 {
		t.Fatalf("logs --lines 2 printed:\n%s", logs.stdout)
	}

	// The simulator cannot run commands: the node's 501 with a hint, exit 1.
	tenant.run(t, "fleet", "run", "debian-minimal-1", "--", "uname", "-a").refused(t, "run on sim", "cannot run commands",
		"fluxctl fleet logs debian-minimal-1")
	// "vm-" starts every VM ID: the error lists both.
	tenant.run(t, "fleet", "run", "vm-", "--", "true").refused(t, "ambiguous prefix", `"vm-" matches 2 VMs`, f.Node+"/"+launched.VM.ID)

	// The operator's view: fleet health, nodes, capacity, events, reconcile.
	op.tty().run(t, "fleet", "status").ok(t, "operator status").has(t, "operator status", "Fleet  "+f.URL, "Nodes   1 up",
		"VMs     2 (2 running)", "Nothing needs attention.", "next: fluxctl fleet vms")
	op.tty().run(t, "fleet", "nodes", "-o", "wide").ok(t, "nodes").has(t, "nodes -o wide", "node-1", "up", f.NodeURL, "sim*")
	// The node's record has its VMs from its next heartbeat (every second).
	deadline := time.Now().Add(10 * time.Second)
	for r := op.tty().run(t, "fleet", "node", f.Node).ok(t, "node"); !strings.Contains(r.stdout, "debian-minimal-1"); {
		if time.Now().After(deadline) {
			t.Fatalf("fleet node never showed the VMs:\n%s", r.stdout)
		}
		time.Sleep(200 * time.Millisecond)
		r = op.tty().run(t, "fleet", "node", f.Node).ok(t, "node")
		r.has(t, "node", "last heartbeat", "drivers         sim*")
	}
	op.tty().run(t, "fleet", "capacity").ok(t, "capacity").has(t, "capacity", "NODE", "node-1", "largest Linux VM now")
	evs := decode[sdk.EventList](t, "events", tenant.run(t, "fleet", "activity", "--limit", "3").ok(t, "activity").stdout)
	if len(evs.Events) != 3 || evs.Events[0].Tenant != created.Tenant.ID {
		t.Fatalf("events --limit 3 = %+v", evs)
	}
	// For people: names and actions in words, each row within 80 columns.
	act := op.tty().run(t, "fleet", "activity").ok(t, "activity")
	act.has(t, "activity", "WHO", "ACTION", "RESULT", "launch vm debian-minimal-1", "create tenant ")
	for _, line := range strings.Split(strings.TrimSpace(act.stdout), "\n") {
		if n := utf8.RuneCountInString(line); n > 80 || strings.Contains(line, created.Tenant.ID) || strings.Contains(line, "/fleet/") {
			t.Errorf("an activity row of %d columns, or with an id or a path in it:\n%s", n, line)
		}
	}
	op.tty().run(t, "fleet", "reconcile").ok(t, "reconcile").has(t, "reconcile", "✓ Reconciled in", "1 nodes checked")

	// Piped, rm needs -y; with it the VMs go.
	tenant.run(t, "fleet", "rm", "debian-minimal-1").refused(t, "rm without -y", "without confirmation", "fluxctl fleet rm debian-minimal-1 -y")
	// On a terminal it asks: no keeps the VM, yes deletes it.
	asked := tenant.tty()
	asked.stdin = "n\n"
	// (A terminal echoes the answer; here the error follows the question.)
	if r := asked.run(t, "fleet", "rm", "debian-minimal-1"); r.code != 1 || !strings.Contains(r.stderr, "[y/N] error: nothing done\nhint: ") {
		t.Fatalf("rm answered no: exit %d, stderr %q", r.code, r.stderr)
	}
	asked.stdin = "y\n"
	r = asked.run(t, "fleet", "rm", "debian-minimal-1").ok(t, "rm answered yes")
	if !strings.Contains(r.stderr, "delete vm debian-minimal-1 ("+launched.VM.ID) || !strings.Contains(r.stdout, "✓ Deleted vm debian-minimal-1") {
		t.Fatalf("rm on a tty: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := tenant.run(t, "fleet", "rm", "debian-minimal-2", "-y").ok(t, "rm -y"); r.stdout != "" {
		t.Fatalf("rm -y piped printed %q", r.stdout)
	}
	if list := decode[sdk.FleetVMList](t, "vms", tenant.run(t, "fleet", "vms").ok(t, "vms").stdout); len(list.VMs) != 0 {
		t.Fatalf("after rm: %+v", list.VMs)
	}

	// Tenant housekeeping by the operator.
	upd := decode[sdk.Tenant](t, "tenant update", op.run(t, "fleet", "tenant", "update", "acme", "--max-vms", "none", "--disable").ok(t, "update").stdout)
	if upd.Quota.MaxVMs != 0 || !upd.Disabled || upd.Quota.MaxMemoryMiB != 4096 {
		t.Fatalf("tenant update = %+v", upd)
	}
	rot := op.tty().run(t, "fleet", "tenant", "rotate-token", "acme", "-y").ok(t, "rotate-token")
	rot.has(t, "rotate-token", "token  fvt_", "Store this token now")
	if strings.Contains(rot.stdout, created.Token) {
		t.Fatal("rotate-token printed the old token")
	}
	op.run(t, "fleet", "tenant", "delete", "acme", "-y").ok(t, "tenant delete")
	op.run(t, "fleet", "tenant", "get", "acme").refused(t, "get a deleted tenant", "no tenant acme", "fluxctl fleet tenant list")
	op.run(t, "fleet", "images", "remove", "debian-minimal", "-y").ok(t, "images remove")
}

func TestFleetRefusalsSayWhatToDo(t *testing.T) {
	// On TCP: one refusal is --central pointed at the node's URL.
	f := fleettest.Start(t, fleettest.WithNodeSize(4, 8192), fleettest.WithNodeOnTCP())
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "small", map[string]int64{"max_vms": 1})
	tenant := fleetCLI(f, token)
	tenant.run(t, "fleet", "launch", "web-1", "--image", "debian-minimal").ok(t, "launch")
	// Names are per tenant: the operator's own VM is what its next launch collides with.
	fleetCLI(f, f.OperatorToken).run(t, "fleet", "launch", "op-1", "--image", "debian-minimal").ok(t, "launch")

	for _, c := range []struct {
		what      string
		cli       cli
		args      []string
		msg, hint string
	}{
		{"401 without a token", fleetCLI(f, ""), []string{"fleet", "vms"},
			"", "pass --token TOKEN or set FLUXVM_AGENT_TOKEN"},
		{"401 with an unknown token", fleetCLI(f, "fvt_nope"), []string{"fleet", "vms"},
			"invalid token", "check --token or FLUXVM_AGENT_TOKEN"},
		{"403 a tenant listing nodes", tenant, []string{"fleet", "nodes"},
			"this route is for the operator", "this command is for the operator"},
		{"404 an unknown VM", tenant, []string{"fleet", "rm", "nope", "-y"},
			`no vm "nope"`, "fluxctl fleet vms lists your VMs"},
		{"404 an unknown node", fleetCLI(f, f.OperatorToken), []string{"fleet", "node", "nope"},
			"no node nope", "fluxctl fleet nodes"},
		{"409 a name in use", fleetCLI(f, f.OperatorToken), []string{"fleet", "launch", "op-1", "--image", "debian-minimal"},
			"already exists", "pick another name"},
		{"409 no node fits", fleetCLI(f, f.OperatorToken), []string{"fleet", "launch", "--image", "debian-minimal", "--vcpus", "64"},
			"", "fluxctl fleet capacity"},
		{"429 over the quota", tenant, []string{"fleet", "launch", "--image", "debian-minimal"},
			"quota max_vms exceeded", "fluxctl fleet tenant me"},
		{"400 an unknown image", tenant, []string{"fleet", "launch", "--image", "nope"},
			`no image "nope"`, "fluxctl fleet images"},
		{"the operator is no tenant", fleetCLI(f, f.OperatorToken), []string{"fleet", "tenant", "me"},
			"the operator is not a tenant", "pass a tenant's fvt_ token"},
		{"central unreachable", tenant, []string{"fleet", "status", "--central", "127.0.0.1:1"},
			"central at http://127.0.0.1:1 is unreachable", "point --central (or CENTRAL_URL) at it"},
		{"no --image", tenant, []string{"fleet", "launch"},
			"needs --image", "usage: fluxctl fleet launch"},
		{"central URL at a node agent", tenant, []string{"fleet", "status", "--central", f.NodeURL},
			f.NodeURL + " is a node agent, not central", "central, which listens on :7799"},
		{"a token with a line break", fleetCLI(f, token+"\nsecond line"), []string{"fleet", "vms"},
			"the token has a line break in it (after 47 characters)", "a token is one line: check --token or FLUXVM_AGENT_TOKEN"},
	} {
		c.cli.run(t, c.args...).refused(t, c.what, c.msg, c.hint)
	}
	// Each 409 of a launch gets the hint of its own cause.
	if r := fleetCLI(f, f.OperatorToken).run(t, "fleet", "launch", "--image", "debian-minimal", "--vcpus", "64"); strings.Contains(r.stderr, "name") {
		t.Errorf("a launch no node fits is told about names:\n%s", r.stderr)
	}
	// The token flag wins over the environment.
	fleetCLI(f, "").run(t, "fleet", "vms", "--token", token).ok(t, "--token")
}

// TestFleetRunInAQEMUGuest runs a real guest through central: fluxctl
// prints the command's output and exits with its code.
func TestFleetRunInAQEMUGuest(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	f := fleettest.Start(t, fleettest.WithQEMU(image.DefaultDir()))
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "qemu", nil)
	tenant := fleetCLI(f, token)
	tenant.run(t, "fleet", "launch", "--image", "debian-minimal", "--wait", "--wait-timeout", "3m").ok(t, "launch --wait")
	r := tenant.run(t, "fleet", "run", "debian-minimal-1", "--", "uname", "-a").ok(t, "run uname -a")
	if !strings.Contains(r.stdout, "Linux") {
		t.Fatalf("uname -a printed %q", r.stdout)
	}
	r = tenant.run(t, "fleet", "run", "debian-minimal-1", "--", "sh", "-c", "echo oops >&2; exit 3")
	if r.code != 3 || !strings.Contains(r.stderr, "oops") {
		t.Fatalf("a failing command: exit %d, stderr %q; want 3 and its stderr", r.code, r.stderr)
	}
	tenant.run(t, "fleet", "rm", "debian-minimal-1", "-y").ok(t, "rm -y")
}
