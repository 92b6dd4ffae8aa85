//go:build linux

package qemu

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// TestRealSnapshotsRestoreAndClone boots a real guest and proves, through
// the guest agent, what the snapshot capabilities promise: a memory
// snapshot restored into the running VM brings back a counter's value and
// lets it count on, with no reboot (same boot id); a disk snapshot restored
// brings back the disk's bytes after they were overwritten; a clone from a
// snapshot boots with the snapshot's disk, its own MAC and its own machine
// id, while its source keeps running.
func TestRealSnapshotsRestoreAndClone(t *testing.T) {
	requireQEMU(t)
	img := guestImage(t)
	d := newTestDriver(t, t.TempDir(), `{}`)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	spec := &pb.VMSpec{Id: "snap", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: img, Vcpus: 1, MemoryMib: 256,
		Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER}}
	if _, err := d.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer d.DestroyVM(context.Background(), spec.Id, true)
	boot := func(id string) {
		t.Helper()
		if _, _, err := d.StartVM(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := d.WaitReady(ctx, id); err != nil {
			log, _ := d.ConsoleLog(ctx, id, 4096)
			t.Fatalf("WaitReady %s: %v\n%s", id, err, log)
		}
	}
	boot(spec.Id)
	counter := func() int {
		t.Helper()
		n, err := strconv.Atoi(strings.TrimSpace(guestOutput(ctx, t, d, spec.Id, "cat /run/counter")))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Memory: a counter that lives in the guest's RAM only, written aside and renamed so
	// that a read never falls between the truncation and the write.
	guestOutput(ctx, t, d, spec.Id, `mkdir -p /run; setsid sh -c 'i=0; while true; do i=$((i+1)); echo $i > /run/counter.new; mv /run/counter.new /run/counter; sleep 0.1; done' </dev/null >/dev/null 2>&1 &`)
	bootID := guestOutput(ctx, t, d, spec.Id, "cat /proc/sys/kernel/random/boot_id")
	time.Sleep(time.Second)
	before := counter()
	start := time.Now()
	snap, err := d.SnapshotVM(ctx, spec.Id, "mem1", true)
	if err != nil {
		_, stateDir := d.config()
		log, _ := tailFile(filepath.Join(workspace(stateDir, spec.Id), qemuLogFile), 2048)
		t.Fatalf("memory snapshot: %v\n%s", err, log)
	}
	t.Logf("memory snapshot took %s", time.Since(start))
	if !snap.Memory || snap.VmState != pb.VMState_VM_STATE_RUNNING {
		t.Errorf("snapshot = %v", snap)
	}
	if st, _ := d.InspectVM(ctx, spec.Id); st.State != pb.VMState_VM_STATE_RUNNING {
		t.Fatalf("after a memory snapshot the vm is %v, want running", st.State)
	}
	after := counter()
	time.Sleep(3 * time.Second)
	later := counter()
	if later <= after {
		t.Fatalf("the counter does not count: %d then %d", after, later)
	}
	start = time.Now()
	if _, err := d.RestoreVM(ctx, spec.Id, "mem1"); err != nil {
		t.Fatalf("restore memory snapshot: %v", err)
	}
	t.Logf("memory restore took %s", time.Since(start))
	restored := counter()
	if restored < before || restored >= later {
		t.Errorf("after the restore the counter reads %d; at the snapshot it was between %d and %d, and %d since", restored, before, after, later)
	}
	time.Sleep(time.Second)
	if on := counter(); on <= restored {
		t.Errorf("after the restore the counter stands still: %d then %d", restored, on)
	}
	if id := guestOutput(ctx, t, d, spec.Id, "cat /proc/sys/kernel/random/boot_id"); id != bootID {
		t.Errorf("boot id %q after the restore, %q before: the guest rebooted", id, bootID)
	}

	// Disk: bytes on the virtio disk, snapshot taken while the VM runs.
	guestOutput(ctx, t, d, spec.Id, "printf original | dd of=/dev/vda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	if _, err := d.SnapshotVM(ctx, spec.Id, "disk1", false); err != nil {
		t.Fatalf("disk snapshot: %v", err)
	}
	if st, _ := d.InspectVM(ctx, spec.Id); st.State != pb.VMState_VM_STATE_RUNNING {
		t.Fatalf("after a disk snapshot the vm is %v, want running", st.State)
	}
	guestOutput(ctx, t, d, spec.Id, "printf OVERWRITE | dd of=/dev/vda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	if _, err := d.RestoreVM(ctx, spec.Id, "disk1"); err == nil {
		t.Error("a disk snapshot was restored into a running vm")
	}
	if _, err := d.StopVM(ctx, spec.Id, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := d.RestoreVM(ctx, spec.Id, "disk1"); err != nil {
		t.Fatalf("restore disk snapshot: %v", err)
	}
	boot(spec.Id)
	readDisk := func(id string) string {
		return guestOutput(ctx, t, d, id, "dd if=/dev/vda bs=8 count=1 2>/dev/null")
	}
	if got := readDisk(spec.Id); got != "original" {
		t.Errorf("after restoring the disk snapshot the disk starts with %q, want %q", got, "original")
	}

	// Clone from the disk snapshot while the source runs.
	if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "disk1", Id: "snap-clone"}); err != nil {
		t.Fatalf("clone: %v", err)
	}
	defer d.DestroyVM(context.Background(), "snap-clone", true)
	guestOutput(ctx, t, d, spec.Id, "printf SOURCE.. | dd of=/dev/vda bs=512 count=1 conv=sync,fsync 2>/dev/null")
	boot("snap-clone")
	if got := readDisk("snap-clone"); got != "original" {
		t.Errorf("the clone's disk starts with %q, want the snapshot's %q", got, "original")
	}
	identity := func(id string) (mac, machineID string) {
		mac = strings.TrimSpace(guestOutput(ctx, t, d, id, "cat /sys/class/net/e*/address"))
		for _, p := range strings.Fields(guestOutput(ctx, t, d, id, "cat /proc/cmdline")) {
			if v, ok := strings.CutPrefix(p, "systemd.machine_id="); ok {
				machineID = v
			}
		}
		return mac, machineID
	}
	srcMAC, srcMachine := identity(spec.Id)
	cloneMAC, cloneMachine := identity("snap-clone")
	if srcMAC == "" || srcMAC == cloneMAC || len(srcMachine) != 32 || len(cloneMachine) != 32 || srcMachine == cloneMachine {
		t.Errorf("source has MAC %q and machine id %q, the clone %q and %q: want both set and different", srcMAC, srcMachine, cloneMAC, cloneMachine)
	}
	if st, _ := d.InspectVM(ctx, spec.Id); st.State != pb.VMState_VM_STATE_RUNNING {
		t.Errorf("the source is %v after cloning, want running", st.State)
	}
	if got := readDisk(spec.Id); got != "SOURCE.." {
		t.Errorf("the source's disk starts with %q, want what it wrote last", got)
	}
	if snaps, _ := d.ListSnapshots(ctx, "snap-clone"); len(snaps) != 0 {
		t.Errorf("the clone has snapshots %v, want none", snaps)
	}

	// Delete while running; the list follows.
	if err := d.DeleteSnapshot(ctx, spec.Id, "mem1"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	snaps, err := d.ListSnapshots(ctx, spec.Id)
	if err != nil || len(snaps) != 1 || snaps[0].Tag != "disk1" || snaps[0].Memory {
		t.Errorf("snapshots after deleting mem1 = %v, %v", snaps, err)
	}
}
