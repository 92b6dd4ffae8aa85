package api

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestVolumesThroughTheAPI drives the volume routes on the sim driver (which
// claims volumes), every answer checked against schemas/node-openapi.yaml: a
// volume is a sparse 0600 file under the state dir; names are unique; sizes
// outside 1-2048 GiB and shrinking are 400; a VM created with the volume
// gets it in its driver spec; while attached the volume refuses delete,
// resize and a second VM (409, with a hint naming the VM), and a clone of
// the VM does not take it; deleting the VM frees it, and then it grows and
// is deleted.
func TestVolumesThroughTheAPI(t *testing.T) {
	e := newEnv(t, nil)
	post := func(path, body string, status int) resp {
		t.Helper()
		return e.must(req{method: "POST", path: path, token: adminToken, body: []byte(body)}, status)
	}
	var vol sdk.Volume
	_ = json.Unmarshal(post("/v1/volumes", `{"name": "data", "size_gib": 4}`, 201).body, &vol)
	if !strings.HasPrefix(vol.ID, "vol-") || len(vol.ID) != 16 || vol.SizeGiB != 4 || vol.AttachedTo != "" {
		t.Fatalf("volume = %+v", vol)
	}
	fi, err := os.Stat(vol.Path)
	if err != nil || fi.Size() != 4<<30 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("volume file %s: %v, %v", vol.Path, fi, err)
	}
	if vol.AllocatedBytes > 1<<20 {
		t.Errorf("a new volume takes %d bytes, want it sparse", vol.AllocatedBytes)
	}
	post("/v1/volumes", `{"name": "data", "size_gib": 1}`, 409)
	for _, bad := range []string{`{"name": "big", "size_gib": 2049}`, `{"name": "zero", "size_gib": 0}`, `{"name": "bad name", "size_gib": 1}`, `{"name": "x", "size_gib": 1, "id": "vol-XYZ"}`} {
		if got := e.call(req{method: "POST", path: "/v1/volumes", token: adminToken, body: []byte(bad)}); got.status != 400 {
			t.Errorf("create %s -> %d %s, want 400", bad, got.status, got.body)
		}
	}
	e.must(req{method: "POST", path: "/v1/volumes", token: readOnlyToken, body: []byte(`{"name": "ro", "size_gib": 1}`)}, 403)

	vm := e.create("user", `, "volumes": ["data"]`)
	got := e.vm(req{method: "GET", path: "/v1/vms/" + vm.ID, token: readOnlyToken}, 200)
	if got.Attributes["volumes"] != vol.ID {
		t.Errorf("the driver was given volumes %q, want %s", got.Attributes["volumes"], vol.ID)
	}
	var att sdk.Volume
	_ = json.Unmarshal(e.must(req{method: "GET", path: "/v1/volumes/" + vol.ID, token: readOnlyToken}, 200).body, &att)
	if att.AttachedTo != vm.ID {
		t.Errorf("attached_to = %q, want %s", att.AttachedTo, vm.ID)
	}
	for _, c := range []resp{
		e.must(req{method: "DELETE", path: "/v1/volumes/data", token: adminToken}, 409),
		post("/v1/volumes/data/resize", `{"size_gib": 8}`, 409),
		e.must(req{method: "POST", path: "/v1/vms", token: adminToken, body: []byte(`{"name": "second", "image": "` + e.image + `", "vcpus": 1, "memory_mib": 256, "volumes": ["data"]}`)}, 409),
	} {
		if eb := c.errorBody(t); !strings.Contains(eb.Hint, "user") {
			t.Errorf("409 hint %q does not name the VM using the volume", eb.Hint)
		}
	}
	post("/v1/vms", `{"name": "nope", "image": "`+e.image+`", "vcpus": 1, "memory_mib": 256, "volumes": ["missing"]}`, 400)
	// A clone does not take its source's volumes.
	post("/v1/vms/"+vm.ID+"/snapshot", `{"tag": "s1"}`, 201)
	clone := e.vm(req{method: "POST", path: "/v1/vms/" + vm.ID + "/clone", token: adminToken, body: []byte(`{"name": "user-copy", "snapshot": "s1"}`)}, 201)
	if clone.Attributes["volumes"] != "" {
		t.Errorf("the clone was given volumes %q", clone.Attributes["volumes"])
	}
	e.must(req{method: "DELETE", path: "/v1/vms/" + clone.ID, token: adminToken}, 204)

	e.must(req{method: "DELETE", path: "/v1/vms/" + vm.ID, token: adminToken}, 204)
	post("/v1/volumes/data/resize", `{"size_gib": 2}`, 400) // shrink
	var grown sdk.Volume
	_ = json.Unmarshal(post("/v1/volumes/data/resize", `{"size_gib": 8}`, 200).body, &grown)
	if fi, err := os.Stat(vol.Path); grown.SizeGiB != 8 || err != nil || fi.Size() != 8<<30 {
		t.Errorf("after resize: %+v, file %v %v", grown, fi, err)
	}
	var list []sdk.Volume
	_ = json.Unmarshal(e.must(req{method: "GET", path: "/v1/volumes", token: readOnlyToken}, 200).body, &list)
	if len(list) != 1 || list[0].Name != "data" {
		t.Errorf("volumes = %+v", list)
	}
	e.must(req{method: "DELETE", path: "/v1/volumes/data", token: adminToken}, 204)
	e.must(req{method: "GET", path: "/v1/volumes/data", token: adminToken}, 404)
	if _, err := os.Stat(vol.Path); !os.IsNotExist(err) {
		t.Errorf("the volume's file after delete: %v", err)
	}
}
