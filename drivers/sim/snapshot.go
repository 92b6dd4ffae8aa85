package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// snapshotRecord is one snapshot in vm.json. A simulated VM has no disk or
// RAM; its screen stands for both: a snapshot keeps the screen, a restore
// brings it back, so a test can see that a restore restored something.
type snapshotRecord struct {
	Tag               string `json:"tag"`
	Memory            bool   `json:"memory"`
	CreatedAtUnixNano int64  `json:"created_at_unix_nano"`
	State             string `json:"state"` // the VM's state when taken
	Screen            screen `json:"screen"`
}

// simSnapshotBytes is the size a simulated snapshot reports: 1 GiB of disk,
// and 1 GiB more of memory for a memory snapshot, so that billing has a
// size to charge in demos and tests.
const simSnapshotBytes = 1 << 30

func (s snapshotRecord) pb() *pb.Snapshot {
	size := int64(simSnapshotBytes)
	if s.Memory {
		size *= 2
	}
	return &pb.Snapshot{Tag: s.Tag, Memory: s.Memory, CreatedAtUnixNano: s.CreatedAtUnixNano, VmState: vmState(s.State), SizeBytes: size}
}

func vmState(s string) pb.VMState {
	switch s {
	case stateCreated:
		return pb.VMState_VM_STATE_CREATED
	case stateRunning:
		return pb.VMState_VM_STATE_RUNNING
	case statePaused:
		return pb.VMState_VM_STATE_PAUSED
	case stateStopped:
		return pb.VMState_VM_STATE_STOPPED
	}
	return pb.VMState_VM_STATE_UNSPECIFIED
}

func (v *vm) runs() bool { return v.rec.State == stateRunning || v.rec.State == statePaused }

func findSnapshot(snaps []snapshotRecord, tag string) int {
	return slices.IndexFunc(snaps, func(s snapshotRecord) bool { return s.Tag == tag })
}

// SnapshotVM records a snapshot: the screen, and the state the VM was in.
func (d *Driver) SnapshotVM(_ context.Context, id, tag string, memory bool) (*pb.Snapshot, error) {
	if err := driver.CheckSnapshotTag(tag); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	if findSnapshot(v.rec.Snapshots, tag) >= 0 {
		return nil, driver.Errorf(driver.ErrExists, "sim: vm %s has a snapshot %q already", id, tag)
	}
	if memory && !v.runs() {
		return nil, driver.Errorf(driver.ErrState, "sim: vm %s is %s: a memory snapshot needs a running or paused VM", id, v.rec.State)
	}
	snap := snapshotRecord{Tag: tag, Memory: memory, CreatedAtUnixNano: d.now().UnixNano(), State: v.rec.State, Screen: v.rec.Screen.clone()}
	rec := v.rec
	rec.Snapshots = append(slices.Clone(rec.Snapshots), snap)
	if err := d.commitLocked(v, rec); err != nil {
		return nil, err
	}
	d.consoleLocked(v, "vm %s: snapshot %q taken (memory=%t)", id, tag, memory)
	return snap.pb(), nil
}

// ListSnapshots lists the VM's snapshots, oldest first.
func (d *Driver) ListSnapshots(_ context.Context, id string) ([]*pb.Snapshot, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	out := make([]*pb.Snapshot, 0, len(v.rec.Snapshots))
	for _, s := range v.rec.Snapshots {
		out = append(out, s.pb())
	}
	return out, nil
}

// DeleteSnapshot forgets one snapshot.
func (d *Driver) DeleteSnapshot(_ context.Context, id, tag string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return err
	}
	i := findSnapshot(v.rec.Snapshots, tag)
	if i < 0 {
		return driver.Errorf(driver.ErrNotFound, "sim: vm %s has no snapshot %q", id, tag)
	}
	rec := v.rec
	rec.Snapshots = slices.Delete(slices.Clone(rec.Snapshots), i, i+1)
	return d.commitLocked(v, rec)
}

// RestoreVM brings back the snapshot's screen; a memory snapshot also
// brings back whether the VM ran or was paused, without a new boot (the
// generation and the start time stay).
func (d *Driver) RestoreVM(_ context.Context, id, tag string) (*pb.VMStatus, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	i := findSnapshot(v.rec.Snapshots, tag)
	if i < 0 {
		return nil, driver.Errorf(driver.ErrNotFound, "sim: vm %s has no snapshot %q", id, tag)
	}
	snap := v.rec.Snapshots[i]
	if snap.Memory != v.runs() {
		if snap.Memory {
			return nil, driver.Errorf(driver.ErrState, "sim: vm %s is %s: a memory snapshot is restored into a running or paused VM (start it first)", id, v.rec.State)
		}
		return nil, driver.Errorf(driver.ErrState, "sim: vm %s is %s: a disk snapshot is restored into a VM that does not run (stop it first)", id, v.rec.State)
	}
	rec := v.rec
	rec.Screen = snap.Screen.clone()
	if snap.Memory {
		rec.State = snap.State
	}
	if err := d.commitLocked(v, rec); err != nil {
		return nil, err
	}
	d.consoleLocked(v, "vm %s: restored snapshot %q", id, tag)
	return d.statusLocked(v), nil
}

// CloneVM creates a VM with the source's spec and screen (or the
// snapshot's) under a new id and a new UUID, without the source's MAC.
func (d *Driver) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error) {
	if req.GetResumeMemory() {
		return nil, driver.Errorf(driver.ErrUnsupported, "sim: clones that resume from a saved guest's memory are the qemu driver's (memory_file)")
	}
	d.mu.Lock()
	src, err := d.lookupLocked(req.GetSourceId())
	var spec *pb.VMSpec
	var scr screen
	if err == nil {
		spec = driver.CloneSpec(src.spec, req)
		scr = src.rec.Screen.clone()
		if tag := req.GetSnapshotTag(); tag != "" {
			i := findSnapshot(src.rec.Snapshots, tag)
			if i < 0 {
				err = driver.Errorf(driver.ErrNotFound, "sim: vm %s has no snapshot %q", req.GetSourceId(), tag)
			} else {
				scr = src.rec.Snapshots[i].Screen.clone()
			}
		} else if src.runs() {
			err = driver.Errorf(driver.ErrState, "sim: vm %s is %s: clone it from a snapshot, or stop it first", req.GetSourceId(), src.rec.State)
		}
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if _, err := d.CreateVM(ctx, spec); err != nil {
		return nil, fmt.Errorf("sim: clone vm %s as %s: %w", req.GetSourceId(), req.GetId(), err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookupLocked(spec.Id)
	if err != nil {
		return nil, err
	}
	rec := v.rec
	rec.Screen = scr
	if err := d.commitLocked(v, rec); err != nil {
		return nil, err
	}
	return d.statusLocked(v), nil
}

func (s screen) clone() screen {
	s.Lines = slices.Clone(s.Lines)
	return s
}
