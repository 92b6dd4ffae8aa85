package api_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk"
)

// TestVolumeSurvivesItsVMOnARealQEMUNode is the acceptance line of volumes
// with real guests (QEMU; TCG here), all through central: a tenant's
// volume, attached to VM 1, is /dev/disk/by-id/virtio-<id> in the guest
// (the guest agent's link, no udev); VM 1 formats it (busybox mke2fs) and
// writes a random token to it; while VM 1 has it the volume refuses
// delete, resize and a second VM (409); VM 1 is deleted; VM 2 on the same
// node finds the file system (the ext2 superblock's magic) and the token.
// The guest image's initramfs has no ext2/ext4 module, so nothing mounts
// the file system: the token is written with dd at 512 MiB into the volume
// (past the little mke2fs writes on a fresh 1 GiB file system) and read
// back raw. Quota and sizes answer 429 and 400 on the same fleet.
func TestVolumeSurvivesItsVMOnARealQEMUNode(t *testing.T) {
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
	node := startQemuFxNode(t, "q1", c.url, img)
	// The QEMUs outlive their agents by design: whatever a failed run
	// leaves is deleted before the node stops (cleanups run last first).
	t.Cleanup(func() {
		var list sdk.VMList
		if code, body := fxCall(t, "GET", node.url+"/v1/vms", node.admin, nil); code == http.StatusOK && json.Unmarshal(body, &list) == nil {
			for _, vm := range list.VMs {
				fxCall(t, "DELETE", node.url+"/v1/vms/"+vm.ID, node.admin, nil)
			}
		}
	})
	fxWaitUp(t, c.url, "q1")
	fxMust(t, "PUT", c.url+"/fleet/images/debian-minimal", fxToken,
		map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	_, acme := fxTenant(t, c.url, "acme", map[string]int64{"max_volume_gib": 3})
	vols := c.url + "/fleet/volumes"

	// Quota and sizes.
	var vol sdk.FleetVolume
	fxMust(t, "POST", vols, acme, map[string]any{"name": "pg-data", "size_gib": 1}, http.StatusCreated, &vol)
	snError(t, "POST", vols, acme, map[string]any{"name": "more", "size_gib": 3}, http.StatusTooManyRequests, "max_volume_gib")
	snError(t, "POST", vols, acme, map[string]any{"name": "more", "size_gib": 2049}, http.StatusBadRequest, "size_gib")
	snError(t, "POST", vols, acme, map[string]any{"name": "more", "size_gib": 0}, http.StatusBadRequest, "size_gib")
	dev := "/dev/disk/by-id/virtio-" + vol.ID

	launch := func(name string) sdk.FleetCreateVMResponse {
		t.Helper()
		var out sdk.FleetCreateVMResponse
		fxMust(t, "POST", c.url+"/fleet/vms", acme, map[string]any{"name": name, "image": "debian-minimal", "volumes": []string{"pg-data"}},
			http.StatusCreated, &out)
		if out.Node != "q1" {
			t.Fatalf("%s runs on %s, want the volume's node q1", name, out.Node)
		}
		fxWait(t, "guest agent of "+name, 3*time.Minute, func() bool {
			var list sdk.FleetVMList
			fxMust(t, "GET", c.url+"/fleet/vms", acme, nil, http.StatusOK, &list)
			for _, vm := range list.VMs {
				if vm.ID == out.VM.ID {
					return vm.AgentReady
				}
			}
			return false
		})
		return out
	}
	run := func(vm sdk.FleetCreateVMResponse, cmd string) string {
		t.Helper()
		var res sdk.ExecResult
		fxMust(t, "POST", c.url+"/fleet/vms/q1/"+vm.VM.ID+"/exec", acme, map[string]any{"command": cmd, "timeout_seconds": 120}, http.StatusOK, &res)
		if res.ExitCode != 0 {
			t.Fatalf("exec %q in %s = %+v", cmd, vm.VM.Name, res)
		}
		return strings.TrimSpace(res.Stdout)
	}

	b := make([]byte, 16)
	_, _ = rand.Read(b)
	token := hex.EncodeToString(b)
	vm1 := launch("writer")
	if got := run(vm1, "readlink "+dev+" && cat /sys/block/$(basename $(readlink "+dev+"))/serial"); !strings.HasSuffix(got, vol.ID) {
		t.Fatalf("%s in the guest: %q, want a link to the disk whose serial is %s", dev, got, vol.ID)
	}
	run(vm1, "mke2fs -q "+dev+" && printf %s "+token+" | dd of="+dev+" bs=1M seek=512 conv=notrunc 2>/dev/null && sync")

	// Attached: no delete, no resize, no second VM.
	snError(t, "DELETE", vols+"/pg-data", acme, nil, http.StatusConflict, "attached")
	snError(t, "POST", vols+"/pg-data/resize", acme, map[string]any{"size_gib": 2}, http.StatusConflict, "attached")
	snError(t, "POST", c.url+"/fleet/vms", acme, map[string]any{"name": "second", "image": "debian-minimal", "volumes": []string{"pg-data"}},
		http.StatusConflict, "attached")

	fxMust(t, "DELETE", c.url+"/fleet/vms/q1/"+vm1.VM.ID, acme, nil, http.StatusNoContent, nil)
	vm2 := launch("reader")
	magic := run(vm2, "dd if="+dev+" bs=1 skip=1080 count=2 2>/dev/null | od -An -tx1")
	if strings.Join(strings.Fields(magic), "") != "53ef" {
		t.Errorf("ext2 superblock magic in VM 2 = %q, want 53 ef (the file system VM 1 made)", magic)
	}
	if got := run(vm2, "dd if="+dev+" bs=1M skip=512 count=1 2>/dev/null | head -c 32"); got != token {
		t.Errorf("VM 2 reads %q from the volume, want VM 1's %q", got, token)
	}
	fxMust(t, "DELETE", c.url+"/fleet/vms/q1/"+vm2.VM.ID, acme, nil, http.StatusNoContent, nil)
	fxMust(t, "POST", vols+"/pg-data/resize", acme, map[string]any{"size_gib": 2}, http.StatusOK, nil)
	fxMust(t, "DELETE", vols+"/pg-data", acme, nil, http.StatusNoContent, nil)
	if _, err := os.Stat(vol.Path); vol.Path != "" && !os.IsNotExist(err) {
		t.Errorf("the volume's file after its delete: %v", err)
	}
}
