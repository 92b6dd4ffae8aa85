package main

import (
	"bytes"
	"image/png"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// pngWidth decodes a whole PNG and returns its width.
func pngWidth(t *testing.T, what string, b []byte) int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s is not a PNG: %v", what, err)
	}
	return img.Bounds().Dx()
}

func TestFleetScreenSavesAPNGAndRefusesWhatItCannotShow(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	tenant := fleetCLI(f, token)
	shown := decode[sdk.FleetCreateVMResponse](t, "launch --display",
		tenant.run(t, "fleet", "launch", "shown", "--image", "debian-minimal", "--display", "--wait").ok(t, "launch with a display").stdout)
	tenant.run(t, "fleet", "launch", "dark", "--image", "debian-minimal", "--wait").ok(t, "launch without a display")
	t.Chdir(t.TempDir())

	// On a terminal, by ID prefix: saved as VM-NAME.png, with its size.
	r := tenant.tty().run(t, "fleet", "screen", shown.VM.ID[:8]).ok(t, "screen on a terminal")
	if !regexp.MustCompile(`^✓ Saved the screen of vm shown to shown\.png \(\d+×\d+, \d+ KiB\)\n$`).MatchString(r.stdout) {
		t.Fatalf("screen on a terminal printed %q", r.stdout)
	}
	full, err := os.ReadFile("shown.png")
	if err != nil {
		t.Fatal(err)
	}
	if w := pngWidth(t, "shown.png", full); w <= 320 {
		t.Fatalf("the full screen is %d pixels wide; the test needs one wider than 320", w)
	}

	// Piped: -f FILE --max-width bounds the picture and prints nothing.
	r = tenant.run(t, "fleet", "screen", "shown", "-f", "small.png", "--max-width", "320").ok(t, "screen -f --max-width")
	small, err := os.ReadFile("small.png")
	if err != nil {
		t.Fatal(err)
	}
	if w := pngWidth(t, "small.png", small); w < 1 || w > 320 || r.stdout != "" {
		t.Fatalf("screen --max-width 320: %d pixels wide, stdout %q", w, r.stdout)
	}
	// -f - writes the PNG itself to a pipe, and refuses a terminal.
	r = tenant.run(t, "fleet", "screen", f.Node+"/shown", "-f", "-").ok(t, "screen -f - piped")
	pngWidth(t, "the PNG of screen -f -", []byte(r.stdout))
	r = tenant.tty().run(t, "fleet", "screen", "shown", "-f", "-")
	r.refused(t, "screen -f - on a terminal", "not writing a PNG to the terminal", "-f FILE.png")
	if r.stdout != "" {
		t.Fatalf("screen -f - on a terminal wrote %d bytes to it", len(r.stdout))
	}

	// Central's refusal for a VM without a display, with fluxctl's hint.
	tenant.run(t, "fleet", "screen", "dark").refused(t, "screen without a display", "without a display", "vm dark has no display")
	if _, err := os.Stat("dark.png"); !os.IsNotExist(err) {
		t.Fatalf("a refused screen left dark.png behind: %v", err)
	}
	tenant.run(t, "fleet", "screen", "nope").refused(t, "screen of an unknown VM", `no vm "nope"`, hintListVMs)
	tenant.run(t, "fleet", "screen", "shown", "--max-width", "-1").refused(t, "negative --max-width", "must not be negative", "usage: fluxctl fleet screen")

	comp := tenant.run(t, "__complete", "fleet", "screen", "sh").ok(t, "complete")
	if !strings.Contains(comp.stdout, "shown\t") || strings.Contains(comp.stdout, "dark") {
		t.Fatalf("completion of fleet screen sh: %q", comp.stdout)
	}
}

// waitWarm polls pools status -o json until the pool has at least n warm
// VMs: central runs as a real process here, so its leader's pool loop
// boots them.
func waitWarm(t *testing.T, c cli, pool string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := decode[sdk.PoolStatus](t, "pools status", c.run(t, "fleet", "pools", "status", pool, "-o", "json").ok(t, "pools status").stdout)
		if st.Warm >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool %s never had %d warm VMs: %+v", pool, n, st)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestFleetPoolsResizeAndLaunchWarmFromAPool(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	_, otherToken := f.Tenant(t, "bystander", nil)
	op, tenant, other := fleetCLI(f, f.OperatorToken), fleetCLI(f, token), fleetCLI(f, otherToken)
	tenant.run(t, "fleet", "pools", "create", "ci", "--image", "debian-minimal", "--size", "1").ok(t, "pools create")

	// Resize on a terminal: the new size and the next command.
	tenant.tty().run(t, "fleet", "pools", "resize", "ci", "--size", "2").ok(t, "pools resize").has(t, "pools resize",
		"✓ Resized pool ci: keeps 2 warm, up to 2\n", "next: fluxctl fleet pools status ci\n")
	p := decode[sdk.Pool](t, "pools get", tenant.run(t, "fleet", "pools", "get", "ci", "-o", "json").ok(t, "pools get").stdout)
	if p.Size != 2 || p.MaxSize != 2 {
		t.Fatalf("pool after resize --size 2: %+v", p)
	}
	// The operator names the tenant's pool; piped, the answer is the pool.
	p = decode[sdk.Pool](t, "operator's resize", op.run(t, "fleet", "pools", "resize", "ci", "--tenant", "acme", "--max-size", "4").ok(t, "operator's resize").stdout)
	if p.Size != 2 || p.MaxSize != 4 {
		t.Fatalf("pool after the operator's resize --max-size 4: %+v", p)
	}
	op.tty().run(t, "fleet", "pools", "resize", "ci", "--tenant", "acme", "--size", "2").ok(t, "operator's resize on a terminal").has(t,
		"operator's resize on a terminal", "next: fluxctl fleet pools status ci --tenant acme")
	other.run(t, "fleet", "pools", "resize", "ci", "--size", "9").refused(t, "resize of another tenant's pool", "no pool ci", hintPools)
	tenant.run(t, "fleet", "pools", "resize", "ci").refused(t, "resize without a size", "needs --size", "usage: fluxctl fleet pools resize")
	if p := decode[sdk.Pool](t, "pools get", tenant.run(t, "fleet", "pools", "get", "ci").ok(t, "pools get").stdout); p.Size != 2 || p.MaxSize != 4 {
		t.Fatalf("refused resizes changed the pool: %+v", p)
	}

	// Launch from the pool once two VMs are warm: on a terminal it says so,
	// piped the answer names the pool, and the VM is the tenant's.
	waitWarm(t, tenant, "ci", 2)
	r := tenant.tty().run(t, "fleet", "launch", "--pool", "ci").ok(t, "launch --pool on a terminal")
	r.has(t, "launch --pool on a terminal", "✓ Launched pool-ci-", " on "+f.Node+" warm from pool ci (", "guest agent ready)", "next: fluxctl fleet logs pool-ci-")
	resp := decode[sdk.FleetCreateVMResponse](t, "launch --pool", tenant.run(t, "fleet", "launch", "job-8", "--pool", "ci").ok(t, "launch --pool").stdout)
	if resp.FromPool != "ci" || !strings.HasPrefix(resp.VM.Name, "pool-ci-") || !resp.VM.AgentReady {
		t.Fatalf("launch --pool answered %+v", resp)
	}
	list := decode[sdk.FleetVMList](t, "vms", tenant.run(t, "fleet", "vms", "-o", "json").ok(t, "vms -o json").stdout)
	var mine []string
	for _, v := range list.VMs {
		mine = append(mine, v.ID)
		if v.ID == resp.VM.ID && v.Labels["fluxvm.dev/pool"] != "ci" {
			t.Fatalf("the pool's VM lacks its pool label: %+v", v)
		}
	}
	if !strings.Contains(strings.Join(mine, " "), resp.VM.ID) {
		t.Fatalf("vms -o json does not list the VM taken from the pool (%s): %v", resp.VM.ID, mine)
	}
	// A name given to a warm launch is not used, and the output says so.
	waitWarm(t, tenant, "ci", 1)
	tenant.tty().run(t, "fleet", "launch", "job-9", "--pool", "ci").ok(t, "named launch --pool").has(t, "named launch --pool",
		"warm from pool ci", "job-9 was not used")

	tenant.run(t, "fleet", "launch", "--pool", "ci", "--ttl", "1h", "--label", "a=b").refused(t, "launch --pool --ttl",
		"cannot honour --ttl, --label", "drop --ttl, --label, or drop --pool")
	tenant.run(t, "fleet", "launch", "--pool", "nope").refused(t, "launch from an unknown pool", "no pool nope", hintPools)
	other.run(t, "fleet", "launch", "--pool", "ci").refused(t, "launch from another tenant's pool", "no pool ci", hintPools)

	// A shared pool a tenant may launch from is still not its to resize.
	opc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	pol, err := opc.GetPolicy(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pol.AllowSharedPoolClaims = true
	if _, err := opc.PutPolicy(t.Context(), *pol); err != nil {
		t.Fatal(err)
	}
	op.run(t, "fleet", "pools", "create", "shared", "--image", "debian-minimal", "--size", "0").ok(t, "shared pool create")
	tenant.run(t, "fleet", "pools", "resize", "shared", "--size", "1").refused(t, "a tenant resizing a shared pool",
		"is a shared pool of the operator", "fluxctl fleet pools create NAME")
	tenant.run(t, "fleet", "pools", "resize", "ci", "--size", "101").refused(t, "resize beyond 100", `"size" must be from 0 to 100`, "go from 0 to 100")
}
