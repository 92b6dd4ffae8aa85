package pluginhost

import (
	"context"
	"io"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// gate is a plugin's driver as the rest of the agent gets it: every optional
// RPC first checks, through require, the capability the plugin process
// claimed when it was launched, and a call whose capability is off is
// refused here with driver.ErrUnsupported and never reaches the plugin. This
// is the one place the agent checks capabilities; the RPCs every driver
// serves pass straight through.
type gate struct {
	driver.Driver
	name string
	caps *pb.CapabilitiesResponse
}

// require is nil when the plugin claimed c, and otherwise the error that
// says which driver lacks which capability.
func (g *gate) require(c driver.Capability) error {
	if c.ClaimedBy(g.caps) {
		return nil
	}
	return c.Unsupported(g.name)
}

func (g *gate) PauseVM(ctx context.Context, id string) error {
	if err := g.require(driver.CapPause); err != nil {
		return err
	}
	return g.Driver.PauseVM(ctx, id)
}

func (g *gate) ResumeVM(ctx context.Context, id string) error {
	if err := g.require(driver.CapPause); err != nil {
		return err
	}
	return g.Driver.ResumeVM(ctx, id)
}

func (g *gate) Screenshot(ctx context.Context, id string) (*pb.ScreenshotResponse, error) {
	if err := g.require(driver.CapScreenshot); err != nil {
		return nil, err
	}
	return g.Driver.Screenshot(ctx, id)
}

func (g *gate) SendInput(ctx context.Context, id string, actions []*pb.InputAction) error {
	if err := g.require(driver.CapInput); err != nil {
		return err
	}
	return g.Driver.SendInput(ctx, id, actions)
}

func (g *gate) Exec(ctx context.Context, req *pb.ExecRequest, stdout, stderr io.Writer) (int, error) {
	if err := g.require(driver.CapExec); err != nil {
		return 0, err
	}
	return g.Driver.Exec(ctx, req, stdout, stderr)
}

// requireSnapshots is nil when the plugin claimed either snapshot
// capability: listing, deleting and restoring serve both kinds.
func (g *gate) requireSnapshots() error {
	if driver.CapMemorySnapshots.ClaimedBy(g.caps) {
		return nil
	}
	return g.require(driver.CapDiskSnapshots)
}

func (g *gate) SnapshotVM(ctx context.Context, id, tag string, memory bool) (*pb.Snapshot, error) {
	c := driver.CapDiskSnapshots
	if memory {
		c = driver.CapMemorySnapshots
	}
	if err := g.require(c); err != nil {
		return nil, err
	}
	return g.Driver.SnapshotVM(ctx, id, tag, memory)
}

func (g *gate) ListSnapshots(ctx context.Context, id string) ([]*pb.Snapshot, error) {
	if err := g.requireSnapshots(); err != nil {
		return nil, err
	}
	return g.Driver.ListSnapshots(ctx, id)
}

func (g *gate) DeleteSnapshot(ctx context.Context, id, tag string) error {
	if err := g.requireSnapshots(); err != nil {
		return err
	}
	return g.Driver.DeleteSnapshot(ctx, id, tag)
}

func (g *gate) RestoreVM(ctx context.Context, id, tag string) (*pb.VMStatus, error) {
	if err := g.requireSnapshots(); err != nil {
		return nil, err
	}
	return g.Driver.RestoreVM(ctx, id, tag)
}

func (g *gate) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error) {
	if err := g.require(driver.CapClones); err != nil {
		return nil, err
	}
	return g.Driver.CloneVM(ctx, req)
}

func (g *gate) ForwardPort(ctx context.Context, id string, guestPort int) (string, error) {
	if err := g.require(driver.CapPortForward); err != nil {
		return "", err
	}
	return g.Driver.ForwardPort(ctx, id, guestPort)
}
