package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestVolumesThroughCentralKeepTheRules: through a real central and two sim
// nodes, a tenant creates, lists, attaches, grows and deletes volumes, and
// every rule holds: bad names and sizes 400, a name the tenant has 409,
// max_volume_gib 429 (on create and on growth), another tenant 404, a
// launch with a volume runs on the volume's node (409 when it names
// another node or its volumes are on two), an attached volume refuses
// delete, resize and a second VM (409), a VM with volumes is not
// reschedulable (400), shrinking is 400, a tenant with volumes is not
// deleted (409); the records keep sizes and end with the delete; the
// activity log names the volumes, and volume.created and volume.deleted
// are recorded. The operator sees the node's path, a tenant does not.
func TestVolumesThroughCentralKeepTheRules(t *testing.T) {
	url, st, activity := snCentral(t)
	images, img := fxImages(t)
	startFxNode(t, "sim-1", url, images, 8, 8192)
	startFxNode(t, "sim-2", url, images, 8, 8192)
	fxWaitUp(t, url, "sim-1", "sim-2")
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	acmeID, tokA := fxTenant(t, url, "acme", map[string]int64{"max_volume_gib": 10})
	_, tokB := fxTenant(t, url, "bravo", nil)
	vols := url + "/fleet/volumes"

	// Names and sizes.
	for _, bad := range []string{"Upper", "-dash", "has space", strings.Repeat("a", 41)} {
		snError(t, "POST", vols, tokA, map[string]any{"name": bad, "size_gib": 1}, http.StatusBadRequest, "name")
	}
	for _, size := range []int64{0, -1, 2049} {
		snError(t, "POST", vols, tokA, map[string]any{"name": "sized", "size_gib": size}, http.StatusBadRequest, "size_gib")
	}
	var data, other sdk.FleetVolume
	fxMust(t, "POST", vols, tokA, map[string]any{"name": "data", "size_gib": 4, "node": "sim-1"}, http.StatusCreated, &data)
	if data.Node != "sim-1" || data.SizeGiB != 4 || !strings.HasPrefix(data.ID, "vol-") || len(data.ID) != 16 || data.Path != "" {
		t.Fatalf("created: %+v", data)
	}
	snError(t, "POST", vols, tokA, map[string]any{"name": "data", "size_gib": 1}, http.StatusConflict, "exists")
	fxMust(t, "POST", vols, tokA, map[string]any{"name": "other", "size_gib": 1, "node": "sim-2"}, http.StatusCreated, &other)
	snError(t, "POST", vols, tokA, map[string]any{"name": "big", "size_gib": 6}, http.StatusTooManyRequests, "max_volume_gib")

	// Listing: the tenant's own, with its use; the operator sees paths.
	var list sdk.FleetVolumeList
	fxMust(t, "GET", vols, tokA, nil, http.StatusOK, &list)
	if len(list.Volumes) != 2 || list.UsedGiB != 5 || list.LimitGiB != 10 || list.Volumes[0].Name != "data" {
		t.Fatalf("acme's list: %+v", list)
	}
	fxMust(t, "GET", vols, tokB, nil, http.StatusOK, &list)
	if len(list.Volumes) != 0 {
		t.Fatalf("bravo sees %+v", list.Volumes)
	}
	fxMust(t, "GET", vols+"?tenant=acme", fxToken, nil, http.StatusOK, &list)
	if len(list.Volumes) != 2 || !strings.HasSuffix(list.Volumes[0].Path, "/volumes/"+list.Volumes[0].ID+".raw") {
		t.Fatalf("operator's list: %+v", list)
	}
	// The operator makes one for a tenant: the tenant's quota and names apply, and it is the tenant's.
	snError(t, "POST", vols+"?tenant=acme", fxToken, map[string]any{"name": "op-made", "size_gib": 6}, http.StatusTooManyRequests, "max_volume_gib")
	snError(t, "POST", vols+"?tenant=acme", fxToken, map[string]any{"name": "data", "size_gib": 1}, http.StatusConflict, "exists")
	snError(t, "POST", vols+"?tenant="+acmeID, tokB, map[string]any{"name": "theirs", "size_gib": 1}, http.StatusForbidden, "own")
	var opMade sdk.FleetVolume
	fxMust(t, "POST", vols+"?tenant=acme", fxToken, map[string]any{"name": "op-made", "size_gib": 1}, http.StatusCreated, &opMade)
	if opMade.Tenant != acmeID {
		t.Fatalf("made by the operator for acme: %+v", opMade)
	}
	fxMust(t, "DELETE", vols+"/op-made", tokA, nil, http.StatusNoContent, nil)
	// Another tenant: not found, by name or id.
	for _, c := range []struct{ method, path string }{{"GET", "/data"}, {"GET", "/" + data.ID}, {"DELETE", "/data"}, {"POST", "/data/resize"}} {
		snError(t, c.method, vols+c.path, tokB, map[string]any{"size_gib": 5}, http.StatusNotFound, "no volume")
	}
	snError(t, "POST", url+"/fleet/vms", tokB, map[string]any{"name": "thief", "image": "tiny", "volumes": []string{data.ID}}, http.StatusBadRequest, "no volume")

	// Launches: pinned to the volume's node; refused elsewhere, across nodes, reschedulable.
	snError(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "db", "image": "tiny", "volumes": []string{"data"}, "node": "sim-2"},
		http.StatusConflict, "on node sim-1")
	snError(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "db", "image": "tiny", "volumes": []string{"data", "other"}},
		http.StatusConflict, "two nodes")
	snError(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "db", "image": "tiny", "volumes": []string{"data"}, "reschedulable": true},
		http.StatusBadRequest, "reschedulable")
	var db sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "db", "image": "tiny", "volumes": []string{"data"}}, http.StatusCreated, &db)
	if db.Node != "sim-1" || db.VM.Attributes["volumes"] != data.ID {
		t.Fatalf("launch with a volume: node %s, attributes %v", db.Node, db.VM.Attributes)
	}
	var got sdk.FleetVolume
	fxMust(t, "GET", vols+"/data", tokA, nil, http.StatusOK, &got)
	if got.AttachedTo != db.VM.ID {
		t.Fatalf("attached_to = %q, want %s", got.AttachedTo, db.VM.ID)
	}
	// Attached: no delete, no resize, no second VM.
	snError(t, "DELETE", vols+"/data", tokA, nil, http.StatusConflict, "attached")
	snError(t, "POST", vols+"/data/resize", tokA, map[string]any{"size_gib": 5}, http.StatusConflict, "attached")
	snError(t, "POST", url+"/fleet/vms", tokA, map[string]any{"name": "db-2", "image": "tiny", "volumes": []string{data.ID}}, http.StatusConflict, "attached")
	// A tenant with volumes stays.
	snError(t, "DELETE", url+"/fleet/tenants/"+acmeID, fxToken, nil, http.StatusConflict, "volumes")

	// Freed by the VM's delete: grow only, within the quota.
	fxMust(t, "DELETE", url+"/fleet/vms/sim-1/"+db.VM.ID, tokA, nil, http.StatusNoContent, nil)
	snError(t, "POST", vols+"/data/resize", tokA, map[string]any{"size_gib": 3}, http.StatusBadRequest, "only grow")
	snError(t, "POST", vols+"/data/resize", tokA, map[string]any{"size_gib": 10}, http.StatusTooManyRequests, "max_volume_gib")
	fxMust(t, "POST", vols+"/data/resize", tokA, map[string]any{"size_gib": 6}, http.StatusOK, &got)
	if got.SizeGiB != 6 {
		t.Fatalf("resized: %+v", got)
	}
	fxMust(t, "DELETE", vols+"/data", tokA, nil, http.StatusNoContent, nil)
	snError(t, "GET", vols+"/data", tokA, nil, http.StatusNotFound, "no volume")
	fxMust(t, "DELETE", vols+"/other", tokA, nil, http.StatusNoContent, nil)

	// Records: kept, deleted, with each size and when it began.
	recs, err := st.ListVolumes(context.Background(), func(v *store.Volume) bool { return v.Tenant == acmeID })
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].Name != "data" || recs[0].Live() || len(recs[0].Sizes) != 2 || recs[0].Sizes[1].GiB != 6 ||
		recs[0].Sizes[1].From.Before(recs[0].Sizes[0].From) {
		t.Fatalf("records: %+v", recs)
	}
	fxMust(t, "DELETE", url+"/fleet/tenants/"+acmeID, fxToken, nil, http.StatusNoContent, nil)

	// The activity log and the notifications.
	var actions []string
	for _, e := range activity.Recent(100, acmeID) {
		actions = append(actions, e.Action)
	}
	all := strings.Join(actions, "\n")
	for _, want := range []string{"create volume data", "resize volume data", "delete volume data"} {
		if !strings.Contains(all, want) {
			t.Errorf("activity lacks %q:\n%s", want, all)
		}
	}
	var notes sdk.NotificationList
	fxMust(t, "GET", url+"/fleet/notifications?tenant=acme", fxToken, nil, http.StatusOK, &notes)
	seen := map[string]string{}
	for _, n := range notes.Notifications {
		seen[n.Type] += n.Title + "\n"
	}
	for _, typ := range []string{sdk.NotifyVolumeCreated, sdk.NotifyVolumeDeleted} {
		if !strings.Contains(seen[typ], "volume data") {
			t.Errorf("notification %s: %q", typ, seen[typ])
		}
	}
}

// TestLaunchWithVolumesBootsItsOwnVMEvenWithAWarmPool: a tenant whose pool
// keeps a warm VM of the image and size it launches gets, for a launch with
// a volume, a VM booted with the volume (a warm VM has none), and the pool's
// VM stays warm.
func TestLaunchWithVolumesBootsItsOwnVMEvenWithAWarmPool(t *testing.T) {
	c := newFxCentral(t, fxStore(t, nil))
	images, img := fxImages(t)
	startFxNode(t, "sim-1", c.url, images, 8, 8192)
	fxWaitUp(t, c.url, "sim-1")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	_, tok := fxTenant(t, c.url, "acme", nil)
	fxMust(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "ci", "image": "tiny", "size": 1}, http.StatusCreated, nil)
	stop := pxLoop(c)
	fxWait(t, "pool ci warm", 20*time.Second, func() bool { return pxPoolStatus(t, c.url, tok, "ci").Warm == 1 })
	stop()
	var vol sdk.FleetVolume
	fxMust(t, "POST", c.url+"/fleet/volumes", tok, map[string]any{"name": "data", "size_gib": 1}, http.StatusCreated, &vol)
	var out pxCreated
	fxMust(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "db", "image": "tiny", "volumes": []string{"data"}}, http.StatusCreated, &out)
	if out.FromPool != "" || out.VM.Name != "db" || out.VM.Attributes["volumes"] != vol.ID {
		t.Fatalf("a launch with a volume: from pool %q, name %s, attributes %v", out.FromPool, out.VM.Name, out.VM.Attributes)
	}
	if st := pxPoolStatus(t, c.url, tok, "ci"); st.Warm != 1 {
		t.Fatalf("the pool after the launch: %+v, want its VM still warm", st)
	}
	snError(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "db-2", "pool": "ci", "volumes": []string{"data"}}, http.StatusBadRequest, "warm pool")
}
