package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// acceptDialogs answers every confirm() the page asks with OK, as a person
// would, and keeps what the dialogs said.
func (b *browser) acceptDialogs() *[]string {
	var mu sync.Mutex
	said := &[]string{}
	chromedp.ListenTarget(b.ctx, func(ev any) {
		if e, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			*said = append(*said, e.Message)
			mu.Unlock()
			go func() { _ = chromedp.Run(b.ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
	return said
}

// errorShown waits until the page shows central's refusal inside css,
// with words in its message and hint in its hint.
func (b *browser) errorShown(css, words, hint string) {
	b.t.Helper()
	b.waitFor("central's refusal in "+css, fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.querySelector("strong").innerText.includes(%q) && (!%q || (e.querySelector(".hint") || {innerText: ""}).innerText.includes(%q)); })()`,
		css+" .error", words, hint, hint), 30*time.Second)
}

// TestConsoleTenantSetsAndRemovesABudgetAndSeesCentralRefuseABadOne: on
// Billing, an owner types a negative budget and the page shows central's
// 400 with its hint (and nothing is set); then sets 250.5, which central
// then reports, and removes it. Billing and Notifications (with the
// webhook form) are photographed and checked with axe-core, and a tenant's
// webhook is created with its secret shown once, refused when not https,
// and deleted.
func TestConsoleTenantSetsAndRemovesABudgetAndSeesCentralRefuseABadOne(t *testing.T) {
	f := fleettest.Start(t)
	_, token := f.Tenant(t, "acme", map[string]int64{"max_vms": 5})
	tc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := startBrowser(t, f.URL)
	dialogs := b.acceptDialogs()
	b.signIn(token)

	b.open("/billing")
	b.waitFor("the budget form", `!!document.querySelector("input[name=budget]") && document.querySelector(".budget-now").innerText.includes("no budget")`, 30*time.Second)
	b.typeInto(`input[name=budget]`, "-5")
	b.click("button", "Set budget")
	b.errorShown("section.budget", `field "monthly" must be from 0 to`, "lists every field's range")
	b.shotEverywhere("tenant-budget-refused")
	b.axe("billing with a refused budget")
	if me, err := tc.TenantMe(ctx); err != nil || me.Billing == nil || me.Billing.Monthly != nil {
		t.Fatalf("after a refused budget, central has %+v (%v), want no budget", me.Billing, err)
	}

	b.typeInto(`input[name=budget]`, "250.5")
	b.click("button", "Set budget")
	b.waitFor("the budget shown", `document.querySelector(".budget-now").innerText.includes("250.5")`, 30*time.Second)
	me, err := tc.TenantMe(ctx)
	if err != nil || me.Billing == nil || me.Billing.Monthly == nil || me.Billing.Monthly.String() != "250.5" {
		t.Fatalf("after Set budget 250.5, central has %+v (%v)", me.Billing, err)
	}
	b.shotEverywhere("tenant-budget-set")
	b.axe("billing with a budget")
	b.click("button", "Remove budget")
	b.waitFor("no budget shown", `document.querySelector(".budget-now").innerText.includes("no budget")`, 30*time.Second)
	if me, err := tc.TenantMe(ctx); err != nil || me.Billing.Monthly != nil {
		t.Fatalf("after Remove budget, central has %+v (%v)", me.Billing, err)
	}

	// A tenant's webhook: http is refused by central, https is created and
	// its secret shown once.
	b.open("/notifications")
	b.typeInto(`input[name=webhook-url]`, "http://hooks.example.com/fluxvm")
	b.click("button", "Create webhook")
	b.errorShown("section[aria-labelledby=hooks-h]", "https", "public address")
	b.shotEverywhere("tenant-webhook-refused")
	b.typeInto(`input[name=webhook-url]`, "https://hooks.example.com/fluxvm")
	b.typeInto(`input[name=webhook-name]`, "ops")
	b.click("label.check", "budget.over")
	b.click("button", "Create webhook")
	b.waitFor("the secret shown once", `!!document.querySelector(".once pre.secret")`, 30*time.Second)
	var secret string
	b.eval("read the secret", `document.querySelector(".once pre.secret").textContent.trim()`, &secret)
	hooks, err := tc.ListWebhooks(ctx)
	if err != nil || len(hooks) != 1 || hooks[0].Name != "ops" || len(hooks[0].Events) != 1 || hooks[0].Events[0] != "budget.over" {
		t.Fatalf("after Create webhook, central lists %+v (%v)", hooks, err)
	}
	if !strings.HasPrefix(secret, webhooks.SecretPrefix) {
		t.Fatalf("the page shows %q as the secret, want one starting %s", secret, webhooks.SecretPrefix)
	}
	b.shotEverywhere("tenant-webhook-secret-shown-once")
	b.axe("notifications with a new webhook's secret")
	b.click("button", "I have copied it")
	b.open("/overview")
	b.open("/notifications")
	b.waitFor("the webhook listed", `document.querySelector('table[aria-label="Webhooks"]').innerText.includes("hooks.example.com")`, 30*time.Second)
	var again bool
	b.eval("look for the secret again", `!!document.querySelector(".once") || document.body.innerText.includes(`+jsonOf(secret)+`)`, &again)
	if again {
		t.Fatal("the webhook's secret is shown a second time")
	}
	b.shotEverywhere("tenant-notifications-webhooks")
	b.axe("notifications with webhooks")
	b.click("button", "Delete webhook ops")
	b.waitFor("the webhook gone", `!!document.querySelector("section[aria-labelledby=hooks-h] .empty")`, 30*time.Second)
	if hooks, err := tc.ListWebhooks(ctx); err != nil || len(hooks) != 0 {
		t.Fatalf("after Delete, central lists %+v (%v)", hooks, err)
	}
	if len(*dialogs) != 1 || !strings.Contains((*dialogs)[0], "hooks.example.com") {
		t.Fatalf("the page asked %q before deleting, want one question naming the webhook", *dialogs)
	}
}

// TestConsoleOperatorEditsCatalogPolicyPricesAndQuotaAndReadsAStatement:
// signed in with the fleet token, the operator edits a catalog entry,
// adds and deletes one, sees central refuse a bad policy value inline and
// saves a good one, publishes a new price and sees a bad one refused, sets
// a tenant's quota, reads that tenant's statement as central computes it,
// and sends a signed test delivery to a webhook. Each change is checked
// through the API, and every new page and sheet is photographed and
// checked with axe-core.
func TestConsoleOperatorEditsCatalogPolicyPricesAndQuotaAndReadsAStatement(t *testing.T) {
	f := fleettest.Start(t)
	f.CatalogImage(t, "debian-minimal")
	tenantID, token := f.Tenant(t, "acme", map[string]int64{"max_vms": 5, "max_vcpus": 8, "max_memory_mib": 8192})
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		t.Fatal(err)
	}
	tc, err := sdk.NewFleetClient(f.URL, sdk.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := startBrowser(t, f.URL)
	dialogs := b.acceptDialogs()
	b.signIn(f.OperatorToken)

	// The catalog: edit an entry, see a bad size refused, add one, delete it.
	b.open("/images")
	b.click("button", "Edit debian-minimal")
	b.waitFor("the image sheet", `!!document.querySelector("input[name=image-display_name]")`, 30*time.Second)
	b.typeInto(`input[name=image-display_name]`, "Debian (small)")
	b.typeInto(`input[name=image-vcpus]`, "5000")
	b.click("button", "Save image")
	b.errorShown("[role=dialog]", `field "vcpus" must be from`, `"Limits"`)
	b.shotEverywhere("operator-image-refused")
	b.axe("image sheet with a refusal")
	b.typeInto(`input[name=image-vcpus]`, "3")
	b.click("button", "Save image")
	b.waitFor("the catalog shows the edit", `!document.querySelector("[role=dialog]") && document.body.innerText.includes("Debian (small)")`, 30*time.Second)
	ims, err := op.ListImages(ctx)
	if err != nil || len(ims) != 1 || ims[0].DisplayName != "Debian (small)" || ims[0].VCPUs != 3 {
		t.Fatalf("after editing debian-minimal, central's catalog is %+v (%v)", ims, err)
	}
	b.click("button", "Add image")
	b.typeInto(`input[name=image-name]`, "alpine-3")
	b.typeInto(`input[name=image-image]`, "/var/lib/fluxvm/images/alpine-3.qcow2")
	b.shotEverywhere("operator-image-add-sheet")
	b.axe("add image sheet")
	b.click("[role=dialog] button", "Add image")
	b.waitFor("alpine-3 listed", `!document.querySelector("[role=dialog]") && document.body.innerText.includes("alpine-3")`, 30*time.Second)
	b.shotEverywhere("operator-catalog")
	b.axe("operator catalog")
	b.click("button", "Delete alpine-3")
	b.waitFor("alpine-3 gone", `!document.body.innerText.includes("alpine-3")`, 30*time.Second)
	if ims, err := op.ListImages(ctx); err != nil || len(ims) != 1 {
		t.Fatalf("after adding and deleting alpine-3, central's catalog is %+v (%v)", ims, err)
	}

	// The policy: every field with its value; a bad one refused inline.
	b.open("/policy")
	b.waitFor("the policy form", `(document.querySelector("input[name=min_lease_hours]") || {}).value === "24"`, 30*time.Second)
	pol, err := op.GetPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var shown map[string]string
	b.eval("the policy form", `Object.fromEntries([...document.querySelectorAll("form.doc input, form.doc textarea")].map(i => [i.name, i.type === "checkbox" ? String(i.checked) : i.value]))`, &shown)
	want := map[string]string{"min_lease_hours": fmt.Sprint(pol.MinLeaseHours), "ledger_retention_days": fmt.Sprint(pol.LedgerRetentionDays),
		"require_lease_for_macos": fmt.Sprint(pol.RequireLeaseForMacOS), "tenant_subnet_prefix": pol.TenantSubnetPrefix,
		"max_snapshots_per_vm": fmt.Sprint(pol.MaxSnapshotsPerVM), "tunnels.ports": strings.Join(pol.Tunnels.Ports, ", "),
		"tunnels.idle_timeout_minutes": fmt.Sprint(pol.Tunnels.IdleTimeoutMinutes), "tunnels.enabled": fmt.Sprint(pol.Tunnels.Enabled)}
	for k, v := range want {
		if shown[k] != v {
			t.Errorf("the policy page shows %s = %q, central has %q", k, shown[k], v)
		}
	}
	b.shotEverywhere("operator-policy")
	b.axe("operator policy")
	b.typeInto(`input[name=ledger_retention_days]`, "-1")
	b.click("button", "Save policy")
	b.errorShown(".save-result", "ledger_retention_days", `"Limits"`)
	b.shotEverywhere("operator-policy-refused")
	b.axe("policy with a refusal")
	b.typeInto(`input[name=ledger_retention_days]`, "200")
	b.typeInto(`input[name="tunnels.max_per_tenant"]`, "7")
	b.click("button", "Save policy")
	b.waitFor("the policy saved", `document.querySelector(".save-result").innerText.includes("Policy saved")`, 30*time.Second)
	if pol, err := op.GetPolicy(ctx); err != nil || pol.LedgerRetentionDays != 200 || pol.Tunnels.MaxPerTenant != 7 || pol.MinLeaseHours != 24 {
		t.Fatalf("after saving the policy, central has %+v (%v)", pol, err)
	}
	// The egress floor, as JSON: a host name refused by central, a subnet kept.
	b.typeInto(`textarea[name=egress]`, `{"mode": "allowlist", "allow": ["example.com"]}`)
	b.click("button", "Save policy")
	b.errorShown(".save-result", "egress", "")
	if pol, err := op.GetPolicy(ctx); err != nil || pol.Egress != nil {
		t.Fatalf("after a refused egress floor, central has %+v (%v), want none", pol.Egress, err)
	}
	b.typeInto(`textarea[name=egress]`, `{"mode": "allowlist", "allow": ["192.0.2.0/24"]}`)
	b.click("button", "Save policy")
	b.waitFor("the floor saved", `document.querySelector(".save-result").innerText.includes("Policy saved")`, 30*time.Second)
	if pol, err := op.GetPolicy(ctx); err != nil || pol.Egress == nil || pol.Egress.Mode != "allowlist" || len(pol.Egress.Allow) != 1 || pol.Egress.Allow[0] != "192.0.2.0/24" || pol.LedgerRetentionDays != 200 {
		t.Fatalf("after saving an egress floor, central has %+v (%v)", pol, err)
	}

	// Prices: a bad rate refused, a good one published after the first.
	b.open("/prices")
	b.typeInto(`input[name=vm_per_hour]`, "-1")
	b.click("button", "Publish prices")
	b.errorShown(".save-result", "vm_per_hour", "")
	b.shotEverywhere("operator-prices-refused")
	if hist, err := op.PriceHistory(ctx); err != nil || len(hist) != 1 {
		t.Fatalf("after a refused price list, central has %d versions (%v), want 1", len(hist), err)
	}
	b.typeInto(`input[name=vm_per_hour]`, "3.6")
	b.click("button", "Publish prices")
	b.waitFor("the new prices in the history", `document.querySelector('table[aria-label="Price history"]').querySelectorAll("tbody tr").length === 2`, 30*time.Second)
	hist, err := op.PriceHistory(ctx)
	if err != nil || len(hist) != 2 || hist[1].VMPerHour.String() != "3.6" {
		t.Fatalf("after Publish prices, central's history is %+v (%v)", hist, err)
	}
	b.shotEverywhere("operator-prices")
	b.axe("operator prices")

	// A tenant's quota.
	b.open("/tenants")
	b.click("button", "Quotas of acme")
	b.waitFor("the quota sheet", `document.querySelector("input[name=quota-max_vms]").value === "5"`, 30*time.Second)
	b.typeInto(`input[name=quota-max_vms]`, "-3")
	b.click("button", "Save quotas")
	b.errorShown("[role=dialog]", "max_vms", `"Limits"`)
	b.typeInto(`input[name=quota-max_vms]`, "12")
	b.typeInto(`input[name=quota-max_leased_hosts]`, "2")
	b.shotEverywhere("operator-tenant-quota-sheet")
	b.axe("tenant quota sheet")
	b.click("button", "Save quotas")
	b.waitFor("the quota in the list", `!document.querySelector("[role=dialog]") && document.body.innerText.includes("12 VMs")`, 30*time.Second)
	tn, err := op.GetTenant(ctx, tenantID)
	if err != nil || tn.Quota.MaxVMs != 12 || tn.Quota.MaxLeasedHosts != 2 || tn.Quota.MaxVCPUs != 8 {
		t.Fatalf("after Save quotas, central has %+v (%v)", tn.Quota, err)
	}

	// The tenant's statement: a VM run at the new price makes a line (the
	// VM is deleted first, so its quantity stays put).
	web1, err := tc.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "web-1", Image: "debian-minimal", VCPUs: 1, MemoryMiB: 128})
	if err != nil {
		t.Fatalf("launch web-1: %v", err)
	}
	time.Sleep(1500 * time.Millisecond) // some seconds of VM time to bill
	if err := tc.DeleteVM(ctx, web1.Node, web1.VM.ID); err != nil {
		t.Fatalf("delete web-1: %v", err)
	}
	st, err := op.Statement(ctx, sdk.StatementQuery{Tenant: "acme"})
	if err != nil || len(st.Lines) == 0 {
		t.Fatalf("central's statement of acme: %+v (%v), want a line for web-1", st, err)
	}
	b.open("/tenants")
	b.click("button", "Statement of acme")
	b.waitFor("the statement", `!!document.querySelector(".statement-total")`, 30*time.Second)
	var lines []string
	b.eval("the statement's lines", `[...document.querySelectorAll('[role=dialog] tbody tr td:first-child')].map(td => td.innerText.trim())`, &lines)
	if len(lines) != len(st.Lines) {
		t.Fatalf("the statement sheet shows lines %q, central's statement has %d", lines, len(st.Lines))
	}
	// A line names its window, which for this month ends now: compare what
	// the line is, not the second each read was made.
	what := func(desc string) string { w, _, _ := strings.Cut(desc, " ("); return w }
	for i, l := range st.Lines {
		if what(lines[i]) != what(l.Description) || !strings.HasPrefix(lines[i], what(l.Description)+" (") {
			t.Errorf("statement line %d: the page shows %q, central %q", i, lines[i], l.Description)
		}
	}
	b.shotEverywhere("operator-tenant-statement")
	b.axe("tenant statement sheet")
	b.run("close the sheet", chromedpKeys("Escape"))

	// The operator's webhook: a signed test delivery to a receiver on
	// loopback, checked with the secret the page showed once.
	type got struct {
		sig, event string
		body       []byte
	}
	received := make(chan got, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- got{r.Header.Get("X-FluxVM-Signature"), r.Header.Get("X-FluxVM-Event"), body}
	}))
	defer rcv.Close()
	b.open("/notifications")
	b.typeInto(`input[name=webhook-url]`, rcv.URL+"/hook")
	b.typeInto(`input[name=webhook-name]`, "pager")
	b.click("button", "Create webhook")
	b.waitFor("the secret shown once", `!!document.querySelector(".once pre.secret")`, 30*time.Second)
	var secret string
	b.eval("read the secret", `document.querySelector(".once pre.secret").textContent.trim()`, &secret)
	b.click("button", "I have copied it")
	b.click("button", "Send a test to pager")
	b.waitFor("the test result", `(document.querySelector(".tested") || {innerText: ""}).innerText.includes("delivered (200)")`, 30*time.Second)
	select {
	case g := <-received:
		if g.event != sdk.NotifyWebhookTest || g.sig != webhooks.Sign(secret, g.body) {
			t.Fatalf("the receiver got event %q signed %q; with the page's secret the signature is %q", g.event, g.sig, webhooks.Sign(secret, g.body))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the test delivery never reached the receiver")
	}
	b.shotEverywhere("operator-notifications-webhooks")
	b.axe("operator notifications with webhooks")
	for _, d := range *dialogs {
		if !strings.Contains(d, "alpine-3") {
			t.Errorf("the page asked %q, want the question to name what is deleted", d)
		}
	}
}
