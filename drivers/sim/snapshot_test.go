package sim

import (
	"slices"
	"testing"

	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// TestSnapshotsRestoreTheScreen: the simulated screen stands for a VM's
// memory and disk, so a memory restore brings back what was typed before
// the snapshot, survives a plugin restart, and a clone starts with the
// snapshot's screen while its source keeps its own.
func TestSnapshotsRestoreTheScreen(t *testing.T) {
	f := newFixture(t, "")
	ctx := t.Context()
	must(f.d.CreateVM(ctx, f.spec("a")))
	start(t, f.d, "a")
	noErr(t, f.d.SendInput(ctx, "a", []*pb.InputAction{text("before")}))
	must(f.d.SnapshotVM(ctx, "a", "m", true))
	noErr(t, f.d.SendInput(ctx, "a", []*pb.InputAction{text("after")}))

	d := f.restart(t, "") // snapshots are on disk, not in the plugin process
	st := must(d.RestoreVM(ctx, "a", "m"))
	if st.State != pb.VMState_VM_STATE_RUNNING {
		t.Errorf("after a memory restore the vm is %s, want running", st.State)
	}
	if got := d.vms["a"].rec.Screen.Lines; !slices.Equal(got, []string{"before"}) {
		t.Errorf("after the restore the screen shows %q, want [before]", got)
	}
	noErr(t, d.SendInput(ctx, "a", []*pb.InputAction{text("-source")}))
	must(d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: "a", SnapshotTag: "m", Id: "b"}))
	if got := d.vms["b"].rec.Screen.Lines; !slices.Equal(got, []string{"before"}) {
		t.Errorf("the clone's screen shows %q, want the snapshot's [before]", got)
	}
	if got := d.vms["a"].rec.Screen.Lines; !slices.Equal(got, []string{"before-source"}) {
		t.Errorf("the source's screen shows %q after the clone, want [before-source]", got)
	}
}
