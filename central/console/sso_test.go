package console_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/console"
	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
)

// people are who the test's identity provider knows; every password is
// "verysecure".
type people map[string]*storage.User

func (u people) GetUserByID(id string) *storage.User { return u[id] }
func (u people) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (u people) ExampleClientID() string { return "" }

// startProvider runs a real OpenID provider (zitadel/oidc's example, with
// its login page) on loopback, central registered as a web client.
func startProvider(t *testing.T, callback string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	users := people{"u1": {ID: "u1", Username: "vera", Password: "verysecure", Email: "vera@example.com", EmailVerified: true}}
	storage.RegisterClients(storage.WebClient("fluxvm-console", "console-secret", callback))
	srv := &http.Server{Handler: exampleop.SetupServer(issuer, storage.NewStorage(users), nil, false), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return issuer
}

// startCentral serves central's API with sign-in through issuer, and the
// console beside it, on a real (embedded) etcd.
func startCentral(t *testing.T) (url, fleetToken string) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url = "http://" + ln.Addr().String()
	st, err := store.Open(ctx, store.Options{DataDir: t.TempDir(), UnsafeNoFsync: true,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "etcd", Level: hclog.Error})})
	if err != nil {
		t.Fatalf("embedded etcd: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	activity, err := audit.Open(audit.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { activity.Close() })
	issuer := startProvider(t, url+"/auth/callback")
	sso, err := identity.NewOIDC(ctx, identity.OIDCConfig{Issuer: issuer, ClientID: "fluxvm-console", ClientSecret: "console-secret",
		RedirectURL: url + "/auth/callback"})
	if err != nil {
		t.Fatal(err)
	}
	fleetToken = "fleet-sso-test-token"
	srv := api.New(api.Options{Store: st, FleetToken: fleetToken, OIDC: sso, OIDCProviderName: "Zitadel", PublicURL: url, Activity: activity})
	studio, err := console.New()
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: studio.Mount(srv), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { _ = hs.Close() })
	return url, fleetToken
}

// writeControls lists, on the page, the buttons, forms and role pickers a
// viewer must not be offered: every button in the page but the few that
// only read (a window's length, a CSV download, Refresh, Copy).
const writeControls = `[...document.querySelectorAll("main button, main form, main select[aria-label^='Role of']")]
	.filter(e => e.tagName !== "BUTTON" || !["7 days", "30 days", "90 days", "Download CSV", "Refresh", "Copy"].includes(e.textContent.trim()))
	.map(e => e.tagName + " " + (e.textContent.trim() || e.getAttribute("aria-label") || "").slice(0, 40))`

// TestConsoleViewerSignedInWithSSOSeesNoWriteControl: someone on a team as
// a viewer signs in with "Sign in with Zitadel" (a real OpenID provider
// and its login page), lands in the console as that viewer, and no page
// offers a button or form that would change anything; the pages a viewer
// cannot read (API keys) are not in the menus either.
func TestConsoleViewerSignedInWithSSOSeesNoWriteControl(t *testing.T) {
	url, fleet := startCentral(t)
	op, err := sdk.NewFleetClient(url, sdk.WithToken(fleet))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tw, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.AddMember(ctx, tw.Tenant.ID, sdk.AddMemberRequest{Email: "vera@example.com", Role: sdk.RoleViewer}); err != nil {
		t.Fatal(err)
	}
	// A network of the team's, so that its page and sheet have a row and
	// members to offer buttons on.
	if _, err := op.CreateOverlay(ctx, tw.Tenant.ID, sdk.CreateOverlayRequest{Name: "backend"}); err != nil {
		t.Fatal(err)
	}

	b := startBrowser(t, url)
	b.run("open the console", chromedpNavigate(url+"/console/"))
	b.click("a", "Sign in with Zitadel")
	b.typeInto("#username", "vera")
	b.typeInto("#password", "verysecure")
	b.click("button", "Login")
	b.waitFor("the console as vera", `(document.querySelector(".account .menu-button")?.textContent || "").includes("vera@example.com")`, time.Minute)
	var who string
	b.eval("who is signed in", `document.querySelector(".account .menu-button").textContent`, &who)
	if !strings.Contains(who, "viewer") {
		t.Fatalf("the account menu says %q, want vera as a viewer", who)
	}
	var menus []string
	b.eval("the menus", `[...document.querySelectorAll(".menus a")].map(a => a.getAttribute("href"))`, &menus)
	for _, hidden := range []string{"#/keys", "#/nodes", "#/tenants"} {
		for _, m := range menus {
			if m == hidden {
				t.Errorf("a viewer's menus offer %s", hidden)
			}
		}
	}
	for _, p := range tenantPages {
		if p == "/keys" {
			continue
		}
		b.open(p)
		var found []string
		b.eval("write controls on "+p, writeControls, &found)
		if len(found) > 0 {
			t.Errorf("a viewer sees write controls on %s: %v", p, found)
		}
		b.shotEverywhere("viewer" + p)
		b.axe("viewer " + p)
	}
	b.open("/networks/backend")
	b.waitFor("the network's sheet", `document.querySelector("[role=dialog] h2")?.textContent === "backend"`, 30*time.Second)
	var found []string
	b.eval("write controls on a network's sheet", strings.Replace(writeControls, "main button", "main button:not(.close)", 1), &found)
	if len(found) > 0 {
		t.Errorf("a viewer sees write controls on a network's sheet: %v", found)
	}
	b.shotEverywhere("viewer-network-sheet")
	b.axe("viewer network sheet")
	b.open("/vms/new")
	var sheet bool
	b.eval("the launch sheet", `!!document.querySelector("[role=dialog]")`, &sheet)
	if sheet {
		t.Error("a viewer who follows a link to the launch sheet gets it")
	}
	// Central refuses it anyway: the session cookie cannot launch.
	var status float64
	b.eval("launch with the session", `fetch("/fleet/vms", {method: "POST", headers: {"X-FluxVM-Console": "1", "Content-Type": "application/json"},
		body: JSON.stringify({name: "x", image: "none"})}).then(r => r.status)`, &status)
	if status != http.StatusForbidden {
		t.Errorf("a viewer's launch through the session answered %v, want 403", status)
	}
}
