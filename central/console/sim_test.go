package console_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

var operatorPages = []string{"/overview", "/vms", "/nodes", "/tenants", "/volumes", "/pools", "/tunnels", "/images",
	"/usage", "/billing", "/prices", "/activity", "/notifications", "/policy"}

var tenantPages = []string{"/overview", "/vms", "/macs", "/networks", "/volumes", "/pools", "/tunnels", "/images",
	"/usage", "/billing", "/activity", "/notifications", "/keys", "/members"}

// TestConsoleOperatorCordonsANodeAndCreatesATenantShownOnce: signed in
// with the fleet token, the operator cordons the node from the Nodes page
// (central then reports it cordoned) and creates a tenant whose token the
// page shows once, works, and is gone after it is dismissed. Every
// operator page is photographed and checked with axe-core on the way.
func TestConsoleOperatorCordonsANodeAndCreatesATenantShownOnce(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	b := startBrowser(t, f.URL)
	b.signIn(f.OperatorToken)

	b.open("/nodes")
	b.waitFor("node-1 listed", `document.body.innerText.includes("node-1")`, 30*time.Second)
	b.click("button", "Cordon "+f.Node)
	b.waitFor("the Uncordon button", fmt.Sprintf(`!!document.querySelector('button[aria-label="Uncordon %s"]')`, f.Node), 30*time.Second)
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	n, err := op.GetNode(context.Background(), f.Node)
	if err != nil || !n.Cordoned {
		t.Fatalf("after Cordon in the console, central says cordoned=%v (%v)", n != nil && n.Cordoned, err)
	}

	b.open("/tenants")
	b.click("button", "New tenant")
	b.typeInto(`input[name=tenant-name]`, "acme")
	b.click("button", "Create tenant")
	b.waitFor("the token shown once", `!!document.querySelector(".once pre.token")`, 30*time.Second)
	var token string
	b.eval("read the token", `document.querySelector(".once pre.token").textContent`, &token)
	b.shotEverywhere("tenant-token-shown-once")
	tc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(strings.TrimSpace(token)))
	if err != nil {
		t.Fatal(err)
	}
	if me, err := tc.TenantMe(context.Background()); err != nil || me.Tenant.Name != "acme" {
		t.Fatalf("the token the console showed does not sign in as acme: %+v, %v", me, err)
	}
	b.click("button", "I have copied it")
	b.open("/overview")
	b.open("/tenants")
	var again bool
	b.eval("look for the token again", `!!document.querySelector(".once") || document.body.innerText.includes(`+jsonOf(strings.TrimSpace(token))+`)`, &again)
	if again {
		t.Fatal("the tenant's token is shown a second time")
	}

	for _, p := range operatorPages {
		b.open(p)
		b.shotEverywhere("operator" + p)
		b.axe("operator " + p)
	}
	b.open("/nodes/" + f.Node)
	b.shotEverywhere("operator-node-sheet")
	b.axe("operator node sheet")
}

// TestConsoleShowsEveryPageWith200VMs: a tenant with 200 VMs (on the sim
// driver) opens every page of the console. The list draws its first 50 rows
// and counts all 200; the first load (the page, its script and styles) stays
// under 300 KB on the wire. Every tenant page is photographed at desktop and
// phone width, light and dark, and checked with axe-core. How fast the
// pages answer is BenchmarkConsolePages200VMs's (make bench), not a timed
// test's.
func TestConsoleShowsEveryPageWith200VMs(t *testing.T) {
	f, token, tc := fleetWith200VMs(t)
	b := startBrowser(t, f.URL)
	// The first load, as the browser fetched it: the page and everything it
	// loaded before anyone signed in.
	b.run("open the console", chromedpNavigate(f.URL+"/console/"))
	b.waitFor("the sign-in page", `!!document.querySelector("input[name=token]") && document.body.dataset.pending === "0"`, 30*time.Second)
	var bytes float64
	b.eval("sum the first load", `performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource"))
		.reduce((n, e) => n + e.transferSize, 0)`, &bytes)
	t.Logf("first load: %.1f KB on the wire (gzip)", bytes/1024)
	if bytes <= 0 || bytes > 300*1024 {
		t.Fatalf("first load is %.0f bytes on the wire, want 1..300 KB", bytes)
	}
	b.shotEverywhere("sign-in")
	b.axe("sign-in")
	b.signIn(token)
	b.openTimed("/vms", listed200)
	for _, p := range tenantPages {
		b.open(p)
		b.shotEverywhere("tenant" + p)
		b.axe("tenant " + p)
	}
	b.open("/vms/new")
	b.waitFor("the catalog", `!!document.querySelector('input[name=image]:checked') && document.querySelector('input[name=name]').value !== ""`, 30*time.Second)
	var suggested string
	b.eval("the suggested name", `document.querySelector('input[name=name]').value`, &suggested)
	if suggested != "debian-minimal-1" {
		t.Errorf("the launch sheet suggests %q, want debian-minimal-1 (no VM has that name)", suggested)
	}
	b.shotEverywhere("tenant-launch-sheet")
	b.axe("launch sheet")
	list, err := tc.ListVMs(context.Background())
	if err != nil || len(list.VMs) == 0 {
		t.Fatalf("list VMs: %v", err)
	}
	vm := list.VMs[0]
	b.open("/vms/" + vm.Node + "/" + vm.ID)
	b.waitFor("the VM sheet", `!!document.querySelector('[role=dialog] [role=tablist]')`, 30*time.Second)
	for _, tab := range []string{"Details", "Run", "Snapshots", "SSH"} {
		b.click("[role=tab]", tab)
		b.run("settle", chromedpSleep(300*time.Millisecond))
		b.shotEverywhere("tenant-vm-sheet-" + tab)
		b.axe("VM sheet " + tab)
	}
	b.open("/vms")
	b.run("open the palette", chromedpKey("k", true))
	b.waitFor("the palette", `!!document.querySelector('.palette input')`, 10*time.Second)
	b.typeInto(`.palette input`, "web-01")
	b.shotEverywhere("palette")
	b.axe("palette")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
