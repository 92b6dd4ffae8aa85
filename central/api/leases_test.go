package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// Tests of leases, scrub and drain with real sim nodes, an embedded etcd
// and a central whose clock the test moves (api.Options.Now).

// lxClock is a settable clock.
type lxClock struct{ ns atomic.Int64 }

func (c *lxClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *lxClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newLxClock(t time.Time) *lxClock {
	c := &lxClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func lxHours(h int) time.Duration { return time.Duration(h) * time.Hour }

func lxJSON(t testing.TB, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// newLxCentral is a central on st whose clock is c.
func newLxCentral(t testing.TB, st *store.Store, c *lxClock) *fxCentral {
	t.Helper()
	srv := api.New(api.Options{Store: st, FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second, Now: c.now})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &fxCentral{st: st, srv: srv, url: hs.URL}
}

// startLxNode is startFxNode with the sim plugin's guest systems and
// macOS slots chosen: a node whose sim runs only linux is not a Mac.
func startLxNode(t testing.TB, name, centralURL, imagesDir string, vcpus, memoryMiB int64, guestOS ...string) *fxNode {
	t.Helper()
	return startSimNode(t, name, centralURL, imagesDir, vcpus, memoryMiB, 50, guestOS...)
}

// startSimNode is startLxNode with the sim's boot delay chosen: its VMs'
// guest agents answer bootDelayMS after they start.
func startSimNode(t testing.TB, name, centralURL, imagesDir string, vcpus, memoryMiB, bootDelayMS int64, guestOS ...string) *fxNode {
	t.Helper()
	dir := fxTempDir(t)
	n := &fxNode{t: t, name: name, admin: "node-admin-" + strconv.FormatInt(time.Now().UnixNano(), 16),
		bin: drivertest.Build(t, "../..", "./cmd/fluxvm-agent"), config: filepath.Join(dir, "node.hcl"), log: filepath.Join(dir, "node.log")}
	addr := freeAddr(t)
	n.url = "http://" + addr
	oses := `"` + strings.Join(guestOS, `", "`) + `"`
	hcl := fmt.Sprintf(`name = %q
state_dir = %q
listen = %q
tokens {
  admin = [%q, %q]
}
policy { allowed_image_dirs = [%q] }
plugin "sim" {
  config {
    boot_delay_ms = %d
    vcpus         = %d
    memory_mib    = %d
    macos_slots   = 2
    guest_os      = [%s]
  }
}
central {
  url   = %q
  token = %q
}
`, name, filepath.Join(dir, "state"), addr, n.admin, fxToken, imagesDir, bootDelayMS, vcpus, memoryMiB, oses, centralURL, fxToken)
	if err := os.WriteFile(n.config, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() {
			b, _ := os.ReadFile(n.log)
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("node %s log:\n%s", name, b)
		}
	})
	n.start()
	return n
}

func freeAddr(t testing.TB) string {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	addr := hs.Listener.Addr().String()
	hs.Listener.Close()
	return addr
}

// nodeVMs lists a node's VMs through its own API.
func nodeVMs(t testing.TB, n *fxNode) []sdk.VM {
	t.Helper()
	var list sdk.VMList
	fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list)
	return list.VMs
}

type lxLease struct {
	store.Lease
	Active bool `json:"active"`
}

// TestLeaseLifecycleWithRealNodes walks leases through their life on three
// real sim nodes (two Macs of different sizes and a Linux host) with an
// injected clock: macOS refused without a lease; the lease takes the
// smallest eligible Mac; max_leased_hosts; the lessee's view of its node;
// macOS guests land on the leased Mac up to its 2 slots and the third is
// refused by name; another tenant's VM never lands there; release refused
// at hour 23 and allowed at 24, deleting the lessee's VMs and leaving the
// node scrub pending; scrub refused while a VM remains, forced; an expiring
// lease ended by the reconciler; concurrent leases of one node have one
// winner; drain evict-ephemeral deletes only the ephemeral VMs.
func TestLeaseLifecycleWithRealNodes(t *testing.T) {
	st := fxStore(t, nil)
	clock := newLxClock(time.Now().UTC())
	c := newLxCentral(t, st, clock)
	c2 := newLxCentral(t, fxStore(t, st.Endpoints()), clock) // a second central on the same etcd
	images, img := fxImages(t)
	nodes := map[string]*fxNode{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, spec := range []struct {
		name       string
		vcpus, mem int64
		os         []string
	}{
		{"mac-big", 16, 65536, []string{"linux", "macos"}},
		{"mac-small", 8, 32768, []string{"linux", "macos"}},
		{"linux-1", 16, 65536, []string{"linux"}},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := startLxNode(t, spec.name, c.url, images, spec.vcpus, spec.mem, spec.os...)
			mu.Lock()
			nodes[spec.name] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fxWaitUp(t, c.url, "mac-big", "mac-small", "linux-1")
	fxMust(t, "PUT", c.url+"/fleet/images/macos", fxToken, map[string]any{"guest_os": "macos", "image": img, "vcpus": 2, "memory_mib": 1024}, http.StatusCreated, nil)
	fxMust(t, "PUT", c.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	acmeID, acme := fxTenant(t, c.url, "acme", map[string]int64{"max_leased_hosts": 1})
	_, other := fxTenant(t, c.url, "other", nil)

	vm := func(token string, body map[string]any) (int, sdk.FleetCreateVMResponse, string) {
		t.Helper()
		code, data := fxCall(t, "POST", c.url+"/fleet/vms", token, body)
		var r sdk.FleetCreateVMResponse
		if code == http.StatusCreated {
			lxJSON(t, data, &r)
		}
		return code, r, string(data)
	}

	// No lease: a tenant's macOS guest is refused, naming the rule.
	if code, _, body := vm(acme, map[string]any{"name": "mac-0", "image": "macos"}); code != http.StatusConflict || !strings.Contains(body, "require_lease_for_macos") {
		t.Fatalf("macOS guest without a lease: %d %s", code, body)
	}
	// A tenant may not lease a Linux host or use the operator's fields.
	fxMust(t, "POST", c.url+"/fleet/leases", acme, map[string]any{"any_node": true}, http.StatusForbidden, nil)
	if code, body := fxCall(t, "POST", c.url+"/fleet/leases", acme, map[string]any{"node": "linux-1"}); code != http.StatusConflict || !strings.Contains(string(body), "not a Mac") {
		t.Fatalf("tenant leasing a Linux host: %d %s", code, body)
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/leases", acme, map[string]any{"hours": 5}); code != http.StatusBadRequest || !strings.Contains(string(body), "24") {
		t.Fatalf("5-hour lease: %d %s", code, body)
	}

	// The lease takes the smallest eligible Mac.
	var lease lxLease
	fxMust(t, "POST", c.url+"/fleet/leases", acme, map[string]any{}, http.StatusCreated, &lease)
	if lease.Node != "mac-small" || lease.Tenant != acmeID || !lease.Active || !lease.MinEnd.Equal(lease.StartedAt.Add(24*time.Hour)) || !lease.EndsAt.IsZero() {
		t.Fatalf("lease %+v: want mac-small for %s, open-ended, minimum 24 h", lease, acmeID)
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/leases", acme, map[string]any{}); code != http.StatusTooManyRequests || !strings.Contains(string(body), "max_leased_hosts") {
		t.Fatalf("second lease over max_leased_hosts 1: %d %s", code, body)
	}
	// The lessee sees its node without its address; others see nothing.
	code, body := fxCall(t, "GET", c.url+"/fleet/nodes/mac-small", acme, nil)
	if code != http.StatusOK || strings.Contains(string(body), nodes["mac-small"].url) || !strings.Contains(string(body), `"free"`) {
		t.Fatalf("lessee's view of its node: %d %s", code, body)
	}
	fxMust(t, "GET", c.url+"/fleet/nodes/mac-small", other, nil, http.StatusNotFound, nil)
	fxMust(t, "GET", c.url+"/fleet/nodes/mac-big", acme, nil, http.StatusNotFound, nil)
	fxMust(t, "GET", c.url+"/fleet/leases/"+lease.ID, other, nil, http.StatusNotFound, nil)
	var list struct{ Leases []lxLease }
	fxMust(t, "GET", c.url+"/fleet/leases", other, nil, http.StatusOK, &list)
	if len(list.Leases) != 0 {
		t.Fatalf("another tenant lists %d leases", len(list.Leases))
	}

	// macOS guests land on the leased Mac, two at most; the third is refused by name.
	for i := range 2 {
		code, r, body := vm(acme, map[string]any{"name": fmt.Sprintf("mac-%d", i+1), "image": "macos"})
		if code != http.StatusCreated || r.Node != "mac-small" {
			t.Fatalf("macOS guest %d: %d %s", i+1, code, body)
		}
	}
	if code, _, body := vm(acme, map[string]any{"name": "mac-3", "image": "macos"}); code != http.StatusConflict || !strings.Contains(body, "no Mac leased by "+acmeID+" has a free macOS slot") {
		t.Fatalf("third macOS guest: %d %s", code, body)
	}
	// Another tenant never lands on the leased host, even pinned there.
	for i := range 3 {
		code, r, body := vm(other, map[string]any{"name": fmt.Sprintf("o-%d", i), "image": "linux", "vcpus": 4})
		if code != http.StatusCreated || r.Node == "mac-small" {
			t.Fatalf("other tenant's vm %d: %d on %s %s", i, code, r.Node, body)
		}
	}
	if code, _, body := vm(other, map[string]any{"name": "o-pinned", "image": "linux", "node": "mac-small"}); code != http.StatusConflict || !strings.Contains(body, "leased by another tenant") {
		t.Fatalf("other tenant pinned onto the leased host: %d %s", code, body)
	}

	// Release: refused at hour 23 saying when, a tenant cannot force it, allowed at 24.
	clock.advance(lxHours(23))
	code, body = fxCall(t, "POST", c.url+"/fleet/leases/"+lease.ID+"/release", acme, nil)
	if code != http.StatusConflict || !strings.Contains(string(body), lease.MinEnd.Format(time.RFC3339)) {
		t.Fatalf("release at hour 23: %d %s", code, body)
	}
	fxMust(t, "POST", c.url+"/fleet/leases/"+lease.ID+"/release?force=true", acme, nil, http.StatusForbidden, nil)
	clock.advance(lxHours(1))
	var released lxLease
	fxMust(t, "POST", c2.url+"/fleet/leases/"+lease.ID+"/release", acme, nil, http.StatusOK, &released)
	if released.Active || released.EndReason != "released" || !released.VMsRemoved {
		t.Fatalf("released lease: %+v", released)
	}
	fxMust(t, "POST", c.url+"/fleet/leases/"+lease.ID+"/release", acme, nil, http.StatusConflict, nil)
	for _, v := range nodeVMs(t, nodes["mac-small"]) {
		t.Fatalf("vm %s (%s) left on the node after the lease ended", v.Name, v.Tenant)
	}
	if running, _ := st.RunningForTenant(context.Background(), acmeID); len(running) != 0 {
		t.Fatalf("%d ledger entries of acme still running", len(running))
	}
	n := fxNodeState(t, c.url, "mac-small")
	if !n.ScrubPending || n.LeasedBy != "" {
		t.Fatalf("node after release: scrub_pending %v leased_by %q", n.ScrubPending, n.LeasedBy)
	}
	// Scrub pending: no placement, no lease.
	if code, _, body := vm(fxToken, map[string]any{"name": "op-1", "image": "linux", "node": "mac-small"}); code != http.StatusConflict || !strings.Contains(body, "scrub") {
		t.Fatalf("operator vm on a scrub-pending node: %d %s", code, body)
	}
	fxMust(t, "POST", c.url+"/fleet/leases", fxToken, map[string]any{"tenant": "acme", "node": "mac-small"}, http.StatusConflict, nil)

	// Scrub: refused while a VM remains (one made on the node directly), forced.
	fxMust(t, "POST", nodes["mac-small"].url+"/v1/vms", nodes["mac-small"].admin,
		map[string]any{"name": "stray", "image": img, "vcpus": 1, "memory_mib": 128}, http.StatusCreated, nil)
	if code, body := fxCall(t, "POST", c.url+"/fleet/nodes/mac-small/scrub", fxToken, nil); code != http.StatusConflict || !strings.Contains(string(body), "stray") {
		t.Fatalf("scrub with a vm left: %d %s", code, body)
	}
	var scrub sdk.ScrubResult
	fxMust(t, "POST", c.url+"/fleet/nodes/mac-small/scrub?force=true", fxToken, nil, http.StatusOK, &scrub)
	if scrub.ScrubPending || len(scrub.Deleted) != 1 || len(nodeVMs(t, nodes["mac-small"])) != 0 ||
		scrub.Proof != "the node lists no VM and no VM workspace" {
		t.Fatalf("forced scrub: %+v", scrub)
	}
	// The node's proof is its disk: no VM folder is left.
	vmsDir := filepath.Join(filepath.Dir(nodes["mac-small"].config), "state", "drivers", "sim", "vms")
	if entries, err := os.ReadDir(vmsDir); err != nil || len(entries) != 0 {
		t.Fatalf("after the scrub %s holds %v (%v)", vmsDir, entries, err)
	}

	// An expiring lease: the operator leases mac-small for acme for 48 h; the
	// reconciler ends it when the time passes.
	lease = lxLease{}
	fxMust(t, "POST", c.url+"/fleet/leases", fxToken, map[string]any{"tenant": "acme", "hours": 48}, http.StatusCreated, &lease)
	if lease.Node != "mac-small" || !lease.EndsAt.Equal(lease.StartedAt.Add(48*time.Hour)) {
		t.Fatalf("48-hour lease: %+v", lease)
	}
	if code, r, body := vm(acme, map[string]any{"name": "mac-4", "image": "macos"}); code != http.StatusCreated || r.Node != "mac-small" {
		t.Fatalf("macOS guest on the second lease: %d %s", code, body)
	}
	var rep sdk.ReconcileReport
	fxMust(t, "POST", c.url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	if len(rep.LeasesEnded) != 0 {
		t.Fatalf("reconcile before the end ended %v", rep.LeasesEnded)
	}
	clock.advance(lxHours(48))
	fxMust(t, "POST", c2.url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	if len(rep.LeasesEnded) != 1 || rep.LeasesEnded[0] != lease.ID {
		t.Fatalf("reconcile after the end: leases_ended %v, want [%s]", rep.LeasesEnded, lease.ID)
	}
	fxMust(t, "GET", c.url+"/fleet/leases/"+lease.ID, acme, nil, http.StatusOK, &lease)
	if lease.Active || lease.EndReason != "expired" || !lease.VMsRemoved {
		t.Fatalf("expired lease: %+v", lease)
	}
	if vms := nodeVMs(t, nodes["mac-small"]); len(vms) != 0 || !fxNodeState(t, c.url, "mac-small").ScrubPending {
		t.Fatalf("after expiry: %d vms, want none and scrub pending", len(vms))
	}
	fxMust(t, "POST", c.url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	if len(rep.LeasesEnded) != 0 {
		t.Fatalf("a second pass ended %v again", rep.LeasesEnded)
	}
	// A VM folder no VM owns (a create cut short) keeps the scrub from
	// passing; force has the node destroy it.
	if err := os.MkdirAll(filepath.Join(vmsDir, "vm-leftover"), 0o700); err != nil {
		t.Fatal(err)
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/nodes/mac-small/scrub", fxToken, nil); code != http.StatusConflict ||
		!strings.Contains(string(body), "sim/vm-leftover") || !strings.Contains(string(body), "force=true") {
		t.Fatalf("scrub with a leftover workspace: %d %s", code, body)
	}
	scrub = sdk.ScrubResult{}
	fxMust(t, "POST", c.url+"/fleet/nodes/mac-small/scrub?force=true", fxToken, nil, http.StatusOK, &scrub)
	if len(scrub.WorkspacesRemoved) != 1 || scrub.WorkspacesRemoved[0] != "sim/vm-leftover" || scrub.ScrubPending {
		t.Fatalf("forced scrub of a leftover workspace: %+v", scrub)
	}
	if entries, _ := os.ReadDir(vmsDir); len(entries) != 0 {
		t.Fatalf("after the forced scrub %s holds %v", vmsDir, entries)
	}
	// With nothing left, a plain scrub passes.
	scrub = sdk.ScrubResult{}
	fxMust(t, "POST", c.url+"/fleet/nodes/mac-small/scrub", fxToken, nil, http.StatusOK, &scrub)
	if len(scrub.Deleted) != 0 || len(scrub.WorkspacesRemoved) != 0 || scrub.Proof != "the node lists no VM and no VM workspace" {
		t.Fatalf("plain scrub of a clean node: %+v", scrub)
	}

	// Concurrent leases of one node through two centrals: one winner.
	var tokens []string
	for i := range 6 {
		_, tok := fxTenant(t, c.url, fmt.Sprintf("racer-%d", i), nil)
		tokens = append(tokens, tok)
	}
	codes := make([]int, 12)
	var race sync.WaitGroup
	start := make(chan struct{})
	for i := range codes {
		race.Add(1)
		go func() {
			defer race.Done()
			<-start
			codes[i], _ = fxCall(t, "POST", []*fxCentral{c, c2}[i%2].url+"/fleet/leases", tokens[i%6], map[string]any{"node": "mac-small"})
		}()
	}
	close(start)
	race.Wait()
	won := 0
	for _, code := range codes {
		switch code {
		case http.StatusCreated:
			won++
		case http.StatusConflict:
		default:
			t.Errorf("concurrent lease: %d", code)
		}
	}
	if won != 1 {
		t.Fatalf("%d concurrent leases of one node won, want 1 (%v)", won, codes)
	}

	// Drain evict-ephemeral on linux-1: the TTL and labelled VMs go, the plain one stays.
	for _, v := range []map[string]any{
		{"name": "d-ttl", "image": "linux", "node": "linux-1", "ttl_seconds": 3600},
		{"name": "d-label", "image": "linux", "node": "linux-1", "labels": map[string]string{"fluxvm.dev/ephemeral": "true"}},
		{"name": "d-plain", "image": "linux", "node": "linux-1"},
	} {
		if code, _, body := vm(fxToken, v); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", v["name"], code, body)
		}
	}
	fxMust(t, "GET", c.url+"/fleet/nodes/linux-1/drain", fxToken, nil, http.StatusNotFound, nil)
	fxMust(t, "POST", c.url+"/fleet/nodes/linux-1/drain?mode=sideways", fxToken, nil, http.StatusBadRequest, nil)
	var drain struct {
		Finished bool `json:"finished"`
		Draining bool `json:"draining"`
		VMs      []sdk.DrainVM
	}
	fxMust(t, "POST", c.url+"/fleet/nodes/linux-1/drain?mode=evict-ephemeral", fxToken, nil, http.StatusOK, &drain)
	fxMust(t, "GET", c2.url+"/fleet/nodes/linux-1/drain", fxToken, nil, http.StatusOK, &drain)
	actions := map[string]string{}
	for _, v := range drain.VMs {
		actions[v.Name] = v.Action
	}
	if !drain.Finished || !drain.Draining || actions["d-ttl"] != "deleted" || actions["d-label"] != "deleted" || actions["d-plain"] != "kept" {
		t.Fatalf("drain status: %+v", drain)
	}
	left := nodeVMs(t, nodes["linux-1"])
	names := []string{}
	for _, v := range left {
		if strings.HasPrefix(v.Name, "d-") {
			names = append(names, v.Name)
		}
	}
	if len(names) != 1 || names[0] != "d-plain" {
		t.Fatalf("drained node keeps %v, want [d-plain]", names)
	}
	if code, _, body := vm(fxToken, map[string]any{"name": "d-new", "image": "linux", "node": "linux-1"}); code != http.StatusConflict {
		t.Fatalf("vm on a draining node: %d %s", code, body)
	}
	// A leased node needs force.
	var leased lxLease
	fxMust(t, "GET", c.url+"/fleet/leases?active=true", fxToken, nil, http.StatusOK, &list)
	for _, l := range list.Leases {
		if l.Node == "mac-small" {
			leased = l
		}
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/nodes/mac-small/drain", fxToken, nil); code != http.StatusConflict || !strings.Contains(string(body), leased.ID) {
		t.Fatalf("drain of a leased node without force: %d %s", code, body)
	}
	fxMust(t, "POST", c.url+"/fleet/nodes/linux-1/uncordon", fxToken, nil, http.StatusOK, nil)
	if code, _, body := vm(fxToken, map[string]any{"name": "d-new", "image": "linux", "node": "linux-1"}); code != http.StatusCreated {
		t.Fatalf("vm after uncordon: %d %s", code, body)
	}

	// A lease end whose VM deletes cannot finish (the node is gone for a
	// moment) is finished by the next reconcile pass.
	lease = lxLease{}
	fxMust(t, "POST", c.url+"/fleet/leases", fxToken, map[string]any{"tenant": acmeID, "node": "mac-big"}, http.StatusCreated, &lease)
	if code, r, body := vm(acme, map[string]any{"name": "mac-5", "image": "macos"}); code != http.StatusCreated || r.Node != "mac-big" {
		t.Fatalf("macOS guest on mac-big: %d %s", code, body)
	}
	big := nodes["mac-big"]
	big.kill()
	clock.advance(lxHours(24))
	released = lxLease{}
	fxMust(t, "POST", c.url+"/fleet/leases/"+lease.ID+"/release", acme, nil, http.StatusOK, &released)
	if released.Active || released.VMsRemoved {
		t.Fatalf("release with the node away: %+v, want ended with vms_removed false", released)
	}
	big.start()
	fxMust(t, "POST", c2.url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	var after lxLease
	fxMust(t, "GET", c.url+"/fleet/leases/"+lease.ID, acme, nil, http.StatusOK, &after)
	if after.ID != lease.ID || !after.VMsRemoved || len(nodeVMs(t, big)) != 0 {
		t.Fatalf("after the next pass: vms_removed %v, %d vms on the node", after.VMsRemoved, len(nodeVMs(t, big)))
	}
}
