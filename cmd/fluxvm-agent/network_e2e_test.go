package main_test

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/plugins/network"
	netpb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// netNode is a real `fluxvm-agent node` process in a network namespace of
// its own (made by the test), with the qemu driver and the netns network
// plugin, serving its API on a unix socket (the test's namespace cannot
// reach the node's loopback).
type netNode struct {
	t        *testing.T
	qemuPids []int
	bin      string
	config   string
	ns       netns.NsHandle
	cmd      *exec.Cmd
	client   *sdk.NodeClient
	log      string
}

// inNetns runs f on a thread in ns, then puts the thread back; a thread
// that cannot go back ends with its goroutine.
func inNetns(t testing.TB, ns netns.NsHandle, f func()) {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current network namespace: %v", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("enter network namespace: %v", err)
	}
	f()
	if err := netns.Set(orig); err != nil {
		t.Fatalf("return to the original network namespace: %v", err)
	}
	runtime.UnlockOSThread()
}

func startNetNode(t *testing.T) *netNode {
	t.Helper()
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	// Short: the VMs' unix sockets live under it (107 bytes at most).
	dir, err := os.MkdirTemp("", "fxnet")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var ns netns.NsHandle
	func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			t.Fatal(err)
		}
		defer orig.Close()
		if ns, err = netns.New(); err != nil { // New also enters it
			t.Fatalf("new network namespace: %v", err)
		}
		if err := netns.Set(orig); err != nil {
			panic(err) // the locked thread must not go back to Go in the wrong namespace
		}
	}()
	t.Cleanup(func() { ns.Close() })

	sock := filepath.Join(dir, "node.sock")
	admin := "admin-token-0123456789abcdef"
	cfg := filepath.Join(dir, "agent.hcl")
	hcl := fmt.Sprintf(`name = "net-e2e"
state_dir = %q
listen = "unix:%s"
tokens { admin = [%q] }
policy { allowed_image_dirs = [%q] }
plugin "qemu" {
  # Three 1-vCPU guests on a 2-CPU machine: overcommit.
  config {
    machine = "microvm"
    vcpus   = 4
  }
}
plugin "netns" {}
`, filepath.Join(dir, "state"), sock, admin, image.DefaultDir())
	if err := os.WriteFile(cfg, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	n := &netNode{t: t, bin: bin, ns: ns, config: cfg, log: filepath.Join(dir, "agent.log")}
	if n.client, err = sdk.NewNodeClient("unix://"+sock, sdk.WithToken(admin)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Delete whatever VMs are left, so no QEMU outlives the test (the
		// test's context has ended by now).
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if vms, err := n.client.ListVMs(ctx); err == nil {
			for _, vm := range vms {
				_ = n.client.DeleteVM(ctx, vm.ID)
			}
		}
		if n.cmd.ProcessState == nil {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
			_ = n.cmd.Wait()
		}
		// A VM the agent could not delete (it was dead): its QEMU, by the
		// pid the driver reported, if it still runs in this test's directory.
		for _, pid := range n.qemuPids {
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), dir) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			data, _ := os.ReadFile(n.log)
			t.Logf("agent log:\n%s", tail(data, 8000))
		}
	})
	n.start()
	return n
}

// start runs the agent in the node's namespace and waits for its API.
func (n *netNode) start() {
	n.t.Helper()
	f, err := os.OpenFile(n.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	n.cmd = exec.Command(n.bin, "node", "-config", n.config, "-log-level", "debug")
	n.cmd.Stdout, n.cmd.Stderr = f, f
	// The agent, its plugins and its VMs live in ns: started from a thread
	// in it, the process starts there.
	inNetns(n.t, n.ns, func() { err = n.cmd.Start() })
	if err != nil {
		n.t.Fatal(err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := n.client.Health(n.t.Context()); err == nil {
			return
		}
		if time.Now().After(deadline) {
			n.t.Fatal("the agent did not serve /v1/health within 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kill SIGKILLs the agent; its plugins die with it, its VMs do not.
func (n *netNode) kill() {
	n.t.Helper()
	if err := n.cmd.Process.Kill(); err != nil {
		n.t.Fatal(err)
	}
	_ = n.cmd.Wait()
}

// create makes a VM in its tenant's network and waits for its guest agent.
func (n *netNode) create(name, tenant, subnet string) *sdk.VM {
	n.t.Helper()
	vm, err := n.client.CreateVM(n.t.Context(), sdk.CreateVMRequest{Name: name, Image: image.DefaultDir(), VCPUs: 1, MemoryMiB: 256,
		Network: "tenant", Tenant: tenant, Subnet: subnet})
	if err != nil {
		n.t.Fatalf("create %s: %v", name, err)
	}
	if pid, err := strconv.Atoi(vm.Attributes["pid"]); err == nil {
		n.qemuPids = append(n.qemuPids, pid)
	}
	if vm, err = n.client.WaitReady(n.t.Context(), vm.ID, 200*time.Millisecond); err != nil {
		n.t.Fatalf("vm %s ready: %v", name, err)
	}
	return vm
}

// sh runs a shell command in a VM and returns its exit code and output.
func (n *netNode) sh(vm *sdk.VM, command string) (int, string) {
	n.t.Helper()
	r, err := n.client.Exec(n.t.Context(), vm.ID, sdk.ExecRequest{Command: sdk.Command{Shell: command}, TimeoutSeconds: 60})
	if err != nil {
		n.t.Fatalf("exec in %s: %v", vm.Name, err)
	}
	return r.ExitCode, r.Stdout + r.Stderr
}

func ip(vm *sdk.VM) string { return netip.MustParsePrefix(vm.Address).Addr().String() }

// serve starts a TCP server on port 7000 in the VM that answers with the
// VM's name (busybox nc, one connection after another).
func (n *netNode) serve(vm *sdk.VM) {
	n.t.Helper()
	script := fmt.Sprintf("printf '#!/bin/sh\\necho hello-from-%s\\n' > /tmp/hello && chmod +x /tmp/hello && "+
		"(setsid sh -c 'while true; do nc -l -p 7000 -e /tmp/hello; done' </dev/null >/dev/null 2>&1 &)", vm.Name)
	if code, out := n.sh(vm, script); code != 0 {
		n.t.Fatalf("start the TCP server in %s: %d %s", vm.Name, code, out)
	}
}

// pings reports whether from gets answers to pings of to's address.
func (n *netNode) pings(from, to *sdk.VM) bool {
	code, _ := n.sh(from, "ping -c 2 -W 2 "+ip(to))
	return code == 0
}

// tcp reports whether from gets to's TCP answer on port 7000, trying three
// times: the server in the guest listens again only after a moment (a
// slow fork under TCG) once a connection ends.
func (n *netNode) tcp(from, to *sdk.VM) bool {
	code, out := n.sh(from, "for i in 1 2 3; do nc -w 3 "+ip(to)+" 7000 </dev/null && break; sleep 1; done")
	return code == 0 && strings.Contains(out, "hello-from-"+to.Name)
}

// taps lists the netns plugin's taps in the node's namespace: name to
// alias (the plugin's record, which holds the VM's id).
func (n *netNode) taps() map[string]string {
	n.t.Helper()
	h, err := netlink.NewHandleAt(n.ns)
	if err != nil {
		n.t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		n.t.Fatal(err)
	}
	out := map[string]string{}
	for _, l := range links {
		if a := l.Attrs().Alias; strings.HasPrefix(l.Attrs().Name, "fxtap") {
			out[l.Attrs().Name] = a
		}
	}
	return out
}

// TestNodeTenantNetworksIsolateTenantsAndSurviveThePlugin is the node half
// of tenant networks end to end: a node agent in a network namespace of its
// own runs the qemu driver and the netns plugin; two real VMs of tenant A
// ping each other and exchange TCP, tenant B's VM reaches neither and
// neither reaches it; a SIGKILL of the network plugin leaves the VMs
// connected and the restarted plugin answers for them, and its start removes
// interfaces of VMs the node has no record of; so does a SIGKILL of the agent,
// and a restarted VM is on its network again; a tunnel reaches a
// tenant VM at its address on the bridge; deleting the VMs leaves no tap,
// address or nftables table in the node's namespace.
func TestNodeTenantNetworksIsolateTenantsAndSurviveThePlugin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: makes network namespaces, bridges, taps and nftables rules")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	n := startNetNode(t)
	ctx := t.Context()
	h, err := n.client.Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Networks) != 1 || h.Networks[0].Name != "netns" || h.Networks[0].Health != "up" ||
		!strings.Contains(strings.Join(h.Networks[0].Capabilities, ","), "tenant_isolation") {
		t.Fatalf("health networks = %+v, want netns up with tenant_isolation", h.Networks)
	}
	if len(h.Drivers) != 1 || h.Drivers[0].Name != "qemu" {
		t.Fatalf("health drivers = %+v, want qemu only", h.Drivers)
	}

	a1 := n.create("a1", "tenant-a", "10.230.1.0/24")
	a2 := n.create("a2", "tenant-a", "10.230.1.0/24")
	b1 := n.create("b1", "tenant-b", "10.230.2.0/24")
	for _, vm := range []*sdk.VM{a1, a2, b1} {
		t.Logf("%s: %s", vm.Name, vm.Address)
		if vm.Network != "tenant" || vm.Address == "" {
			t.Fatalf("vm %s: network %q address %q", vm.Name, vm.Network, vm.Address)
		}
		// The guest has the address the plugin decided, on its NIC.
		if code, out := n.sh(vm, "ip -4 addr show"); code != 0 || !strings.Contains(out, vm.Address) {
			t.Fatalf("vm %s has not configured %s: %d %s", vm.Name, vm.Address, code, out)
		}
		n.serve(vm)
	}
	if !strings.HasPrefix(a1.Address, "10.230.1.") || !strings.HasPrefix(b1.Address, "10.230.2.") {
		t.Fatalf("addresses %s, %s are not in their tenants' subnets", a1.Address, b1.Address)
	}

	// Tenant A's VMs reach each other, both ways, ICMP and TCP.
	for _, p := range [][2]*sdk.VM{{a1, a2}, {a2, a1}} {
		if !n.pings(p[0], p[1]) {
			t.Errorf("%s does not ping %s", p[0].Name, p[1].Name)
		}
		if !n.tcp(p[0], p[1]) {
			t.Errorf("%s gets no TCP answer from %s", p[0].Name, p[1].Name)
		}
	}
	// Between tenants nothing passes, in either direction.
	for _, p := range [][2]*sdk.VM{{b1, a1}, {b1, a2}, {a1, b1}, {a2, b1}} {
		if n.pings(p[0], p[1]) {
			t.Errorf("%s (tenant %s) pings %s (tenant %s)", p[0].Name, p[0].Tenant, p[1].Name, p[1].Tenant)
		}
		if n.tcp(p[0], p[1]) {
			t.Errorf("%s (tenant %s) reaches TCP of %s (tenant %s)", p[0].Name, p[0].Tenant, p[1].Name, p[1].Tenant)
		}
	}

	// The node reaches a tenant VM's port through a tunnel: it is on the
	// tenant's bridge through the gateway address.
	c, err := n.client.DialTunnel(ctx, a2.ID, 7000)
	if err != nil {
		t.Fatalf("tunnel to a2:7000: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	c.Close()
	if err != nil || line != "hello-from-a2\n" {
		t.Errorf("tunnel to a2:7000 read %q, %v", line, err)
	}

	// Interfaces of VMs the node has no record of, as a crash could leave
	// them: made by another netns plugin process in the node's namespace.
	// The agent removes them when its network plugin next starts.
	n.ghost("tenant-a", "10.230.1.0/24", "ghost-a")
	n.ghost("tenant-g", "10.230.3.0/24", "ghost-g")
	ghosts := 0
	for _, alias := range n.taps() {
		if strings.Contains(alias, "ghost-") {
			ghosts++
		}
	}
	if ghosts != 2 {
		t.Fatalf("made 2 ghost interfaces, see %d: %v", ghosts, n.taps())
	}

	// SIGKILL the network plugin during a continuous ping (a2 to a1, 5 per
	// second for 8 s): not one packet is lost while the plugin dies and
	// the agent starts a new one.
	if code, out := n.sh(a2, "(setsid ping -c 40 -i 0.2 "+ip(a1)+" </dev/null >/tmp/ping.log 2>&1 &)"); code != 0 {
		t.Fatalf("start the ping: %d %s", code, out)
	}
	time.Sleep(2 * time.Second)
	plugin := pluginPidOf(n.cmd.Process.Pid, "netns")
	if plugin == 0 {
		t.Fatal("no netns plugin process under the agent")
	}
	if err := syscall.Kill(plugin, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !n.tcp(a1, a2) {
		t.Errorf("right after the network plugin's death, a1 gets no TCP answer from a2")
	}
	var pingLog string
	pingDeadline := time.Now().Add(time.Minute)
	for !strings.Contains(pingLog, "packets received") {
		if time.Now().After(pingDeadline) {
			t.Fatalf("the ping did not finish: %q", pingLog)
		}
		time.Sleep(time.Second)
		_, pingLog = n.sh(a2, "cat /tmp/ping.log")
	}
	summary := pingLog[strings.LastIndex(pingLog, "---"):]
	t.Logf("ping a2 -> a1 across the plugin's death: %s", strings.TrimSpace(summary))
	if !strings.Contains(summary, "40 packets transmitted, 40 packets received") {
		t.Errorf("packets were lost while the network plugin died and restarted: %s", summary)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		h, err = n.client.Health(ctx)
		if err == nil && h.Networks[0].Restarts >= 1 && h.Networks[0].Health == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the netns plugin did not come back: %+v %v", h, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, err := n.client.GetVM(ctx, a1.ID); err != nil || got.Address != a1.Address {
		t.Fatalf("after the plugin restart a1's address is %q (%v), want %s", got.Address, err, a1.Address)
	}
	if !n.tcp(a1, a2) || n.tcp(b1, a1) {
		t.Errorf("after the plugin restart: a1->a2 must pass and b1->a1 must not")
	}
	// The restarted plugin's start removed the ghosts, and the network of
	// tenant-g, which only a ghost had.
	for name, alias := range n.taps() {
		if strings.Contains(alias, "ghost-") {
			t.Errorf("ghost tap %s is still there after the plugin restart (%s)", name, alias)
		}
	}
	if n.hasLink(func(l netlink.Link) bool { return strings.Contains(l.Attrs().Alias, `"tenant-g"`) }) {
		t.Errorf("tenant-g's network is still there after its only (ghost) interface went")
	}

	// SIGKILL the agent (its plugins die with it): the VMs keep their
	// network, and the new agent's network plugin, reconciling at its
	// start, keeps every interface of a VM the node has a record of.
	tapsBefore := n.taps()
	n.kill()
	n.start()
	if after := n.taps(); len(after) != len(tapsBefore) {
		t.Errorf("taps before the agent's restart: %v; after: %v", tapsBefore, after)
	}
	if _, err := n.client.WaitReady(ctx, a1.ID, 200*time.Millisecond); err != nil {
		t.Fatalf("a1 after the agent's restart: %v", err)
	}
	if !n.tcp(a1, a2) || n.pings(b1, a1) {
		t.Errorf("after the agent's restart: a1->a2 must pass and b1->a1 must not")
	}
	// A restarted VM opens its (persistent) tap again, and its guest
	// configures its address again.
	if _, err := n.client.RestartVM(ctx, a2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := n.client.WaitReady(ctx, a2.ID, 200*time.Millisecond); err != nil {
		t.Fatalf("a2 after its restart: %v", err)
	}
	// Ready comes before the guest's set-up (its address among it); an
	// exec waits for the set-up, so one in a2 means its address is back.
	if code, out := n.sh(a2, "true"); code != 0 {
		t.Fatalf("exec in a2 after its restart: %d %s", code, out)
	}
	if !n.pings(a1, a2) {
		t.Errorf("a1 does not ping a2 after a2's restart")
	}

	// Deleting a VM removes its tap, and only its.
	before := n.taps()
	if err := n.client.DeleteVM(ctx, a1.ID); err != nil {
		t.Fatal(err)
	}
	after := n.taps()
	if len(after) != len(before)-1 {
		t.Errorf("taps before deleting a1: %v; after: %v", before, after)
	}
	for name, alias := range after {
		if strings.Contains(alias, a1.ID) {
			t.Errorf("a1's tap %s is left (%s)", name, alias)
		}
	}
	if code, out := n.sh(a2, "ping -c 2 -W 2 10.230.1.1"); code != 0 {
		t.Errorf("a2 lost its gateway when a1 was deleted: %s", out)
	}
	for _, vm := range []*sdk.VM{a2, b1} {
		if err := n.client.DeleteVM(ctx, vm.ID); err != nil {
			t.Fatal(err)
		}
	}
	checkNothingLeftIn(t, n.ns)
}

// ghost makes an interface of a VM the agent does not know, through a
// netns plugin process of the test's own in the node's namespace.
func (n *netNode) ghost(tenant, subnet, vm string) {
	n.t.Helper()
	var p *network.Plugin
	var err error
	inNetns(n.t, n.ns, func() {
		p, err = network.Launch(n.t.Context(), network.LaunchConfig{Cmd: exec.Command(n.bin, "plugin", "netns")})
	})
	if err != nil {
		n.t.Fatal(err)
	}
	defer p.Kill()
	if err := p.SetConfig(n.t.Context(), &basepb.SetConfigRequest{ConfigJson: []byte(`{}`), Agent: &basepb.AgentContext{StateDir: n.t.TempDir()}}); err != nil {
		n.t.Fatal(err)
	}
	if _, err := p.CreateInterface(n.t.Context(), &netpb.CreateInterfaceRequest{
		Network: &netpb.TenantNetwork{Tenant: tenant, Subnet: subnet}, VmId: vm}); err != nil {
		n.t.Fatalf("ghost interface %s/%s: %v", tenant, vm, err)
	}
}

// hasLink reports whether a link of the node's namespace satisfies ok.
func (n *netNode) hasLink(ok func(netlink.Link) bool) bool {
	n.t.Helper()
	h, err := netlink.NewHandleAt(n.ns)
	if err != nil {
		n.t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		n.t.Fatal(err)
	}
	for _, l := range links {
		if ok(l) {
			return true
		}
	}
	return false
}

// checkNothingLeftIn fails unless the namespace holds no link, address or
// nftables table of the netns plugin's, read from the kernel's own tables.
func checkNothingLeftIn(t *testing.T, ns netns.NsHandle) {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "fx") || strings.HasPrefix(l.Attrs().Alias, "fluxvm:") {
			t.Errorf("link %s (%s) is left behind", l.Attrs().Name, l.Attrs().Alias)
		}
	}
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP[0] == 10 && a.IP[1] == 230 {
			t.Errorf("address %s is left behind", a.IPNet)
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables {
		if tb.Name == "fluxvm" {
			t.Errorf("nftables table %s is left behind", tb.Name)
		}
	}
}

// TestNodeChecksAThirdPartyNetworkPlugin: a binary in plugin_dir is a
// network plugin when its block says type = "network" (a script that runs
// the netns plugin stands in for a third party's binary); the same binary
// taken for a driver fails at the handshake, and the message says so.
func TestNodeChecksAThirdPartyNetworkPlugin(t *testing.T) {
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	dir := t.TempDir()
	pluginDir := filepath.Join(dir, "plugins")
	if err := os.MkdirAll(pluginDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pluginDir, "mynet"), []byte("#!/bin/sh\nexec "+bin+" plugin netns\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("state_dir = %q\nplugin_dir = %q\ntokens { admin = [\"0123456789abcdef0123\"] }\nplugin \"sim\" {}\n", filepath.Join(dir, "state"), pluginDir)
	for _, c := range []struct {
		name, block string
		wantCode    int
		wantOut     string
	}{
		{"as a network plugin", "plugin \"mynet\" {\n  type = \"network\"\n  config { egress_nat = false }\n}\n", 0, "ok"},
		{"config checked against its schema", "plugin \"mynet\" {\n  type = \"network\"\n  config { nat = false }\n}\n", 1, `"nat"`},
		{"taken for a driver", "plugin \"mynet\" {}\n", 1, "is it a FluxVM driver plugin"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			cfg := filepath.Join(dir, "agent.hcl")
			if err := os.WriteFile(cfg, []byte(base+c.block), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(bin, "node", "-config", cfg, "-check").CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantCode || !strings.Contains(string(out), c.wantOut) {
				t.Errorf("exit %d, output %q; want exit %d and %q", code, out, c.wantCode, c.wantOut)
			}
		})
	}
}
