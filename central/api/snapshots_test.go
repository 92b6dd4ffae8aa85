package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// snCentral is a central with an activity log, serving over HTTP, and its
// store.
func snCentral(t testing.TB) (url string, st *store.Store, log *audit.Log) {
	t.Helper()
	log, err := audit.Open(audit.Options{Dir: fxTempDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	st = fxStore(t, nil)
	srv := api.New(api.Options{Store: st, FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second, Activity: log})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs.URL, st, log
}

// snError calls and checks the status and that the error says want and
// gives a hint.
func snError(t *testing.T, method, url, token string, body any, status int, want string) {
	t.Helper()
	code, data := fxCall(t, method, url, token, body)
	var e sdk.ErrorBody
	_ = json.Unmarshal(data, &e)
	if code != status || !strings.Contains(strings.ToLower(e.Error), strings.ToLower(want)) || e.Hint == "" {
		t.Fatalf("%s %s = %d %s, want %d saying %q with a hint", method, url, code, data, status, want)
	}
}

// TestSnapshotsThroughCentralKeepTheRules: through a real central and a sim
// node, a tenant takes, lists, restores and deletes snapshots of its VM and
// clones it, and every rule holds: bad names 400, a name the VM has 409
// (without regard to case), the tenant's max_snapshots_per_vm 429 (and 0
// turns snapshots off), a memory snapshot of a stopped VM 409, an unknown
// snapshot 404, another tenant 404, a read-only key 403 (but it may list),
// a clone counts against max_vms (429), a disk clone of a running VM 409,
// a clone onto a cordoned node 409 with a hint; the records carry sizes
// and end with their VM; the activity log names VMs and snapshots, and
// vm.snapshot, vm.restored and vm.cloned are recorded.
func TestSnapshotsThroughCentralKeepTheRules(t *testing.T) {
	url, st, activity := snCentral(t)
	images, img := fxImages(t)
	startFxNode(t, "sim-1", url, images, 8, 8192)
	fxWaitUp(t, url, "sim-1")
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	acmeID, tokA := fxTenant(t, url, "acme", map[string]int64{"max_vms": 2, "max_snapshots_per_vm": 2})
	_, tokB := fxTenant(t, url, "bravo", map[string]int64{"max_snapshots_per_vm": 0})
	var web, other sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "web", "image": "tiny"}, http.StatusCreated, &web)
	fxMust(t, "POST", url+"/fleet/vms", tokB, map[string]any{"name": "db", "image": "tiny"}, http.StatusCreated, &other)
	var roKey sdk.APIKeyWithToken
	fxMust(t, "POST", url+"/fleet/tenants/me/keys", tokA, map[string]any{"name": "ro", "read_only": true}, http.StatusCreated, &roKey)
	vmURL := url + "/fleet/vms/sim-1/" + web.VM.ID
	snaps := vmURL + "/snapshots"

	// Names.
	for _, bad := range []string{"-dash", "has space", strings.Repeat("a", 65), "a/b"} {
		snError(t, "POST", snaps, tokA, map[string]any{"name": bad}, http.StatusBadRequest, "snapshot name")
	}
	var before, warm sdk.FleetSnapshot
	fxMust(t, "POST", snaps, tokA, map[string]any{"name": "before"}, http.StatusCreated, &before)
	if before.Name != "before" || before.Memory || before.SizeGiB != 1 || before.VM != "web" || before.TakenAt.IsZero() {
		t.Fatalf("disk snapshot: %+v", before)
	}
	snError(t, "POST", snaps, tokA, map[string]any{"name": "BEFORE"}, http.StatusConflict, "already")
	fxMust(t, "POST", snaps, tokA, map[string]any{"name": "warm", "include_memory": true}, http.StatusCreated, &warm)
	if !warm.Memory || warm.SizeGiB != 2 {
		t.Fatalf("memory snapshot: %+v", warm)
	}
	// The limit: the tenant's quota of 2; bravo's 0 turns snapshots off.
	snError(t, "POST", snaps, tokA, map[string]any{"name": "third"}, http.StatusTooManyRequests, "max_snapshots_per_vm")
	snError(t, "POST", url+"/fleet/vms/sim-1/"+other.VM.ID+"/snapshots", tokB, nil, http.StatusTooManyRequests, "turned off")

	// Listing, for the tenant, its read-only key; not for another tenant.
	var list sdk.FleetSnapshotList
	fxMust(t, "GET", snaps, roKey.Token, nil, http.StatusOK, &list)
	if list.Limit != 2 || len(list.Snapshots) != 2 || list.Snapshots[0].Name != "before" || list.Snapshots[1].Name != "warm" {
		t.Fatalf("list: %+v", list)
	}
	snError(t, "POST", snaps, roKey.Token, map[string]any{"name": "ro"}, http.StatusForbidden, "read-only")
	snError(t, "DELETE", snaps+"/before", roKey.Token, nil, http.StatusForbidden, "read-only")
	for _, c := range []struct{ method, url string }{{"GET", snaps}, {"POST", snaps}, {"DELETE", snaps + "/before"},
		{"POST", snaps + "/before/restore"}, {"POST", vmURL + "/clone"}} {
		snError(t, c.method, c.url, tokB, map[string]any{"name": "x"}, http.StatusNotFound, "no vm")
	}

	// Delete; a memory snapshot of a stopped VM; restore of a disk snapshot
	// starts the VM again.
	fxMust(t, "DELETE", snaps+"/warm", tokA, nil, http.StatusNoContent, nil)
	snError(t, "DELETE", snaps+"/warm", tokA, nil, http.StatusNotFound, "no snapshot")
	snError(t, "POST", snaps+"/nope/restore", tokA, nil, http.StatusNotFound, "no snapshot")
	fxMust(t, "POST", vmURL+"/stop", tokA, nil, http.StatusOK, nil)
	snError(t, "POST", snaps, tokA, map[string]any{"name": "mem", "include_memory": true}, http.StatusConflict, "running or paused")
	var restored sdk.FleetVM
	fxMust(t, "POST", snaps+"/Before/restore", tokA, nil, http.StatusOK, &restored)
	if restored.State != sdk.StateRunning {
		t.Fatalf("restored vm is %s, want running", restored.State)
	}

	// Clones: from the running VM's disk 409; from a snapshot, within
	// max_vms; the next is over it.
	snError(t, "POST", vmURL+"/clone", tokA, map[string]any{"name": "web-2"}, http.StatusConflict, "stopped")
	snError(t, "POST", vmURL+"/clone", tokA, map[string]any{"name": "bad name", "snapshot": "before"}, http.StatusBadRequest, "clone name")
	var clone sdk.FleetCreateVMResponse
	fxMust(t, "POST", vmURL+"/clone", tokA, map[string]any{"name": "web-2", "snapshot": "before"}, http.StatusCreated, &clone)
	if clone.Node != "sim-1" || clone.VM.Name != "web-2" || clone.VM.ID == web.VM.ID {
		t.Fatalf("clone: %+v", clone)
	}
	snError(t, "POST", vmURL+"/clone", tokA, map[string]any{"name": "web-3", "snapshot": "before"}, http.StatusTooManyRequests, "max_vms")
	var vmsList sdk.FleetVMList
	fxMust(t, "GET", url+"/fleet/vms", tokA, nil, http.StatusOK, &vmsList)
	if len(vmsList.VMs) != 2 {
		t.Fatalf("acme's VMs after the clone: %+v", vmsList.VMs)
	}
	// A cordoned node takes no clone.
	fxMust(t, "DELETE", url+"/fleet/vms/sim-1/"+clone.VM.ID, tokA, nil, http.StatusNoContent, nil)
	fxMust(t, "POST", url+"/fleet/nodes/sim-1/cordon", fxToken, nil, http.StatusOK, nil)
	snError(t, "POST", vmURL+"/clone", tokA, map[string]any{"name": "web-3", "snapshot": "before"}, http.StatusConflict, "cordoned")
	fxMust(t, "POST", url+"/fleet/nodes/sim-1/uncordon", fxToken, nil, http.StatusOK, nil)

	// Records: sizes and times, ended with the delete and with the VM.
	ctx := context.Background()
	recs, err := st.VMSnapshots(ctx, "sim-1", web.VM.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Name != "before" || recs[0].Tenant != acmeID || recs[0].SizeGiB != 1 || !recs[0].Live() ||
		recs[1].Name != "warm" || recs[1].SizeGiB != 2 || recs[1].Live() {
		t.Fatalf("records: %+v", recs)
	}
	fxMust(t, "DELETE", vmURL, tokA, nil, http.StatusNoContent, nil)
	if recs, err = st.VMSnapshots(ctx, "sim-1", web.VM.ID); err != nil || len(recs) != 2 || recs[0].Live() {
		t.Fatalf("records after the VM's delete: %+v %v", recs, err)
	}

	// The activity log and the notifications.
	var actions []string
	for _, e := range activity.Recent(100, acmeID) {
		actions = append(actions, e.Action)
	}
	all := strings.Join(actions, "\n")
	for _, want := range []string{"snapshot vm web as before", "snapshot vm web as warm", "delete snapshot warm of web",
		"restore vm web to before", "clone vm web as web-2"} {
		if !strings.Contains(all, want) {
			t.Errorf("activity lacks %q:\n%s", want, all)
		}
	}
	var notes sdk.NotificationList
	fxMust(t, "GET", url+"/fleet/notifications", tokA, nil, http.StatusOK, &notes)
	seen := map[string]string{}
	for _, n := range notes.Notifications {
		seen[n.Type] = n.Title
	}
	for _, typ := range []string{sdk.NotifyVMSnapshot, sdk.NotifyVMRestored, sdk.NotifyVMCloned} {
		if !strings.Contains(seen[typ], "web") {
			t.Errorf("notification %s: %q", typ, seen[typ])
		}
	}
}
