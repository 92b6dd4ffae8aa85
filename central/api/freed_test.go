package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestDeletedVMsRoomIsPlaceableAtOnce fills a real sim node with two
// one-vCPU VMs, deletes one and launches again at once: the launch is placed
// in the room the delete freed, long before the node's next heartbeat (the
// interval here is 20 s) would have reported it.
func TestDeletedVMsRoomIsPlaceableAtOnce(t *testing.T) {
	url := startFxCentral(t, central.Options{HeartbeatInterval: 8 * time.Second, ReconcileEvery: time.Hour})
	images, img := fxImages(t)
	startFxNode(t, "sim-small", url, images, 2, 4096)
	fxWaitUp(t, url, "sim-small")
	fxMust(t, "PUT", url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(t, url, "acme", nil)
	var a sdk.FleetCreateVMResponse
	fxMust(t, "POST", url+"/fleet/vms", token, map[string]any{"name": "a", "image": "tiny"}, http.StatusCreated, &a)
	fxMust(t, "POST", url+"/fleet/vms", token, map[string]any{"name": "b", "image": "tiny"}, http.StatusCreated, nil)
	// Wait for the heartbeat that reports both, so the node's own count is
	// what stands between the next launch and the room.
	fxWait(t, "the node reports two VMs", 20*time.Second, func() bool { return len(fxNodeState(t, url, "sim-small").VMs) == 2 })
	if code, body := fxCall(t, "POST", url+"/fleet/vms", token, map[string]any{"name": "c", "image": "tiny"}); code != http.StatusConflict ||
		!strings.Contains(string(body), "vCPU") {
		t.Fatalf("a third launch on a full node = %d %s, want 409 naming the vCPUs", code, body)
	}
	fxMust(t, "DELETE", url+"/fleet/vms/sim-small/"+a.VM.ID, token, nil, http.StatusNoContent, nil)
	fxMust(t, "POST", url+"/fleet/vms", token, map[string]any{"name": "c", "image": "tiny"}, http.StatusCreated, nil)
	if n := fxNodeState(t, url, "sim-small"); len(n.VMs) != 1 {
		t.Fatalf("node record after the delete lists %d VMs, want 1 (b); heartbeat at %s", len(n.VMs), n.LastHeartbeat)
	}
	// The activity log names the VM deleted by its id, and the tenant.
	var evs sdk.EventList
	fxMust(t, "GET", url+"/fleet/events?tenant=acme", fxToken, nil, http.StatusOK, &evs)
	var actions []string
	for _, e := range evs.Events {
		if e.Actor != "acme" {
			t.Errorf("event %+v: actor %q, want acme", e, e.Actor)
		}
		actions = append(actions, e.Action)
	}
	if want := "launch vm c|delete vm a|launch vm c|launch vm b|launch vm a"; strings.Join(actions, "|") != want {
		t.Fatalf("activity, newest first: %q, want %q", actions, want)
	}
}
