package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestCreatesNeverOvershootQuotaOrCapacityAcrossTwoCentrals fires 200
// concurrent creates from one tenant at two centrals sharing one etcd,
// placing on three real sim nodes: exactly as many VMs as the limit allows
// exist afterwards (the nodes' own lists agree with the ledger), every other
// create is refused with the limit named, and no reservation is left.
func TestCreatesNeverOvershootQuotaOrCapacityAcrossTwoCentrals(t *testing.T) {
	stA := fxStore(t, nil)
	stB := fxStore(t, stA.Endpoints())
	a, b := newFxCentral(t, stA), newFxCentral(t, stB)
	images, img := fxImages(t)
	// 3 nodes x 16 vCPUs; nodes heartbeat to either central.
	var nodes []*fxNode
	for i, c := range []*fxCentral{a, b, a} {
		nodes = append(nodes, startFxNode(t, fmt.Sprintf("sim-%d", i+1), c.url, images, 16, 16384))
	}
	fxWaitUp(t, a.url, "sim-1", "sim-2", "sim-3")
	fxMust(t, "PUT", a.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)

	cases := []struct {
		name      string
		quota     map[string]int64
		vcpus     int64
		memoryMiB int64
		want      int    // VMs that fit
		refusal   int    // status of the rest
		names     string // what the refusals must name
	}{
		{"max_vms", map[string]int64{"max_vms": 10}, 1, 64, 10, http.StatusTooManyRequests, "max_vms"},
		{"max_vcpus", map[string]int64{"max_vcpus": 10}, 2, 64, 5, http.StatusTooManyRequests, "max_vcpus"},
		{"max_memory_mib", map[string]int64{"max_memory_mib": 1000}, 1, 100, 10, http.StatusTooManyRequests, "max_memory_mib"},
		// No quota: the nodes' 48 vCPUs take 12 VMs of 4.
		{"node capacity", nil, 4, 64, 12, http.StatusConflict, "node"},
	}
	const burst = 200
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tenantName := strings.ReplaceAll(tc.name, " ", "-")
			tenant, token := fxTenant(t, a.url, tenantName, tc.quota)
			statuses := make([]int, burst)
			bodies := make([][]byte, burst)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range burst {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					c := []*fxCentral{a, b}[i%2]
					statuses[i], bodies[i] = fxCall(t, "POST", c.url+"/fleet/vms", token, map[string]any{
						"name": fmt.Sprintf("%s-%d", tenantName, i), "image": "tiny", "vcpus": tc.vcpus, "memory_mib": tc.memoryMiB})
				}()
			}
			began := time.Now()
			close(start)
			wg.Wait()
			t.Logf("%d creates in %v", burst, time.Since(began).Round(time.Millisecond))

			var created []sdk.FleetCreateVMResponse
			for i, code := range statuses {
				switch code {
				case http.StatusCreated:
					var r sdk.FleetCreateVMResponse
					if err := json.Unmarshal(bodies[i], &r); err != nil {
						t.Fatal(err)
					}
					if r.VM.Tenant != tenant || r.Placement.Reason == "" {
						t.Errorf("created vm %+v: want tenant stamp %s and a placement reason", r, tenant)
					}
					created = append(created, r)
				case tc.refusal:
					var e sdk.ErrorBody
					if err := json.Unmarshal(bodies[i], &e); err != nil || e.Hint == "" || !strings.Contains(e.Error+e.Hint, tc.names) {
						t.Errorf("refusal %d %s: want an error naming %s, with a hint", code, bodies[i], tc.names)
					}
				default:
					t.Errorf("create %d = %d %s", i, code, bodies[i])
				}
			}
			if len(created) != tc.want {
				t.Fatalf("%d VMs created, want exactly %d", len(created), tc.want)
			}
			// The nodes' own lists agree.
			onNodes := 0
			for _, n := range nodes {
				var list sdk.VMList
				fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list)
				for _, vm := range list.VMs {
					if vm.Tenant == tenant {
						onNodes++
					}
				}
			}
			running, err := stA.RunningForTenant(context.Background(), tenant)
			if err != nil {
				t.Fatal(err)
			}
			if onNodes != tc.want || len(running) != tc.want {
				t.Fatalf("nodes run %d of the tenant's VMs and the ledger %d, want %d", onNodes, len(running), tc.want)
			}
			if rs, err := stA.ListReservations(context.Background()); err != nil || len(rs) != 0 {
				t.Fatalf("reservations left: %v %v", rs, err)
			}
			// Clean up through central (half through each), which ends the entries.
			for i, r := range created {
				c := []*fxCentral{a, b}[i%2]
				fxMust(t, "DELETE", c.url+"/fleet/vms/"+r.Node+"/"+r.VM.ID, token, nil, http.StatusNoContent, nil)
			}
			if running, _ := stB.RunningForTenant(context.Background(), tenant); len(running) != 0 {
				t.Fatalf("after deleting: %d entries still running", len(running))
			}
			ended, _ := stB.EntriesForTenant(context.Background(), tenant)
			for _, e := range ended {
				if e.Running() || e.EndReason != "deleted" {
					t.Fatalf("entry after delete: %+v", e)
				}
			}
		})
	}
}

// TestBadBodiesAre400WithHintsAndLeaveNothingBehind sends bad create and
// heartbeat bodies: each is refused with a hint, and neither a reservation,
// a ledger entry nor a node record is left by them.
func TestBadBodiesAre400WithHintsAndLeaveNothingBehind(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	images, img := fxImages(t)
	startFxNode(t, "sim-1", c.url, images, 8, 8192)
	fxWaitUp(t, c.url, "sim-1")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(t, c.url, "acme", map[string]int64{"max_vms": 5})

	creates := []struct {
		name string
		body any
		want int
		hint string // a word the error or hint must hold
	}{
		{"no body", nil, 400, "JSON"},
		{"malformed", `{"name":`, 400, "JSON"},
		{"not an object", `[1,2]`, 400, "object"},
		{"unknown field", map[string]any{"name": "x", "image": "tiny", "bogus": 1}, 400, "node_selector"},
		{"wrong type", map[string]any{"name": 5, "image": "tiny"}, 400, "name"},
		{"bad name", map[string]any{"name": "-x", "image": "tiny"}, 400, "letters"},
		{"long name", map[string]any{"name": strings.Repeat("a", 64), "image": "tiny"}, 400, "1-63"},
		{"unknown image", map[string]any{"name": "x", "image": "nope"}, 400, "tiny"},
		{"no image", map[string]any{"name": "x"}, 400, "tiny"},
		{"image and path", map[string]any{"name": "x", "image": "tiny", "image_path": img}, 400, "not both"},
		{"too many vcpus", map[string]any{"name": "x", "image": "tiny", "vcpus": 5000}, 400, "vcpus"},
		{"too little memory", map[string]any{"name": "x", "image": "tiny", "memory_mib": 1}, 400, "memory_mib"},
		{"negative ttl", map[string]any{"name": "x", "image": "tiny", "ttl_seconds": -1}, 400, "ttl_seconds"},
		{"unknown network", map[string]any{"name": "x", "image": "tiny", "network": "bridge"}, 400, "none"},
		{"guest os mismatch", map[string]any{"name": "x", "image": "tiny", "guest_os": "macos"}, 400, "guest_os"},
		{"bad label", map[string]any{"name": "x", "image": "tiny", "labels": map[string]string{"bad key!": "v"}}, 400, "label"},
		{"bad pin", map[string]any{"name": "x", "image": "tiny", "node": "no/such"}, 400, "node"},
		{"tenant names a host path", map[string]any{"name": "x", "image_path": img}, 403, "tiny"},
		{"pinned to an unknown node", map[string]any{"name": "x", "image": "tiny", "node": "ghost"}, 409, "ghost"},
	}
	for _, tc := range creates {
		code, body := fxCall(t, "POST", c.url+"/fleet/vms", token, tc.body)
		var e sdk.ErrorBody
		_ = json.Unmarshal(body, &e)
		if code != tc.want || e.Error == "" || e.Hint == "" || !strings.Contains(e.Error+" "+e.Hint, tc.hint) {
			t.Errorf("%s: %d %s, want %d with an error and a hint naming %q", tc.name, code, body, tc.want, tc.hint)
		}
	}
	// The node refuses what central cannot check (an image outside its
	// allowed dirs): the reservation made for it is released.
	code, body := fxCall(t, "POST", c.url+"/fleet/vms", fxToken, map[string]any{"name": "x", "image_path": "/etc/passwd", "vcpus": 1, "memory_mib": 64})
	if code/100 != 4 || !strings.Contains(string(body), "sim-1") {
		t.Errorf("create refused by the node: %d %s, want a 4xx naming the node", code, body)
	}

	hbURL := c.url + "/fleet/nodes/sim-2/heartbeat"
	good := sdk.Heartbeat{URL: "http://127.0.0.1:1", Drivers: []sdk.HeartbeatDriver{{Name: "sim", Health: "healthy", GuestOS: []string{"linux"}}},
		Capacity: sdk.Capacity{Total: sdk.Resources{VCPUs: 4, MemoryMiB: 4096}}}
	with := func(f func(*sdk.Heartbeat)) sdk.Heartbeat {
		hb := good
		hb.Drivers = append([]sdk.HeartbeatDriver(nil), good.Drivers...)
		f(&hb)
		return hb
	}
	heartbeats := []struct {
		name string
		url  string
		body any
		hint string
	}{
		{"no body", hbURL, nil, "JSON"},
		{"malformed", hbURL, `{"url":`, "JSON"},
		{"unknown field", hbURL, `{"url":"http://127.0.0.1:1","cpu":4}`, "capacity"},
		{"bad url", hbURL, with(func(h *sdk.Heartbeat) { h.URL = "ftp://x" }), "advertise"},
		// No url is fine: central reaches that node through its channel only.
		{"url with a query", hbURL, with(func(h *sdk.Heartbeat) { h.URL = "http://127.0.0.1:1/?a=b" }), "advertise"},
		{"negative capacity", hbURL, with(func(h *sdk.Heartbeat) { h.Capacity.Total.VCPUs = -1 }), `field "capacity.total.vcpus" must be from 0`},
		{"nameless driver", hbURL, with(func(h *sdk.Heartbeat) { h.Drivers[0].Name = "" }), "driver"},
		{"vm without id", hbURL, with(func(h *sdk.Heartbeat) { h.VMs = []sdk.HeartbeatVM{{Name: "x"}} }), "id"},
		{"bad node name", c.url + "/fleet/nodes/-bad/heartbeat", good, "name"},
	}
	for _, tc := range heartbeats {
		code, body := fxCall(t, "POST", tc.url, fxToken, tc.body)
		var e sdk.ErrorBody
		_ = json.Unmarshal(body, &e)
		if code != http.StatusBadRequest || e.Hint == "" || !strings.Contains(e.Error+" "+e.Hint, tc.hint) {
			t.Errorf("heartbeat %s: %d %s, want 400 with a hint naming %q", tc.name, code, body, tc.hint)
		}
	}

	ctx := context.Background()
	if rs, err := st.ListReservations(ctx); err != nil || len(rs) != 0 {
		t.Errorf("reservations left: %v %v", rs, err)
	}
	if es, err := st.ListEntries(ctx, nil); err != nil || len(es) != 0 {
		t.Errorf("ledger entries written: %v %v", es, err)
	}
	if ns, err := st.ListNodes(ctx); err != nil || len(ns) != 1 {
		t.Errorf("nodes: %v %v, want only sim-1", ns, err)
	}
	// The good heartbeat registers its node.
	var reply sdk.HeartbeatReply
	fxMust(t, "POST", hbURL, fxToken, good, http.StatusOK, &reply)
	if reply.State != store.NodeUp || reply.IntervalSeconds != 1 {
		t.Errorf("heartbeat reply %+v", reply)
	}
}

// TestNodeGoesDownAndComesBackWithItsVMs runs central.Run with a one-second
// heartbeat interval: a SIGKILLed node is marked down, its VM shown as
// unreachable (to its tenant without error text, to nobody else) and kept in
// the ledger; after a restart the node is up with the VM. It also walks the
// reconciler (a VM deleted on the node directly is ended, a stamped VM the
// ledger lacks is adopted), tenant isolation (another tenant's VM is 404),
// every VM route through central, and the placement, reservation, leader and
// node metrics moving with all of it.
func TestNodeGoesDownAndComesBackWithItsVMs(t *testing.T) {
	url := startFxCentral(t, central.Options{HeartbeatInterval: time.Second, ReconcileEvery: time.Hour})

	images, img := fxImages(t)
	n := startFxNode(t, "sim-1", url, images, 8, 8192)
	fxWaitUp(t, url, "sim-1")
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	acme, acmeToken := fxTenant(t, url, "acme", nil)
	_, otherToken := fxTenant(t, url, "other", map[string]int64{"max_vcpus": 1})
	fxWait(t, "central leads", 10*time.Second, func() bool { return fxMetrics(t, url)["fluxvm_central_leader"] == 1 })
	before := fxMetrics(t, url)
	var created sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", acmeToken, map[string]any{"name": "web", "image": "tiny"}, http.StatusCreated, &created)
	vmURL := url + "/fleet/vms/sim-1/" + created.VM.ID
	// One of each other outcome: over a quota, no node fits, the node refuses.
	fxMust(t, "POST", url+"/fleet/vms", otherToken, map[string]any{"name": "big", "image": "tiny", "vcpus": 2}, http.StatusTooManyRequests, nil)
	fxMust(t, "POST", url+"/fleet/vms", acmeToken, map[string]any{"name": "pinned", "image": "tiny", "node": "ghost"}, http.StatusConflict, nil)
	if code, body := fxCall(t, "POST", url+"/fleet/vms", fxToken, map[string]any{"name": "x", "image_path": "/etc/passwd", "vcpus": 1, "memory_mib": 64}); code/100 != 4 {
		t.Fatalf("create of an image the node does not allow: %d %s, want the node's 4xx", code, body)
	}
	after := fxMetrics(t, url)
	for name, delta := range map[string]float64{
		`fluxvm_central_placements_total{result="placed"}`:                  2,
		`fluxvm_central_placements_total{result="quota"}`:                   1,
		`fluxvm_central_placements_total{result="no_placement"}`:            1,
		`fluxvm_central_reservations_total{result="committed"}`:             1,
		`fluxvm_central_reservations_total{result="released"}`:              1,
		`fluxvm_central_reservation_seconds_count`:                          2,
		`fluxvm_central_requests_total{code="201",route="POST /fleet/vms"}`: 1,
	} {
		if got := after[name] - before[name]; got != delta {
			t.Errorf("%s moved by %v, want %v", name, got, delta)
		}
	}
	if after[`fluxvm_central_nodes{state="up"}`] != 1 || after[`fluxvm_central_nodes{state="down"}`] != 0 {
		t.Errorf("node metrics with sim-1 up: %v up, %v down", after[`fluxvm_central_nodes{state="up"}`], after[`fluxvm_central_nodes{state="down"}`])
	}

	// Another tenant sees nothing of it and touches nothing.
	var list sdk.FleetVMList
	fxMust(t, "GET", url+"/fleet/vms", otherToken, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 {
		t.Fatalf("another tenant lists %+v", list.VMs)
	}
	for _, call := range []struct{ method, path string }{{"DELETE", ""}, {"POST", "/exec"}, {"POST", "/stop"}, {"GET", "/logs"}} {
		var body any
		if call.path == "/exec" {
			body = map[string]any{"command": "true"}
		}
		if code, data := fxCall(t, call.method, vmURL+call.path, otherToken, body); code != http.StatusNotFound {
			t.Errorf("another tenant's %s %s = %d %s, want 404", call.method, call.path, code, data)
		}
	}
	if code, _ := fxCall(t, "GET", url+"/fleet/nodes/sim-1", acmeToken, nil); code != http.StatusNotFound {
		t.Errorf("a tenant reads a node it does not lease: %d, want 404", code)
	}

	// Power off the node: marked down within ~3 heartbeats.
	n.kill()
	killed := time.Now()
	fxWait(t, "sim-1 marked down", 15*time.Second, func() bool { return fxNodeState(t, url, "sim-1").State == store.NodeDown })
	t.Logf("marked down %v after the kill", time.Since(killed).Round(100*time.Millisecond))
	if m := fxMetrics(t, url); m[`fluxvm_central_nodes{state="up"}`] != 0 || m[`fluxvm_central_nodes{state="down"}`] != 1 {
		t.Errorf("node metrics with sim-1 down: %v up, %v down", m[`fluxvm_central_nodes{state="up"}`], m[`fluxvm_central_nodes{state="down"}`])
	}
	fxMust(t, "GET", url+"/fleet/vms", acmeToken, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || !list.VMs[0].Unreachable || list.VMs[0].ID != created.VM.ID {
		t.Fatalf("tenant's list while its node is down: %+v, want its VM marked unreachable", list.VMs)
	}
	if len(list.UnreachableNodes) != 1 || list.UnreachableNodes[0].Node != "sim-1" || list.UnreachableNodes[0].Error != "" {
		t.Fatalf("tenant's unreachable_nodes: %+v, want sim-1 without error text", list.UnreachableNodes)
	}
	fxMust(t, "GET", url+"/fleet/vms", otherToken, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 || len(list.UnreachableNodes) != 0 {
		t.Fatalf("another tenant's list while sim-1 is down: %+v", list)
	}
	var rep sdk.ReconcileReport
	fxMust(t, "POST", url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	if len(rep.Ended) != 0 || len(rep.NodesSkipped) != 1 {
		t.Fatalf("reconcile while the node is down: %+v, want it skipped and nothing ended", rep)
	}
	if code, _ := fxCall(t, "POST", vmURL+"/stop", acmeToken, nil); code != http.StatusServiceUnavailable {
		t.Errorf("stop on a down node = %d, want 503", code)
	}

	// Back up, with the VM.
	n.start()
	fxWait(t, "sim-1 up again", 15*time.Second, func() bool { return fxNodeState(t, url, "sim-1").State == store.NodeUp })
	fxMust(t, "GET", url+"/fleet/vms", acmeToken, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || list.VMs[0].Unreachable || list.VMs[0].ID != created.VM.ID || list.VMs[0].State != sdk.StateRunning {
		t.Fatalf("after the node is back: %+v, want its VM running", list.VMs)
	}
	var stopped sdk.FleetVM
	fxMust(t, "POST", vmURL+"/stop", acmeToken, nil, http.StatusOK, &stopped)
	if stopped.Node != "sim-1" || stopped.State != sdk.StateStopped {
		t.Fatalf("stop through central: %+v", stopped)
	}
	// The other VM routes, each answer held to the spec by fxCall.
	for _, action := range []struct{ name, state string }{
		{"start", sdk.StateRunning}, {"pause", sdk.StatePaused}, {"resume", sdk.StateRunning}, {"restart", sdk.StateRunning},
	} {
		var vm sdk.FleetVM
		fxMust(t, "POST", vmURL+"/"+action.name, acmeToken, nil, http.StatusOK, &vm)
		if vm.State != action.state {
			t.Errorf("%s through central: state %s, want %s", action.name, vm.State, action.state)
		}
	}
	if code, body := fxCall(t, "GET", vmURL+"/logs?lines=5", acmeToken, nil); code != http.StatusOK {
		t.Errorf("logs through central: %d %s", code, body)
	}
	// The sim driver runs no guest: the node's 501 passes through.
	if code, body := fxCall(t, "POST", vmURL+"/exec", acmeToken, map[string]any{"command": "true"}); code != http.StatusNotImplemented {
		t.Errorf("exec on a sim VM through central: %d %s, want the node's 501", code, body)
	}
	fxMust(t, "GET", url+"/fleet/capacity", acmeToken, nil, http.StatusOK, nil)
	fxMust(t, "GET", url+"/fleet/nodes", fxToken, nil, http.StatusOK, nil)
	fxMust(t, "GET", url+"/fleet/vms", fxToken, nil, http.StatusOK, nil)

	// The reconciler: a VM deleted on the node directly is ended...
	fxMust(t, "DELETE", n.url+"/v1/vms/"+created.VM.ID, n.admin, nil, http.StatusNoContent, nil)
	// ... and one made on the node with acme's stamp (central died before
	// writing its entry) is adopted.
	var orphan sdk.VM
	fxMust(t, "POST", n.url+"/v1/vms", n.admin, sdk.CreateVMRequest{Name: "orphan", Image: img, VCPUs: 1, MemoryMiB: 64, Tenant: acme},
		http.StatusCreated, &orphan)
	fxMust(t, "POST", url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	if len(rep.Ended) != 1 || rep.Ended[0].VMID != created.VM.ID || len(rep.Adopted) != 1 || rep.Adopted[0].VMID != orphan.ID {
		t.Fatalf("reconcile: %+v, want web ended and orphan adopted", rep)
	}
	fxMust(t, "POST", url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	if len(rep.Ended)+len(rep.Adopted)+len(rep.CountersFixed) != 0 {
		t.Fatalf("a second pass changed things: %+v", rep)
	}
	// The adopted VM is acme's to delete through central.
	fxMust(t, "DELETE", url+"/fleet/vms/sim-1/"+orphan.ID, acmeToken, nil, http.StatusNoContent, nil)
}

// TestCentralKilledMidBurstLeavesNothingUnaccounted SIGKILLs one of two
// centrals while a burst of creates runs through both: once the dead
// central's etcd lease lapses its reservations are gone, and after one
// reconcile every VM the nodes run for the tenant has a ledger entry (VMs the
// dead central created but never recorded are adopted), within the quota.
func TestCentralKilledMidBurstLeavesNothingUnaccounted(t *testing.T) {
	stA := fxStore(t, nil)
	a := newFxCentral(t, stA)
	images, img := fxImages(t)
	var nodes []*fxNode
	for i := range 3 {
		nodes = append(nodes, startFxNode(t, fmt.Sprintf("sim-%d", i+1), a.url, images, 16, 16384))
	}

	// Central B is a real `fluxvm-agent central` on A's etcd, so it can be
	// SIGKILLed.
	dir := fxTempDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bAddr := ln.Addr().String()
	ln.Close()
	logf, err := os.Create(filepath.Join(dir, "central-b.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	b := exec.Command(nodes[0].bin, "central", "-token", fxToken, "-listen", bAddr, "-state-dir", dir,
		"-etcd-endpoints", strings.Join(stA.Endpoints(), ","), "-heartbeat-secs", "1")
	b.Stdout, b.Stderr = logf, logf
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b.ProcessState == nil {
			_ = b.Process.Kill()
			_ = b.Wait()
		}
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(dir, "central-b.log"))
			t.Logf("central B log:\n%s", data)
		}
	})
	bURL := "http://" + bAddr
	fxWait(t, "central B answers", 30*time.Second, func() bool { code, _ := fxCall(t, "GET", bURL+"/healthz", "", nil); return code == 200 })
	fxWaitUp(t, a.url, "sim-1", "sim-2", "sim-3")
	fxMust(t, "PUT", a.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	tenant, token := fxTenant(t, a.url, "burst", map[string]int64{"max_vms": 10})

	const burst = 200
	statuses := make([]int, burst)
	bAnswered := make(chan struct{}, burst)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			url := []string{a.url, bURL}[i%2]
			statuses[i], _ = fxCall(t, "POST", url+"/fleet/vms", token, map[string]any{"name": fmt.Sprintf("vm-%d", i), "image": "tiny"})
			if url == bURL {
				bAnswered <- struct{}{}
			}
		}()
	}
	close(start)
	<-bAnswered // B is mid-burst: its other creates are in flight
	if err := b.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = b.Wait()
	wg.Wait()
	counts := map[int]int{}
	for _, s := range statuses {
		counts[s]++
	}
	t.Logf("statuses (0: central B died first): %v", counts)

	fxWait(t, "the dead central's reservations to lapse with its lease", 30*time.Second, func() bool {
		rs, err := stA.ListReservations(context.Background())
		return err == nil && len(rs) == 0
	})
	var rep sdk.ReconcileReport
	fxMust(t, "POST", a.url+"/fleet/reconcile", fxToken, nil, http.StatusOK, &rep)
	t.Logf("reconcile adopted %d, ended %d, fixed %d counters", len(rep.Adopted), len(rep.Ended), len(rep.CountersFixed))
	if len(rep.CountersFixed) != 0 {
		t.Errorf("counters were wrong: %+v", rep.CountersFixed)
	}
	onNodes := map[string]bool{}
	for _, n := range nodes {
		var list sdk.VMList
		fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list)
		for _, vm := range list.VMs {
			if vm.Tenant == tenant {
				onNodes[n.name+"/"+vm.ID] = true
			}
		}
	}
	running, err := stA.RunningForTenant(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	inLedger := map[string]bool{}
	for _, e := range running {
		inLedger[e.Node+"/"+e.VMID] = true
	}
	if len(onNodes) != len(inLedger) || len(onNodes) > 10 || len(onNodes) < counts[http.StatusCreated] {
		t.Fatalf("nodes run %d of the tenant's VMs, the ledger has %d, %d were answered 201; want them to agree, at most 10",
			len(onNodes), len(inLedger), counts[http.StatusCreated])
	}
	for k := range onNodes {
		if !inLedger[k] {
			t.Errorf("vm %s runs without a ledger entry", k)
		}
	}
}
