package network

import (
	"context"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
)

// grpcServer runs in the plugin process and serves the Network service of a
// Network over gRPC (base.RegisterServer serves its base service). It refuses
// requests missing a required message, so plugins never see a nil one.
type grpcServer struct {
	pb.UnimplementedNetworkServer
	impl Network
}

func (s *grpcServer) Capabilities(ctx context.Context, _ *pb.CapabilitiesRequest) (*pb.CapabilitiesResponse, error) {
	r, err := s.impl.Capabilities(ctx)
	return r, base.ToStatus(err)
}

func (s *grpcServer) EnsureNetwork(ctx context.Context, req *pb.EnsureNetworkRequest) (*pb.EnsureNetworkResponse, error) {
	if req.GetNetwork() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "ensure network: the request has no network"))
	}
	n, err := s.impl.EnsureNetwork(ctx, req.Network)
	return &pb.EnsureNetworkResponse{Network: n}, base.ToStatus(err)
}

func (s *grpcServer) DeleteNetwork(ctx context.Context, req *pb.DeleteNetworkRequest) (*pb.DeleteNetworkResponse, error) {
	return &pb.DeleteNetworkResponse{}, base.ToStatus(s.impl.DeleteNetwork(ctx, req.Tenant))
}

func (s *grpcServer) CreateInterface(ctx context.Context, req *pb.CreateInterfaceRequest) (*pb.CreateInterfaceResponse, error) {
	if req.GetNetwork() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "create interface for vm %s: the request has no network", req.GetVmId()))
	}
	i, err := s.impl.CreateInterface(ctx, req)
	return &pb.CreateInterfaceResponse{Interface: i}, base.ToStatus(err)
}

func (s *grpcServer) DeleteInterface(ctx context.Context, req *pb.DeleteInterfaceRequest) (*pb.DeleteInterfaceResponse, error) {
	if req.GetRef() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "delete interface: the request names no interface"))
	}
	return &pb.DeleteInterfaceResponse{}, base.ToStatus(s.impl.DeleteInterface(ctx, req.Ref))
}

func (s *grpcServer) InterfaceExists(ctx context.Context, req *pb.InterfaceExistsRequest) (*pb.InterfaceExistsResponse, error) {
	if req.GetRef() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "interface exists: the request names no interface"))
	}
	ok, err := s.impl.InterfaceExists(ctx, req.Ref)
	return &pb.InterfaceExistsResponse{Exists: ok}, base.ToStatus(err)
}

func (s *grpcServer) InterfaceDetails(ctx context.Context, req *pb.InterfaceDetailsRequest) (*pb.InterfaceDetailsResponse, error) {
	if req.GetRef() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "interface details: the request names no interface"))
	}
	i, err := s.impl.InterfaceDetails(ctx, req.Ref)
	return &pb.InterfaceDetailsResponse{Interface: i}, base.ToStatus(err)
}

func (s *grpcServer) ListInterfaces(ctx context.Context, _ *pb.ListInterfacesRequest) (*pb.ListInterfacesResponse, error) {
	l, err := s.impl.ListInterfaces(ctx)
	return &pb.ListInterfacesResponse{Interfaces: l}, base.ToStatus(err)
}

// overlays is the plugin's overlay part, or an error saying it has none.
func (s *grpcServer) overlays(rpc string) (Overlays, error) {
	if o, ok := s.impl.(Overlays); ok {
		return o, nil
	}
	return nil, base.ToStatus(Errorf(ErrUnsupported, "%s: this network plugin has no overlays capability", rpc))
}

func (s *grpcServer) EnsureOverlay(ctx context.Context, req *pb.EnsureOverlayRequest) (*pb.EnsureOverlayResponse, error) {
	o, err := s.overlays("ensure overlay")
	if err != nil {
		return nil, err
	}
	if req.GetOverlay() == nil {
		return nil, base.ToStatus(Errorf(ErrInvalid, "ensure overlay: the request has no overlay"))
	}
	d, err := o.EnsureOverlay(ctx, req.Overlay)
	return &pb.EnsureOverlayResponse{Overlay: d}, base.ToStatus(err)
}

func (s *grpcServer) DeleteOverlay(ctx context.Context, req *pb.DeleteOverlayRequest) (*pb.DeleteOverlayResponse, error) {
	o, err := s.overlays("delete overlay")
	if err != nil {
		return nil, err
	}
	return &pb.DeleteOverlayResponse{}, base.ToStatus(o.DeleteOverlay(ctx, req.Network))
}

func (s *grpcServer) RotateOverlayKey(ctx context.Context, req *pb.RotateOverlayKeyRequest) (*pb.RotateOverlayKeyResponse, error) {
	o, err := s.overlays("rotate overlay key")
	if err != nil {
		return nil, err
	}
	r, err := o.RotateOverlayKey(ctx, req.Network, req.Commit)
	return r, base.ToStatus(err)
}

func (s *grpcServer) ListOverlays(ctx context.Context, _ *pb.ListOverlaysRequest) (*pb.ListOverlaysResponse, error) {
	o, err := s.overlays("list overlays")
	if err != nil {
		return nil, err
	}
	l, err := o.ListOverlays(ctx)
	return &pb.ListOverlaysResponse{Overlays: l}, base.ToStatus(err)
}
