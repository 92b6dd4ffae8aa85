package console_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// canvasColours counts the colours on a sample of noVNC's canvas: 1 is a
// blank frame.
const canvasColours = `(() => { const c = document.querySelector(".vnc canvas"); if (!c || !c.width) return 0;
	const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; const seen = new Set();
	for (let i = 0; i < d.length; i += 4 * 7) seen.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]); return seen.size; })()`

// canvasDigest sums the canvas' pixels, to tell that the frame changed.
const canvasDigest = `(() => { const c = document.querySelector(".vnc canvas"); const d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data;
	let h = 0; for (let i = 0; i < d.length; i += 4) h = (h * 31 + d[i] + d[i + 1] * 7 + d[i + 2] * 13) >>> 0; return h; })()`

// TestConsoleTenantLaunchesRunsSnapshotsControlsAndDeletesARealQEMUVM is a
// tenant's whole day in the console against a real central and node with
// a real QEMU guest: sign in with the tenant's token, launch a VM from the
// sheet (catalog image, suggested name), watch it become ready, run a
// command and read its output, take a snapshot, read the SSH config block,
// open Control (noVNC through a ticket) and see the guest's console text
// drawn, type a command that reaches the guest's terminal, and delete the
// VM after typing its name.
func TestConsoleTenantLaunchesRunsSnapshotsControlsAndDeletesARealQEMUVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	f := fleettest.Start(t, fleettest.WithQEMU(image.DefaultDir()))
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", nil)
	api, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	b := startBrowser(t, f.URL)
	b.signIn(token)

	// Launch from the sheet: the catalog's image is picked, the name suggested.
	b.open("/vms")
	b.click("button", "Launch VM")
	b.waitFor("the suggested name", `document.querySelector("input[name=name]")?.value === "debian-minimal-1"`, 30*time.Second)
	b.shotEverywhere("launch-sheet")
	b.click("button[type=submit]", "Launch")
	b.waitFor("the VM's sheet", `/^#\/vms\/[^/]+\/[^/]+$/.test(location.hash) && !!document.querySelector("[role=tablist]")`, 2*time.Minute)
	var hash string
	b.eval("the VM's link", `location.hash`, &hash)
	parts := strings.Split(strings.TrimPrefix(hash, "#/vms/"), "/")
	node, id := parts[0], parts[1]
	b.waitFor("the VM ready", `[...document.querySelectorAll("[role=dialog] .badge")].some(e => e.textContent === "ready")`, 4*time.Minute)
	b.shotEverywhere("vm-details-ready")

	// Run a command and read its output.
	b.click("[role=tab]", "Run")
	b.typeInto(`input[name=command]`, "echo hello-from-studio; uname -s")
	b.waitFor("the command typed", `document.querySelector("input[name=command]").value.startsWith("echo hello")`, 10*time.Second)
	b.click("button[type=submit]", "Run")
	b.waitFor("the command's output", `(document.querySelector("pre.stdout")?.textContent || "").includes("hello-from-studio")`, 2*time.Minute)
	var out string
	b.eval("read the output", `document.querySelector("pre.stdout").textContent + " exit " + document.querySelector(".exit-code").textContent`, &out)
	if !strings.Contains(out, "Linux") || !strings.HasSuffix(out, "exit 0") {
		t.Fatalf("Run showed %q, want the echo, Linux and exit 0", out)
	}
	b.shotEverywhere("vm-run")

	// Take a snapshot.
	b.click("[role=tab]", "Snapshots")
	b.typeInto(`input[name=snapshot-name]`, "before-control")
	b.click("button", "Take snapshot")
	b.waitFor("the snapshot listed", `[...document.querySelectorAll('table[aria-label="Snapshots"] td')].some(e => e.textContent === "before-control")`, 3*time.Minute)
	b.shotEverywhere("vm-snapshots")

	// The SSH config block names the VM, its host key alias and the tunnel.
	b.click("[role=tab]", "SSH")
	var block string
	b.eval("read the SSH block", `document.querySelector("pre.ssh-config").textContent`, &block)
	for _, want := range []string{"Host debian-minimal-1", "HostKeyAlias fluxvm-" + id,
		fmt.Sprintf("ProxyCommand fluxctl fleet --central %s tunnel-stdio %s/%s %%p", f.URL, node, id)} {
		if !strings.Contains(block, want) {
			t.Errorf("the SSH block lacks %q:\n%s", want, block)
		}
	}
	b.shotEverywhere("vm-ssh")

	// Screen: the node's screenshot, refreshed.
	b.click("[role=tab]", "Screen")
	b.waitFor("the screen image", `document.querySelector("img.screen")?.naturalWidth > 0`, 2*time.Minute)
	b.shotEverywhere("vm-screen")

	// Control: noVNC through a ticket shows the guest's console, and typing
	// reaches the guest. A reader on tty1 (the console has no login) takes
	// what is typed; the terminal echoes it on the screen.
	if _, err := api.Exec(context.Background(), node, id, sdk.ExecRequest{Command: sdk.Command{
		Shell: "setsid sh -c 'exec cat /dev/tty1 > /tmp/typed' </dev/null >/dev/null 2>&1 &"}}); err != nil {
		t.Fatalf("start a reader on tty1: %v", err)
	}
	b.click("[role=tab]", "Control")
	b.waitFor("noVNC connected", `(document.querySelector(".status")?.textContent || "").startsWith("Connected")`, time.Minute)
	b.waitFor("console text drawn on the canvas", canvasColours+" > 1", 2*time.Minute)
	var before float64
	b.eval("the frame before typing", canvasDigest, &before)
	b.shotEverywhere("vm-control")
	b.run("type into the screen", chromedpClick(".vnc canvas"), chromedpSleep(200*time.Millisecond), chromedpKeys("echo typed-in-studio\r"))
	var typed string
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		r, err := api.Exec(context.Background(), node, id, sdk.ExecRequest{Command: sdk.Command{Shell: "cat /tmp/typed"}})
		if err == nil && strings.Contains(r.Stdout, "echo typed-in-studio") {
			typed = r.Stdout
			break
		}
		time.Sleep(time.Second)
	}
	if typed == "" {
		b.shot("control-after-typing")
		t.Fatal("what was typed on the noVNC canvas never reached the guest's terminal")
	}
	b.waitFor("the echo drawn", canvasDigest+" !== "+fmt.Sprint(int64(before)), 30*time.Second)
	b.shotEverywhere("vm-control-typed")

	// Delete after typing the name.
	b.click("[role=tab]", "Details")
	b.click("button", "Delete debian-minimal-1")
	var disabled bool
	b.eval("the delete button before the name", `document.querySelector("button.destructive").disabled`, &disabled)
	if !disabled {
		t.Fatal("Delete is enabled before the VM's name is typed")
	}
	b.typeInto(`input[name=confirm-delete]`, "debian-minimal-1")
	b.click("button", "Delete debian-minimal-1")
	b.waitFor("back on the list", `location.hash === "#/vms"`, 2*time.Minute)
	deadline = time.Now().Add(2 * time.Minute)
	for {
		list, err := api.ListVMs(context.Background())
		if err == nil && len(list.VMs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the VM is still listed after Delete: %+v, %v", list, err)
		}
		time.Sleep(time.Second)
	}
}
