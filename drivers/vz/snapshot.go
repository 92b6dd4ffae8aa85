package vz

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// Snapshots live in the VM's workspace, snapshots/<tag>/: APFS clones of the
// disk and firmware files (the EFI variable store of a Linux guest; the
// auxiliary storage and hardware model of a macOS guest), plus, for a memory
// snapshot, the framework's saved machine state. The machine identifier is
// never part of one: it belongs to the VM, and a clone gets its own.

// snapMeta is snapshots/<tag>/snapshot.json.
type snapMeta struct {
	Tag       string `json:"tag"`
	Memory    bool   `json:"memory"`
	CreatedAt int64  `json:"created_at_unix_nano"`
	VMState   string `json:"vm_state"`
	SizeBytes int64  `json:"size_bytes"`
}

// diskFiles are the files in dir (the workspace or a snapshot) that a
// snapshot, restore or clone copies. A Linux guest's EFI variable store
// exists only once it has booted.
func (v *vm) diskFiles(dir string) []string {
	if v.cfg.GuestOS == "macos" {
		return []string{diskName, auxName, hwModelName}
	}
	files := []string{diskName}
	if _, err := os.Stat(filepath.Join(dir, efiVarsName)); err == nil {
		files = append(files, efiVarsName)
	}
	return files
}

func (v *vm) snapDir(tag string) string { return filepath.Join(v.ws, snapshotsDir, tag) }

// SnapshotVM clones the disk files of the VM; a running VM is paused for the
// copy, so the copy is crash-consistent. With memory, the paused VM's state
// is saved as well (macOS 14 or later).
func (d *Driver) SnapshotVM(ctx context.Context, id, tag string, memory bool) (*pb.Snapshot, error) {
	if err := d.unusable(); err != nil {
		return nil, err
	}
	if memory && !d.opts.Platform.SaveRestore {
		return nil, driver.CapMemorySnapshots.Unsupported(driverName + " on macOS " + d.opts.Platform.OSVersion + " (saving a VM's state needs macOS 14)")
	}
	if err := driver.CheckSnapshotTag(tag); err != nil {
		return nil, err
	}
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	if err := v.claim(); err != nil {
		return nil, err
	}
	defer v.unclaim()
	v.mu.Lock()
	state := v.state
	v.mu.Unlock()
	runs := state == pb.VMState_VM_STATE_RUNNING || state == pb.VMState_VM_STATE_PAUSED
	if memory && !runs {
		return nil, driver.Errorf(driver.ErrState, "vm %s is %s: a memory snapshot needs a running or paused VM", id, stateName(state))
	}
	dir := v.snapDir(tag)
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, driver.Errorf(driver.ErrExists, "vm %s already has a snapshot %q", id, tag)
		}
		return nil, fmt.Errorf("snapshot vm %s: %w", id, err)
	}
	fail := func(err error) (*pb.Snapshot, error) {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("snapshot vm %s: %w", id, err)
	}
	if state == pb.VMState_VM_STATE_RUNNING {
		if _, _, err := v.host().call(ctx, hostRequest{Op: opPause}); err != nil {
			return fail(err)
		}
		defer func() {
			if _, _, err := v.host().call(context.WithoutCancel(ctx), hostRequest{Op: opResume}); err != nil {
				d.log.Error("resume after snapshot failed", "vm", id, "error", err)
			}
		}()
	}
	meta := snapMeta{Tag: tag, Memory: memory, CreatedAt: time.Now().UnixNano(), VMState: stateName(state)}
	if memory {
		path := filepath.Join(dir, stateFileName)
		if _, _, err := v.host().call(ctx, hostRequest{Op: opSave, Path: path}); err != nil {
			return fail(err)
		}
		if fi, err := os.Stat(path); err == nil {
			meta.SizeBytes = fi.Size()
		}
	}
	for _, name := range v.diskFiles(v.ws) {
		if err := cloneFile(filepath.Join(v.ws, name), filepath.Join(dir, name)); err != nil {
			return fail(err)
		}
	}
	if err := writeJSON(filepath.Join(dir, snapMetaFile), meta); err != nil {
		return fail(err)
	}
	return meta.proto(), nil
}

func (m snapMeta) proto() *pb.Snapshot {
	st := map[string]pb.VMState{"created": pb.VMState_VM_STATE_CREATED, "running": pb.VMState_VM_STATE_RUNNING, "paused": pb.VMState_VM_STATE_PAUSED, "stopped": pb.VMState_VM_STATE_STOPPED}
	return &pb.Snapshot{Tag: m.Tag, Memory: m.Memory, CreatedAtUnixNano: m.CreatedAt, VmState: st[m.VMState], SizeBytes: m.SizeBytes}
}

// claim marks the VM busy with one snapshot, restore or clone at a time.
func (v *vm) claim() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.busy {
		return driver.Errorf(driver.ErrState, "vm %s is busy with another start, snapshot or restore", v.id)
	}
	v.busy = true
	return nil
}

func (v *vm) unclaim() { v.mu.Lock(); v.busy = false; v.mu.Unlock() }

// readSnap reads one snapshot's record (ErrNotFound when there is none).
func (v *vm) readSnap(tag string) (snapMeta, error) {
	var m snapMeta
	if err := driver.CheckSnapshotTag(tag); err != nil {
		return m, err
	}
	if err := readJSON(filepath.Join(v.snapDir(tag), snapMetaFile), &m); err != nil {
		return m, driver.Errorf(driver.ErrNotFound, "vm %s has no snapshot %q", v.id, tag)
	}
	return m, nil
}

// ListSnapshots lists the VM's snapshots, oldest first.
func (d *Driver) ListSnapshots(_ context.Context, id string) ([]*pb.Snapshot, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	entries, _ := os.ReadDir(filepath.Join(v.ws, snapshotsDir))
	var metas []snapMeta
	for _, e := range entries {
		if m, err := v.readSnap(e.Name()); err == nil {
			metas = append(metas, m)
		}
	}
	sort.Slice(metas, func(i, j int) bool { return metas[i].CreatedAt < metas[j].CreatedAt })
	out := make([]*pb.Snapshot, 0, len(metas))
	for _, m := range metas {
		out = append(out, m.proto())
	}
	return out, nil
}

// DeleteSnapshot removes one snapshot.
func (d *Driver) DeleteSnapshot(_ context.Context, id, tag string) error {
	v, err := d.lookup(id)
	if err != nil {
		return err
	}
	if _, err := v.readSnap(tag); err != nil {
		return err
	}
	return os.RemoveAll(v.snapDir(tag))
}

// RestoreVM puts the snapshot's files back. A disk snapshot goes into a VM
// that does not run, and the next start boots from it; a memory snapshot
// goes into a running or paused VM, which is stopped and started again from
// the saved state, running on from the moment of the snapshot.
func (d *Driver) RestoreVM(ctx context.Context, id, tag string) (*pb.VMStatus, error) {
	if err := d.unusable(); err != nil {
		return nil, err
	}
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	m, err := v.readSnap(tag)
	if err != nil {
		return nil, err
	}
	if err := v.claim(); err != nil {
		return nil, err
	}
	defer v.unclaim()
	v.mu.Lock()
	state := v.state
	v.mu.Unlock()
	runs := state == pb.VMState_VM_STATE_RUNNING || state == pb.VMState_VM_STATE_PAUSED
	switch {
	case m.Memory && !runs:
		return nil, driver.Errorf(driver.ErrState, "vm %s is %s: a memory snapshot is restored into a running or paused VM", id, stateName(state))
	case !m.Memory && runs:
		return nil, driver.Errorf(driver.ErrState, "vm %s runs: stop it before restoring disk snapshot %q", id, tag)
	}
	if runs {
		if _, err := d.StopVM(ctx, id, 0); err != nil {
			return nil, fmt.Errorf("restore vm %s: %w", id, err)
		}
	}
	if !m.Memory {
		// A restored disk boots with the firmware variables it had then.
		_ = os.Remove(filepath.Join(v.ws, efiVarsName))
	}
	for _, name := range v.diskFiles(v.snapDir(tag)) {
		dst := filepath.Join(v.ws, name)
		_ = os.Remove(dst)
		if err := cloneFile(filepath.Join(v.snapDir(tag), name), dst); err != nil {
			return nil, fmt.Errorf("restore vm %s from %s: %w", id, tag, err)
		}
	}
	if !m.Memory {
		return v.status(), nil
	}
	v.cfg.RestoreFrom = filepath.Join(v.snapDir(tag), stateFileName)
	if err := writeJSON(filepath.Join(v.ws, hostFile), v.cfg); err != nil {
		return nil, err
	}
	_, _, err = d.start(ctx, v)
	// Later starts boot cold again.
	v.cfg.RestoreFrom = ""
	if werr := writeJSON(filepath.Join(v.ws, hostFile), v.cfg); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return nil, fmt.Errorf("restore vm %s from %s: %w", id, tag, err)
	}
	return v.status(), nil
}

// CloneVM makes a new VM from a snapshot of the source, or from the source's
// own disk when it does not run. It has the source's settings, and for a
// macOS guest its hardware model and auxiliary storage, but a MAC address
// and machine identifier of its own.
func (d *Driver) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error) {
	if err := d.unusable(); err != nil {
		return nil, err
	}
	src, err := d.lookup(req.GetSourceId())
	if err != nil {
		return nil, err
	}
	from := src.ws
	if tag := req.GetSnapshotTag(); tag != "" {
		if _, err := src.readSnap(tag); err != nil {
			return nil, err
		}
		from = src.snapDir(tag)
	} else {
		src.mu.Lock()
		runs := src.hello != nil
		src.mu.Unlock()
		if runs {
			return nil, driver.Errorf(driver.ErrState, "vm %s runs: clone it from a snapshot, or stop it first", src.id)
		}
	}
	spec := driver.CloneSpec(src.spec, req)
	hc, err := translate(spec, d.workspace(spec.GetId()), spec.GetGuestOs())
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, name := range src.diskFiles(from) {
		files[filepath.Join(from, name)] = name
	}
	return d.create(spec, hc, files)
}
