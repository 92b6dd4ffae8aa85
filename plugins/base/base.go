// Package base is the part of the FluxVM plugin contract that every plugin
// serves, whatever it plugs in: plugin info, config schema and set config
// (proto/base.proto), the error kinds that cross the plugin boundary, and the
// gRPC glue for both, and the launch of a plugin process. The driver contract
// (plugins/driver) and the network contract (plugins/network) build on it.
package base

import (
	"context"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"google.golang.org/grpc"
)

// Plugin is the base service. Each method is the RPC of the same name in
// proto/base.proto, which says what it must do and how it fails.
type Plugin interface {
	// PluginInfo names the plugin and the contract versions it speaks.
	PluginInfo(ctx context.Context) (*basepb.PluginInfoResponse, error)
	// ConfigSchema describes the plugin's HCL configuration block.
	ConfigSchema(ctx context.Context) (*basepb.ConfigSchemaResponse, error)
	// SetConfig hands the plugin its configuration and state directory.
	SetConfig(ctx context.Context, req *basepb.SetConfigRequest) error
}

// RegisterServer serves impl as the base service on s; a plugin's go-plugin
// glue calls it next to registering its own service.
func RegisterServer(s *grpc.Server, impl Plugin) {
	basepb.RegisterBasePluginServer(s, &server{impl: impl})
}

// NewClient returns a Plugin that calls the base service of the plugin
// process at the other end of conn.
func NewClient(conn grpc.ClientConnInterface) Plugin {
	return &client{c: basepb.NewBasePluginClient(conn)}
}

// server runs in the plugin process.
type server struct {
	basepb.UnimplementedBasePluginServer
	impl Plugin
}

func (s *server) PluginInfo(ctx context.Context, _ *basepb.PluginInfoRequest) (*basepb.PluginInfoResponse, error) {
	r, err := s.impl.PluginInfo(ctx)
	return r, ToStatus(err)
}

func (s *server) ConfigSchema(ctx context.Context, _ *basepb.ConfigSchemaRequest) (*basepb.ConfigSchemaResponse, error) {
	r, err := s.impl.ConfigSchema(ctx)
	return r, ToStatus(err)
}

func (s *server) SetConfig(ctx context.Context, req *basepb.SetConfigRequest) (*basepb.SetConfigResponse, error) {
	return &basepb.SetConfigResponse{}, ToStatus(s.impl.SetConfig(ctx, req))
}

// client runs in the agent.
type client struct {
	c basepb.BasePluginClient
}

func (c *client) PluginInfo(ctx context.Context) (*basepb.PluginInfoResponse, error) {
	r, err := c.c.PluginInfo(ctx, &basepb.PluginInfoRequest{})
	return r, FromStatus(err)
}

func (c *client) ConfigSchema(ctx context.Context) (*basepb.ConfigSchemaResponse, error) {
	r, err := c.c.ConfigSchema(ctx, &basepb.ConfigSchemaRequest{})
	return r, FromStatus(err)
}

func (c *client) SetConfig(ctx context.Context, req *basepb.SetConfigRequest) error {
	_, err := c.c.SetConfig(ctx, req)
	return FromStatus(err)
}
