package main_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestCentralRunsATenantsQEMUVM is central end to end: `fluxvm-agent
// central` on its embedded etcd and a `fluxvm-agent node` with the qemu
// plugin heartbeating to it. A tenant launches a catalog image through
// central, runs `uname -a` in it, sees it in GET /fleet/vms and deletes it;
// the ledger then holds the VM's start and end.
func TestCentralRunsATenantsQEMUVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	// Short paths: the VM's unix sockets live under the node's state dir.
	dir, err := os.MkdirTemp("", "fx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	// The node's admin token is central's fleet token: central calls the
	// node with it, and the node heartbeats with it.
	n := &node{t: t, bin: bin, dir: dir, stateDir: filepath.Join(dir, "state"), admin: "fleet-" + fmt.Sprint(time.Now().UnixNano()),
		ro: "read-only-token-0123456789", config: filepath.Join(dir, "agent.hcl"), logPath: filepath.Join(dir, "agent.log")}
	n.url = "http://" + freeAddr(t)
	centralAddr := freeAddr(t)
	centralURL := "http://" + centralAddr
	hcl := fmt.Sprintf(`name = "qemu-1"
state_dir = %q
listen = %q
tokens {
  admin = [%q]
  read_only = [%q]
}
policy { allowed_image_dirs = [%q] }
plugin "qemu" {
  config {
    machine = "microvm"
    accel   = "tcg"
  }
}
central {
  url   = %q
  token = %q
}
`, n.stateDir, strings.TrimPrefix(n.url, "http://"), n.admin, n.ro, filepath.Dir(image.DefaultDir()), centralURL, n.admin)
	if err := os.WriteFile(n.config, []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}

	centralState := filepath.Join(dir, "central")
	clog, err := os.Create(filepath.Join(dir, "central.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer clog.Close()
	cmd := exec.Command(bin, "central", "-token", n.admin, "-listen", centralAddr, "-state-dir", centralState, "-heartbeat-secs", "1")
	cmd.Stdout, cmd.Stderr = clog, clog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopCentral := func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
	}
	t.Cleanup(func() {
		n.stop()
		stopCentral()
		if t.Failed() {
			for _, f := range []string{"central.log", "agent.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				t.Logf("%s:\n%s", f, tail(b, 6000))
			}
		}
	})
	call := func(method, path, token string, body any) (int, []byte) {
		c := &node{url: centralURL}
		return c.call(method, path, body, token)
	}
	must := func(method, path, token string, body any, want int, out any) {
		t.Helper()
		c := &node{t: t, url: centralURL, admin: token}
		c.must(method, path, body, want, out)
	}
	n.waitFor("central's /healthz", 30*time.Second, func() bool { code, _ := call("GET", "/healthz", "", nil); return code == 200 })
	n.start()
	n.waitFor("the node reporting to central with a healthy qemu", 60*time.Second, func() bool {
		var nd store.Node
		code, _ := call("GET", "/fleet/nodes/qemu-1", n.admin, nil)
		if code != http.StatusOK {
			return false
		}
		must("GET", "/fleet/nodes/qemu-1", n.admin, nil, http.StatusOK, &nd)
		return nd.State == store.NodeUp && len(nd.GuestOS) > 0
	})

	var tenant struct {
		Tenant struct{ ID string } `json:"tenant"`
		Token  string              `json:"token"`
	}
	must("POST", "/fleet/tenants", n.admin, map[string]any{"name": "acme", "quota": map[string]int64{"max_vms": 2}}, http.StatusCreated, &tenant)
	must("PUT", "/fleet/images/debian-minimal", n.admin,
		map[string]any{"guest_os": "linux", "image": image.DefaultDir(), "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)

	var created sdk.FleetCreateVMResponse
	must("POST", "/fleet/vms", tenant.Token, map[string]any{"name": "e2e-vm", "image": "debian-minimal"}, http.StatusCreated, &created)
	if created.Node != "qemu-1" || created.VM.Tenant != tenant.Tenant.ID {
		t.Fatalf("created %+v, want it on qemu-1 stamped with the tenant", created)
	}
	vmPath := "/fleet/vms/qemu-1/" + created.VM.ID
	var list sdk.FleetVMList
	n.waitFor("the vm's guest agent, seen through central", 3*time.Minute, func() bool {
		must("GET", "/fleet/vms", tenant.Token, nil, http.StatusOK, &list)
		return len(list.VMs) == 1 && list.VMs[0].ID == created.VM.ID && list.VMs[0].AgentReady
	})
	var res sdk.ExecResult
	must("POST", vmPath+"/exec", tenant.Token, map[string]any{"command": []string{"uname", "-a"}, "timeout_seconds": 60}, http.StatusOK, &res)
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Linux") {
		t.Fatalf("uname -a through central = %+v", res)
	}
	must("DELETE", vmPath, tenant.Token, nil, http.StatusNoContent, nil)
	must("GET", "/fleet/vms", tenant.Token, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 {
		t.Fatalf("after delete the tenant still lists %+v", list.VMs)
	}

	// The ledger, read from central's own etcd data once it has stopped.
	n.stop()
	stopCentral()
	st, err := store.Open(context.Background(), store.Options{DataDir: filepath.Join(centralState, "etcd")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.EntriesForTenant(context.Background(), tenant.Tenant.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].VMID != created.VM.ID || es[0].StartedAt.IsZero() || es[0].EndedAt.IsZero() ||
		es[0].EndReason != "deleted" || es[0].Image != "debian-minimal" || es[0].Node != "qemu-1" {
		t.Fatalf("ledger = %+v, want one entry for the vm with a start and an end", es)
	}
	t.Logf("ledger: %s on %s from %s to %s (%s)", es[0].Name, es[0].Node, es[0].StartedAt.Format(time.RFC3339), es[0].EndedAt.Format(time.RFC3339), es[0].EndReason)
}
