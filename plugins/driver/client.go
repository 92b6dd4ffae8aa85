package driver

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// grpcClient is the agent's side: a Driver that forwards every call to a
// plugin process, the base RPCs to its base service and the rest to its
// Driver service.
type grpcClient struct {
	base.Plugin
	c pb.DriverClient
}

var _ Driver = (*grpcClient)(nil)

func (c *grpcClient) Capabilities(ctx context.Context) (*pb.CapabilitiesResponse, error) {
	r, err := c.c.Capabilities(ctx, &pb.CapabilitiesRequest{})
	return r, base.FromStatus(err)
}

func (c *grpcClient) Fingerprint(ctx context.Context) (<-chan *pb.FingerprintResponse, error) {
	stream, err := c.c.Fingerprint(ctx, &pb.FingerprintRequest{})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return relay(ctx, stream.Recv), nil
}

func (c *grpcClient) CreateVM(ctx context.Context, spec *pb.VMSpec) (*pb.VMStatus, error) {
	r, err := c.c.CreateVM(ctx, &pb.CreateVMRequest{Spec: spec})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Status, nil
}

func (c *grpcClient) StartVM(ctx context.Context, id string) (*pb.Handle, *pb.VMStatus, error) {
	r, err := c.c.StartVM(ctx, &pb.StartVMRequest{Id: id})
	if err != nil {
		return nil, nil, base.FromStatus(err)
	}
	return r.Handle, r.Status, nil
}

func (c *grpcClient) RecoverVM(ctx context.Context, h *pb.Handle) (*pb.VMStatus, error) {
	r, err := c.c.RecoverVM(ctx, &pb.RecoverVMRequest{Handle: h})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Status, nil
}

func (c *grpcClient) WaitVM(ctx context.Context, id string) (*pb.ExitResult, error) {
	r, err := c.c.WaitVM(ctx, &pb.WaitVMRequest{Id: id})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Exit, nil
}

func (c *grpcClient) WaitReady(ctx context.Context, id string) (map[string]string, error) {
	r, err := c.c.WaitReady(ctx, &pb.WaitReadyRequest{Id: id})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Guest, nil
}

func (c *grpcClient) StopVM(ctx context.Context, id string, timeout time.Duration) (*pb.ExitResult, error) {
	r, err := c.c.StopVM(ctx, &pb.StopVMRequest{Id: id, TimeoutMs: timeout.Milliseconds()})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Exit, nil
}

func (c *grpcClient) DestroyVM(ctx context.Context, id string, force bool) error {
	_, err := c.c.DestroyVM(ctx, &pb.DestroyVMRequest{Id: id, Force: force})
	return base.FromStatus(err)
}

func (c *grpcClient) InspectVM(ctx context.Context, id string) (*pb.VMStatus, error) {
	r, err := c.c.InspectVM(ctx, &pb.InspectVMRequest{Id: id})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Status, nil
}

func (c *grpcClient) ListVMs(ctx context.Context) ([]*pb.VMStatus, error) {
	r, err := c.c.ListVMs(ctx, &pb.ListVMsRequest{})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Vms, nil
}

func (c *grpcClient) Events(ctx context.Context) (<-chan *pb.Event, error) {
	stream, err := c.c.Events(ctx, &pb.EventsRequest{})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	// Wait for the plugin's header: it is sent once the plugin subscribed, so
	// no event after this call returns is lost.
	if _, err := stream.Header(); err != nil {
		return nil, base.FromStatus(err)
	}
	return relay(ctx, stream.Recv), nil
}

func (c *grpcClient) ConsoleLog(ctx context.Context, id string, maxBytes int64) ([]byte, error) {
	r, err := c.c.ConsoleLog(ctx, &pb.ConsoleLogRequest{Id: id, MaxBytes: maxBytes})
	if err != nil {
		return nil, base.FromStatus(err)
	}
	return r.Data, nil
}

func (c *grpcClient) PauseVM(ctx context.Context, id string) error {
	_, err := c.c.PauseVM(ctx, &pb.PauseVMRequest{Id: id})
	return base.FromStatus(err)
}

func (c *grpcClient) ResumeVM(ctx context.Context, id string) error {
	_, err := c.c.ResumeVM(ctx, &pb.ResumeVMRequest{Id: id})
	return base.FromStatus(err)
}

func (c *grpcClient) Screenshot(ctx context.Context, id string) (*pb.ScreenshotResponse, error) {
	r, err := c.c.Screenshot(ctx, &pb.ScreenshotRequest{Id: id})
	return r, base.FromStatus(err)
}

func (c *grpcClient) SendInput(ctx context.Context, id string, actions []*pb.InputAction) error {
	_, err := c.c.SendInput(ctx, &pb.SendInputRequest{Id: id, Actions: actions})
	return base.FromStatus(err)
}

func (c *grpcClient) Exec(ctx context.Context, req *pb.ExecRequest, stdout, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.c.Exec(ctx, req)
	if err != nil {
		return 0, base.FromStatus(err)
	}
	for {
		m, err := stream.Recv()
		if err == io.EOF {
			return 0, Errorf(ErrUnavailable, "exec in vm %s: the plugin ended the stream without an exit code", req.Id)
		}
		if err != nil {
			return 0, base.FromStatus(err)
		}
		switch out := m.Output.(type) {
		case *pb.ExecResponse_Stdout:
			if stdout != nil {
				if _, err := stdout.Write(out.Stdout); err != nil {
					return 0, fmt.Errorf("exec in vm %s: write stdout: %w", req.Id, err)
				}
			}
		case *pb.ExecResponse_Stderr:
			if stderr != nil {
				if _, err := stderr.Write(out.Stderr); err != nil {
					return 0, fmt.Errorf("exec in vm %s: write stderr: %w", req.Id, err)
				}
			}
		case *pb.ExecResponse_ExitCode:
			return int(out.ExitCode), nil
		}
	}
}

// relay copies a server stream into a channel that closes when the stream
// ends or ctx is done.
func relay[T any](ctx context.Context, recv func() (*T, error)) <-chan *T {
	ch := make(chan *T, 16)
	go func() {
		defer close(ch)
		for {
			m, err := recv()
			if err != nil {
				// io.EOF or a broken plugin: either way the stream is over,
				// and the caller sees the channel close.
				return
			}
			select {
			case ch <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

func (c *grpcClient) SnapshotVM(ctx context.Context, id, tag string, memory bool) (*pb.Snapshot, error) {
	r, err := c.c.SnapshotVM(ctx, &pb.SnapshotVMRequest{Id: id, Tag: tag, Memory: memory})
	return r.GetSnapshot(), base.FromStatus(err)
}

func (c *grpcClient) ListSnapshots(ctx context.Context, id string) ([]*pb.Snapshot, error) {
	r, err := c.c.ListSnapshots(ctx, &pb.ListSnapshotsRequest{Id: id})
	return r.GetSnapshots(), base.FromStatus(err)
}

func (c *grpcClient) DeleteSnapshot(ctx context.Context, id, tag string) error {
	_, err := c.c.DeleteSnapshot(ctx, &pb.DeleteSnapshotRequest{Id: id, Tag: tag})
	return base.FromStatus(err)
}

func (c *grpcClient) RestoreVM(ctx context.Context, id, tag string) (*pb.VMStatus, error) {
	r, err := c.c.RestoreVM(ctx, &pb.RestoreVMRequest{Id: id, Tag: tag})
	return r.GetStatus(), base.FromStatus(err)
}

func (c *grpcClient) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.VMStatus, error) {
	r, err := c.c.CloneVM(ctx, req)
	return r.GetStatus(), base.FromStatus(err)
}

func (c *grpcClient) ForwardPort(ctx context.Context, id string, guestPort int) (string, error) {
	if err := CheckGuestPort(guestPort); err != nil {
		return "", err
	}
	r, err := c.c.ForwardPort(ctx, &pb.ForwardPortRequest{Id: id, GuestPort: uint32(guestPort)})
	return r.GetAddress(), base.FromStatus(err)
}
