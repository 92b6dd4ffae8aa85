package base

import (
	"context"
	"os"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Service is one contract's go-plugin glue: the plugin serves the base
// service and the contract's own (T) on one connection, and the agent gets a
// T that calls both.
type Service[T Plugin] struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the plugin; nil on the agent's side.
	Impl T
	// Register serves impl as the contract's own service on s.
	Register func(s *grpc.Server, impl T)
	// NewClient returns the agent's T over conn, with b for the base RPCs.
	NewClient func(b Plugin, conn *grpc.ClientConn) T
}

func (p *Service[T]) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	RegisterServer(s, p.Impl)
	p.Register(s, p.Impl)
	return nil
}

func (p *Service[T]) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return p.NewClient(NewClient(c), c), nil
}

// Serve runs a plugin process with the contract's handshake and versioned
// plugin set; it returns only when the agent ends the plugin. A nil logger
// logs JSON to stderr, which go-plugin hands to the agent.
func Serve(handshake plugin.HandshakeConfig, plugins map[int]plugin.PluginSet, logger hclog.Logger) {
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: os.Stderr, JSONFormat: true})
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: plugins,
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           logger,
	})
}
