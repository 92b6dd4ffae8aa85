// Command recorder is a driver plugin for the node API's tests: the real
// simulated driver (drivers/sim), claiming only the capabilities listed in
// FLUXVM_TEST_CAPS (comma-separated names, e.g. "pause,exec"), and writing
// the name of every optional RPC it receives, one a line, to the file named
// by FLUXVM_TEST_RPC_LOG. It serves every optional RPC whatever it claims
// (the sim does, except exec), so a call the agent should have refused
// would succeed here and show in the file.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/fluxvm/fluxvm/drivers/sim"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
)

func main() {
	logger := hclog.New(&hclog.LoggerOptions{Name: "recorder", Level: hclog.Debug, Output: os.Stderr, JSONFormat: true})
	driver.Serve(&recorder{
		Driver: sim.New(logger),
		claims: strings.Split(os.Getenv("FLUXVM_TEST_CAPS"), ","),
		log:    os.Getenv("FLUXVM_TEST_RPC_LOG"),
	}, logger)
}

type recorder struct {
	driver.Driver
	claims []string
	log    string
}

// Capabilities are the sim's, with the optional ones replaced by the claims.
func (r *recorder) Capabilities(ctx context.Context) (*pb.CapabilitiesResponse, error) {
	caps, err := r.Driver.Capabilities(ctx)
	if err != nil {
		return nil, err
	}
	claims := func(c driver.Capability) bool { return slices.Contains(r.claims, string(c)) }
	caps.Pause, caps.Screenshot, caps.Input, caps.Exec =
		claims(driver.CapPause), claims(driver.CapScreenshot), claims(driver.CapInput), claims(driver.CapExec)
	caps.DiskSnapshots, caps.MemorySnapshots, caps.Clones, caps.PortForward, caps.Volumes =
		claims(driver.CapDiskSnapshots), claims(driver.CapMemorySnapshots), claims(driver.CapClones), claims(driver.CapPortForward), claims(driver.CapVolumes)
	return caps, nil
}

// record appends the RPC's name to the log file before the RPC runs.
func (r *recorder) record(rpc string) {
	f, err := os.OpenFile(r.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		panic(fmt.Sprintf("recorder: open %s: %v", r.log, err)) // the test must not miss a call
	}
	defer f.Close()
	fmt.Fprintln(f, rpc)
}

func (r *recorder) PauseVM(ctx context.Context, id string) error {
	r.record("PauseVM")
	return r.Driver.PauseVM(ctx, id)
}

func (r *recorder) ResumeVM(ctx context.Context, id string) error {
	r.record("ResumeVM")
	return r.Driver.ResumeVM(ctx, id)
}

func (r *recorder) Screenshot(ctx context.Context, id string) (*pb.ScreenshotResponse, error) {
	r.record("Screenshot")
	return r.Driver.Screenshot(ctx, id)
}

func (r *recorder) SendInput(ctx context.Context, id string, actions []*pb.InputAction) error {
	r.record("SendInput")
	return r.Driver.SendInput(ctx, id, actions)
}

func (r *recorder) Exec(ctx context.Context, req *pb.ExecRequest, stdout, stderr io.Writer) (int, error) {
	r.record("Exec")
	return r.Driver.Exec(ctx, req, stdout, stderr)
}

func (r *recorder) SnapshotVM(ctx context.Context, id, tag string, memory bool) (*pb.Snapshot, error) {
	r.record("SnapshotVM")
	return r.Driver.SnapshotVM(ctx, id, tag, memory)
}

func (r *recorder) ListSnapshots(ctx context.Context, id string) ([]*pb.Snapshot, error) {
	r.record("ListSnapshots")
	return r.Driver.ListSnapshots(ctx, id)
}

func (r *recorder) DeleteSnapshot(ctx context.Context, id, tag string) error {
	r.record("DeleteSnapshot")
	return r.Driver.DeleteSnapshot(ctx, id, tag)
}

func (r *recorder) RestoreVM(ctx context.Context, id, tag string) (*pb.VMStatus, error) {
	r.record("RestoreVM")
	return r.Driver.RestoreVM(ctx, id, tag)
}

func (r *recorder) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error) {
	r.record("CloneVM")
	return r.Driver.CloneVM(ctx, req)
}

func (r *recorder) ForwardPort(ctx context.Context, id string, guestPort int) (string, error) {
	r.record("ForwardPort")
	return r.Driver.ForwardPort(ctx, id, guestPort)
}
