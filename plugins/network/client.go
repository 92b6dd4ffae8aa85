package network

import (
	"context"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
)

// grpcClient is the agent's side: a Network that forwards every call to a
// plugin process.
type grpcClient struct {
	base.Plugin
	c pb.NetworkClient
}

var _ Network = (*grpcClient)(nil)

func (c *grpcClient) Capabilities(ctx context.Context) (*pb.CapabilitiesResponse, error) {
	r, err := c.c.Capabilities(ctx, &pb.CapabilitiesRequest{})
	return r, base.FromStatus(err)
}

func (c *grpcClient) EnsureNetwork(ctx context.Context, n *pb.TenantNetwork) (*pb.NetworkDetails, error) {
	r, err := c.c.EnsureNetwork(ctx, &pb.EnsureNetworkRequest{Network: n})
	return r.GetNetwork(), base.FromStatus(err)
}

func (c *grpcClient) DeleteNetwork(ctx context.Context, tenant string) error {
	_, err := c.c.DeleteNetwork(ctx, &pb.DeleteNetworkRequest{Tenant: tenant})
	return base.FromStatus(err)
}

func (c *grpcClient) CreateInterface(ctx context.Context, req *pb.CreateInterfaceRequest) (*pb.Interface, error) {
	r, err := c.c.CreateInterface(ctx, req)
	return r.GetInterface(), base.FromStatus(err)
}

func (c *grpcClient) DeleteInterface(ctx context.Context, ref *pb.InterfaceRef) error {
	_, err := c.c.DeleteInterface(ctx, &pb.DeleteInterfaceRequest{Ref: ref})
	return base.FromStatus(err)
}

func (c *grpcClient) InterfaceExists(ctx context.Context, ref *pb.InterfaceRef) (bool, error) {
	r, err := c.c.InterfaceExists(ctx, &pb.InterfaceExistsRequest{Ref: ref})
	return r.GetExists(), base.FromStatus(err)
}

func (c *grpcClient) InterfaceDetails(ctx context.Context, ref *pb.InterfaceRef) (*pb.Interface, error) {
	r, err := c.c.InterfaceDetails(ctx, &pb.InterfaceDetailsRequest{Ref: ref})
	return r.GetInterface(), base.FromStatus(err)
}

func (c *grpcClient) ListInterfaces(ctx context.Context) ([]*pb.Interface, error) {
	r, err := c.c.ListInterfaces(ctx, &pb.ListInterfacesRequest{})
	return r.GetInterfaces(), base.FromStatus(err)
}

// The client always has the overlay methods; a plugin without the
// capability answers them with ErrUnsupported.
var _ Overlays = (*grpcClient)(nil)

func (c *grpcClient) EnsureOverlay(ctx context.Context, o *pb.Overlay) (*pb.OverlayDetails, error) {
	r, err := c.c.EnsureOverlay(ctx, &pb.EnsureOverlayRequest{Overlay: o})
	return r.GetOverlay(), base.FromStatus(err)
}

func (c *grpcClient) DeleteOverlay(ctx context.Context, network string) error {
	_, err := c.c.DeleteOverlay(ctx, &pb.DeleteOverlayRequest{Network: network})
	return base.FromStatus(err)
}

func (c *grpcClient) RotateOverlayKey(ctx context.Context, network string, commit bool) (*pb.RotateOverlayKeyResponse, error) {
	r, err := c.c.RotateOverlayKey(ctx, &pb.RotateOverlayKeyRequest{Network: network, Commit: commit})
	return r, base.FromStatus(err)
}

func (c *grpcClient) ListOverlays(ctx context.Context) ([]*pb.OverlayDetails, error) {
	r, err := c.c.ListOverlays(ctx, &pb.ListOverlaysRequest{})
	return r.GetOverlays(), base.FromStatus(err)
}
