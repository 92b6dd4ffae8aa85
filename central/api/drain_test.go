package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Tests of drain modes (cordon, evict-ephemeral, reschedule) with real sim
// nodes, and of a leader that dies in the middle of a drain.

type dxDrain struct {
	store.Drain
	Draining bool `json:"draining"`
}

func (d *dxDrain) actions() map[string]string {
	out := map[string]string{}
	for _, v := range d.VMs {
		a := v.Action
		if v.MovedTo != "" {
			a += " " + v.MovedTo
		}
		if v.Error != "" {
			a += ": " + v.Error
		}
		out[v.Name] = a
	}
	return out
}

// dxSetup starts a central on an embedded etcd and the named linux sim nodes
// (8 vCPUs, 8 GiB each), with a catalog image "linux".
func dxSetup(t *testing.T, clock *lxClock, names ...string) (*fxCentral, map[string]*fxNode) {
	t.Helper()
	st := fxStore(t, nil)
	c := newLxCentral(t, st, clock)
	images, img := fxImages(t)
	nodes := map[string]*fxNode{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := startLxNode(t, name, c.url, images, 8, 8192, "linux")
			mu.Lock()
			nodes[name] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fxWaitUp(t, c.url, names...)
	fxMust(t, "PUT", c.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	return c, nodes
}

func dxNames(vms []sdk.VM) []string {
	var out []string
	for _, vm := range vms {
		out = append(out, vm.Name)
	}
	sort.Strings(out)
	return out
}

// TestDrainModes: on a node with an ephemeral VM (TTL), an ephemeral one
// (label), a reschedulable one and a plain one, each mode does what it says
// and the status tells it; the reschedule fits a tenant that is at its VM
// quota (the copy replaces the old VM for the quota).
func TestDrainModes(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	c, nodes := dxSetup(t, clock, "src", "dst")
	// Four VMs: exactly the quota, so only a replacement can be placed.
	_, acme := fxTenant(t, c.url, "acme", map[string]int64{"max_vms": 4})
	mk := func(body map[string]any) {
		t.Helper()
		body["image"], body["node"] = "linux", "src"
		fxMust(t, "POST", c.url+"/fleet/vms", acme, body, http.StatusCreated, nil)
	}
	mkEphemeral := func() {
		t.Helper()
		mk(map[string]any{"name": "eph-ttl", "ttl_seconds": 3600})
		mk(map[string]any{"name": "eph-label", "labels": map[string]string{"fluxvm.dev/ephemeral": "true"}})
	}
	mkEphemeral()
	mk(map[string]any{"name": "mover", "reschedulable": true, "labels": map[string]string{"app": "web"}})
	mk(map[string]any{"name": "plain"})
	// A fifth is over the quota.
	if code, body := fxCall(t, "POST", c.url+"/fleet/vms", acme, map[string]any{"name": "extra", "image": "linux"}); code != http.StatusTooManyRequests {
		t.Fatalf("fifth vm: %d %s", code, body)
	}
	drain := func(mode string) dxDrain {
		t.Helper()
		var d dxDrain
		fxMust(t, "POST", c.url+"/fleet/nodes/src/drain?mode="+mode, fxToken, nil, http.StatusOK, &d)
		var st dxDrain
		fxMust(t, "GET", c.url+"/fleet/nodes/src/drain", fxToken, nil, http.StatusOK, &st)
		if !st.Finished || !st.Draining || st.Mode != mode {
			t.Fatalf("%s: status %+v", mode, st)
		}
		return st
	}
	uncordon := func() {
		t.Helper()
		fxMust(t, "POST", c.url+"/fleet/nodes/src/uncordon", fxToken, nil, http.StatusOK, nil)
	}

	// cordon: everything stays.
	d := drain("cordon")
	want := map[string]string{"eph-ttl": "kept", "eph-label": "kept", "mover": "kept", "plain": "kept"}
	if got := d.actions(); !mapsEqual(got, want) {
		t.Fatalf("cordon: %v, want %v", got, want)
	}
	if got := dxNames(nodeVMs(t, nodes["src"])); len(got) != 4 {
		t.Fatalf("cordon left %v", got)
	}
	uncordon()

	// evict-ephemeral: the two ephemeral VMs go.
	d = drain("evict-ephemeral")
	want = map[string]string{"eph-ttl": "deleted", "eph-label": "deleted", "mover": "kept", "plain": "kept"}
	if got := d.actions(); !mapsEqual(got, want) {
		t.Fatalf("evict-ephemeral: %v, want %v", got, want)
	}
	if got := dxNames(nodeVMs(t, nodes["src"])); !slices.Equal(got, []string{"mover", "plain"}) {
		t.Fatalf("evict-ephemeral left %v", got)
	}
	uncordon()

	// reschedule: ephemeral deleted, the reschedulable one moves to dst
	// (same name, same tenant, same labels), the plain one stays.
	mkEphemeral()
	d = drain("reschedule")
	want = map[string]string{"eph-ttl": "deleted", "eph-label": "deleted", "mover": "moved dst", "plain": "kept"}
	if got := d.actions(); !mapsEqual(got, want) {
		t.Fatalf("reschedule: %v, want %v", got, want)
	}
	if got := dxNames(nodeVMs(t, nodes["src"])); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("reschedule left %v on src", got)
	}
	moved := nodeVMs(t, nodes["dst"])
	if len(moved) != 1 || moved[0].Name != "mover" || moved[0].Labels["app"] != "web" || moved[0].Tenant == "" {
		t.Fatalf("dst runs %+v", moved)
	}
	// The tenant sees it on dst, and its quota counts two VMs now.
	var list sdk.FleetVMList
	fxMust(t, "GET", c.url+"/fleet/vms", acme, nil, http.StatusOK, &list)
	where := map[string]string{}
	for _, v := range list.VMs {
		where[v.Name] = v.Node
	}
	if len(where) != 2 || where["mover"] != "dst" || where["plain"] != "src" {
		t.Fatalf("tenant's vms: %v", where)
	}
	// The copy is reschedulable in turn (its spec went with it): draining
	// dst moves it nowhere, since src is draining, and says why.
	code, body := fxCall(t, "POST", c.url+"/fleet/nodes/dst/drain?mode=reschedule", fxToken, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"failed"`) || !strings.Contains(string(body), "no other node") {
		t.Fatalf("drain of dst with nowhere to go: %d %s", code, body)
	}
	uncordon()
	fxMust(t, "POST", c.url+"/fleet/nodes/dst/uncordon", fxToken, nil, http.StatusOK, nil)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestDrainLeaderDies: central A starts a reschedule drain and dies (its
// etcd client closed, its session never revoked) while the copy's create
// hangs on the target node. Central B, on the same etcd, takes the drain up
// in its reconcile pass: it finds the copy A made (not recorded), records
// it, deletes the old VM and finishes the drain; nothing is created twice
// and the node is not left draining with nothing to do.
func TestDrainLeaderDies(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	stE := fxStore(t, nil) // owns the etcd
	stA := fxStore(t, stE.Endpoints())
	stB := fxStore(t, stE.Endpoints())
	// A's server is closed without waiting for its handlers: the dead
	// central's drain goes on failing against its closed client for a while.
	aSrv := api.New(api.Options{Store: stA, FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second, Now: clock.now})
	aHS := httptest.NewServer(aSrv)
	t.Cleanup(func() { _ = aHS.Config.Close() })
	a := &fxCentral{st: stA, srv: aSrv, url: aHS.URL}
	b := newLxCentral(t, stB, clock)
	images, img := fxImages(t)
	var src, dst *fxNode
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); src = startLxNode(t, "src", b.url, images, 8, 8192, "linux") }()
	go func() { defer wg.Done(); dst = startLxNode(t, "dst", b.url, images, 8, 8192, "linux") }()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fxWaitUp(t, b.url, "src", "dst")
	fxMust(t, "PUT", b.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	_, acme := fxTenant(t, b.url, "acme", nil)
	for _, body := range []map[string]any{
		{"name": "mover", "reschedulable": true},
		{"name": "eph", "ttl_seconds": 3600},
		{"name": "plain"},
	} {
		body["image"], body["node"] = "linux", "src"
		fxMust(t, "POST", b.url+"/fleet/vms", acme, body, http.StatusCreated, nil)
	}

	// dst stops answering: A's create of the copy hangs there.
	if err := dst.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	go func() {
		// A's answer does not matter (A is about to die), and it may come
		// after the test: no t here.
		req, _ := http.NewRequest("POST", a.url+"/fleet/nodes/src/drain?mode=reschedule", nil)
		req.Header.Set("Authorization", "Bearer "+fxToken)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	ctx := context.Background()
	fxWait(t, "drain pending on dst", 20*time.Second, func() bool {
		d, err := stB.GetDrain(ctx, "src")
		if err != nil {
			return false
		}
		for _, v := range d.VMs {
			if v.Name == "mover" && v.Action == "pending" && v.MovedTo == "dst" {
				return true
			}
		}
		return false
	})
	// A dies: its etcd client goes without resigning or revoking anything.
	_ = stA.Client().Close()
	if err := dst.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The copy appears on dst (the node finishes the create A asked for).
	fxWait(t, "copy on dst", 20*time.Second, func() bool { return len(nodeVMs(t, dst)) == 1 })

	// B reconciles a couple of minutes later (ResumeDrains waits a minute
	// for an unfinished drain nobody touches).
	clock.advance(2 * time.Minute)
	if _, err := b.srv.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	var st dxDrain
	fxMust(t, "GET", b.url+"/fleet/nodes/src/drain", fxToken, nil, http.StatusOK, &st)
	want := map[string]string{"mover": "moved dst", "eph": "deleted", "plain": "kept"}
	if got := st.actions(); !st.Finished || !mapsEqual(got, want) {
		t.Fatalf("after B's pass: finished %v, %v, want %v", st.Finished, got, want)
	}
	if got := dxNames(nodeVMs(t, dst)); !slices.Equal(got, []string{"mover"}) {
		t.Fatalf("dst runs %v: the move made more than one copy", got)
	}
	if got := dxNames(nodeVMs(t, src)); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("src runs %v", got)
	}
	// The ledger has one running entry per VM, the copy marked as a
	// replacement, and the copy's spec kept.
	es, err := stB.ListEntries(ctx, func(e *store.LedgerEntry) bool { return e.Running() })
	if err != nil {
		t.Fatal(err)
	}
	var copies int
	for _, e := range es {
		if e.Name == "mover" {
			copies++
			if e.Node != "dst" || e.Replaces == "" {
				t.Fatalf("copy's entry: %+v", e)
			}
			if _, err := stB.GetSpec(ctx, e.ID); err != nil {
				t.Fatalf("copy lost its spec: %v", err)
			}
		}
	}
	if copies != 1 || len(es) != 2 {
		t.Fatalf("running entries: %+v", es)
	}
	// Another pass changes nothing.
	clock.advance(2 * time.Minute)
	rep, err := b.srv.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted)+len(rep.Ended) != 0 {
		t.Fatalf("second pass: %+v", rep)
	}
}
