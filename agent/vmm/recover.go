package vmm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fluxvm/fluxvm/agent/store"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
	"google.golang.org/protobuf/proto"
)

// Recover takes back every VM of the named driver after its plugin process
// (re)started: each stored handle goes to RecoverVM; a VM that cannot be
// recovered is destroyed and kept as "lost" with the reason; a workspace no
// record owns is removed. It also follows the driver's events so VMs that
// stop by themselves are seen as stopped.
func (m *Manager) Recover(ctx context.Context, name string, d driver.Driver) {
	recs, err := m.opts.Store.ListVMs()
	if err != nil {
		m.log.Error("recover: list vms", "driver", name, "error", err)
		return
	}
	owned := map[string]bool{}
	recovered, lost := 0, 0
	for _, rec := range recs {
		if rec.Driver != name {
			continue
		}
		owned[rec.ID] = true
		if err := m.recoverOne(ctx, d, rec); err != nil {
			lost++
			m.log.Error("recover vm failed; destroyed it", "vm", rec.ID, "name", rec.Name, "error", err)
		} else {
			recovered++
		}
	}
	m.removeOrphans(ctx, name, d, owned)
	m.log.Info("recovered vms", "driver", name, "recovered", recovered, "lost", lost)
	go m.follow(ctx, d)
}

func (m *Manager) recoverOne(ctx context.Context, d driver.Driver, rec *store.VM) error {
	unlock := m.lock(rec.ID)
	defer unlock()
	if rec.State == sdk.StateLost {
		return nil
	}
	var cause error
	switch {
	case rec.State == sdk.StateCreating:
		// The agent died while creating it: nothing was promised yet.
		cause = errors.New("the agent stopped while the VM was being created")
	case len(rec.Handle) == 0:
		// Created but never started: its workspace is all there is.
		return nil
	default:
		var h pb.Handle
		if err := proto.Unmarshal(rec.Handle, &h); err != nil {
			cause = fmt.Errorf("stored handle is corrupt: %w", err)
			break
		}
		st, err := d.RecoverVM(ctx, &h)
		if err != nil {
			cause = err
			break
		}
		if s := stateName(st.State); s != "" {
			rec.State = s
		}
		rec.RecoveryNote = fmt.Sprintf("recovered at %s", m.opts.Now().UTC().Format(time.RFC3339))
		if err := m.opts.Store.PutVM(rec); err != nil {
			return err
		}
		if st.State == pb.VMState_VM_STATE_RUNNING || st.State == pb.VMState_VM_STATE_PAUSED {
			m.watchReady(rec.ID, d)
		}
		m.event(rec.ID, "recovered", "state "+rec.State)
		return nil
	}
	// Could not be recovered: destroy what is left, keep the record saying why.
	if err := d.DestroyVM(ctx, rec.ID, true); err != nil {
		cause = fmt.Errorf("%w; destroying it failed too: %v", cause, err)
	}
	rec.State = sdk.StateLost
	rec.LastError = "recovery failed: " + cause.Error()
	rec.RecoveryNote = rec.LastError
	if err := m.opts.Store.PutVM(rec); err != nil {
		return err
	}
	m.event(rec.ID, "lost", rec.LastError)
	return cause
}

// removeOrphans destroys workspaces of the driver that no record owns (a VM
// created just before the agent died, before its record was written).
func (m *Manager) removeOrphans(ctx context.Context, name string, d driver.Driver, owned map[string]bool) {
	entries, err := os.ReadDir(filepath.Join(m.opts.Drivers.StateDir(name), "vms"))
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || owned[e.Name()] {
			continue
		}
		if err := d.DestroyVM(ctx, e.Name(), true); err != nil {
			m.log.Error("remove orphaned workspace", "driver", name, "vm", e.Name(), "error", err)
			continue
		}
		m.log.Warn("removed a workspace no record owns", "driver", name, "vm", e.Name())
	}
}

// follow keeps records in step with state changes the driver reports (a
// guest that powers itself off, a VM that crashes).
func (m *Manager) follow(ctx context.Context, d driver.Driver) {
	events, err := d.Events(ctx)
	if err != nil {
		return
	}
	for ev := range events {
		var state string
		switch ev.Type {
		case pb.EventType_EVENT_TYPE_STOPPED, pb.EventType_EVENT_TYPE_CRASHED:
			state = sdk.StateStopped
		case pb.EventType_EVENT_TYPE_PAUSED:
			state = sdk.StatePaused
		case pb.EventType_EVENT_TYPE_RESUMED:
			state = sdk.StateRunning
		default:
			continue
		}
		// SetState, not PutVM: the event may race with a delete.
		if rec, err := m.opts.Store.GetVM(ev.VmId); err == nil && rec.State != state && rec.State != sdk.StateLost {
			if m.opts.Store.SetState(rec.ID, state) == nil && state == sdk.StateStopped {
				m.stopWatching(rec.ID)
			}
		}
	}
}

// Run deletes VMs whose TTL has passed, checking every interval, until ctx
// ends.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.ExpireOnce(ctx)
	}
}

// ExpireOnce deletes every VM whose TTL has passed, and returns how many.
func (m *Manager) ExpireOnce(ctx context.Context) int {
	recs, err := m.opts.Store.ListVMs()
	if err != nil {
		return 0
	}
	now := m.opts.Now()
	n := 0
	for _, rec := range recs {
		if rec.ExpiresAt.IsZero() || now.Before(rec.ExpiresAt) {
			continue
		}
		if err := m.Delete(ctx, rec.ID); err != nil {
			m.log.Error("delete expired vm", "vm", rec.ID, "name", rec.Name, "error", err)
			continue
		}
		m.log.Info("deleted expired vm", "vm", rec.ID, "name", rec.Name)
		n++
	}
	return n
}
