package api_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// restartableCentral is one central on an embedded etcd whose data
// directory outlives it, served at an address that outlives it too, so a
// restart (restart) is a new store and API on the same data, where the
// nodes already heartbeat.
type restartableCentral struct {
	t       *testing.T
	dataDir string
	addr    string
	url     string
	st      *store.Store
	srv     *http.Server
}

func startRestartableCentral(t *testing.T) *restartableCentral {
	c := &restartableCentral{t: t, dataDir: filepath.Join(fxTempDir(t), "etcd")}
	c.start()
	t.Cleanup(c.stop)
	return c
}

func (c *restartableCentral) start() {
	c.t.Helper()
	st, err := store.Open(context.Background(), store.Options{DataDir: c.dataDir, Logger: fxLogger("store"), UnsafeNoFsync: true})
	if err != nil {
		c.t.Fatalf("open store: %v", err)
	}
	addr := c.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		st.Close()
		c.t.Fatalf("listen on %s: %v", addr, err)
	}
	c.addr, c.url, c.st = ln.Addr().String(), "http://"+ln.Addr().String(), st
	c.srv = &http.Server{Handler: api.New(api.Options{Store: st, FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second})}
	go func() { _ = c.srv.Serve(ln) }()
}

func (c *restartableCentral) stop() {
	if c.srv != nil {
		_ = c.srv.Close()
		c.st.Close()
		c.srv = nil
	}
}

func (c *restartableCentral) restart() {
	c.t.Helper()
	c.stop()
	c.start()
}

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
// (kept across a restart of central and its etcd). A node without a
// network plugin is refused with the reason; with isolation off a tenant's
// VM has user networking as before.
func TestTenantNetworksThroughCentral(t *testing.T) {
	a := startRestartableCentral(t)
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
	t.Logf("acme: %s (%s, %s), globex: %s (%s)", sa1, a1.Address, a2.Address, sg1, g1.Address)
	if a1.Address == a2.Address {
		t.Fatalf("two VMs of acme share address %s", a1.Address)
	}

	// Not on a node without a network plugin, with the reason.
	code, data := fxCall(t, "POST", a.url+"/fleet/vms", acme, map[string]any{"name": "pinned", "image": "tiny", "node": "plain"})
	var np sdk.NoPlacementBody
	_ = json.Unmarshal(data, &np)
	if code != http.StatusConflict || np.Error != "node plain cannot take 1 vCPU / 64 MiB for linux: no tenant network plugin" ||
		!strings.Contains(np.Hint, "network plugin is up") {
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

	// Central restarted (its etcd too, from its data directory): acme
	// keeps its subnet, and a new tenant takes the next free one.
	a.restart()
	fxWaitUp(t, a.url, "net-1", "net-2")
	if s := subnetOf(launch(a.url, acme, map[string]any{"name": "a3", "image": "tiny"})); s != sa1 {
		t.Fatalf("acme's subnet after a central restart: %s; want %s, the one in etcd", s, sa1)
	}
	// A dry run places like a launch and assigns no subnet: hooli's dry
	// run leaves 10.230.2.0/24 for initech's launch.
	_, hooli := fxTenant(t, a.url, "hooli", nil)
	code, data = fxCall(t, "POST", a.url+"/fleet/vms?dry_run=true", hooli, map[string]any{"name": "h1", "image": "tiny", "node": "plain"})
	if code != http.StatusConflict || !strings.Contains(string(data), "no tenant network plugin") {
		t.Fatalf("dry run pinned to plain: %d %s; want 409 naming the missing network plugin", code, data)
	}
	fxMust(t, "POST", a.url+"/fleet/vms?dry_run=true", hooli, map[string]any{"name": "h1", "image": "tiny"}, http.StatusOK, nil)
	_, initech := fxTenant(t, a.url, "initech", nil)
	if s := subnetOf(launch(a.url, initech, map[string]any{"name": "i1", "image": "tiny"})); s != "10.230.2.0/24" {
		t.Fatalf("initech's subnet %s after the restart and hooli's dry run; want 10.230.2.0/24, the lowest free (acme %s, globex %s)", s, sa1, sg1)
	} else {
		t.Logf("after the restart: acme %s, initech %s", sa1, s)
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
