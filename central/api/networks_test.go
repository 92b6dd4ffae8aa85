package api_test

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
)

// startFxNetNode starts a sim node (startFxNode) that also runs a real netns
// network plugin. The plugin is a third party's binary to the agent (a
// script in plugin_dir, type = "network") that runs `fluxvm-agent plugin
// netns` under `unshare -n`: its bridges, taps and nftables rules live in a
// network namespace of its own, never the host's. It needs root (and
// unshare); the test skips without them.
func startFxNetNode(t *testing.T, name, centralURL, imagesDir string) *fxNode {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the netns network plugin needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) to give the netns plugin a network namespace of its own")
	}
	n := startFxNode(t, name, centralURL, imagesDir, 8, 8192)
	n.stop()
	pluginDir := filepath.Join(fxTempDir(t), "plugins")
	if err := os.MkdirAll(pluginDir, 0o700); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\nexec " + unshare + " -n " + n.bin + " plugin netns\n"
	if err := os.WriteFile(filepath.Join(pluginDir, "fxnet"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(n.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("plugin_dir = \"" + pluginDir + "\"\nplugin \"fxnet\" {\n  type = \"network\"\n}\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	n.start()
	return n
}

// TestTenantNetworksThroughCentral: with isolate_tenant_networks on, a
// tenant's launch through central lands on a node with a network plugin,
// and the node's VM (GET /v1/vms/{id} on the node, a real netns plugin
// behind it) is in the tenant's network: one subnet for both VMs of a
// tenant, another for another tenant, from the index central keeps in etcd
// (a second central on the same etcd gives the same). A node without a
// network plugin is refused with the reason; with isolation off a tenant's
// VM has user networking as before.
func TestTenantNetworksThroughCentral(t *testing.T) {
	stA := fxStore(t, nil)
	a := newFxCentral(t, stA)
	images, img := fxImages(t)
	nodes := map[string]*fxNode{
		"net-1": startFxNetNode(t, "net-1", a.url, images),
		"net-2": startFxNetNode(t, "net-2", a.url, images),
		"plain": startFxNode(t, "plain", a.url, images, 4, 4096), // the smallest: bin-packing alone would choose it
	}
	fxWaitUp(t, a.url, "net-1", "net-2", "plain")
	for _, name := range []string{"net-1", "net-2"} {
		fxWait(t, "node "+name+" reports its network plugin", 30*time.Second, func() bool {
			return slices.Equal(fxNodeState(t, a.url, name).Networks, []string{"fxnet"})
		})
	}
	if n := fxNodeState(t, a.url, "plain"); len(n.Networks) != 0 {
		t.Fatalf("node plain reports network plugins %v; it has none", n.Networks)
	}
	fxMust(t, "PUT", a.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64},
		http.StatusCreated, nil)
	_, acme := fxTenant(t, a.url, "acme", nil)
	_, globex := fxTenant(t, a.url, "globex", nil)

	// nodeVM launches through central c and reads the VM from its node.
	launch := func(c, token string, body map[string]any) sdk.VM {
		t.Helper()
		var out sdk.FleetCreateVMResponse
		fxMust(t, "POST", c+"/fleet/vms", token, body, http.StatusCreated, &out)
		n := nodes[out.Node]
		var vm sdk.VM
		fxMust(t, "GET", n.url+"/v1/vms/"+out.VM.ID, n.admin, nil, http.StatusOK, &vm)
		return vm
	}
	subnetOf := func(vm sdk.VM) string {
		t.Helper()
		p, err := netip.ParsePrefix(vm.Address)
		if vm.Network != "tenant" || err != nil {
			t.Fatalf("vm %s: network %q, address %q; want a tenant network address", vm.Name, vm.Network, vm.Address)
		}
		return p.Masked().String()
	}

	// Isolation off (the default): user networking, as before.
	if vm := launch(a.url, acme, map[string]any{"name": "before", "image": "tiny"}); vm.Network != "user" || vm.Address != "" {
		t.Fatalf("isolation off: vm network %q address %q; want user networking", vm.Network, vm.Address)
	}

	fxMust(t, "PUT", a.url+"/fleet/policy", fxToken, map[string]any{"isolate_tenant_networks": true}, http.StatusOK, nil)
	a1 := launch(a.url, acme, map[string]any{"name": "a1", "image": "tiny"})
	a2 := launch(a.url, acme, map[string]any{"name": "a2", "image": "tiny", "network": "tenant"})
	g1 := launch(a.url, globex, map[string]any{"name": "g1", "image": "tiny"})
	sa1, sa2, sg1 := subnetOf(a1), subnetOf(a2), subnetOf(g1)
	if sa1 != sa2 || sa1 == sg1 || !strings.HasPrefix(sa1, "10.230.") || !strings.HasPrefix(sg1, "10.230.") {
		t.Fatalf("subnets: acme %s and %s, globex %s; want one 10.230.n.0/24 per tenant", sa1, sa2, sg1)
	}
	if a1.Address == a2.Address {
		t.Fatalf("two VMs of acme share address %s", a1.Address)
	}

	// Not on a node without a network plugin, with the reason.
	code, data := fxCall(t, "POST", a.url+"/fleet/vms", acme, map[string]any{"name": "pinned", "image": "tiny", "node": "plain"})
	var np sdk.NoPlacementBody
	_ = json.Unmarshal(data, &np)
	if code != http.StatusConflict || np.Error != "node plain cannot take 1 vCPU / 64 MiB for linux: no tenant network plugin" {
		t.Fatalf("pinned to plain: %d %s; want 409 naming the missing network plugin", code, data)
	}
	// User networking is refused to a tenant under isolation; the operator
	// keeps it, and has no tenant network.
	if code, data := fxCall(t, "POST", a.url+"/fleet/vms", acme, map[string]any{"name": "nat", "image": "tiny", "network": "user"}); code != http.StatusForbidden ||
		!strings.Contains(string(data), "isolate_tenant_networks") {
		t.Fatalf("tenant asks for user networking under isolation: %d %s; want 403 naming isolate_tenant_networks", code, data)
	}
	if code, data := fxCall(t, "POST", a.url+"/fleet/vms", fxToken, map[string]any{"name": "op", "image": "tiny", "network": "tenant"}); code != http.StatusBadRequest {
		t.Fatalf("operator asks for a tenant network: %d %s; want 400", code, data)
	}
	if vm := launch(a.url, fxToken, map[string]any{"name": "op", "image": "tiny"}); vm.Network != "user" {
		t.Fatalf("operator VM under isolation: network %q; want user", vm.Network)
	}

	// A second central on the same etcd (nothing in memory from the first)
	// gives acme the same subnet.
	b := newFxCentral(t, fxStore(t, stA.Endpoints()))
	if s := subnetOf(launch(b.url, acme, map[string]any{"name": "a3", "image": "tiny"})); s != sa1 {
		t.Fatalf("acme's subnet from a second central: %s; want %s, the one in etcd", s, sa1)
	}

	// No node with a network plugin left: refused, each node's reason shown.
	for _, name := range []string{"net-1", "net-2"} {
		fxMust(t, "POST", a.url+"/fleet/nodes/"+name+"/cordon", fxToken, nil, http.StatusOK, nil)
	}
	code, data = fxCall(t, "POST", a.url+"/fleet/vms", globex, map[string]any{"name": "g2", "image": "tiny"})
	np = sdk.NoPlacementBody{}
	_ = json.Unmarshal(data, &np)
	if code != http.StatusConflict || !strings.Contains(np.Error, "no tenant network plugin") {
		t.Fatalf("no capable node: %d %s; want 409 naming the missing network plugin", code, data)
	}
	for _, v := range np.Considered {
		if v.Node == "plain" && !slices.Contains(v.Reasons, "no tenant network plugin") {
			t.Fatalf("plain's verdict %+v: want the missing network plugin", v)
		}
	}
}
