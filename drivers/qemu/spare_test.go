//go:build linux

package qemu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/internal/benchstat"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver/drivertest"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// spareProcesses lists the live processes working in a spare workspace
// under stateDir (a spare a clone took works in the clone's workspace).
func spareProcesses(t *testing.T, stateDir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !processAlive(pid) {
			continue
		}
		if cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd"); err == nil && strings.HasPrefix(cwd, spareDir(stateDir)+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitSpare waits for the driver to hold its full set of spares for key,
// none still being made, and returns the one the next clone takes.
func waitSpare(t *testing.T, d *Driver, key spareKey) *spare {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		d.spares.mu.Lock()
		r, making := d.spares.ready[key], d.spares.making[key]
		d.spares.mu.Unlock()
		if len(r) == perSnapshot && making == 0 {
			return r[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no %d spares for %v a minute after a resumed clone answered", perSnapshot, key)
	return nil
}

// TestResumedClonesTakeAQEMUStartedAhead: once a saved memory_file VM is
// stopped, and again once a clone resumed from it has answered, the driver
// starts the next clones' QEMUs ahead (spares, holding no guest; none while
// the VM runs); a clone takes one, resumes in it the saved guest (same boot
// id, the template's RAM-only file), and its QEMU is the spare's, moved into
// the clone's workspace. The VM is recovered by a new
// plugin process like any other; a clone given a spare but never started
// before a plugin restart has that QEMU ended and starts one of its own;
// deleting the snapshot or the source ends the spares; a new plugin
// process ends the spares an earlier one left.
func TestResumedClonesTakeAQEMUStartedAhead(t *testing.T) {
	requireQEMU(t)
	img := guestImage(t)
	stateDir := t.TempDir()
	d := newTestDriver(t, stateDir, `{"machine": "microvm"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	spec := memoryFileSpec("tmpl", img)
	if _, err := d.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	defer d.DestroyVM(context.Background(), spec.Id, true)
	if _, _, err := d.StartVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := d.WaitReady(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	guestOutput(ctx, t, d, spec.Id, "mkdir -p /run && echo saved-in-ram > /run/mark")
	bootID := guestOutput(ctx, t, d, spec.Id, "cat /proc/sys/kernel/random/boot_id")
	if _, err := d.SnapshotVM(ctx, spec.Id, "warm", true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if pids := spareProcesses(t, stateDir); len(pids) != 0 {
		t.Fatalf("spares %v for a template that still runs", pids)
	}
	if _, err := d.StopVM(ctx, spec.Id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	key := spareKey{spec.Id, "warm"}
	resume := func(d *Driver, id string) *pb.Handle {
		t.Helper()
		if _, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "warm", Id: id, Name: "copy " + id, ResumeMemory: true}); err != nil {
			t.Fatalf("clone %s: %v", id, err)
		}
		h, _, err := d.StartVM(ctx, id)
		if err != nil {
			log, _ := tailFile(filepath.Join(workspace(stateDir, id), qemuLogFile), 2048)
			t.Fatalf("start %s: %v\n%s", id, err, log)
		}
		if _, err := d.WaitReady(ctx, id); err != nil {
			t.Fatalf("WaitReady %s: %v", id, err)
		}
		if got := guestOutput(ctx, t, d, id, "cat /proc/sys/kernel/random/boot_id"); got != bootID {
			t.Errorf("%s has boot id %q, want the template's %q (a resume, not a boot)", id, got, bootID)
		}
		if got := strings.TrimSpace(guestOutput(ctx, t, d, id, "cat /run/mark")); got != "saved-in-ram" {
			t.Errorf("%s: /run/mark = %q, want what the template wrote into RAM", id, got)
		}
		return h
	}

	// Stopping the saved template makes its spares: the first clone finds one.
	s := waitSpare(t, d, key)
	if rss := residentMiB(t, s.proc.pid); rss > 128 {
		t.Errorf("a spare QEMU holds %d MiB resident: more than QEMU itself, as if it held the guest", rss)
	} else {
		t.Logf("a spare QEMU holds %d MiB resident (the guest has 256 MiB)", rss)
	}
	resume(d, "c1")
	defer d.DestroyVM(context.Background(), "c1", true)
	v1, _ := d.lookup("c1")
	if v1.rec.StartedIn != s.ws || v1.rec.QEMUName != s.id {
		t.Fatalf("c1's record says its QEMU started in %q as %q, want the spare's %q, %q", v1.rec.StartedIn, v1.rec.QEMUName, s.ws, s.id)
	}
	if c := qemuCmdline(t, stateDir, "c1"); !strings.Contains(c, s.ws+"/") {
		t.Errorf("c1's QEMU is not the spare's: %q", c)
	}

	// The clone's answer tops the spares up; the second takes one, named as asked.
	s2 := waitSpare(t, d, key)
	h2 := resume(d, "c2")
	defer d.DestroyVM(context.Background(), "c2", true)
	v2, _ := d.lookup("c2")
	if v2.rec.StartedIn != s2.ws {
		t.Fatalf("c2's QEMU started in %q, want the spare's %q", v2.rec.StartedIn, s2.ws)
	}
	if v2.spec.GetName() != "copy c2" || v2.spec.GetId() != "c2" {
		t.Errorf("c2's spec is %q named %q, want the clone request's id and name", v2.spec.GetId(), v2.spec.GetName())
	}

	// A new plugin process recovers c2 (the QEMU says it is the spare), and
	// ends the spare made meanwhile for the next clone, which it does not know.
	s3 := waitSpare(t, d, key)
	forget(v2) // as the earlier process's end would: it holds c2's QMP
	d2 := newTestDriver(t, stateDir, `{"machine": "microvm"}`)
	if processAlive(s3.proc.pid) {
		t.Error("a new plugin process left an earlier one's spare running")
	}
	if st, err := d2.RecoverVM(ctx, h2); err != nil || st.State != pb.VMState_VM_STATE_RUNNING {
		t.Fatalf("recover c2 in a new plugin process: %v, %v", st, err)
	}
	if got := strings.TrimSpace(guestOutput(ctx, t, d2, "c2", "cat /run/mark")); got != "saved-in-ram" {
		t.Errorf("recovered c2 reads %q", got)
	}
	if err := d2.DestroyVM(ctx, "c2", true); err != nil {
		t.Fatalf("destroy c2 from the new plugin process: %v", err)
	}

	// A clone given a spare, then a plugin restart before its start: the new
	// process ends that QEMU and the clone resumes in one of its own.
	tmpl2, err := d2.lookupOrLoad(spec.Id)
	if err != nil {
		t.Fatal(err)
	}
	d2.makeSpares(tmpl2, "warm")
	s4 := waitSpare(t, d2, key)
	if _, err := d2.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "warm", Id: "c4", ResumeMemory: true}); err != nil {
		t.Fatal(err)
	}
	d3 := newTestDriver(t, stateDir, `{"machine": "microvm"}`)
	if _, _, err := d3.StartVM(ctx, "c4"); err != nil {
		t.Fatalf("start c4, given a spare by the earlier plugin process: %v", err)
	}
	defer d3.DestroyVM(context.Background(), "c4", true)
	if processAlive(s4.proc.pid) {
		t.Error("the earlier plugin process's QEMU for c4 still runs")
	}
	if _, err := d3.WaitReady(ctx, "c4"); err != nil {
		t.Fatal(err)
	}
	if got := guestOutput(ctx, t, d3, "c4", "cat /proc/sys/kernel/random/boot_id"); got != bootID {
		t.Errorf("c4 booted (boot id %q) instead of resuming", got)
	}
	if v4, _ := d3.lookup("c4"); v4.rec.StartedIn != "" {
		t.Errorf("c4 runs its own QEMU but its record still names the spare's workspace %q", v4.rec.StartedIn)
	}

	// Deleting the snapshot ends its spare.
	tmpl3, err := d3.lookupOrLoad(spec.Id)
	if err != nil {
		t.Fatal(err)
	}
	d3.makeSpares(tmpl3, "warm")
	s5 := waitSpare(t, d3, key)
	if err := d3.DeleteSnapshot(ctx, spec.Id, "warm"); err != nil {
		t.Fatal(err)
	}
	if processAlive(s5.proc.pid) {
		t.Error("the snapshot is deleted and its spare still runs")
	}
	if pids := spareProcesses(t, stateDir); len(pids) != 0 {
		t.Errorf("spare QEMUs %v outlived their snapshot", pids)
	}
	if entries, _ := os.ReadDir(spareDir(stateDir)); len(entries) != 0 {
		t.Errorf("spare workspaces left: %v", entries)
	}
}

// residentMiB is a process's resident memory, in whole MiB.
func residentMiB(t *testing.T, pid int) int64 {
	t.Helper()
	mib, err := benchstat.ResidentMiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	return int64(mib)
}

// forget drops what this plugin process holds of v's QEMU (its QMP and agent
// connections), as the process ending would, for a second driver in the
// same test to recover it.
func forget(v *vm) {
	v.mu.Lock()
	m := v.mon
	v.mon = nil
	v.mu.Unlock()
	if m != nil {
		m.close()
	}
	v.closeAgent()
}

// TestSparesEndWithThePluginProcess: the QEMUs a plugin process started
// ahead end when the agent stops it, while the VMs run on.
func TestSparesEndWithThePluginProcess(t *testing.T) {
	requireQEMU(t)
	img := guestImage(t)
	bin := drivertest.Build(t, "../..", "./cmd/fluxvm-agent")
	p := drivertest.LaunchCommand(bin, "plugin", "qemu")(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	stateDir := t.TempDir()
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: []byte(`{"machine": "microvm"}`),
		Agent: &basepb.AgentContext{StateDir: stateDir, NodeName: "spares"}}); err != nil {
		t.Fatal(err)
	}
	waitAccel(t, p)
	spec := memoryFileSpec("tmpl", img)
	if _, err := p.CreateVM(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.StartVM(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(ctx, spec.Id); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SnapshotVM(ctx, spec.Id, "warm", true); err != nil {
		t.Fatal(err)
	}
	if _, err := p.StopVM(ctx, spec.Id, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CloneVM(ctx, &pb.CloneVMRequest{SourceId: spec.Id, SnapshotTag: "warm", Id: "c1", ResumeMemory: true}); err != nil {
		t.Fatal(err)
	}
	h, _, err := p.StartVM(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitReady(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for len(spareProcesses(t, stateDir)) < perSnapshot {
		if time.Now().After(deadline) {
			t.Fatalf("%d QEMUs started ahead a minute after a resumed clone answered, want %d", len(spareProcesses(t, stateDir)), perSnapshot)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Kill() // as the agent stops its plugins
	deadline = time.Now().Add(10 * time.Second)
	for len(spareProcesses(t, stateDir)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("QEMUs started ahead %v outlived their plugin process by 10s", spareProcesses(t, stateDir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The VM runs on: a new plugin process recovers it, and ends it.
	p2 := drivertest.LaunchCommand(bin, "plugin", "qemu")(t)
	if err := p2.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: []byte(`{"machine": "microvm"}`),
		Agent: &basepb.AgentContext{StateDir: stateDir, NodeName: "spares"}}); err != nil {
		t.Fatal(err)
	}
	if st, err := p2.RecoverVM(ctx, h); err != nil || st.State != pb.VMState_VM_STATE_RUNNING {
		t.Fatalf("recover c1 after its plugin process stopped: %v, %v", st, err)
	}
	for _, id := range []string{"c1", spec.Id} {
		if err := p2.DestroyVM(ctx, id, true); err != nil {
			t.Error(err)
		}
	}
}

// TestHoldSparesWaitsForSparesBeingMadeAndStartsNoNew: removing a snapshot's
// files (or its VM's workspace) first holds its spares: the hold waits for
// a spare being made (whose QEMU would make a removed RAM file again in the
// source's workspace), and while it lasts no spare of it is started, of
// that tag or, for a whole VM, of any.
func TestHoldSparesWaitsForSparesBeingMadeAndStartsNoNew(t *testing.T) {
	d := &Driver{}
	key := spareKey{"tmpl", "warm"}
	d.spares.mu.Lock()
	d.spares.init()
	d.spares.making[key] = 1 // a spare being made, as makeSpares counts it
	d.spares.mu.Unlock()

	held := make(chan func())
	go func() { held <- d.holdSpares("tmpl", "") }()
	select {
	case <-held:
		t.Fatal("the hold returned while a spare of the VM was being made")
	case <-time.After(200 * time.Millisecond):
	}
	// The spare is made, as makeSpares ends one.
	d.spares.mu.Lock()
	delete(d.spares.making, key)
	d.spares.made.Broadcast()
	d.spares.mu.Unlock()
	var release func()
	select {
	case release = <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the hold did not return once the spare being made was done")
	}

	// Held: makeSpares starts nothing for any snapshot of the VM.
	d.makeSpares(&vm{id: "tmpl"}, "other")
	d.spares.mu.Lock()
	making, ready := len(d.spares.making), len(d.spares.ready)
	d.spares.mu.Unlock()
	if making != 0 || ready != 0 {
		t.Fatalf("a held VM got spares made: %d being made, %d ready", making, ready)
	}
	release()
	d.spares.mu.Lock()
	left := len(d.spares.held)
	d.spares.mu.Unlock()
	if left != 0 {
		t.Errorf("after release %d holds are left", left)
	}
}
