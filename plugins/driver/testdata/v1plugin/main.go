// Command v1plugin is a driver plugin of contract version 1 as far as the
// go-plugin handshake can tell: it serves the FluxVM driver cookie and
// protocol version 1 only, exactly as every driver built before version 2
// did. TestLaunchFailsClearlyWithoutHang launches it to show that the agent
// refuses it at the handshake and says why.
package main

import (
	"context"

	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// v1 stands in for version 1's driver service; the handshake fails before
// anything would be served or dispensed.
type v1 struct{ plugin.NetRPCUnsupportedPlugin }

func (v1) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error { return nil }

func (v1) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, nil
}

func main() {
	handshake := driver.Handshake
	handshake.ProtocolVersion = 1
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  handshake,
		VersionedPlugins: map[int]plugin.PluginSet{1: {"driver": v1{}}},
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
