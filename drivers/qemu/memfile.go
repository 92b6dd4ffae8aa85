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
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// A VM created with driver_config memory_file keeps its RAM in the
// workspace's ram file (memory-backend-file, share=on). Its memory
// snapshots are not written into the qcow2 (snapshot-save copies every page
// through the migration stream, and snapshot-load needs a running QEMU to
// read them back): the disk gets an internal snapshot, the device state is
// migrated into snap-<tag>.state with x-ignore-shared (the RAM stays out of
// the stream, it is in the file), and the RAM file is copied to
// snap-<tag>.ram while the vCPUs are stopped. A clone asked to resume from
// such a snapshot starts QEMU over snap-<tag>.ram with share=off (the
// kernel maps it copy-on-write: every clone reads the same page cache,
// writes its own pages, and never changes the file) and -incoming defer,
// with the device state file open as its descriptor 3, then feeds it that:
// the guest runs on from the moment of the snapshot without booting
// (ARCHITECTURE.md "Boot speed": about 0.2 s).
const ramFile = "ram"

// resumeFrom is a saved guest a start resumes from.
type resumeFrom struct {
	// RAM is the saved RAM file, mapped privately.
	RAM string `json:"ram"`
	// State is the saved device state (a migration stream without RAM).
	State string `json:"state"`
}

func snapFiles(ws, tag string) resumeFrom {
	return resumeFrom{RAM: filepath.Join(ws, "snap-"+tag+".ram"), State: filepath.Join(ws, "snap-"+tag+".state")}
}

// hasSnapFiles reports whether tag was saved as files (a memory_file VM's
// memory snapshot).
func (v *vm) hasSnapFiles(tag string) bool {
	f := snapFiles(v.ws, tag)
	_, err1 := os.Stat(f.RAM)
	_, err2 := os.Stat(f.State)
	return err1 == nil && err2 == nil
}

func (v *vm) writeRecord() error {
	data, err := json.MarshalIndent(v.rec, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(v.ws, specFile), append(data, '\n'))
}

// shellQuote quotes a path for the sh -c that QEMU's exec: migration URIs
// run (QEMU 7.2 has no file: URI).
func shellQuote(p string) string { return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'" }

// ignoreShared turns on x-ignore-shared, on both ends of a migration.
func ignoreShared(ctx context.Context, mon *monitor) error {
	return mon.run(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}}}, nil)
}

// saveMemoryFiles takes a memory snapshot of a memory_file VM as files.
// The vCPUs stop for the whole of it (the disk, the device state and the
// RAM copy are one moment) and run again after if they ran before.
func (v *vm) saveMemoryFiles(ctx context.Context, tag string, state pb.VMState) (err error) {
	mon, err := v.monitor(ctx)
	if err != nil {
		return err
	}
	files := snapFiles(v.ws, tag)
	defer func() {
		if err != nil {
			_ = os.Remove(files.RAM)
			_ = os.Remove(files.State)
		}
	}()
	if err := mon.run(ctx, "stop", nil, nil); err != nil {
		return err
	}
	if state == pb.VMState_VM_STATE_RUNNING {
		v.transition(pb.VMState_VM_STATE_RUNNING, pb.VMState_VM_STATE_PAUSED, pb.EventType_EVENT_TYPE_PAUSED)
		defer func() {
			if cerr := mon.run(context.WithoutCancel(ctx), "cont", nil, nil); cerr != nil {
				v.d.logger.Error("cannot resume the vm after a memory snapshot", "vm", v.id, "error", cerr)
				return
			}
			v.transition(pb.VMState_VM_STATE_PAUSED, pb.VMState_VM_STATE_RUNNING, pb.EventType_EVENT_TYPE_RESUMED)
		}()
	}
	if err := mon.run(ctx, "blockdev-snapshot-internal-sync", map[string]any{"device": "disk0", "name": tag}, nil); err != nil {
		return err
	}
	if err := ignoreShared(ctx, mon); err != nil {
		return err
	}
	if err := mon.run(ctx, "migrate", map[string]any{"uri": "exec:cat > " + shellQuote(files.State)}, nil); err != nil {
		return err
	}
	if err := waitMigration(ctx, mon); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, snapshotJobTimeout)
	defer cancel()
	// --sparse=always: pages the guest never touched stay holes.
	if out, err := exec.CommandContext(cctx, "cp", "--sparse=always", filepath.Join(v.ws, ramFile), files.RAM).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the guest's RAM: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return os.Chmod(files.RAM, 0o600)
}

// waitMigration waits for the outgoing migration to end.
func waitMigration(ctx context.Context, mon *monitor) error {
	ctx, cancel := context.WithTimeout(ctx, snapshotJobTimeout)
	defer cancel()
	for {
		var info struct {
			Status    string `json:"status"`
			ErrorDesc string `json:"error-desc"`
		}
		if err := mon.run(ctx, "query-migrate", nil, &info); err != nil {
			return err
		}
		switch info.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			return fmt.Errorf("save the device state: migration %s: %s", info.Status, info.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return driver.Errorf(driver.ErrTimeout, "save the device state: %v", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// stateFD is the descriptor a resuming QEMU reads the saved device state
// from (StartVM's cmd.ExtraFiles[0]).
const stateFD = 3

// resume feeds a QEMU started with -incoming defer the saved device state
// and starts the vCPUs once it is in (the save stopped them, so the state
// arrives paused).
func (v *vm) resume(ctx context.Context, mon *monitor) error {
	r := v.rec.Resume
	// Connect to the guest agent's port before the device state loads. The
	// guest was saved with the host connected (the driver talks to its
	// agent), and QEMU tells a resumed guest only about a change: connected
	// now, the agent stays in its blocking read and answers the first ping
	// at once; not connected, it gets a hang-up, polls for the host, and a
	// later connection costs it a poll interval. A failure here only costs
	// that: WaitReady dials again.
	agent, aerr := v.agentClient(ctx)
	if aerr != nil {
		v.d.logger.Debug("cannot reach the agent port before resuming; WaitReady will", "vm", v.id, "error", aerr)
	}
	if err := ignoreShared(ctx, mon); err != nil {
		return err
	}
	// StartVM gave QEMU the state file as its descriptor 3.
	if err := mon.run(ctx, "migrate-incoming", map[string]any{"uri": "fd:" + strconv.Itoa(stateFD)}, nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotJobTimeout)
	defer cancel()
	for {
		st, err := mon.queryStatus(ctx)
		if err != nil {
			return err
		}
		switch st {
		case "running":
			return nil
		case "paused", "postmigrate":
			// The source's vCPUs were stopped for the save, and the
			// migrated run state says so: start them.
			if err := mon.run(ctx, "cont", nil, nil); err != nil {
				return err
			}
			if agent != nil {
				// The guest's answer is on its way before anyone waits for
				// it (WaitReady takes it).
				if err := agent.Ping(); err != nil {
					v.dropAgent(agent)
					agent = nil
				}
			}
			continue
		case "inmigrate":
		default:
			return fmt.Errorf("resume from %s: qemu is %q", filepath.Base(r.State), st)
		}
		select {
		case <-ctx.Done():
			return driver.Errorf(driver.ErrTimeout, "resume from %s: %v", filepath.Base(r.State), ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// removeSnapFiles deletes a file snapshot's files (clones resuming from
// them keep their mapping: the kernel frees the file with the last one).
func (v *vm) removeSnapFiles(tag string) error {
	f := snapFiles(v.ws, tag)
	return errors.Join(ignoreMissing(os.Remove(f.RAM)), ignoreMissing(os.Remove(f.State)))
}

func ignoreMissing(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
