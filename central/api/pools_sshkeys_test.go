package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestLaunchWithSSHKeysIsNotServedByAWarmVM: a warm VM booted before the
// launch cannot have had the launch's keys installed, so a launch with
// ssh_authorized_keys boots a VM of its own even when a pool of its image
// is warm, and a launch that names the pool is refused with what to leave
// out.
func TestLaunchWithSSHKeysIsNotServedByAWarmVM(t *testing.T) {
	c := newFxCentral(t, fxStore(t, nil))
	images, img := fxImages(t)
	startFxNode(t, "sim-1", c.url, images, 64, 1<<20)
	fxWaitUp(t, c.url, "sim-1")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, tok := fxTenant(t, c.url, "acme", map[string]int64{"max_vms": 10})
	fxMust(t, "POST", c.url+"/fleet/pools", tok, map[string]any{"name": "ci", "image": "tiny", "size": 1}, http.StatusCreated, nil)
	stop := pxLoop(c)
	fxWait(t, "pool ci warm", 20*time.Second, func() bool { return pxPoolStatus(t, c.url, tok, "ci").Warm == 1 })
	stop()

	keys := []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0b3Bz me@laptop"}
	code, body := fxCall(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "k-1", "pool": "ci", "ssh_authorized_keys": keys})
	if code != http.StatusBadRequest || !strings.Contains(string(body), "ssh_authorized_keys") {
		t.Fatalf("a pool launch with keys = %d %s; want 400 naming ssh_authorized_keys", code, body)
	}
	var resp sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "k-2", "image": "tiny", "ssh_authorized_keys": keys}, http.StatusCreated, &resp)
	if resp.FromPool != "" || resp.VM.Name != "k-2" {
		t.Fatalf("a launch with keys was served by pool %q as %s; want a VM booted for it", resp.FromPool, resp.VM.Name)
	}
	if st := pxPoolStatus(t, c.url, tok, "ci"); st.Warm != 1 {
		t.Fatalf("the pool has %d warm VMs after the launch with keys; want its 1 untouched", st.Warm)
	}
	// Without keys the same launch takes the warm VM: the rule above is
	// about the keys, not the test's set-up.
	fxMust(t, "POST", c.url+"/fleet/vms", tok, map[string]any{"name": "k-3", "image": "tiny"}, http.StatusCreated, &resp)
	if resp.FromPool != "ci" {
		t.Fatalf("a plain launch of tiny was not served by pool ci: %+v", resp)
	}
}
