package console_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// eventually polls check (a question to central) until it says "" or the
// time is up, then fails with its last answer.
func eventually(t *testing.T, what string, d time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		if last = check(); last == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %s", what, d, last)
}

// setValue sets an input's value as typing would (Preact hears the input
// event): a number input's old value is replaced, not added to.
func (b *browser) setValue(css, value string) {
	b.t.Helper()
	b.waitFor(css, fmt.Sprintf(`!!document.querySelector(%q)`, css), 10*time.Second)
	b.eval("set "+css, fmt.Sprintf(`(() => { const el = document.querySelector(%q);
		Object.getOwnPropertyDescriptor(Object.getPrototypeOf(el), "value").set.call(el, %q);
		el.dispatchEvent(new Event(el.tagName === "SELECT" ? "change" : "input", {bubbles: true})); })()`, css, value), nil)
}

// TestConsoleTenantMakesAndDeletesANetworkClonesFromSnapshotsAndSeesMacSlots:
// on a sim node, a tenant who leases it and runs one macOS guest there sees
// ●○ on My Macs; makes a private network from the Networks page (central's
// refusal of a host name in the allowlist shown, then made with an
// allowlist central keeps), is shown central's refusal to add the sim node
// (it has no network plugin), rotates its keys, finds it in the launch
// sheet, and deletes it after typing its name; makes a VM from a snapshot
// from the Snapshots tab and lands on the new VM's sheet; creates, grows
// and deletes a volume, and creates, resizes and deletes a warm pool.
// Central is asked after each step; every new page and sheet is
// photographed and checked with axe-core.
func TestConsoleTenantMakesAndDeletesANetworkClonesFromSnapshotsAndSeesMacSlots(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	ctx := context.Background()
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.PutImage(ctx, sdk.Image{Name: "macos-15", GuestOS: "macos", Image: f.Image, VCPUs: 2, MemoryMiB: 1024}); err != nil {
		t.Fatal(err)
	}
	_, token := f.Tenant(t, "acme", map[string]int64{"max_vms": 20, "max_vcpus": 40, "max_memory_mib": 40 * 1024})
	tc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.CreateLease(ctx, sdk.CreateLeaseRequest{Node: f.Node}); err != nil {
		t.Fatalf("lease %s: %v", f.Node, err)
	}
	if _, err := tc.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "mac-1", Image: "macos-15", Node: f.Node}); err != nil {
		t.Fatalf("launch a macOS guest: %v", err)
	}
	src, err := tc.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "web-1", Image: "debian-minimal"})
	if err != nil {
		t.Fatalf("launch web-1: %v", err)
	}
	if _, err := tc.TakeSnapshot(ctx, src.Node, src.VM.ID, sdk.FleetSnapshotRequest{Name: "golden"}); err != nil {
		t.Fatalf("snapshot web-1: %v", err)
	}

	b := startBrowser(t, f.URL)
	b.signIn(token)

	// My Macs: one macOS guest on the leased Mac takes one slot of two.
	b.open("/macs")
	b.waitFor("the slot dots", `document.querySelector(".slots")?.textContent === "●○"`, 30*time.Second)
	var label string
	b.eval("the dots' label", `document.querySelector(".slots").getAttribute("aria-label")`, &label)
	if label != "1 of 2 macOS slots in use" {
		t.Errorf("the dots are labelled %q, want 1 of 2 macOS slots in use", label)
	}
	b.shotEverywhere("tenant-macs-with-slots")
	b.axe("My Macs with slots")
	// A cordoned Mac takes no VM, and central reports no slots for it.
	if _, err := op.CordonNode(ctx, f.Node); err != nil {
		t.Fatal(err)
	}
	b.open("/overview")
	b.open("/macs")
	b.waitFor("no slots for a cordoned Mac", `!document.querySelector(".slots") && document.body.innerText.includes("takes no VM now")`, 30*time.Second)
	if _, err := op.UncordonNode(ctx, f.Node); err != nil {
		t.Fatal(err)
	}

	// Networks: a host name in the allowlist is refused by central, and its
	// answer is on the sheet; an address range is taken.
	b.open("/networks")
	b.click("button", "New network")
	b.typeInto(`input[name=network-name]`, "backend")
	b.setValue(`select[name=egress-mode]`, "allowlist")
	b.typeInto(`textarea[name=egress-allow]`, "example.com")
	b.shotEverywhere("tenant-new-network")
	b.axe("new network sheet")
	b.click("button", "Create network")
	b.waitFor("central's refusal", `(document.querySelector("[role=dialog] .error")?.textContent || "").includes("example.com")`, 30*time.Second)
	if l, err := tc.ListOverlays(ctx, ""); err != nil || len(l.Overlays) != 0 {
		t.Fatalf("after a refused create central lists %+v (%v), want none", l, err)
	}
	b.shotEverywhere("tenant-new-network-refused")
	b.typeInto(`textarea[name=egress-allow]`, "192.0.2.0/24")
	b.click("button", "Create network")
	b.waitFor("the network's sheet", `location.hash === "#/networks/backend" && !!document.querySelector("[role=dialog] h2") && document.querySelector("[role=dialog] h2").textContent === "backend"`, 30*time.Second)
	o, err := tc.GetOverlay(ctx, "", "backend")
	if err != nil {
		t.Fatalf("central has no network backend after the console made it: %v", err)
	}
	if o.Egress.Mode != "allowlist" || strings.Join(o.Egress.Allow, ",") != "192.0.2.0/24" {
		t.Errorf("central keeps egress %+v, want an allowlist of 192.0.2.0/24", o.Egress)
	}
	b.waitFor("the list", `document.querySelector('table[aria-label="Networks"]')?.innerText.includes("192.0.2.0/24")`, 30*time.Second)

	// The sim node has no network plugin: central refuses it, and says why.
	b.click("button", "Add node")
	b.waitFor("the refusal to add "+f.Node, `(document.querySelector("[role=dialog] .error")?.textContent || "").includes("no network plugin")`, 30*time.Second)
	b.shotEverywhere("tenant-network-sheet")
	b.axe("network sheet")
	b.click("button", "Rotate keys")
	b.waitFor("the rotation", `(document.querySelector("[role=dialog] .done-note")?.textContent || "").includes("keys rotated")`, 30*time.Second)
	if o, err := tc.GetOverlay(ctx, "", "backend"); err != nil || o.RotatedAt == nil {
		t.Errorf("after Rotate keys central's network says rotated_at=%v (%v)", o != nil && o.RotatedAt != nil, err)
	}
	b.open("/networks")
	b.shotEverywhere("tenant-networks")
	b.axe("networks page")

	// The launch sheet offers the network, and then only its member nodes
	// (none yet).
	b.open("/vms/new")
	b.waitFor("the network picker", `[...document.querySelectorAll("select[name=network] option")].some(o => o.value === "backend")`, 30*time.Second)
	b.setValue(`select[name=network]`, "backend")
	b.waitFor("no node offered", `document.body.innerText.includes("No node of backend has room")`, 10*time.Second)
	b.shotEverywhere("tenant-launch-sheet-network")
	b.axe("launch sheet with a network")

	b.open("/networks/backend")
	b.typeInto(`input[name=confirm-delete]`, "backend")
	b.click("button", "Delete backend")
	b.waitFor("back on the list", `location.hash === "#/networks" && !document.querySelector("[role=dialog]")`, 30*time.Second)
	eventually(t, "the network gone from central", 10*time.Second, func() string {
		if l, err := tc.ListOverlays(ctx, ""); err != nil || len(l.Overlays) != 0 {
			return fmt.Sprintf("%+v (%v)", l, err)
		}
		return ""
	})

	// A new VM from web-1's snapshot golden, with the name suggested.
	b.open("/vms/" + src.Node + "/" + src.VM.ID)
	b.click("[role=tab]", "Snapshots")
	b.click("button", "New VM from this: golden")
	b.waitFor("the clone form", `!!document.querySelector("input[name=clone-name]")`, 10*time.Second)
	var suggested string
	b.eval("the suggested name", `document.querySelector("input[name=clone-name]").value`, &suggested)
	if suggested != "web-1-golden" {
		t.Errorf("the clone form suggests %q, want web-1-golden", suggested)
	}
	b.shotEverywhere("tenant-vm-sheet-clone")
	b.axe("clone form")
	b.click("button", "Create VM")
	var clone sdk.FleetVM
	eventually(t, "the clone in central", 30*time.Second, func() string {
		l, err := tc.ListVMs(ctx)
		if err != nil {
			return err.Error()
		}
		for _, v := range l.VMs {
			if v.Name == "web-1-golden" {
				clone = v
				return ""
			}
		}
		return "no VM web-1-golden"
	})
	b.waitFor("the clone's sheet", fmt.Sprintf(`location.hash === %q && document.querySelector("[role=dialog] h2")?.textContent === "web-1-golden"`, "#/vms/"+clone.Node+"/"+clone.ID), 30*time.Second)

	// Volumes: create on the node, grow while detached, delete by name.
	b.open("/volumes")
	b.click("button", "New volume")
	b.typeInto(`input[name=volume-name]`, "data")
	b.setValue(`input[name=volume-size]`, "2")
	b.setValue(`select[name=volume-node]`, f.Node)
	b.shotEverywhere("tenant-new-volume")
	b.axe("new volume sheet")
	b.click("button", "Create volume")
	b.waitFor("the volume's sheet", `location.hash === "#/volumes/data" && document.querySelector("[role=dialog] h2")?.textContent === "data"`, 30*time.Second)
	if v, err := tc.GetVolume(ctx, "data"); err != nil || v.SizeGiB != 2 || v.Node != f.Node {
		t.Fatalf("central's volume data: %+v (%v), want 2 GiB on %s", v, err, f.Node)
	}
	b.setValue(`input[name=volume-new-size]`, "1")
	b.click("button", "Resize")
	b.waitFor("central's refusal to shrink", `!!document.querySelector("[role=dialog] .error")`, 30*time.Second)
	b.setValue(`input[name=volume-new-size]`, "4")
	b.click("button", "Resize")
	b.waitFor("the resize", `(document.querySelector("[role=dialog] .done-note")?.textContent || "").includes("4 GiB")`, 30*time.Second)
	if v, err := tc.GetVolume(ctx, "data"); err != nil || v.SizeGiB != 4 {
		t.Fatalf("after Resize central's volume data is %+v (%v), want 4 GiB", v, err)
	}
	b.shotEverywhere("tenant-volume-sheet")
	b.axe("volume sheet")
	b.open("/volumes")
	b.shotEverywhere("tenant-volumes")
	b.axe("volumes page")
	b.open("/volumes/data")
	b.typeInto(`input[name=confirm-delete]`, "data")
	b.click("button", "Delete data")
	b.waitFor("back on the volumes", `location.hash === "#/volumes" && !document.querySelector("[role=dialog]")`, 30*time.Second)
	if l, err := tc.ListVolumes(ctx, ""); err != nil || len(l.Volumes) != 0 {
		t.Fatalf("after Delete central lists volumes %+v (%v)", l, err)
	}

	// Warm pools: create, resize, delete by name.
	b.open("/pools")
	b.click("button", "New pool")
	b.typeInto(`input[name=pool-name]`, "ci")
	b.setValue(`input[name=pool-size]`, "1")
	b.shotEverywhere("tenant-new-pool")
	b.axe("new pool sheet")
	b.click("button", "Create pool")
	b.waitFor("the pool's sheet", `location.hash === "#/pools/ci" && document.querySelector("[role=dialog] h2")?.textContent === "ci"`, 30*time.Second)
	if p, err := tc.GetPool(ctx, "ci", ""); err != nil || p.Size != 1 || p.Image != "debian-minimal" {
		t.Fatalf("central's pool ci: %+v (%v), want debian-minimal, size 1", p, err)
	}
	b.setValue(`input[name=pool-new-size]`, "2")
	b.setValue(`input[name=pool-new-max]`, "3")
	b.click("button", "Save size")
	b.waitFor("the new size", `(document.querySelector("[role=dialog] .done-note")?.textContent || "").includes("Size 2")`, 30*time.Second)
	if p, err := tc.GetPool(ctx, "ci", ""); err != nil || p.Size != 2 || p.MaxSize != 3 {
		t.Fatalf("after Save size central's pool ci is %+v (%v), want size 2, at most 3", p, err)
	}
	b.setValue(`input[name=pool-new-size]`, "101")
	b.click("button", "Save size")
	b.waitFor("central's refusal of 101", `!!document.querySelector("[role=dialog] .error")`, 30*time.Second)
	b.shotEverywhere("tenant-pool-sheet")
	b.axe("pool sheet")
	b.open("/pools")
	b.shotEverywhere("tenant-pools")
	b.axe("pools page")
	b.open("/pools/ci")
	b.typeInto(`input[name=confirm-delete]`, "ci")
	b.click("button", "Delete ci")
	b.waitFor("back on the pools", `location.hash === "#/pools" && !document.querySelector("[role=dialog]")`, 30*time.Second)
	eventually(t, "the pool gone or going", 30*time.Second, func() string {
		p, err := tc.GetPool(ctx, "ci", "")
		if sdk.IsNotFound(err) || (err == nil && p.Deleting) {
			return ""
		}
		return fmt.Sprintf("%+v (%v)", p, err)
	})
}

// TestConsoleTenantJoinsANodeToANetworkLaunchesIntoItAndTakesItOut: the
// node runs a real netns network plugin (in a network namespace of its
// own, with an overlay address), so the Networks page's node controls do
// their real work: the tenant adds the node to a new network (central then
// lists it as a member with its /28 and key), rotates the keys with a
// member, launches a VM into the network from the launch sheet (the sheet
// offers the member node; central puts the VM in the network, with an
// address of the node's part), is shown central's refusal to take the node
// out while the VM runs there, and after the VM is gone takes it out and
// deletes the network. Needs root (make test runs as root, as the netns
// plugin's own tests do) and unshare(1).
func TestConsoleTenantJoinsANodeToANetworkLaunchesIntoItAndTakesItOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the netns network plugin needs root")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("no unshare(1) for the netns plugin's network namespace: apt-get install util-linux")
	}
	f := fleettest.Start(t, fleettest.WithNetnsPlugin(`overlay_address = "192.0.2.1"`))
	f.CatalogImage(t, "debian-minimal")
	ctx := context.Background()
	_, token := f.Tenant(t, "acme", map[string]int64{"max_vms": 10})
	tc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happens, no overlay (and its WireGuard process) outlives the
	// test: this runs before the fleet stops.
	t.Cleanup(func() {
		if l, err := tc.ListVMs(context.Background()); err == nil {
			for _, v := range l.VMs {
				_ = tc.DeleteVM(context.Background(), v.Node, v.ID)
			}
		}
		if l, err := tc.ListOverlays(context.Background(), ""); err == nil {
			for _, o := range l.Overlays {
				_ = tc.DeleteOverlay(context.Background(), "", o.Name)
			}
		}
	})

	b := startBrowser(t, f.URL)
	b.signIn(token)
	b.open("/networks/new")
	b.typeInto(`input[name=network-name]`, "backend")
	b.click("button", "Create network")
	b.waitFor("the network's sheet", `location.hash === "#/networks/backend" && document.querySelector("[role=dialog] h2")?.textContent === "backend"`, 30*time.Second)

	b.setValue(`select[name=add-node]`, f.Node)
	b.click("button", "Add node")
	b.waitFor(f.Node+" a member", fmt.Sprintf(`!!document.querySelector('button[aria-label="Remove %s from backend"]')`, f.Node), time.Minute)
	o, err := tc.GetOverlay(ctx, "", "backend")
	if err != nil || len(o.Members) != 1 || o.Members[0].Node != f.Node || o.Members[0].PublicKey == "" || o.Members[0].Endpoint == "" {
		t.Fatalf("after Add node central's network is %+v (%v), want %s a member with a key and an endpoint", o, err, f.Node)
	}
	part := o.Members[0].Subnet
	b.click("button", "Rotate keys")
	b.waitFor("the rotation", `(document.querySelector("[role=dialog] .done-note")?.textContent || "").includes("keys rotated")`, time.Minute)
	if r, err := tc.GetOverlay(ctx, "", "backend"); err != nil || r.RotatedAt == nil || r.Members[0].PublicKey == o.Members[0].PublicKey {
		t.Errorf("after Rotate keys central's member key is %q (was %q), rotated_at %v (%v)", r.Members[0].PublicKey, o.Members[0].PublicKey, r.RotatedAt, err)
	}
	b.shotEverywhere("tenant-network-sheet-with-a-member")
	b.axe("network sheet with a member")

	// Launch into it: the sheet offers the member node and names it.
	b.open("/vms/new")
	b.waitFor("the catalog", `!!document.querySelector('input[name=image]:checked')`, 30*time.Second)
	b.setValue(`select[name=network]`, "backend")
	b.waitFor("the member node chosen", fmt.Sprintf(`document.querySelector("select[name=node]")?.value === %q`, f.Node), 10*time.Second)
	b.click("button", "Launch")
	var vm sdk.FleetVM
	eventually(t, "the VM in the network", time.Minute, func() string {
		l, err := tc.ListVMs(ctx)
		if err != nil || len(l.VMs) != 1 {
			return fmt.Sprintf("%v (%v)", l, err)
		}
		vm = l.VMs[0]
		p, perr := netip.ParsePrefix(part)
		a, aerr := netip.ParsePrefix(vm.Address)
		if vm.Network != "tenant" || perr != nil || aerr != nil || !p.Contains(a.Addr()) {
			return fmt.Sprintf("VM %s has network %q, address %q; want tenant, in %s", vm.Name, vm.Network, vm.Address, part)
		}
		return ""
	})
	b.waitFor("the new VM's sheet", fmt.Sprintf(`location.hash === %q`, "#/vms/"+vm.Node+"/"+vm.ID), 30*time.Second)

	// Central will not take the node out while the VM runs there.
	b.open("/networks/backend")
	b.click("button", "Remove "+f.Node+" from backend")
	b.waitFor("the refusal", `!!document.querySelector("[role=dialog] .error")`, time.Minute)
	b.shotEverywhere("tenant-network-sheet-remove-refused")
	if err := tc.DeleteVM(ctx, vm.Node, vm.ID); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the VM gone", time.Minute, func() string {
		if l, err := tc.ListVMs(ctx); err != nil || len(l.VMs) != 0 {
			return fmt.Sprintf("%v (%v)", l, err)
		}
		return ""
	})
	b.click("button", "Remove "+f.Node+" from backend")
	b.waitFor(f.Node+" out", `(document.querySelector("[role=dialog] .done-note")?.textContent || "").includes("left")`, time.Minute)
	if o, err := tc.GetOverlay(ctx, "", "backend"); err != nil || len(o.Members) != 0 {
		t.Fatalf("after Remove central's network is %+v (%v), want no members", o, err)
	}
	b.typeInto(`input[name=confirm-delete]`, "backend")
	b.click("button", "Delete backend")
	b.waitFor("back on the list", `location.hash === "#/networks" && !document.querySelector("[role=dialog]")`, time.Minute)
	if l, err := tc.ListOverlays(ctx, ""); err != nil || len(l.Overlays) != 0 {
		t.Fatalf("after Delete central lists %+v (%v)", l, err)
	}
}

// TestConsoleOperatorMakesASharedWarmPoolThatTenantsSeeButDoNotChange:
// the operator makes a pool from the Warm pools page (a shared pool,
// central says), resizes it from its sheet; a tenant's admin sees it listed
// as shared, and its sheet offers no control to change it (central would
// refuse with 403).
func TestConsoleOperatorMakesASharedWarmPoolThatTenantsSeeButDoNotChange(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	ctx := context.Background()
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	_, token := f.Tenant(t, "acme", nil)
	pol, err := op.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pol.AllowSharedPoolClaims = true // tenants see (and claim from) shared pools
	if _, err := op.PutPolicy(ctx, *pol); err != nil {
		t.Fatal(err)
	}

	b := startBrowser(t, f.URL)
	b.signIn(f.OperatorToken)
	b.open("/pools/new")
	b.typeInto(`input[name=pool-name]`, "shared-ci")
	b.setValue(`input[name=pool-size]`, "1")
	b.shotEverywhere("operator-new-pool")
	b.axe("operator new pool sheet")
	b.click("button", "Create pool")
	b.waitFor("the pool's sheet", `location.hash === "#/pools/shared-ci" && document.querySelector("[role=dialog] h2")?.textContent === "shared-ci"`, 30*time.Second)
	if p, err := op.GetPool(ctx, "shared-ci", ""); err != nil || !p.Shared || p.Size != 1 {
		t.Fatalf("central's pool shared-ci: %+v (%v), want a shared pool of 1", p, err)
	}
	b.setValue(`input[name=pool-new-size]`, "0")
	b.click("button", "Save size")
	b.waitFor("the new size", `(document.querySelector("[role=dialog] .done-note")?.textContent || "").includes("Size 0")`, 30*time.Second)
	if p, err := op.GetPool(ctx, "shared-ci", ""); err != nil || p.Size != 0 {
		t.Fatalf("after Save size central's pool is %+v (%v), want size 0", p, err)
	}
	b.shotEverywhere("operator-pool-sheet")
	b.axe("operator pool sheet")

	t2 := startBrowser(t, f.URL)
	t2.signIn(token)
	t2.open("/pools")
	t2.waitFor("the shared pool listed", `document.querySelector('table[aria-label="Warm pools"]')?.innerText.includes("shared-ci")`, 30*time.Second)
	t2.open("/pools/shared-ci")
	t2.waitFor("its sheet", `document.querySelector("[role=dialog] h2")?.textContent === "shared-ci"`, 30*time.Second)
	var controls []string
	t2.eval("change controls", `[...document.querySelectorAll("[role=dialog] form, [role=dialog] button.destructive, input[name=confirm-delete]")].map(e => e.tagName + " " + (e.getAttribute("name") || e.textContent.trim()))`, &controls)
	if len(controls) > 0 {
		t.Errorf("a tenant's admin is offered changes to the operator's shared pool: %v", controls)
	}
	t2.shotEverywhere("tenant-shared-pool-sheet")
	t2.axe("tenant's view of a shared pool")
}
