package console_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
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

// TestConsolePagesAnswerWithin100msWith200VMs: a tenant with 200 VMs (on
// the sim driver) opens every page of the console, with nothing cached (a
// fresh load of the console) and again; each must have shown its heading
// and received every answer it asked for within 100 ms (the median of
// five visits of each kind), on loopback. The first load (the page, its script and styles) must stay
// under 300 KB on the wire. Every tenant page is photographed at desktop
// and phone width, light and dark, and checked with axe-core.
func TestConsolePagesAnswerWithin100msWith200VMs(t *testing.T) {
	f := fleettest.Start(t, fleettest.WithNodeSize(256, 256*1024))
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "acme", map[string]int64{"max_vms": 300, "max_vcpus": 300, "max_memory_mib": 300 * 1024})
	tc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	const vms = 200
	var wg sync.WaitGroup
	errs := make(chan error, vms)
	sem := make(chan struct{}, 8)
	for i := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			_, err := tc.CreateVM(context.Background(), sdk.FleetCreateVMRequest{Name: fmt.Sprintf("web-%03d", i), Image: "debian-minimal", VCPUs: 1, MemoryMiB: 128})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("launch the 200 VMs: %v", err)
		}
	}

	// Where a visit of the VM list spends its time outside the browser: the
	// node listing its VMs, and central's GET /fleet/vms (which asks the
	// node through its channel and adds the ledger's image names).
	nc, err := sdk.NewNodeClient(f.NodeURL, sdk.WithToken(f.NodeToken))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"the node's GET /v1/vms", func() error { _, err := nc.ListVMs(context.Background()); return err }},
		{"central's GET /fleet/vms", func() error { _, err := tc.ListVMs(context.Background()); return err }},
	} {
		var ts []time.Duration
		for range 15 {
			t0 := time.Now()
			if err := c.call(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			ts = append(ts, time.Since(t0))
		}
		sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
		t.Logf("%s with 200 VMs, 15 calls: median %.1f ms, slowest %.1f ms", c.name, ms(ts[7]), ms(ts[14]))
	}

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
	// The list draws 50 rows a page and counts all 200.
	const listed = `document.querySelectorAll('table[aria-label="Virtual machines"] tbody tr').length === 50 &&
		document.querySelector(".count").textContent.trim() === "200 of 200"`
	first := b.openTimed("/vms", listed)
	t.Logf("the first visit to /vms (nothing cached yet): %.1f ms", ms(first))

	// Two kinds of visit, five of each per page; the median of each is held
	// to 100 ms (the machine is shared, and one visit may wait behind
	// another process), the slowest is reported beside it:
	//   - uncached: the console is loaded afresh on a page that asks for
	//     nothing of its own, so the page visited has nothing cached and
	//     waits for every answer (as on a first visit);
	//   - again: the page was seen before in this load, draws from the
	//     answers it had and refreshes behind them.
	const rounds = 5
	ready := func(p string) string {
		if p == "/vms" { // the list is there, every row of it
			return listed
		}
		return ""
	}
	uncached := map[string][]time.Duration{"/vms": {first}}
	loads := map[string]map[string][]float64{} // page -> path -> ms, uncached visits
	again := map[string][]time.Duration{}
	for round := 0; round < rounds; round++ {
		for _, p := range tenantPages {
			if len(uncached[p]) > round {
				continue
			}
			// A new load of the console: nothing cached. The token stays in
			// the tab's session storage, as it does for a person reloading.
			b.run("load the console afresh", chromedpNavigate(fmt.Sprintf("%s/console/?load=%d%s#/nowhere", f.URL, round, strings.ReplaceAll(p, "/", "-"))))
			b.waitFor("the console loaded", `!!document.querySelector(".topbar") && !!document.querySelector("main h1") && document.body.dataset.pending === "0"`, 30*time.Second)
			d, seen := b.openTimedLoads(p, ready(p))
			uncached[p] = append(uncached[p], d)
			if loads[p] == nil {
				loads[p] = map[string][]float64{}
			}
			for path, ms := range seen {
				loads[p][path] = append(loads[p][path], ms)
			}
		}
	}
	for round := 0; round < rounds; round++ {
		for _, p := range tenantPages {
			from := "/overview" // a hash change is what is timed: come from elsewhere
			if p == from {
				from = "/images"
			}
			b.open(from)
			again[p] = append(again[p], b.openTimed(p, ready(p)))
		}
	}
	var rows []string
	for _, p := range tenantPages {
		row := fmt.Sprintf("%-15s", p)
		for _, k := range []struct {
			name  string
			times []time.Duration
		}{{"uncached", uncached[p]}, {"again", again[p]}} {
			ts := k.times
			sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
			median, slowest := ts[len(ts)/2], ts[len(ts)-1]
			row += fmt.Sprintf("  %s: median %6.1f ms slowest %6.1f ms", k.name, ms(median), ms(slowest))
			if median > 100*time.Millisecond {
				t.Errorf("page %s (%s) took %v (median of %d visits) with 200 VMs listed, want at most 100 ms", p, k.name, median, len(ts))
			}
		}
		var paths []string
		for path, mss := range loads[p] {
			sort.Float64s(mss)
			paths = append(paths, fmt.Sprintf("%s %.0f", path, mss[len(mss)/2]))
		}
		sort.Strings(paths)
		rows = append(rows, row+"\n                 its requests, uncached (median ms): "+strings.Join(paths, ", "))
	}
	t.Logf("pages with 200 VMs listed, %d visits each:\n%s", rounds, strings.Join(rows, "\n"))
	var api []float64
	b.eval("the list's answers", `performance.getEntriesByType("resource").filter(e => e.name.endsWith("/fleet/vms")).map(e => e.responseEnd - e.startTime)`, &api)
	t.Logf("GET /fleet/vms as the browser saw it (ms): %v", api)

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
