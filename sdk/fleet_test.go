package sdk_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// liveFleet is the real central (with one sim node) the fleet tests and
// the fleet examples run against; TestMain starts it once for the package.
var liveFleet *fleettest.Fleet

// The examples read central's address and tokens from the environment, as
// a program would: TestMain sets CENTRAL_URL, FLUXVM_FLEET_TOKEN (the
// operator's) and FLUXVM_AGENT_TOKEN for a tenant "example" (at most one
// VM), and puts "debian-minimal" in the catalog.
func TestMain(m *testing.M) {
	f, err := fleettest.Launch()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start a fleet for the fleet tests:", err)
		os.Exit(1)
	}
	liveFleet = f
	if err := exampleTenant(f); err != nil {
		f.Stop()
		fmt.Fprintln(os.Stderr, "set up the fleet examples:", err)
		os.Exit(1)
	}
	code := m.Run()
	f.Stop()
	os.Exit(code)
}

func exampleTenant(f *fleettest.Fleet) error {
	ctx := context.Background()
	op, err := sdk.NewFleetClient(f.URL, sdk.WithToken(f.OperatorToken))
	if err != nil {
		return err
	}
	tw, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "example", Quota: sdk.Quotas{MaxVMs: 1}})
	if err != nil {
		return err
	}
	if _, err := op.PutImage(ctx, sdk.Image{Name: "debian-minimal", GuestOS: "linux", Image: f.Image, VCPUs: 1, MemoryMiB: 256}); err != nil {
		return err
	}
	os.Setenv("CENTRAL_URL", f.URL)
	os.Setenv("FLUXVM_FLEET_TOKEN", f.OperatorToken)
	os.Setenv("FLUXVM_AGENT_TOKEN", tw.Token)
	return nil
}

// tenants counts the tenants the tests made, so that names stay unique
// when the tests run again (-count) against the same central.
var tenants atomic.Int64

func unique(name string) string { return fmt.Sprintf("%s-%d", name, tenants.Add(1)) }

func fleetClient(t *testing.T, token string) *sdk.FleetClient {
	t.Helper()
	fc, err := sdk.NewFleetClient(liveFleet.URL, sdk.WithToken(token), sdk.WithUserAgent("sdk-test"))
	if err != nil {
		t.Fatal(err)
	}
	return fc
}

func wantStatus(t *testing.T, what string, err error, status int) *sdk.APIError {
	t.Helper()
	var ae *sdk.APIError
	if !errors.As(err, &ae) || ae.Status != status {
		t.Fatalf("%s: err = %v, want an *APIError with status %d", what, err, status)
	}
	if ae.Message == "" || ae.Hint == "" {
		t.Fatalf("%s: %d without central's message and hint: %+v", what, status, ae)
	}
	return ae
}

func TestFleetClientRunsATenantsVMThroughItsLifeOnARealCentral(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)

	h, err := op.Health(ctx)
	if err != nil || h.Status != "ok" || h.Etcd != "ok" {
		t.Fatalf("health = %+v, %v", h, err)
	}
	life := unique("life")
	created, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: life, Quota: sdk.Quotas{MaxVMs: 2, MaxVCPUs: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(created.Token, "fvt_") || created.Note == "" || created.Tenant.Quota.MaxVMs != 2 {
		t.Fatalf("created tenant %+v", created)
	}
	im, err := op.PutImage(ctx, sdk.Image{Name: "life-img", GuestOS: "linux", Image: liveFleet.Image})
	if err != nil || im.VCPUs != 4 || im.MemoryMiB != 8192 || im.SSHUser != "admin" {
		t.Fatalf("put image = %+v, %v; want central's defaults filled in", im, err)
	}
	tenant := fleetClient(t, created.Token)

	me, err := tenant.TenantMe(ctx)
	if err != nil || me.Tenant.ID != created.Tenant.ID || me.Usage.Total.VMs != 0 || me.MaxSnapshotsPerVM != 20 {
		t.Fatalf("me = %+v, %v", me, err)
	}
	capRep, err := tenant.Capacity(ctx)
	if err != nil || len(capRep.Nodes) != 1 || capRep.Nodes[0].Node != liveFleet.Node || capRep.LargestLinux.VCPUs < 1 {
		t.Fatalf("capacity = %+v, %v", capRep, err)
	}

	launch, err := tenant.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: "life-1", Image: "life-img", VCPUs: 1, MemoryMiB: 256,
		Labels: map[string]string{"job": "7"}}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if launch.Node != liveFleet.Node || !launch.VM.AgentReady || launch.VM.Tenant != created.Tenant.ID || launch.Placement.Reason == "" ||
		len(launch.Placement.Considered) != 1 {
		t.Fatalf("launched %+v", launch)
	}
	id := launch.VM.ID

	// Found by name, by ID, by ID prefix and as NODE/NAME.
	for _, ref := range []string{"life-1", id, id[:6], liveFleet.Node + "/life-1"} {
		vm, err := tenant.FindVM(ctx, ref)
		if err != nil || vm.ID != id || vm.Node != liveFleet.Node {
			t.Fatalf("FindVM(%q) = %+v, %v", ref, vm, err)
		}
	}
	if _, err := tenant.FindVM(ctx, "nope"); !sdk.IsNotFound(err) {
		t.Fatalf("FindVM of an unknown VM = %v, want IsNotFound", err)
	}
	// The operator sees it too; another tenant does not.
	if _, err := op.FindVM(ctx, "life-1"); err != nil {
		t.Fatalf("operator FindVM: %v", err)
	}
	_, otherToken := liveFleet.Tenant(t, unique("life-other"), nil)
	other := fleetClient(t, otherToken)
	if _, err := other.FindVM(ctx, "life-1"); !sdk.IsNotFound(err) {
		t.Fatalf("another tenant's FindVM = %v, want IsNotFound", err)
	}
	wantStatus(t, "another tenant deleting it", other.DeleteVM(ctx, liveFleet.Node, id), http.StatusNotFound)

	for _, step := range []struct {
		verb  string
		call  func() (*sdk.FleetVM, error)
		state string
	}{
		{"pause", func() (*sdk.FleetVM, error) { return tenant.PauseVM(ctx, liveFleet.Node, id) }, sdk.StatePaused},
		{"resume", func() (*sdk.FleetVM, error) { return tenant.ResumeVM(ctx, liveFleet.Node, id) }, sdk.StateRunning},
		{"stop", func() (*sdk.FleetVM, error) { return tenant.StopVM(ctx, liveFleet.Node, id, 5*time.Second) }, sdk.StateStopped},
		{"start", func() (*sdk.FleetVM, error) { return tenant.StartVM(ctx, liveFleet.Node, "life-1") }, sdk.StateRunning},
		{"restart", func() (*sdk.FleetVM, error) { return tenant.RestartVM(ctx, liveFleet.Node, id) }, sdk.StateRunning},
	} {
		vm, err := step.call()
		if err != nil || vm.State != step.state || vm.Node != liveFleet.Node || vm.ID != id {
			t.Fatalf("%s = %+v, %v; want state %s", step.verb, vm, err, step.state)
		}
	}
	logs, err := tenant.Logs(ctx, liveFleet.Node, id, 2)
	if err != nil || strings.Count(string(logs), "\n") != 2 {
		t.Fatalf("logs --lines 2 = %q, %v", logs, err)
	}
	// The simulator runs no guest: exec is the node's 501, passed through.
	_, err = tenant.Exec(ctx, liveFleet.Node, id, sdk.ExecRequest{Command: sdk.Command{Argv: []string{"true"}}})
	wantStatus(t, "exec on sim", err, http.StatusNotImplemented)

	// Quota: max_vcpus 4 leaves room for 3 more vCPUs, not 4.
	_, err = tenant.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "life-2", Image: "life-img", VCPUs: 4, MemoryMiB: 256})
	if !sdk.IsQuota(wantStatus(t, "over max_vcpus", err, http.StatusTooManyRequests)) {
		t.Fatal("IsQuota is false for a 429")
	}
	// The same name again is the node's conflict; a size no node has is
	// central's "no placement".
	_, err = tenant.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "life-1", Image: "life-img", VCPUs: 1, MemoryMiB: 256})
	if !sdk.IsConflict(wantStatus(t, "duplicate name", err, http.StatusConflict)) {
		t.Fatal("IsConflict is false for a 409")
	}
	_, err = op.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "huge", Image: "life-img", VCPUs: 1000, MemoryMiB: 256})
	wantStatus(t, "no placement", err, http.StatusConflict)

	evs, err := tenant.ListEvents(ctx, sdk.EventQuery{Limit: 50})
	if err != nil || len(evs) == 0 {
		t.Fatalf("tenant events = %v, %v", evs, err)
	}
	for _, e := range evs {
		if e.Tenant != created.Tenant.ID {
			t.Fatalf("a tenant sees another's event: %+v", e)
		}
	}
	if evs, err := op.ListEvents(ctx, sdk.EventQuery{Limit: 1, Tenant: life}); err != nil || len(evs) != 1 || evs[0].Tenant != created.Tenant.ID {
		t.Fatalf("operator events of tenant life = %+v, %v", evs, err)
	}

	if err := tenant.DeleteVM(ctx, liveFleet.Node, id); err != nil {
		t.Fatal(err)
	}
	if list, err := tenant.ListVMs(ctx); err != nil || len(list.VMs) != 0 {
		t.Fatalf("after delete: %+v, %v", list, err)
	}
	rep, err := op.Reconcile(ctx)
	if err != nil || len(rep.NodesChecked) != 1 {
		t.Fatalf("reconcile = %+v, %v", rep, err)
	}

	// Quota patch: a number sets, nil removes, an absent key stays.
	five := int64(5)
	upd, err := op.UpdateTenant(ctx, life, sdk.UpdateTenantRequest{Quota: sdk.QuotaPatch{sdk.QuotaMaxVMs: &five, sdk.QuotaMaxVCPUs: nil}})
	if err != nil || upd.Quota.MaxVMs != 5 || upd.Quota.MaxVCPUs != 0 {
		t.Fatalf("update quota = %+v, %v", upd, err)
	}
	disabled := true
	if upd, err := op.UpdateTenant(ctx, created.Tenant.ID, sdk.UpdateTenantRequest{Disabled: &disabled}); err != nil || !upd.Disabled || upd.Quota.MaxVMs != 5 {
		t.Fatalf("disable = %+v, %v", upd, err)
	}
	_, err = tenant.TenantMe(ctx)
	if !sdk.IsForbidden(err) {
		t.Fatalf("a disabled tenant's call = %v, want IsForbidden", err)
	}
	rotated, err := op.RotateTenantToken(ctx, life)
	if err != nil || rotated.Token == created.Token {
		t.Fatalf("rotate = %+v, %v", rotated, err)
	}
	if _, err := tenant.TenantMe(ctx); !sdk.IsUnauthorized(err) {
		t.Fatalf("the old token after a rotation = %v, want IsUnauthorized", err)
	}
	if err := op.DeleteTenant(ctx, life); err != nil {
		t.Fatal(err)
	}
	if _, err := op.GetTenant(ctx, life); !sdk.IsNotFound(err) {
		t.Fatalf("get a deleted tenant = %v, want IsNotFound", err)
	}
	if err := op.DeleteImage(ctx, "life-img"); err != nil {
		t.Fatal(err)
	}
}

func TestFleetClientOperatorCallsAndRefusals(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)
	nodes, err := op.ListNodes(ctx)
	// fleettest's node listens on a unix socket: it advertises no URL, and
	// central reaches it through its channel.
	if err != nil || len(nodes) != 1 || nodes[0].Name != liveFleet.Node || nodes[0].State != sdk.NodeUp || nodes[0].URL != "" {
		t.Fatalf("nodes = %+v, %v", nodes, err)
	}
	n, err := op.GetNode(ctx, liveFleet.Node)
	if err != nil || len(n.Drivers) != 1 || !n.Drivers[0].Simulated || n.Capacity.Total.VCPUs != 8 {
		t.Fatalf("node = %+v, %v", n, err)
	}
	wantStatus(t, "unknown node", func() error { _, err := op.GetNode(ctx, "nope"); return err }(), http.StatusNotFound)

	pol, err := op.GetPolicy(ctx)
	if err != nil || pol.MinLeaseHours != 24 || !pol.Tunnels.Enabled {
		t.Fatalf("policy = %+v, %v", pol, err)
	}
	was := *pol
	pol.MinLeaseHours = 2
	pol.MaxSnapshotsPerVM = 7
	stored, err := op.PutPolicy(ctx, *pol)
	if err != nil || stored.MinLeaseHours != 24 || stored.MaxSnapshotsPerVM != 7 {
		t.Fatalf("put policy = %+v, %v; want min_lease_hours raised to 24", stored, err)
	}
	if _, err := op.PutPolicy(ctx, was); err != nil {
		t.Fatal(err)
	}
	// Two operators edit from one version: the second write is stale.
	_, v, err := op.GetPolicyVersion(ctx)
	if err != nil || v == "" {
		t.Fatalf("policy version = %q, %v", v, err)
	}
	edited := was
	edited.MaxSnapshotsPerVM = 9
	if _, v2, err := op.PutPolicyIfMatch(ctx, edited, v); err != nil || v2 == "" || v2 == v {
		t.Fatalf("put at the version read = %q, %v; want a new version", v2, err)
	}
	if _, _, err := op.PutPolicyIfMatch(ctx, was, v); !sdk.IsStale(err) {
		t.Fatalf("put at a stale version: %v; want IsStale", err)
	}
	if got, _ := op.GetPolicy(ctx); got == nil || got.MaxSnapshotsPerVM != 9 {
		t.Fatalf("policy after the stale write = %+v; want the first edit kept", got)
	}
	if _, err := op.PutPolicy(ctx, was); err != nil {
		t.Fatal(err)
	}

	refused := unique("refused")
	_, token := liveFleet.Tenant(t, refused, nil)
	tenant := fleetClient(t, token)
	for _, c := range []struct {
		what   string
		err    error
		status int
	}{
		{"tenant lists nodes", func() error { _, err := tenant.ListNodes(ctx); return err }(), http.StatusForbidden},
		{"tenant reads the policy", func() error { _, err := tenant.GetPolicy(ctx); return err }(), http.StatusForbidden},
		{"tenant creates a tenant", func() error { _, err := tenant.CreateTenant(ctx, sdk.CreateTenantRequest{Name: "x"}); return err }(), http.StatusForbidden},
		{"tenant gets a node", func() error { _, err := tenant.GetNode(ctx, liveFleet.Node); return err }(), http.StatusNotFound},
		{"operator asks for me", func() error { _, err := op.TenantMe(ctx); return err }(), http.StatusBadRequest},
		{"a duplicate tenant", func() error { _, err := op.CreateTenant(ctx, sdk.CreateTenantRequest{Name: refused}); return err }(), http.StatusConflict},
		{"no token", func() error { _, err := fleetClient(t, "").ListVMs(ctx); return err }(), http.StatusUnauthorized},
		{"unknown image", func() error {
			_, err := tenant.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "x", Image: "nope"})
			return err
		}(), http.StatusBadRequest},
	} {
		wantStatus(t, c.what, c.err, c.status)
	}

	// Nothing listens at a closed port: a ConnectError, IsUnavailable.
	down, err := sdk.NewFleetClient("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = down.ListVMs(ctx)
	var ce *sdk.ConnectError
	if !errors.As(err, &ce) || ce.Service != "central" || !sdk.IsUnavailable(err) {
		t.Fatalf("unreachable central = %v, want a *ConnectError for central", err)
	}
}

// TestFleetTypesCarryCentralsJSONUnchanged decodes what central answers on
// every GET route strictly (a field the SDK lacks fails) and encodes it
// again: fluxctl's -o json prints the SDK's types, so they must give back
// the API's JSON.
func TestFleetTypesCarryCentralsJSONUnchanged(t *testing.T) {
	ctx := t.Context()
	op := fleetClient(t, liveFleet.OperatorToken)
	liveFleet.CatalogImage(t, "raw-img")
	raw := unique("raw")
	_, token := liveFleet.Tenant(t, raw, map[string]int64{"max_vms": 3, "max_snapshots_per_vm": 0})
	tenant := fleetClient(t, token)
	vm, err := tenant.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: "raw-1", Image: "raw-img", TTLSeconds: 3600, Labels: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.DeleteVM(context.Background(), vm.Node, vm.VM.ID) })
	vm2, err := tenant.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: "raw-2", Image: "raw-img"}, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tenant.DeleteVM(context.Background(), vm2.Node, vm2.VM.ID) })
	if _, err := op.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	key, err := tenant.CreateKey(ctx, "", sdk.CreateKeyRequest{Name: "raw-key"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fleetClient(t, key.Token).TenantMe(ctx); err != nil { // so that it has been used
		t.Fatal(err)
	}

	for _, c := range []struct {
		path, token string
		into        any
	}{
		{"/healthz", "", &sdk.FleetHealth{}},
		{"/fleet/nodes", liveFleet.OperatorToken, &sdk.FleetNodeList{}},
		{"/fleet/nodes/" + liveFleet.Node, liveFleet.OperatorToken, &sdk.FleetNode{}},
		{"/fleet/capacity", token, &sdk.CapacityReport{}},
		{"/fleet/tenants", liveFleet.OperatorToken, &sdk.TenantList{}},
		{"/fleet/tenants/" + raw, liveFleet.OperatorToken, &sdk.Tenant{}},
		{"/fleet/tenants/me", token, &sdk.TenantMe{}},
		{"/fleet/tenants/me/keys", key.Token, &sdk.APIKeyList{}},
		{"/fleet/tenants/" + raw + "/keys", liveFleet.OperatorToken, &sdk.APIKeyList{}},
		{"/fleet/policy", liveFleet.OperatorToken, &sdk.Policy{}},
		{"/fleet/images", token, &sdk.ImageList{}},
		{"/fleet/vms", token, &sdk.FleetVMList{}},
		{"/fleet/vms", liveFleet.OperatorToken, &sdk.FleetVMList{}},
		{"/fleet/events?limit=20", liveFleet.OperatorToken, &sdk.EventList{}},
	} {
		roundTrips(t, "GET "+c.path, rawGet(t, c.path, c.token), c.into)
	}
}

// roundTrips decodes central's answer raw into the SDK type behind into
// strictly (a field the SDK lacks fails) and checks that encoding it again
// gives central's JSON back.
func roundTrips(t *testing.T, what string, raw []byte, into any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: the SDK's %T cannot hold central's answer: %v\n%s", what, into, err, raw)
	}
	again, err := json.Marshal(into)
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	_ = json.Unmarshal(raw, &want)
	_ = json.Unmarshal(again, &got)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("%s: the SDK's %T does not give back central's JSON\ncentral: %s\nsdk:     %s", what, into, raw, again)
	}
}

func rawGet(t *testing.T, path, token string) []byte {
	t.Helper()
	return rawDo(t, http.MethodGet, path, token, nil)
}

// rawDo calls central without the SDK and returns the body of a 200.
func rawDo(t *testing.T, method, path, token string, body []byte) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, liveFleet.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s = %d %s", method, path, resp.StatusCode, b)
	}
	return b
}

func TestLaunchAndWaitReturnsTheVMWhenTheWaitFails(t *testing.T) {
	liveFleet.CatalogImage(t, "wait-img")
	_, token := liveFleet.Tenant(t, unique("waiter"), nil)
	tenant := fleetClient(t, token)
	// A deadline too short for the guest agent (the sim boots in 100 ms).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	resp, err := tenant.LaunchAndWait(ctx, sdk.FleetCreateVMRequest{Name: "wait-1", Image: "wait-img"}, 10*time.Millisecond)
	if resp == nil {
		// The create itself may not fit in 30 ms on a slow machine.
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("LaunchAndWait = %v, want the deadline", err)
		}
		t.Skip("the create took longer than the deadline; nothing to check")
	}
	if !errors.Is(err, context.DeadlineExceeded) || resp.VM.ID == "" || resp.Node != liveFleet.Node {
		t.Fatalf("LaunchAndWait = %+v, %v; want the created VM with the deadline", resp, err)
	}
	if err := tenant.DeleteVM(t.Context(), resp.Node, resp.VM.ID); err != nil {
		t.Fatalf("delete the VM a failed wait returned: %v", err)
	}
}

func TestFindVMRefusesAnAmbiguousIDPrefix(t *testing.T) {
	liveFleet.CatalogImage(t, "amb-img")
	_, token := liveFleet.Tenant(t, unique("amb"), nil)
	tenant := fleetClient(t, token)
	ctx := t.Context()
	for _, name := range []string{"amb-1", "amb-2"} {
		resp, err := tenant.CreateVM(ctx, sdk.FleetCreateVMRequest{Name: name, Image: "amb-img"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tenant.DeleteVM(context.Background(), resp.Node, resp.VM.ID) })
	}
	// NODE/ with nothing after it names no VM.
	_, err := tenant.FindVM(ctx, liveFleet.Node+"/")
	if !sdk.IsNotFound(err) {
		t.Fatalf("FindVM of NODE/ = %v, want not found", err)
	}
	// Every VM ID starts with "vm-".
	_, err = tenant.FindVM(ctx, "vm-")
	var amb *sdk.AmbiguousVMError
	if !errors.As(err, &amb) || len(amb.Matches) != 2 || !strings.Contains(err.Error(), "amb-1") || !strings.Contains(err.Error(), "amb-2") {
		t.Fatalf("FindVM(\"vm-\") = %v, want an *AmbiguousVMError naming both", err)
	}
}
