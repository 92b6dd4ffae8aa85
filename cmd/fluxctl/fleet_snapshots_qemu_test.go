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
// snapshot is listed with the size its node reported.
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
	deadline := time.Now().Add(3 * time.Minute)
	var got string
	for {
		r := tenant.run(t, "fleet", "run", "disk-1", "--", "dd", "if=/dev/vda", "bs=8", "count=1")
		if r.code == 0 {
			got = r.stdout
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restored VM does not answer: exit %d\n%s", r.code, r.stderr)
		}
		time.Sleep(2 * time.Second)
	}
	if got != "original" {
		t.Fatalf("after the restore the disk starts with %q, want %q", got, "original")
	}
	list := tenant.tty().run(t, "fleet", "snapshots", "disk-1").ok(t, "snapshots").stdout
	if !strings.Contains(list, "before") || !strings.Contains(list, " GiB") {
		t.Fatalf("fleet snapshots printed:\n%s", list)
	}
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
