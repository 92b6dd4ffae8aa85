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
