package vmm

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/fluxvm/fluxvm/agent/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// Workspaces lists the VM folders (StateDir/vms/<id>) of every configured
// driver, each marked owned when a VM record owns it. It reads the disk, not
// the drivers, so it also sees what a driver that is down left behind.
func (m *Manager) Workspaces() ([]sdk.Workspace, error) {
	out := []sdk.Workspace{}
	for _, name := range m.opts.DriverOrder {
		entries, err := os.ReadDir(filepath.Join(m.opts.Drivers.StateDir(name), "vms"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list the workspaces of driver %s: %w", name, err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			rec, err := m.opts.Store.GetVM(e.Name())
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			out = append(out, sdk.Workspace{Driver: name, ID: e.Name(), Owned: err == nil && rec.Driver == name})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Driver+"/"+out[i].ID < out[j].Driver+"/"+out[j].ID })
	return out, nil
}

// CleanWorkspaces destroys, through their drivers, the workspaces no VM
// record owns, and returns those it removed. A driver that is down keeps its
// leftovers (and the error says so); workspaces of existing VMs are never
// touched.
func (m *Manager) CleanWorkspaces(ctx context.Context) ([]sdk.Workspace, error) {
	ws, err := m.Workspaces()
	if err != nil {
		return nil, err
	}
	removed := []sdk.Workspace{}
	var errs []error
	for _, w := range ws {
		if w.Owned {
			continue
		}
		unlock := m.lock(w.ID)
		err := func() error {
			// Owned meanwhile (a create that was just recording it)?
			if _, err := m.opts.Store.GetVM(w.ID); err == nil {
				return nil
			}
			d, err := m.opts.Drivers.Driver(w.Driver)
			if err != nil {
				return fmt.Errorf("driver %s: %w", w.Driver, err)
			}
			if err := d.DestroyVM(ctx, w.ID, true); err != nil {
				return fmt.Errorf("destroy workspace %s of driver %s: %w", w.ID, w.Driver, err)
			}
			removed = append(removed, w)
			m.log.Warn("removed a workspace no VM owns", "driver", w.Driver, "vm", w.ID)
			return nil
		}()
		unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
