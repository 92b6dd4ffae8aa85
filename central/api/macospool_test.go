package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

type mxCheckout struct {
	Node       string `json:"node"`
	ID         string `json:"id"`
	Pool       string `json:"pool"`
	VM         sdk.VM `json:"vm"`
	IdleOnNode int    `json:"idle_on_node"`
	Return     string `json:"return"`
}

type mxMember struct {
	Node  string `json:"node"`
	VMID  string `json:"vm_id"`
	State string `json:"state"`
}

// TestMacOSPoolCheckoutAndReturn: a shared pool of three macOS VMs on two
// sim Macs; a checkout takes one from the Mac with the most idle VMs and says
// so; when none is idle the refusal says to wait; a return deletes the VM on
// its node and the pool refills; returning twice, returning a VM that is not
// a checked-out macOS pool VM, and filters matching nothing are refused.
func TestMacOSPoolCheckoutAndReturn(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	c := newLxCentral(t, fxStore(t, nil), clock)
	images, img := fxImages(t)
	nodes := map[string]*fxNode{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range []string{"mac-a", "mac-b"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := startLxNode(t, name, c.url, images, 16, 65536, "linux", "macos")
			mu.Lock()
			nodes[name] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	fxWaitUp(t, c.url, "mac-a", "mac-b")
	fxMust(t, "PUT", c.url+"/fleet/images/macos", fxToken, map[string]any{"guest_os": "macos", "image": img, "vcpus": 2, "memory_mib": 1024}, http.StatusCreated, nil)
	fxMust(t, "PUT", c.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)

	// No macOS pool yet.
	if code, body := fxCall(t, "POST", c.url+"/fleet/macos-pool/checkout", fxToken, nil); code != http.StatusNotFound ||
		!strings.Contains(string(body), "no shared pool of macOS guests") || !strings.Contains(string(body), "POST /fleet/pools") {
		t.Fatalf("checkout without a pool: %d %s", code, body)
	}

	fxMust(t, "POST", c.url+"/fleet/pools", fxToken, map[string]any{"name": "macos-ci", "image": "macos", "size": 3}, http.StatusCreated, nil)
	stop := pxLoop(c)
	fxWait(t, "pool macos-ci warm", 30*time.Second, func() bool { return pxPoolStatus(t, c.url, fxToken, "macos-ci").Warm == 3 })
	stop() // nothing refills while the checkouts are counted
	idle := func() map[string]int {
		var st struct{ Members []mxMember }
		fxMust(t, "GET", c.url+"/fleet/pools/macos-ci/status", fxToken, nil, http.StatusOK, &st)
		out := map[string]int{}
		for _, m := range st.Members {
			if m.State == "warm" {
				out[m.Node]++
			}
		}
		return out
	}
	before := idle()
	busiest := "mac-a"
	if before["mac-b"] > before["mac-a"] {
		busiest = "mac-b"
	}
	if before["mac-a"]+before["mac-b"] != 3 || before[busiest] != 2 {
		t.Fatalf("three macOS VMs on two Macs of two slots each: %v", before)
	}

	var out mxCheckout
	fxMust(t, "POST", c.url+"/fleet/macos-pool/checkout", fxToken, map[string]any{"image": "macos"}, http.StatusOK, &out)
	if out.Node != busiest || out.IdleOnNode != 2 || out.Pool != "macos-ci" || out.VM.GuestOS != "macos" || out.VM.ID != out.ID ||
		out.Return != "POST /fleet/macos-pool/"+out.Node+"/"+out.ID+"/return" {
		t.Fatalf("first checkout %+v, want the Mac with 2 idle VMs (%s)", out, busiest)
	}
	if got := idle(); got[busiest] != 1 {
		t.Fatalf("after a checkout the pool's idle VMs are %v", got)
	}
	// The other two, then none is idle.
	var second, third mxCheckout
	fxMust(t, "POST", c.url+"/fleet/macos-pool/checkout", fxToken, nil, http.StatusOK, &second)
	fxMust(t, "POST", c.url+"/fleet/macos-pool/checkout", fxToken, map[string]any{"pool": "macos-ci"}, http.StatusOK, &third)
	if second.ID == out.ID || third.ID == out.ID || second.ID == third.ID {
		t.Fatalf("a VM was checked out twice: %s %s %s", out.ID, second.ID, third.ID)
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/macos-pool/checkout", fxToken, nil); code != http.StatusConflict ||
		!strings.Contains(string(body), "no warm macOS VM is idle") {
		t.Fatalf("checkout of an empty pool: %d %s", code, body)
	}
	for _, bad := range []struct {
		body any
		code int
		want string
	}{
		{map[string]any{"pool": "nope"}, http.StatusNotFound, "no shared pool of macOS guests matches"},
		{map[string]any{"image": "linux"}, http.StatusNotFound, "no shared pool of macOS guests matches"},
		{map[string]any{"pool": "Bad Name"}, http.StatusBadRequest, "not a valid name"},
		{map[string]any{"size": 1}, http.StatusBadRequest, "size"},
		{`{"pool":`, http.StatusBadRequest, "JSON"},
	} {
		if code, body := fxCall(t, "POST", c.url+"/fleet/macos-pool/checkout", fxToken, bad.body); code != bad.code || !strings.Contains(string(body), bad.want) {
			t.Errorf("checkout %v: %d %s, want %d naming %q", bad.body, code, body, bad.code, bad.want)
		}
	}

	// A VM that is no macOS pool VM is not taken back.
	var plain sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", fxToken, map[string]any{"name": "plain", "image": "linux", "node": out.Node}, http.StatusCreated, &plain)
	if code, body := fxCall(t, "POST", c.url+"/fleet/macos-pool/"+plain.Node+"/"+plain.VM.ID+"/return", fxToken, nil); code != http.StatusConflict ||
		!strings.Contains(string(body), "not a macOS pool VM") {
		t.Fatalf("return of a plain VM: %d %s", code, body)
	}

	// Return: deleted on its node, refused the second time, and the pool refills.
	fxMust(t, "POST", c.url+"/fleet/macos-pool/"+out.Node+"/"+out.ID+"/return", fxToken, nil, http.StatusOK, nil)
	for _, vm := range nodeVMs(t, nodes[out.Node]) {
		if vm.ID == out.ID {
			t.Fatalf("the returned VM still runs on %s", out.Node)
		}
	}
	if code, body := fxCall(t, "POST", c.url+"/fleet/macos-pool/"+out.Node+"/"+out.ID+"/return", fxToken, nil); code != http.StatusNotFound {
		t.Fatalf("second return: %d %s", code, body)
	}
	stop = pxLoop(c)
	defer stop()
	fxWait(t, "the pool boots a replacement", 30*time.Second, func() bool { return pxPoolStatus(t, c.url, fxToken, "macos-ci").Warm >= 1 })
}
