package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestDeleteRacingItsCreateLeavesNoGhost runs 100 creates, each deleted by
// its tenant as soon as GET /fleet/vms shows it, while the create call may
// still be open. Half of the creates are held between the node's answer and
// the ledger write until their delete has returned (the order that left a
// ledger entry for a deleted VM); the other half race freely. Afterwards,
// without a reconcile pass, the ledger agrees with the nodes (no running
// entry, no VM) and nothing is reserved.
func TestDeleteRacingItsCreateLeavesNoGhost(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	images, img := fxImages(t)
	nodes := []*fxNode{startFxNode(t, "race-1", c.url, images, 64, 65536), startFxNode(t, "race-2", c.url, images, 64, 65536)}
	fxWaitUp(t, c.url, "race-1", "race-2")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	tenant, token := fxTenant(t, c.url, "racer", nil)

	const races = 100
	var mu sync.Mutex
	deleted := map[string]chan struct{}{} // vm name -> closed once its delete returned
	held := func(name string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if deleted[name] == nil {
			deleted[name] = make(chan struct{})
		}
		return deleted[name]
	}
	api.SetAfterNodeCreate(c.srv, func(node string, vm sdk.VM) {
		if vm.Name[len(vm.Name)-1]%2 == 0 { // names ending in an even digit wait for their delete
			select {
			case <-held(vm.Name):
			case <-time.After(30 * time.Second):
				t.Errorf("the delete of %s did not return within 30 s", vm.Name)
			}
		}
	})

	creates := map[int]int{}
	deletes := map[int]int{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 10)
	for i := range races {
		name := fmt.Sprintf("ghost-%d", i)
		wg.Add(2)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			code, body := fxCall(t, "POST", c.url+"/fleet/vms", token, map[string]any{"name": name, "image": "tiny"})
			if code != http.StatusCreated && code != http.StatusConflict {
				t.Errorf("create %s = %d %s", name, code, body)
			}
			mu.Lock()
			creates[code]++
			mu.Unlock()
		}()
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer close(held(name))
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				var list sdk.FleetVMList
				if code, body := fxCall(t, "GET", c.url+"/fleet/vms", token, nil); code == http.StatusOK {
					_ = json.Unmarshal(body, &list)
				}
				for _, vm := range list.VMs {
					if vm.Name != name {
						continue
					}
					code, body := fxCall(t, "DELETE", fmt.Sprintf("%s/fleet/vms/%s/%s", c.url, vm.Node, vm.ID), token, nil)
					if code != http.StatusNoContent {
						t.Errorf("delete %s = %d %s", name, code, body)
					}
					mu.Lock()
					deletes[code]++
					mu.Unlock()
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
			t.Errorf("%s never showed in GET /fleet/vms", name)
		}()
	}
	wg.Wait()
	t.Logf("creates by status %v, deletes by status %v", creates, deletes)
	if deletes[http.StatusNoContent] != races {
		t.Fatalf("%d of %d deletes went through", deletes[http.StatusNoContent], races)
	}

	ctx := context.Background()
	running, err := st.RunningForTenant(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range running {
		t.Errorf("ghost: running ledger entry %s for vm %s (%s) on node %s", e.ID, e.Name, e.VMID, e.Node)
	}
	for _, n := range nodes {
		var list sdk.VMList
		fxMust(t, "GET", n.url+"/v1/vms", n.admin, nil, http.StatusOK, &list)
		for _, vm := range list.VMs {
			t.Errorf("node %s still runs vm %s", n.name, vm.Name)
		}
	}
	u, err := st.TenantUsage(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if u.Running.VMs != 0 || u.Reserved.VMs != 0 {
		t.Errorf("tenant usage running %+v reserved %+v, want nothing", u.Running, u.Reserved)
	}
}

// TestCentralDyingBetweenNodeCreateAndLedgerWrite makes a central die
// exactly after the node created a VM and before the ledger entry was
// written (a fault-injection point, not a sleep). The reconciler of the
// central that lives on adopts the VM with its tenant, and the tenant's
// quota counts it.
func TestCentralDyingBetweenNodeCreateAndLedgerWrite(t *testing.T) {
	etcd := fxStore(t, nil) // the embedded etcd outlives both centrals
	stA, stB := fxStore(t, etcd.Endpoints()), fxStore(t, etcd.Endpoints())
	a, b := newFxCentral(t, stA), newFxCentral(t, stB)
	images, img := fxImages(t)
	startFxNode(t, "crash-1", b.url, images, 8, 8192)
	fxWaitUp(t, b.url, "crash-1")
	fxMust(t, "PUT", b.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	tenant, token := fxTenant(t, b.url, "survivor", map[string]int64{"max_vms": 1})

	died := make(chan string, 1)
	api.SetAfterNodeCreate(a.srv, func(node string, vm sdk.VM) {
		stA.Close() // its etcd lease, and with it the reservation, goes at once
		died <- vm.ID
		panic(http.ErrAbortHandler)
	})
	if code, body := fxCall(t, "POST", a.url+"/fleet/vms", token, map[string]any{"name": "orphan", "image": "tiny"}); code != 0 {
		t.Fatalf("create through the dying central answered %d %s; want the connection cut", code, body)
	}
	vmID := <-died
	ctx := context.Background()
	if u, err := stB.TenantUsage(ctx, tenant); err != nil || u.Running.VMs != 0 || u.Reserved.VMs != 0 {
		t.Fatalf("before the reconcile: usage %+v, %v; want nothing recorded and nothing reserved", u, err)
	}

	rep, err := b.srv.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Adopted) != 1 || rep.Adopted[0].VMID != vmID || rep.Adopted[0].Tenant != tenant || rep.Adopted[0].Name != "orphan" {
		t.Fatalf("adopted %+v, want vm %s (orphan) of tenant %s", rep.Adopted, vmID, tenant)
	}
	u, err := stB.TenantUsage(ctx, tenant)
	if err != nil || u.Running.VMs != 1 {
		t.Fatalf("after the reconcile: usage %+v, %v; want the adopted VM counted", u, err)
	}
	// The quota (max_vms 1) is taken by the adopted VM.
	code, body := fxCall(t, "POST", b.url+"/fleet/vms", token, map[string]any{"name": "second", "image": "tiny"})
	if code != http.StatusTooManyRequests {
		t.Fatalf("a second create = %d %s, want 429: the adopted VM counts against max_vms", code, body)
	}
	// A second pass adopts nothing more.
	if rep, err := b.srv.Reconcile(ctx); err != nil || len(rep.Adopted) != 0 {
		t.Fatalf("second pass adopted %+v, %v", rep, err)
	}
}

// TestVMNamesArePerTenant: two tenants may use one name on one node, and
// nothing a tenant is answered reveals the other's VM: the create, the list,
// a delete by name and an action by the other's id all behave as if the
// other VM did not exist. The operator, who sees both, is told to use ids.
func TestVMNamesArePerTenant(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	images, img := fxImages(t)
	startFxNode(t, "shared-1", c.url, images, 8, 8192)
	fxWaitUp(t, c.url, "shared-1")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, alice := fxTenant(t, c.url, "alice", nil)
	_, bob := fxTenant(t, c.url, "bob", nil)

	var a, b sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", alice, map[string]any{"name": "web", "image": "tiny", "node": "shared-1"}, http.StatusCreated, &a)
	// Before: 409 "a VM named web already exists on node shared-1".
	fxMust(t, "POST", c.url+"/fleet/vms", bob, map[string]any{"name": "web", "image": "tiny", "node": "shared-1"}, http.StatusCreated, &b)
	if a.VM.ID == b.VM.ID {
		t.Fatalf("both creates answered vm %s", a.VM.ID)
	}
	// A tenant's own duplicate is still refused.
	if code, body := fxCall(t, "POST", c.url+"/fleet/vms", bob, map[string]any{"name": "web", "image": "tiny", "node": "shared-1"}); code != http.StatusConflict {
		t.Fatalf("bob's second web = %d %s, want 409", code, body)
	}
	var list sdk.FleetVMList
	fxMust(t, "GET", c.url+"/fleet/vms", bob, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || list.VMs[0].ID != b.VM.ID {
		t.Fatalf("bob lists %+v, want only his own web", list.VMs)
	}
	// Bob cannot reach Alice's VM by its id: 404, as for one that does not exist.
	if code, body := fxCall(t, "POST", c.url+"/fleet/vms/shared-1/"+a.VM.ID+"/stop", bob, map[string]any{}); code != http.StatusNotFound {
		t.Fatalf("bob stopping alice's vm = %d %s, want 404", code, body)
	}
	// The operator must say which web.
	code, body := fxCall(t, "DELETE", c.url+"/fleet/vms/shared-1/web", fxToken, nil)
	if code != http.StatusConflict || !strings.Contains(string(body), "id") {
		t.Fatalf("operator deleting web by name = %d %s, want 409 asking for the id", code, body)
	}
	// Bob deletes his web by name; Alice's stays.
	fxMust(t, "DELETE", c.url+"/fleet/vms/shared-1/web", bob, nil, http.StatusNoContent, nil)
	fxMust(t, "GET", c.url+"/fleet/vms", alice, nil, http.StatusOK, &list)
	if len(list.VMs) != 1 || list.VMs[0].ID != a.VM.ID {
		t.Fatalf("after bob's delete alice lists %+v, want her web", list.VMs)
	}
	fxMust(t, "GET", c.url+"/fleet/vms", bob, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 {
		t.Fatalf("after his delete bob lists %+v", list.VMs)
	}
}

// TestTenantsCannotSetReservedLabels: labels under fluxvm.dev/ are FluxVM's
// (a pool member's mark, say), except fluxvm.dev/ephemeral, which a tenant
// sets to let drains delete its VM.
func TestTenantsCannotSetReservedLabels(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	images, img := fxImages(t)
	startFxNode(t, "labels-1", c.url, images, 8, 8192)
	fxWaitUp(t, c.url, "labels-1")
	fxMust(t, "PUT", c.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, token := fxTenant(t, c.url, "labeller", nil)
	for _, key := range []string{api.PoolLabel, "fluxvm.dev/anything", "fluxvm.dev/ephemeral-not"} {
		code, body := fxCall(t, "POST", c.url+"/fleet/vms", token, map[string]any{"name": "l", "image": "tiny", "labels": map[string]string{key: "x"}})
		if code != http.StatusBadRequest || !strings.Contains(string(body), "reserved") {
			t.Errorf("label %s = %d %s, want 400 naming the reserved prefix", key, code, body)
		}
	}
	fxMust(t, "POST", c.url+"/fleet/vms", token, map[string]any{"name": "e", "image": "tiny",
		"labels": map[string]string{api.EphemeralLabel: "true", "team": "ci"}}, http.StatusCreated, nil)
}

// TestOnlyTheBearerSchemeIsAccepted: a bare token, or a token under another
// scheme, is refused as if it were missing; the scheme's case does not matter.
func TestOnlyTheBearerSchemeIsAccepted(t *testing.T) {
	st := fxStore(t, nil)
	c := newFxCentral(t, st)
	for _, tc := range []struct {
		header string
		want   int
	}{
		{fxToken, http.StatusUnauthorized},
		{"Basic " + fxToken, http.StatusUnauthorized},
		{"Token " + fxToken, http.StatusUnauthorized},
		{"Bearer" + fxToken, http.StatusUnauthorized},
		{"Bearer " + fxToken, http.StatusOK},
		{"bearer " + fxToken, http.StatusOK},
		{"BEARER " + fxToken, http.StatusOK},
	} {
		req, err := http.NewRequest("GET", c.url+"/fleet/tenants", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", tc.header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("Authorization: %.12s… = %d, want %d", tc.header, resp.StatusCode, tc.want)
		}
	}
}
