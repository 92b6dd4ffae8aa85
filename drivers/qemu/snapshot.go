//go:build linux

package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"google.golang.org/protobuf/encoding/protojson"
)

// Snapshots are internal qcow2 snapshots of the VM's overlay disk (node
// disk0), so they live and die with the workspace and need no chain of
// files. A disk snapshot is blockdev-snapshot-internal-sync between a stop
// and a cont (crash-consistent: the guest's unflushed caches are not in it),
// or qemu-img snapshot -c while QEMU does not run. A memory snapshot is the
// snapshot-save job, which writes RAM and device state into the same qcow2
// (vmstate on disk0); snapshot-load brings both back into the running QEMU.
// What the contract asks beyond qcow2's own list (memory or not, the VM's
// state) is kept in snapshots.json.
const snapshotsFile = "snapshots.json"

// snapshotJobTimeout bounds one snapshot-save, -load or -delete job: under
// TCG, writing a few hundred MiB of RAM into the qcow2 takes seconds.
const snapshotJobTimeout = 5 * time.Minute

func (v *vm) readSnapshots() ([]*pb.Snapshot, error) {
	data, err := os.ReadFile(filepath.Join(v.ws, snapshotsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("vm %s: read %s: %w", v.id, snapshotsFile, err)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("vm %s: decode %s: %w", v.id, snapshotsFile, err)
	}
	out := make([]*pb.Snapshot, 0, len(raw))
	for _, r := range raw {
		s := &pb.Snapshot{}
		if err := protojson.Unmarshal(r, s); err != nil {
			return nil, fmt.Errorf("vm %s: decode %s: %w", v.id, snapshotsFile, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func (v *vm) writeSnapshots(snaps []*pb.Snapshot) error {
	raw := make([]json.RawMessage, 0, len(snaps))
	for _, s := range snaps {
		b, err := protojson.Marshal(s)
		if err != nil {
			return err
		}
		raw = append(raw, b)
	}
	data, err := json.MarshalIndent(raw, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(v.ws, snapshotsFile), append(data, '\n'))
}

func findSnapshot(snaps []*pb.Snapshot, tag string) int {
	return slices.IndexFunc(snaps, func(s *pb.Snapshot) bool { return s.Tag == tag })
}

// snapshotTarget looks up a VM for a snapshot RPC and checks it has a disk.
func (d *Driver) snapshotTarget(id string) (*vm, error) {
	v, err := d.lookupOrLoad(id)
	if err != nil {
		return nil, err
	}
	if v.rec.Disk == "" {
		return nil, driver.Errorf(driver.ErrState, "vm %s has no disk to keep snapshots in (its image has none)", id)
	}
	return v, nil
}

// withSnapshots runs f on a VM and its snapshots, under the VM's operation
// lock (so no start, stop or other snapshot runs meanwhile).
func (d *Driver) withSnapshots(id string, f func(v *vm, snaps []*pb.Snapshot) error) error {
	v, err := d.snapshotTarget(id)
	if err != nil {
		return err
	}
	v.op.Lock()
	defer v.op.Unlock()
	snaps, err := v.readSnapshots()
	if err != nil {
		return err
	}
	return f(v, snaps)
}

// snapshotIndex finds tag in snaps, or says that the VM has no such snapshot.
func snapshotIndex(snaps []*pb.Snapshot, id, tag string) (int, error) {
	i := findSnapshot(snaps, tag)
	if i < 0 {
		return 0, driver.Errorf(driver.ErrNotFound, "vm %s has no snapshot %q", id, tag)
	}
	return i, nil
}

func (v *vm) currentState() pb.VMState {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state
}

func runs(s pb.VMState) bool {
	return s == pb.VMState_VM_STATE_RUNNING || s == pb.VMState_VM_STATE_PAUSED
}

// SnapshotVM takes a disk or memory snapshot of the VM under tag.
func (d *Driver) SnapshotVM(ctx context.Context, id, tag string, memory bool) (*pb.Snapshot, error) {
	if err := driver.CheckSnapshotTag(tag); err != nil {
		return nil, err
	}
	var snap *pb.Snapshot
	err := d.withSnapshots(id, func(v *vm, snaps []*pb.Snapshot) error {
		if findSnapshot(snaps, tag) >= 0 {
			return driver.Errorf(driver.ErrExists, "vm %s has a snapshot %q already", id, tag)
		}
		state := v.currentState()
		var err error
		switch {
		case memory && !runs(state):
			return driver.Errorf(driver.ErrState, "vm %s is %s: a memory snapshot needs a running or paused vm", id, stateName(state))
		case memory && v.rec.MemoryFile:
			err = v.saveMemoryFiles(ctx, tag, state)
		case memory:
			// The job stops the vCPUs while it saves and resumes them after,
			// if they ran before.
			err = v.snapshotJob(ctx, "snapshot-save", map[string]any{"tag": tag, "vmstate": "disk0", "devices": []string{"disk0"}})
		case runs(state):
			err = v.diskSnapshotLive(ctx, tag, state)
		default:
			err = d.qemuImgSnapshot(ctx, "-c", tag, v.rec.Disk)
		}
		if err != nil {
			return fmt.Errorf("snapshot vm %s as %q: %w", id, tag, err)
		}
		snap = &pb.Snapshot{Tag: tag, Memory: memory, CreatedAtUnixNano: time.Now().UnixNano(), VmState: state, SizeBytes: allocated(v.rec.Disk)}
		if err := v.writeSnapshots(append(snaps, snap)); err != nil {
			return fmt.Errorf("snapshot vm %s as %q: record it: %w", id, tag, err)
		}
		return nil
	})
	return snap, err
}

// allocated is the space path takes on its file system (0 when it cannot
// be read): a qcow2 overlay is sparse, so its length says little.
func allocated(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// diskSnapshotLive takes an internal disk snapshot of a running VM with its
// vCPUs stopped, so that the disk is in one moment's state.
func (v *vm) diskSnapshotLive(ctx context.Context, tag string, state pb.VMState) error {
	mon, err := v.monitor(ctx)
	if err != nil {
		return err
	}
	if state == pb.VMState_VM_STATE_RUNNING {
		if err := mon.run(ctx, "stop", nil, nil); err != nil {
			return err
		}
		v.transition(pb.VMState_VM_STATE_RUNNING, pb.VMState_VM_STATE_PAUSED, pb.EventType_EVENT_TYPE_PAUSED)
		defer func() {
			// A VM left paused by a failed cont is worse than an error: try
			// with a fresh context too.
			if err := mon.run(context.WithoutCancel(ctx), "cont", nil, nil); err != nil {
				v.d.logger.Error("cannot resume the vm after a disk snapshot", "vm", v.id, "error", err)
				return
			}
			v.transition(pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, pb.EventType_EVENT_TYPE_RESUMED)
		}()
	}
	return mon.run(ctx, "blockdev-snapshot-internal-sync", map[string]any{"device": "disk0", "name": tag}, nil)
}

// snapshotJob runs one of QEMU's snapshot jobs (snapshot-save, -load,
// -delete) to its end and dismisses it.
func (v *vm) snapshotJob(ctx context.Context, command string, args map[string]any) error {
	mon, err := v.monitor(ctx)
	if err != nil {
		return err
	}
	jobID := fmt.Sprintf("fluxvm-%s-%d", command, time.Now().UnixNano())
	args["job-id"] = jobID
	if err := mon.run(ctx, command, args, nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotJobTimeout)
	defer cancel()
	for {
		var jobs []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		if err := mon.run(ctx, "query-jobs", nil, &jobs); err != nil {
			return err
		}
		i := slices.IndexFunc(jobs, func(j struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Error  string `json:"error"`
		}) bool {
			return j.ID == jobID
		})
		if i < 0 {
			return fmt.Errorf("qmp %s: job %s vanished", command, jobID)
		}
		if jobs[i].Status == "concluded" {
			_ = mon.run(ctx, "job-dismiss", map[string]any{"id": jobID}, nil)
			if jobs[i].Error != "" {
				return fmt.Errorf("qmp %s: %s", command, jobs[i].Error)
			}
			return v.syncRunState(ctx, mon)
		}
		select {
		case <-ctx.Done():
			return driver.Errorf(driver.ErrTimeout, "qmp %s: job %s did not end: %v", command, jobID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// syncRunState sets the VM's state from QEMU's, after a job that stopped
// and resumed the vCPUs: QEMU's STOP and RESUME events may not have been
// handled yet, and the caller must see the state the job left.
func (v *vm) syncRunState(ctx context.Context, mon *monitor) error {
	st, err := mon.queryStatus(ctx)
	if err != nil {
		return err
	}
	if st == "running" {
		v.transition(pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, pb.EventType_EVENT_TYPE_RESUMED)
	} else {
		v.transition(pb.VMState_VM_STATE_RUNNING, pb.VMState_VM_STATE_PAUSED, pb.EventType_EVENT_TYPE_PAUSED)
	}
	return nil
}

// qemuImgSnapshot runs qemu-img snapshot on a disk no QEMU has open.
func (d *Driver) qemuImgSnapshot(ctx context.Context, op, tag, disk string) error {
	cfg, _ := d.config()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cfg.QEMUImg, "snapshot", op, tag, disk).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img snapshot %s %s: %v: %s", op, tag, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ListSnapshots lists the VM's snapshots, oldest first.
func (d *Driver) ListSnapshots(_ context.Context, id string) ([]*pb.Snapshot, error) {
	v, err := d.snapshotTarget(id)
	if err != nil {
		return nil, err
	}
	snaps, err := v.readSnapshots()
	if snaps == nil && err == nil {
		snaps = []*pb.Snapshot{}
	}
	return snaps, err
}

// DeleteSnapshot removes one snapshot from the qcow2 and the record.
func (d *Driver) DeleteSnapshot(ctx context.Context, id, tag string) error {
	return d.withSnapshots(id, func(v *vm, snaps []*pb.Snapshot) error {
		i, err := snapshotIndex(snaps, id, tag)
		if err != nil {
			return err
		}
		release := d.holdSpares(id, tag) // no spare reads the snapshot while it goes
		defer release()
		if runs(v.currentState()) {
			err = v.snapshotJob(ctx, "snapshot-delete", map[string]any{"tag": tag, "devices": []string{"disk0"}})
		} else {
			err = d.qemuImgSnapshot(ctx, "-d", tag, v.rec.Disk)
		}
		if err == nil {
			err = v.removeSnapFiles(tag)
		}
		if err != nil {
			return fmt.Errorf("delete snapshot %q of vm %s: %w", tag, id, err)
		}
		return v.writeSnapshots(slices.Delete(snaps, i, i+1))
	})
}

// RestoreVM puts the VM back to a snapshot: a disk snapshot into a VM that
// does not run (qemu-img snapshot -a), a memory snapshot into a running QEMU
// (snapshot-load), which then runs on from the snapshot's moment.
func (d *Driver) RestoreVM(ctx context.Context, id, tag string) (*pb.VMStatus, error) {
	var st *pb.VMStatus
	err := d.withSnapshots(id, func(v *vm, snaps []*pb.Snapshot) error {
		i, err := snapshotIndex(snaps, id, tag)
		if err != nil {
			return err
		}
		state := v.currentState()
		switch {
		case snaps[i].Memory && v.hasSnapFiles(tag):
			return driver.Errorf(driver.ErrUnsupported, "vm %s keeps its memory in a file (memory_file), and restoring such a snapshot into the vm itself is not built yet; clone it with resume_memory instead", id)
		case snaps[i].Memory && !runs(state):
			return driver.Errorf(driver.ErrState, "vm %s is %s: a memory snapshot is restored into a running or paused vm (start it first)", id, stateName(state))
		case snaps[i].Memory:
			err = v.loadMemorySnapshot(ctx, snaps[i])
		case runs(state):
			return driver.Errorf(driver.ErrState, "vm %s is %s: a disk snapshot is restored into a vm that does not run (stop it first)", id, stateName(state))
		default:
			err = d.qemuImgSnapshot(ctx, "-a", tag, v.rec.Disk)
		}
		if err != nil {
			return fmt.Errorf("restore vm %s to %q: %w", id, tag, err)
		}
		st = v.status()
		return nil
	})
	return st, err
}

// loadMemorySnapshot brings a memory snapshot back into the running QEMU
// and lets it run if it ran when the snapshot was taken.
func (v *vm) loadMemorySnapshot(ctx context.Context, snap *pb.Snapshot) error {
	if err := v.snapshotJob(ctx, "snapshot-load", map[string]any{"tag": snap.Tag, "vmstate": "disk0", "devices": []string{"disk0"}}); err != nil {
		return err
	}
	// The guest agent connection belongs to the guest that was: the
	// restored guest knows nothing of it.
	v.closeAgent()
	if snap.VmState != pb.VMState_VM_STATE_RUNNING {
		return nil
	}
	mon, err := v.monitor(ctx)
	if err != nil {
		return err
	}
	if st, err := mon.queryStatus(ctx); err != nil || st == "running" {
		return err
	}
	if err := mon.run(ctx, "cont", nil, nil); err != nil {
		return err
	}
	v.transition(pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, pb.EventType_EVENT_TYPE_RESUMED)
	return nil
}

// CloneVM creates a new VM over the same image whose overlay holds the
// source's disk, from a snapshot or from a source that does not run. The
// copy is qemu-img convert onto a fresh overlay over the same backing file
// (only what the source changed is copied, and none of its snapshots). The
// clone gets its own UUID, which is also the machine id the guest is given,
// and a MAC derived from its own id unless the request names one.
func (d *Driver) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error) {
	src, err := d.snapshotTarget(req.GetSourceId())
	if err != nil {
		return nil, err
	}
	tag := req.GetSnapshotTag()
	if req.GetResumeMemory() && tag == "" {
		return nil, driver.Errorf(driver.ErrInvalid, "clone of vm %s: resume_memory needs a memory snapshot's tag", src.id)
	}
	if tag != "" {
		snaps, err := src.readSnapshots()
		if err != nil {
			return nil, err
		}
		i, err := snapshotIndex(snaps, src.id, tag)
		if err != nil {
			return nil, err
		}
		if req.GetResumeMemory() && (!snaps[i].Memory || !src.hasSnapFiles(tag)) {
			return nil, driver.Errorf(driver.ErrState, "snapshot %q of vm %s cannot be resumed from: only memory snapshots of a vm created with driver_config memory_file can", tag, src.id)
		}
	} else if st := src.currentState(); runs(st) {
		return nil, driver.Errorf(driver.ErrState, "vm %s is %s: clone it from a snapshot, or stop it first", src.id, stateName(st))
	}
	if req.GetResumeMemory() {
		if v := d.takeSpare(src, req); v != nil { // a QEMU started ahead (spare.go)
			return v.status(), nil
		}
	}
	spec := driver.CloneSpec(src.spec, req) // no MAC: macFor(the clone's id)
	st, format, err := d.createVM(ctx, spec, true)
	if err != nil {
		return nil, fmt.Errorf("clone vm %s as %s: %w", src.id, spec.Id, err)
	}
	v, err := d.lookup(spec.Id)
	if err == nil && v.rec.Backing != src.rec.Backing {
		format = "" // not the image whose format createVM read
	}
	if err == nil {
		err = d.copyDisk(ctx, src, tag, format, v.rec.Disk)
	}
	if err == nil && req.GetResumeMemory() {
		// The clone's own later boots use ordinary memory.
		r := snapFiles(src.ws, tag)
		v.rec.Resume, v.rec.MemoryFile = &r, false
		v.rec.NoAnnounce = src.rec.NoAnnounce // the NIC the saved state was taken from
		v.resumedFrom = spareKey{src.id, tag}
		err = v.writeRecord()
	}
	if err != nil {
		_ = d.DestroyVM(context.WithoutCancel(ctx), spec.Id, true)
		return nil, fmt.Errorf("clone vm %s as %s: %w", src.id, spec.Id, err)
	}
	return st, nil
}

// copyDisk writes the source's disk (at snapshot tag, or as it is) into
// dst, a new overlay over the same backing file, whose format is format
// ("": ask qemu-img). -U reads while the source's QEMU holds the image: a
// snapshot does not change once taken.
func (d *Driver) copyDisk(ctx context.Context, src *vm, tag, format, dst string) error {
	cfg, _ := d.config()
	if format == "" {
		var err error
		if format, err = imageFormat(ctx, cfg.QEMUImg, src.rec.Backing); err != nil {
			return err
		}
	}
	args := []string{"convert", "-U", "-O", "qcow2", "-B", src.rec.Backing, "-F", format}
	if tag != "" {
		args = append(args, "-l", "snapshot.name="+tag)
	}
	args = append(args, src.rec.Disk, dst)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cfg.QEMUImg, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img convert %s: %v: %s", src.rec.Disk, err, strings.TrimSpace(string(out)))
	}
	return os.Chmod(dst, 0o600)
}
