package api_test

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestDrainReschedulesARealQEMUVM is the reschedule drain with a real
// guest: a tenant's reschedulable VM boots on node src (QEMU; TCG here) and
// answers an exec through central; draining src with mode=reschedule
// recreates it on dst (same name, tenant and labels, a fresh boot from the
// kept spec) and deletes it from src, workspace and all; the drain's status
// says so; the copy's guest answers an exec through central, and deleting
// it leaves dst with nothing.
func TestDrainReschedulesARealQEMUVM(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	img := image.DefaultDir()
	if _, err := image.Load(img); errors.Is(err, image.ErrNotBuilt) {
		t.Fatalf("guest image: %v", err) // the error says to run make guest-image
	} else if err != nil {
		t.Fatalf("guest image in %s is unusable: %v (run make guest-image)", img, err)
	}
	c := newFxCentral(t, fxStore(t, nil))
	// One after the other: the helpers fail the test, which only the test's
	// own goroutine may do.
	src := startQemuFxNode(t, "src", c.url, img)
	dst := startQemuFxNode(t, "dst", c.url, img)
	// The QEMUs outlive their agents by design: whatever a failed run
	// leaves is deleted before the nodes stop (cleanups run last first).
	t.Cleanup(func() {
		for _, n := range []*fxNode{src, dst} {
			var list sdk.VMList
			if code, body := fxCall(t, "GET", n.url+"/v1/vms", n.admin, nil); code == http.StatusOK && json.Unmarshal(body, &list) == nil {
				for _, vm := range list.VMs {
					fxCall(t, "DELETE", n.url+"/v1/vms/"+vm.ID, n.admin, nil)
				}
			}
		}
	})
	fxWaitUp(t, c.url, "src", "dst")
	fxMust(t, "PUT", c.url+"/fleet/images/debian-minimal", fxToken,
		map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	acmeID, acme := fxTenant(t, c.url, "acme", nil)
	// workspaces is where a node's QEMU driver keeps its VMs' workspaces.
	workspaces := func(n *fxNode) string {
		return filepath.Join(filepath.Dir(n.config), "state", "drivers", "qemu", "vms")
	}

	// ready waits until the tenant sees the VM on the node with its guest
	// agent up, then runs uname and reads the boot id through central.
	ready := func(node, id string) (bootID string) {
		t.Helper()
		fxWait(t, "guest agent of "+id+" on "+node+", seen through central", 3*time.Minute, func() bool {
			var list sdk.FleetVMList
			fxMust(t, "GET", c.url+"/fleet/vms", acme, nil, http.StatusOK, &list)
			return len(list.VMs) == 1 && list.VMs[0].Node == node && list.VMs[0].ID == id && list.VMs[0].AgentReady
		})
		var res sdk.ExecResult
		fxMust(t, "POST", c.url+"/fleet/vms/"+node+"/"+id+"/exec", acme,
			map[string]any{"command": "uname -a && cat /proc/sys/kernel/random/boot_id", "timeout_seconds": 60}, http.StatusOK, &res)
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if res.ExitCode != 0 || len(lines) != 2 || !strings.Contains(lines[0], "Linux") || len(lines[1]) != 36 {
			t.Fatalf("exec in %s on %s through central = %+v, want uname's line and a boot id", id, node, res)
		}
		return lines[1]
	}

	var created sdk.FleetCreateVMResponse
	fxMust(t, "POST", c.url+"/fleet/vms", acme, map[string]any{"name": "mover", "image": "debian-minimal", "node": "src",
		"reschedulable": true, "labels": map[string]string{"app": "web"}}, http.StatusCreated, &created)
	if created.Node != "src" || created.VM.Driver != "qemu" {
		t.Fatalf("created %+v, want a qemu vm on src", created)
	}
	firstBoot := ready("src", created.VM.ID)
	onSrc := nodeVMs(t, src)
	if len(onSrc) != 1 {
		t.Fatalf("src runs %+v, want the one vm", onSrc)
	}
	orig := onSrc[0]
	workspace := orig.Attributes["workspace"]
	if filepath.Dir(workspace) != workspaces(src) {
		t.Fatalf("workspace %q of the vm on src is not in %s", workspace, workspaces(src))
	}

	var d dxDrain
	start := time.Now()
	fxMust(t, "POST", c.url+"/fleet/nodes/src/drain?mode=reschedule", fxToken, nil, http.StatusOK, &d)
	t.Logf("drain took %v", time.Since(start).Round(time.Millisecond))
	fxMust(t, "GET", c.url+"/fleet/nodes/src/drain", fxToken, nil, http.StatusOK, &d)
	if got, want := d.actions(), map[string]string{"mover": "moved dst"}; !d.Finished || !d.Draining || d.Mode != "reschedule" ||
		!mapsEqual(got, want) || d.VMs[0].ID != orig.ID || d.VMs[0].Tenant != acmeID {
		t.Fatalf("drain status %+v, want finished and draining, mover (%s of %s) moved to dst", d, orig.ID, acmeID)
	}

	// Gone from src: the node's API, the QEMU's workspace.
	if vms := nodeVMs(t, src); len(vms) != 0 {
		t.Fatalf("src still runs %+v", vms)
	}
	if code, body := fxCall(t, "GET", src.url+"/v1/vms/"+orig.ID, src.admin, nil); code != http.StatusNotFound {
		t.Fatalf("GET the old vm on src = %d %s, want 404", code, body)
	}
	if entries, err := os.ReadDir(workspaces(src)); err != nil || len(entries) != 0 {
		t.Fatalf("workspaces left on src: %v (%v)", entries, err)
	}

	// On dst: the same name, tenant and labels, in a new VM with its own
	// workspace and a fresh boot.
	onDst := nodeVMs(t, dst)
	if len(onDst) != 1 {
		t.Fatalf("dst runs %+v, want the copy", onDst)
	}
	cp := onDst[0]
	if cp.ID == orig.ID || cp.Name != "mover" || cp.Tenant != orig.Tenant || cp.Tenant == "" || !maps.Equal(cp.Labels, orig.Labels) ||
		cp.Labels["app"] != "web" || cp.Driver != "qemu" || cp.VCPUs != orig.VCPUs || cp.MemoryMiB != orig.MemoryMiB {
		t.Fatalf("copy on dst %+v does not match the vm of src %+v", cp, orig)
	}
	if filepath.Dir(cp.Attributes["workspace"]) != workspaces(dst) {
		t.Fatalf("workspace %q of the copy is not in %s", cp.Attributes["workspace"], workspaces(dst))
	}
	if secondBoot := ready("dst", cp.ID); secondBoot == firstBoot {
		t.Fatalf("the copy has the old guest's boot id %s", firstBoot)
	}

	fxMust(t, "DELETE", c.url+"/fleet/vms/dst/"+cp.ID, acme, nil, http.StatusNoContent, nil)
	if vms := nodeVMs(t, dst); len(vms) != 0 {
		t.Fatalf("dst still runs %+v after the delete", vms)
	}
	if entries, err := os.ReadDir(workspaces(dst)); err != nil || len(entries) != 0 {
		t.Fatalf("workspaces left on dst: %v (%v)", entries, err)
	}
	var list sdk.FleetVMList
	fxMust(t, "GET", c.url+"/fleet/vms", acme, nil, http.StatusOK, &list)
	if len(list.VMs) != 0 {
		t.Fatalf("the tenant still lists %+v", list.VMs)
	}
}
