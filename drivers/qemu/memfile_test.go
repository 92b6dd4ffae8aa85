//go:build linux

package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// TestResumeMemoryClonesRunOnFromTheSavedGuestWithoutBooting: a
// memory_file VM saved as files, then stopped (no QEMU holds it), gives
// two clones that resume from the saved moment (same boot id, a file the
// template wrote into its RAM-only /run is there) in well under a boot, and
// that do not see each other's writes nor change the saved RAM file.
func TestResumeMemoryClonesRunOnFromTheSavedGuestWithoutBooting(t *testing.T) {
	requireQEMU(t)
	img := guestImage(t)
	d := newTestDriver(t, t.TempDir(), `{"machine": "microvm"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	spec := memoryFileSpec("tmpl", img)
	if _, err := d.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer d.DestroyVM(context.Background(), spec.Id, true)
	bootStart := time.Now()
	if _, _, err := d.StartVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitReady(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	boot := time.Since(bootStart)
	guestOutput(ctx, t, d, spec.Id, "mkdir -p /run && echo saved-in-ram > /run/mark")
	bootID := guestOutput(ctx, t, d, spec.Id, "cat /proc/sys/kernel/random/boot_id")
	if _, err := d.SnapshotVM(ctx, spec.Id, "warm", true); err != nil {
		_, stateDir := d.config()
		log, _ := tailFile(filepath.Join(workspace(stateDir, spec.Id), qemuLogFile), 2048)
		t.Fatalf("memory snapshot of a memory_file vm: %v\n%s", err, log)
	}
	if st, _ := d.InspectVM(ctx, spec.Id); st.State != pb.VMState_VM_STATE_RUNNING {
		t.Fatalf("after the snapshot the template is %v, want running", st.State)
	}
	if _, err := d.StopVM(ctx, spec.Id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	_, stateDir := d.config()
	saved := filepath.Join(workspace(stateDir, spec.Id), "snap-warm.ram")
	before, err := os.ReadFile(saved)
	if err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{"c1", "c2"} {
		if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "warm", Id: id, ResumeMemory: true}); err != nil {
			t.Fatalf("clone %s: %v", id, err)
		}
		defer d.DestroyVM(context.Background(), id, true)
		start := time.Now()
		if _, _, err := d.StartVM(ctx, id); err != nil {
			log, _ := tailFile(filepath.Join(workspace(stateDir, id), qemuLogFile), 2048)
			t.Fatalf("start %s: %v\n%s", id, err, log)
		}
		guest, err := d.WaitReady(ctx, id)
		if err != nil {
			t.Fatalf("WaitReady %s: %v", id, err)
		}
		took := time.Since(start)
		if c := qemuCmdline(t, stateDir, id); !strings.Contains(c, "guest_announce=off") {
			t.Errorf("%s: QEMU started without guest_announce=off, like its template: %q", id, c)
		}
		// The saved guest's network runs on (configuring it again by the
		// clone's MAC would find no such NIC: the guest kept its source's).
		if guest["network"] != userNetAddress {
			t.Errorf("%s: network %q, want the saved guest's %s", id, guest["network"], userNetAddress)
		}
		t.Logf("%s resumed to agent-ready in %s (the template booted in %s)", id, took, boot)
		if took > boot/2 {
			t.Errorf("%s took %s to resume, more than half of a boot (%s): it booted", id, took, boot)
		}
		if got := guestOutput(ctx, t, d, id, "cat /proc/sys/kernel/random/boot_id"); got != bootID {
			t.Errorf("%s has boot id %q, want the template's %q (no boot)", id, got, bootID)
		}
		if got := strings.TrimSpace(guestOutput(ctx, t, d, id, "cat /run/mark")); got != "saved-in-ram" {
			t.Errorf("%s: /run/mark = %q, want what the template wrote into RAM", id, got)
		}
		guestOutput(ctx, t, d, id, "echo "+id+" > /run/mine")
	}
	if got := strings.TrimSpace(guestOutput(ctx, t, d, "c1", "cat /run/mine")); got != "c1" {
		t.Errorf("c1 reads %q from its RAM, want its own write", got)
	}
	after, err := os.ReadFile(saved)
	if err != nil || string(before) != string(after) {
		t.Fatal("the clones' writes reached the saved RAM file")
	}
	// A restarted clone boots normally: the resume was for one start.
	if _, err := d.StopVM(ctx, "c2", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.StartVM(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitReady(ctx, "c2"); err != nil {
		t.Fatal(err)
	}
	if got := guestOutput(ctx, t, d, "c2", "cat /proc/sys/kernel/random/boot_id"); got == bootID {
		t.Error("a restarted clone resumed again instead of booting")
	}

	// Refusals.
	if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, Id: "c3", ResumeMemory: true}); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("resume_memory without a tag: %v, want invalid", err)
	}
	if _, err := d.SnapshotVM(ctx, "c1", "disk-only", false); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: "c1", SnapshotTag: "disk-only", Id: "c4", ResumeMemory: true}); !errors.Is(err, driver.ErrState) {
		t.Errorf("resume_memory from a disk snapshot: %v, want failed precondition", err)
	}
	if err := d.DeleteSnapshot(ctx, spec.Id, "warm"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(saved); !os.IsNotExist(err) {
		t.Errorf("the saved RAM file outlived its snapshot: %v", err)
	}
}

// TestResumeFromAGuestSavedWithTheNICsAnnounceOn: a memory_file VM's record
// written before NoAnnounce existed (its NIC offered guest_announce, QEMU's
// default) saves a guest whose clones still resume, their NIC made like
// their source's, while a memory_file VM made today has it off, and so do
// its clones.
func TestResumeFromAGuestSavedWithTheNICsAnnounceOn(t *testing.T) {
	requireQEMU(t)
	img := guestImage(t)
	d := newTestDriver(t, t.TempDir(), `{"machine": "microvm"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	_, stateDir := d.config()
	cmdline := func(id string) string { return qemuCmdline(t, stateDir, id) }
	spec := memoryFileSpec("old", img)
	if _, err := d.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer d.DestroyVM(context.Background(), spec.Id, true)
	v, err := d.lookup(spec.Id)
	if err != nil {
		t.Fatal(err)
	}
	if !v.rec.NoAnnounce {
		t.Fatal("a memory_file vm made today offers the guest announce feature")
	}
	v.rec.NoAnnounce = false // as a record written before the field was
	if err := v.writeRecord(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.StartVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitReady(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if c := cmdline(spec.Id); strings.Contains(c, "guest_announce") {
		t.Fatalf("the old-style vm's QEMU was started with %q", c)
	}
	if _, err := d.SnapshotVM(ctx, spec.Id, "warm", true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.StopVM(ctx, spec.Id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "warm", Id: "oldc", ResumeMemory: true}); err != nil {
		t.Fatal(err)
	}
	defer d.DestroyVM(context.Background(), "oldc", true)
	if _, _, err := d.StartVM(ctx, "oldc"); err != nil {
		log, _ := tailFile(filepath.Join(workspace(stateDir, "oldc"), qemuLogFile), 2048)
		t.Fatalf("resume from a guest saved with the announce feature on: %v\n%s", err, log)
	}
	if _, err := d.WaitReady(ctx, "oldc"); err != nil {
		t.Fatal(err)
	}
	if c := cmdline("oldc"); strings.Contains(c, "guest_announce") {
		t.Errorf("the clone of an old-style guest was started with %q, unlike its source", c)
	}
	if got := strings.TrimSpace(guestOutput(ctx, t, d, "oldc", "echo resumed")); got != "resumed" {
		t.Errorf("the resumed clone answers %q", got)
	}
}

// qemuCmdline is the command line of the QEMU running vm id, its arguments
// joined by spaces.
func qemuCmdline(t *testing.T, stateDir, id string) string {
	t.Helper()
	pid, err := os.ReadFile(filepath.Join(workspace(stateDir, id), pidFile))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(data), "\x00", " ")
}
