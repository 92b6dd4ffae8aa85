package vmm

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/agent/store"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

func toSnapshot(s *pb.Snapshot) sdk.Snapshot {
	return sdk.Snapshot{Tag: s.GetTag(), Memory: s.GetMemory(), CreatedAt: time.Unix(0, s.GetCreatedAtUnixNano()).UTC(), VMState: stateName(s.GetVmState()), SizeBytes: s.GetSizeBytes()}
}

// Snapshot takes a disk or memory snapshot of a VM (the driver's gate
// refuses a kind the driver lacks).
func (m *Manager) Snapshot(ctx context.Context, id string, req sdk.SnapshotRequest) (*sdk.Snapshot, error) {
	var out sdk.Snapshot
	_, err := m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		s, err := d.SnapshotVM(ctx, rec.ID, req.Tag, req.Memory)
		if err != nil {
			return driverErr(err, "snapshot vm %s", rec.Name)
		}
		out = toSnapshot(s)
		m.event(rec.ID, "snapshot", fmt.Sprintf("%s (memory: %t)", req.Tag, req.Memory))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Snapshots lists a VM's snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context, id string) ([]sdk.Snapshot, error) {
	out := []sdk.Snapshot{}
	_, err := m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		snaps, err := d.ListSnapshots(ctx, rec.ID)
		if err != nil {
			return driverErr(err, "list snapshots of vm %s", rec.Name)
		}
		for _, s := range snaps {
			out = append(out, toSnapshot(s))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteSnapshot removes one of a VM's snapshots.
func (m *Manager) DeleteSnapshot(ctx context.Context, id, tag string) error {
	_, err := m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		if err := d.DeleteSnapshot(ctx, rec.ID, tag); err != nil {
			return driverErr(err, "delete snapshot %q of vm %s", tag, rec.Name)
		}
		m.event(rec.ID, "snapshot-deleted", tag)
		return nil
	})
	return err
}

// Restore puts a VM back to a snapshot and records the state the driver
// reports afterwards (a memory snapshot runs on; a disk snapshot waits for
// a start).
func (m *Manager) Restore(ctx context.Context, id string, req sdk.RestoreRequest) (*sdk.VM, error) {
	return m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		st, err := d.RestoreVM(ctx, rec.ID, req.Tag)
		if err != nil {
			return driverErr(err, "restore vm %s to %q", rec.Name, req.Tag)
		}
		if s := stateName(st.GetState()); s != "" && s != rec.State {
			rec.State = s
			if err := m.opts.Store.PutVM(rec); err != nil {
				return err
			}
		}
		m.event(rec.ID, "restored", req.Tag)
		return nil
	})
}

// Clone creates and starts a new VM, on the source's driver, from one of
// the source's snapshots or from its disk when it does not run. The clone
// asks for what its source asked for (checked against capacity like any
// create) under its own name.
func (m *Manager) Clone(ctx context.Context, id string, req sdk.CloneRequest) (*sdk.VM, error) {
	src, err := m.get(id)
	if err != nil {
		return nil, err
	}
	var creq sdk.CreateVMRequest
	if err := json.Unmarshal(src.Spec, &creq); err != nil {
		return nil, fmt.Errorf("clone vm %s: read its spec: %w", src.Name, err)
	}
	// A clone never takes its source's volumes: a volume is one VM's at a time.
	creq.Name, creq.Driver, creq.TTLSeconds, creq.Volumes = req.Name, src.Driver, 0, nil
	if req.Labels != nil {
		creq.Labels = req.Labels
	}
	if err := m.validate(&creq); err != nil {
		return nil, err
	}
	if creq.Network == networkTenant {
		return nil, fail(driver.ErrUnsupported, "create a new VM in the tenant network instead",
			"vm %s is in its tenant's network, and clones of such VMs are not built yet", src.Name)
	}
	vm, err := m.create(ctx, creq, func(d driver.Driver, newID string, _ *pb.Network) error {
		_, err := d.CloneVM(ctx, &pb.CloneVMRequest{SourceId: src.ID, SnapshotTag: req.Snapshot, Id: newID, Name: creq.Name, Labels: creq.Labels, ResumeMemory: req.ResumeMemory})
		return err
	})
	if err != nil {
		return nil, err
	}
	m.event(vm.ID, "cloned", "from "+src.Name)
	return vm, nil
}
