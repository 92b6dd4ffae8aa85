package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestRescheduleKeepsTheOriginalWhenTheCopyFails: a reschedule deletes the
// old VM only once its copy runs and its guest agent answers. Here the copy
// (on a node whose guests take 20 s to answer) is stopped while the drain
// waits for it: the drain reports the VM failed with the reason, and the
// original still runs where it was.
func TestRescheduleKeepsTheOriginalWhenTheCopyFails(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	c := newLxCentral(t, fxStore(t, nil), clock)
	images, img := fxImages(t)
	src := startLxNode(t, "src", c.url, images, 8, 8192, "linux")
	dst := startSimNode(t, "dst", c.url, images, 8, 8192, 20000, "linux")
	fxWaitUp(t, c.url, "src", "dst")
	fxMust(t, "PUT", c.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	_, acme := fxTenant(t, c.url, "acme", nil)
	var created sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", acme, map[string]any{"name": "mover", "image": "linux", "node": "src", "reschedulable": true},
		http.StatusCreated, &created)
	fxWait(t, "the original's guest agent", 10*time.Second, func() bool {
		var vm sdk.VM
		fxMust(t, "GET", src.url+"/v1/vms/mover", src.admin, nil, http.StatusOK, &vm)
		return vm.AgentReady
	})

	done := make(chan dxDrain, 1)
	go func() {
		var d dxDrain
		code, body := fxCall(t, "POST", c.url+"/fleet/nodes/src/drain?mode=reschedule", fxToken, nil)
		if code != http.StatusOK {
			t.Errorf("drain: %d %s", code, body)
		}
		lxJSON(t, body, &d)
		done <- d
	}()
	// The copy appears on dst and boots slowly; stop it while the drain waits.
	fxWait(t, "the copy on dst", 20*time.Second, func() bool {
		code, _ := fxCall(t, "GET", dst.url+"/v1/vms/mover", dst.admin, nil)
		return code == http.StatusOK
	})
	fxMust(t, "POST", dst.url+"/v1/vms/mover/stop", dst.admin, map[string]any{"timeout_seconds": 1}, http.StatusOK, nil)
	var d dxDrain
	select {
	case d = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the drain did not end after its copy stopped")
	}
	got := d.actions()["mover"]
	if !strings.HasPrefix(got, "failed") || !strings.Contains(got, "the old vm stays") || !strings.Contains(got, "stopped") {
		t.Fatalf("drain action for mover: %q, want failed because the copy stopped", got)
	}
	vms := nodeVMs(t, src)
	if len(vms) != 1 || vms[0].ID != created.VM.ID || vms[0].State != sdk.StateRunning {
		t.Fatalf("src after the failed move: %+v, want the original running", vms)
	}
}
