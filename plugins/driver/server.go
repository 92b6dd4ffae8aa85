package driver

import (
	"context"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// grpcServer runs in the plugin process and serves the Driver service of a
// Driver over gRPC (base.RegisterServer serves its base service).
type grpcServer struct {
	pb.UnimplementedDriverServer
	impl Driver
}

func (s *grpcServer) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	r, err := s.impl.Capabilities(ctx)
	return r, base.ToStatus(err)
}

func (s *grpcServer) Fingerprint(_ *pb.FingerprintRequest, stream pb.Driver_FingerprintServer) error {
	ch, err := s.impl.Fingerprint(stream.Context())
	if err != nil {
		return base.ToStatus(err)
	}
	for fp := range ch {
		if err := stream.Send(fp); err != nil {
			return err
		}
	}
	return nil
}

func (s *grpcServer) CreateVM(ctx context.Context, req *pb.CreateVMRequest) (*pb.CreateVMResponse, error) {
	if req.GetSpec() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "create: the request has no spec"))
	}
	st, err := s.impl.CreateVM(ctx, req.Spec)
	return &pb.CreateVMResponse{Status: st}, base.ToStatus(err)
}

func (s *grpcServer) StartVM(ctx context.Context, req *pb.StartVMRequest) (*pb.StartVMResponse, error) {
	h, st, err := s.impl.StartVM(ctx, req.Id)
	return &pb.StartVMResponse{Handle: h, Status: st}, base.ToStatus(err)
}

func (s *grpcServer) RecoverVM(ctx context.Context, req *pb.RecoverVMRequest) (*pb.RecoverVMResponse, error) {
	if req.GetHandle() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "recover: the request has no handle"))
	}
	st, err := s.impl.RecoverVM(ctx, req.Handle)
	return &pb.RecoverVMResponse{Status: st}, base.ToStatus(err)
}

func (s *grpcServer) WaitVM(ctx context.Context, req *pb.WaitVMRequest) (*pb.WaitVMResponse, error) {
	r, err := s.impl.WaitVM(ctx, req.Id)
	return &pb.WaitVMResponse{Exit: r}, base.ToStatus(err)
}

func (s *grpcServer) WaitReady(ctx context.Context, req *pb.WaitReadyRequest) (*pb.WaitReadyResponse, error) {
	g, err := s.impl.WaitReady(ctx, req.Id)
	return &pb.WaitReadyResponse{Guest: g}, base.ToStatus(err)
}

func (s *grpcServer) StopVM(ctx context.Context, req *pb.StopVMRequest) (*pb.StopVMResponse, error) {
	r, err := s.impl.StopVM(ctx, req.Id, time.Duration(req.TimeoutMs)*time.Millisecond)
	return &pb.StopVMResponse{Exit: r}, base.ToStatus(err)
}

func (s *grpcServer) DestroyVM(ctx context.Context, req *pb.DestroyVMRequest) (*pb.DestroyVMResponse, error) {
	return &pb.DestroyVMResponse{}, base.ToStatus(s.impl.DestroyVM(ctx, req.Id, req.Force))
}

func (s *grpcServer) InspectVM(ctx context.Context, req *pb.InspectVMRequest) (*pb.InspectVMResponse, error) {
	st, err := s.impl.InspectVM(ctx, req.Id)
	return &pb.InspectVMResponse{Status: st}, base.ToStatus(err)
}

func (s *grpcServer) ListVMs(ctx context.Context, _ *pb.ListVMsRequest) (*pb.ListVMsResponse, error) {
	vms, err := s.impl.ListVMs(ctx)
	return &pb.ListVMsResponse{Vms: vms}, base.ToStatus(err)
}

func (s *grpcServer) Events(_ *pb.EventsRequest, stream pb.Driver_EventsServer) error {
	ch, err := s.impl.Events(stream.Context())
	if err != nil {
		return base.ToStatus(err)
	}
	// Tell the client the subscription stands (see grpcClient.Events).
	if err := stream.SendHeader(nil); err != nil {
		return err
	}
	for ev := range ch {
		if err := stream.Send(ev); err != nil {
			return err
		}
	}
	return nil
}

func (s *grpcServer) ConsoleLog(ctx context.Context, req *pb.ConsoleLogRequest) (*pb.ConsoleLogResponse, error) {
	data, err := s.impl.ConsoleLog(ctx, req.Id, req.MaxBytes)
	return &pb.ConsoleLogResponse{Data: data}, base.ToStatus(err)
}

func (s *grpcServer) PauseVM(ctx context.Context, req *pb.PauseVMRequest) (*pb.PauseVMResponse, error) {
	return &pb.PauseVMResponse{}, base.ToStatus(s.impl.PauseVM(ctx, req.Id))
}

func (s *grpcServer) ResumeVM(ctx context.Context, req *pb.ResumeVMRequest) (*pb.ResumeVMResponse, error) {
	return &pb.ResumeVMResponse{}, base.ToStatus(s.impl.ResumeVM(ctx, req.Id))
}

func (s *grpcServer) Screenshot(ctx context.Context, req *pb.ScreenshotRequest) (*pb.ScreenshotResponse, error) {
	r, err := s.impl.Screenshot(ctx, req.Id)
	return r, base.ToStatus(err)
}

func (s *grpcServer) SendInput(ctx context.Context, req *pb.SendInputRequest) (*pb.SendInputResponse, error) {
	return &pb.SendInputResponse{}, base.ToStatus(s.impl.SendInput(ctx, req.Id, req.Actions))
}

func (s *grpcServer) Exec(req *pb.ExecRequest, stream pb.Driver_ExecServer) error {
	if req.GetCommand() == nil {
		return base.ToStatus(Errorf(ErrInvalid, "exec in vm %s: the request has no command (argv or shell)", req.GetId()))
	}
	var mu sync.Mutex
	send := func(m *pb.ExecResponse) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.Send(m)
	}
	stdout := writerFunc(func(p []byte) error { return send(&pb.ExecResponse{Output: &pb.ExecResponse_Stdout{Stdout: p}}) })
	stderr := writerFunc(func(p []byte) error { return send(&pb.ExecResponse{Output: &pb.ExecResponse_Stderr{Stderr: p}}) })
	code, err := s.impl.Exec(stream.Context(), req, stdout, stderr)
	if err != nil {
		return base.ToStatus(err)
	}
	return send(&pb.ExecResponse{Output: &pb.ExecResponse_ExitCode{ExitCode: int32(code)}})
}

// writerFunc sends each Write as one message; it copies p, which the caller
// may reuse.
type writerFunc func(p []byte) error

func (f writerFunc) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := f(append([]byte(nil), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *grpcServer) SnapshotVM(ctx context.Context, req *pb.SnapshotVMRequest) (*pb.SnapshotVMResponse, error) {
	snap, err := s.impl.SnapshotVM(ctx, req.Id, req.Tag, req.Memory)
	return &pb.SnapshotVMResponse{Snapshot: snap}, base.ToStatus(err)
}

func (s *grpcServer) ListSnapshots(ctx context.Context, req *pb.ListSnapshotsRequest) (*pb.ListSnapshotsResponse, error) {
	snaps, err := s.impl.ListSnapshots(ctx, req.Id)
	return &pb.ListSnapshotsResponse{Snapshots: snaps}, base.ToStatus(err)
}

func (s *grpcServer) DeleteSnapshot(ctx context.Context, req *pb.DeleteSnapshotRequest) (*pb.DeleteSnapshotResponse, error) {
	return &pb.DeleteSnapshotResponse{}, base.ToStatus(s.impl.DeleteSnapshot(ctx, req.Id, req.Tag))
}

func (s *grpcServer) RestoreVM(ctx context.Context, req *pb.RestoreVMRequest) (*pb.RestoreVMResponse, error) {
	st, err := s.impl.RestoreVM(ctx, req.Id, req.Tag)
	return &pb.RestoreVMResponse{Status: st}, base.ToStatus(err)
}

func (s *grpcServer) CloneVM(ctx context.Context, req *pb.CloneVMRequest) (*pb.CloneVMResponse, error) {
	st, err := s.impl.CloneVM(ctx, req)
	return &pb.CloneVMResponse{Status: st}, base.ToStatus(err)
}

func (s *grpcServer) ForwardPort(ctx context.Context, req *pb.ForwardPortRequest) (*pb.ForwardPortResponse, error) {
	if err := CheckGuestPort(int(req.GetGuestPort())); err != nil {
		return nil, base.ToStatus(err)
	}
	addr, err := s.impl.ForwardPort(ctx, req.GetId(), int(req.GetGuestPort()))
	return &pb.ForwardPortResponse{Address: addr}, base.ToStatus(err)
}
