package main

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/sdk/fleettest"
)

// TestFleetSnapshotRestoreInAQEMUGuest: through central and a real QEMU
// guest, bytes written to the VM's disk, snapshotted, then overwritten are
// back after fluxctl fleet restore; the restored VM runs again, and the
// snapshot is listed with the size its node reported. A clone from the
// snapshot, made while the source runs on, has the snapshot's bytes and a
// MAC and machine id of its own, and the source keeps what it wrote.
func TestFleetSnapshotRestoreInAQEMUGuest(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	f := fleettest.Start(t, fleettest.WithQEMU(image.DefaultDir()))
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "qemu", nil)
	tenant := fleetCLI(f, token)
	tenant.run(t, "fleet", "launch", "disk-1", "--image", "debian-minimal", "--wait", "--wait-timeout", "3m").ok(t, "launch --wait")
	write := func(what string) {
		t.Helper()
		tenant.run(t, "fleet", "run", "disk-1", "--", "sh", "-c", "printf "+what+" | dd of=/dev/vda bs=512 count=1 conv=sync,fsync 2>/dev/null").ok(t, "write "+what)
	}
	write("original")
	tenant.run(t, "fleet", "snapshot", "disk-1", "--name", "before").ok(t, "snapshot")
	write("OVERWRITE")
	tenant.tty().run(t, "fleet", "restore", "disk-1", "before", "-y").ok(t, "restore").has(t, "restore", "Restored vm disk-1 to snapshot before (running)")

	// The restored VM boots from the snapshot's disk: its agent answers
	// once it is up.
	guest := func(vm, script string) string {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for {
			r := tenant.run(t, "fleet", "run", vm, "--", "sh", "-c", script)
			if r.code == 0 {
				return r.stdout
			}
			if time.Now().After(deadline) {
				t.Fatalf("vm %s does not answer: exit %d\n%s", vm, r.code, r.stderr)
			}
			time.Sleep(2 * time.Second)
		}
	}
	readDisk := func(vm string) string { return guest(vm, "dd if=/dev/vda bs=8 count=1 2>/dev/null") }
	if got := readDisk("disk-1"); got != "original" {
		t.Fatalf("after the restore the disk starts with %q, want %q", got, "original")
	}
	list := tenant.tty().run(t, "fleet", "snapshots", "disk-1").ok(t, "snapshots").stdout
	if !strings.Contains(list, "before") || !strings.Contains(list, " GiB") {
		t.Fatalf("fleet snapshots printed:\n%s", list)
	}

	// A clone from the snapshot, while its source runs on and writes: the
	// snapshot's bytes, its own MAC and machine id.
	write("SOURCE..")
	tenant.tty().run(t, "fleet", "clone", "disk-1", "disk-2", "--snapshot", "before").ok(t, "clone").has(t, "clone", "Cloned vm disk-1 as disk-2")
	if got := readDisk("disk-2"); got != "original" {
		t.Fatalf("the clone's disk starts with %q, want the snapshot's %q", got, "original")
	}
	identity := func(vm string) (mac, machineID string) {
		mac = strings.TrimSpace(guest(vm, "cat /sys/class/net/e*/address"))
		for _, p := range strings.Fields(guest(vm, "cat /proc/cmdline")) {
			if v, ok := strings.CutPrefix(p, "systemd.machine_id="); ok {
				machineID = v
			}
		}
		return mac, machineID
	}
	srcMAC, srcMachine := identity("disk-1")
	cloneMAC, cloneMachine := identity("disk-2")
	if srcMAC == "" || srcMAC == cloneMAC || len(srcMachine) != 32 || srcMachine == cloneMachine {
		t.Fatalf("source has MAC %q and machine id %q, the clone %q and %q: want both set and different", srcMAC, srcMachine, cloneMAC, cloneMachine)
	}
	if got := readDisk("disk-1"); got != "SOURCE.." {
		t.Fatalf("the source's disk starts with %q after the clone, want what it wrote last", got)
	}
	tenant.run(t, "fleet", "rm", "disk-2", "-y").ok(t, "rm the clone")
	tenant.run(t, "fleet", "rm", "disk-1", "-y").ok(t, "rm -y")
}

// TestFleetMemorySnapshotResumesInAQEMUGuest: through central and a real
// QEMU guest, a counter that lives only in the guest's memory, snapshotted
// with --memory and restored a few seconds later, goes on from where the
// snapshot caught it (lower than it had reached before the restore), in
// the same boot (same boot id): the guest resumed, it did not boot.
func TestFleetMemorySnapshotResumesInAQEMUGuest(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Fatal("qemu-system-x86_64 not found: apt-get install qemu-system-x86 qemu-utils (make deps)")
	}
	if _, err := image.Load(image.DefaultDir()); err != nil {
		t.Fatalf("guest image: %v (run make guest-image)", err)
	}
	f := fleettest.Start(t, fleettest.WithQEMU(image.DefaultDir()))
	f.CatalogImage(t, "debian-minimal")
	_, token := f.Tenant(t, "qemu", nil)
	tenant := fleetCLI(f, token)
	tenant.run(t, "fleet", "launch", "mem-1", "--image", "debian-minimal", "--wait", "--wait-timeout", "3m").ok(t, "launch --wait")
	guest := func(what, script string) string {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			r := tenant.run(t, "fleet", "run", "mem-1", "--", "sh", "-c", script)
			if r.code == 0 {
				return strings.TrimSpace(r.stdout)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: exit %d\n%s", what, r.code, r.stderr)
			}
			time.Sleep(time.Second)
		}
	}
	counter := func() int {
		t.Helper()
		n, err := strconv.Atoi(guest("read the counter", "cat /run/counter"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	guest("start the counter", `mkdir -p /run; setsid sh -c 'i=0; while true; do i=$((i+1)); echo $i > /run/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`)
	bootID := guest("boot id", "cat /proc/sys/kernel/random/boot_id")
	time.Sleep(time.Second)
	before := counter()
	tenant.run(t, "fleet", "snapshot", "mem-1", "--name", "warm", "--memory").ok(t, "snapshot --memory")
	time.Sleep(3 * time.Second)
	reached := counter()
	tenant.tty().run(t, "fleet", "restore", "mem-1", "warm", "-y").ok(t, "restore").has(t, "restore", "Restored vm mem-1 to snapshot warm (running)")
	if id := guest("boot id after the restore", "cat /proc/sys/kernel/random/boot_id"); id != bootID {
		t.Fatalf("boot id %s after the restore, %s before: the guest booted instead of resuming", id, bootID)
	}
	resumed := counter()
	time.Sleep(time.Second)
	later := counter()
	if resumed < before || resumed >= reached || later <= resumed {
		t.Fatalf("counter %d at the snapshot, %d before the restore, %d after it, %d a second later: want it to go on from the snapshot",
			before, reached, resumed, later)
	}
	tenant.run(t, "fleet", "rm", "mem-1", "-y").ok(t, "rm -y")
}
