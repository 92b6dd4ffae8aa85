package api

import (
	"encoding/json"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestSnapshotsAndClonesThroughTheAPI drives the snapshot routes on the sim
// driver (which claims every snapshot capability and clones), with every
// response checked against schemas/node-openapi.yaml: snapshots are taken,
// listed oldest first, refused twice under one tag (409), restored (a
// memory one into the running VM, a disk one only into a stopped VM),
// deleted (then 404), and a clone is a new, running VM whose source runs on.
func TestSnapshotsAndClonesThroughTheAPI(t *testing.T) {
	e := newEnv(t, nil)
	vm := e.create("snapped", "")
	path := "/v1/vms/" + vm.ID
	post := func(action, body string, status int) resp {
		t.Helper()
		return e.must(req{method: "POST", path: path + "/" + action, token: adminToken, body: []byte(body)}, status)
	}
	var snap sdk.Snapshot
	_ = json.Unmarshal(post("snapshot", `{"tag": "disk-1"}`, 201).body, &snap)
	if snap.Tag != "disk-1" || snap.Memory || snap.VMState != sdk.StateRunning || snap.CreatedAt.IsZero() {
		t.Errorf("snapshot = %+v", snap)
	}
	post("snapshot", `{"tag": "mem-1", "memory": true}`, 201)
	post("snapshot", `{"tag": "mem-1"}`, 409)
	if bad := e.call(req{method: "POST", path: path + "/snapshot", token: adminToken, body: []byte(`{"tag": "Bad Tag"}`)}); bad.specErr == nil || bad.status != 400 {
		t.Errorf("a bad tag -> %d (spec error %v), want 400 from the server and a refusal from the spec", bad.status, bad.specErr)
	}
	e.must(req{method: "POST", path: path + "/snapshot", token: readOnlyToken, body: []byte(`{"tag": "ro"}`)}, 403)

	var snaps []sdk.Snapshot
	_ = json.Unmarshal(e.must(req{method: "GET", path: path + "/snapshots", token: readOnlyToken}, 200).body, &snaps)
	if len(snaps) != 2 || snaps[0].Tag != "disk-1" || snaps[1].Tag != "mem-1" || !snaps[1].Memory {
		t.Fatalf("snapshots = %+v, want disk-1 then mem-1 (memory)", snaps)
	}

	if got := e.vm(req{method: "POST", path: path + "/restore", token: adminToken, body: []byte(`{"tag": "mem-1"}`)}, 200); got.State != sdk.StateRunning {
		t.Errorf("after restoring a memory snapshot the VM is %s, want running", got.State)
	}
	post("restore", `{"tag": "disk-1"}`, 409) // it runs
	post("restore", `{"tag": "nope"}`, 404)

	clone := e.vm(req{method: "POST", path: path + "/clone", token: adminToken, body: []byte(`{"name": "snapped-copy", "snapshot": "disk-1"}`)}, 201)
	if clone.ID == vm.ID || clone.Name != "snapped-copy" || clone.State != sdk.StateRunning {
		t.Errorf("clone = %+v, want a new running VM named snapped-copy", clone)
	}
	post("clone", `{"name": "snapped-copy", "snapshot": "disk-1"}`, 409) // the name is taken
	post("clone", `{"name": "no-snap"}`, 409)                            // the source runs
	if got := e.vm(req{method: "GET", path: path, token: readOnlyToken}, 200); got.State != sdk.StateRunning {
		t.Errorf("the source is %s after the clone, want running", got.State)
	}
	var cloneSnaps []sdk.Snapshot
	_ = json.Unmarshal(e.must(req{method: "GET", path: "/v1/vms/" + clone.ID + "/snapshots", token: readOnlyToken}, 200).body, &cloneSnaps)
	if len(cloneSnaps) != 0 {
		t.Errorf("the clone has snapshots %+v, want none", cloneSnaps)
	}

	e.must(req{method: "POST", path: path + "/stop", token: adminToken}, 200)
	if got := e.vm(req{method: "POST", path: path + "/restore", token: adminToken, body: []byte(`{"tag": "disk-1"}`)}, 200); got.State != sdk.StateStopped {
		t.Errorf("after restoring a disk snapshot the VM is %s, want stopped", got.State)
	}
	e.must(req{method: "DELETE", path: path + "/snapshots/disk-1", token: adminToken}, 204)
	e.must(req{method: "DELETE", path: path + "/snapshots/disk-1", token: adminToken}, 404)
}
