package network

import (
	"context"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is what the agent and a network plugin check before they talk.
// Its cookie differs from the driver contract's, so a driver started as a
// network plugin (or the other way round) fails at the handshake.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "FLUXVM_NETWORK_PLUGIN",
	MagicCookieValue: "5d0e7b41-network-fluxvm",
}

// pluginName is the name under which the network service is dispensed.
const pluginName = "network"

// versionedPlugins lists, per contract version, what the plugin serves and
// the agent speaks: version 1.
func versionedPlugins(impl Network) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		APIVersion: {pluginName: &base.Service[Network]{
			Impl:     impl,
			Register: func(s *grpc.Server, impl Network) { pb.RegisterNetworkServer(s, &grpcServer{impl: impl}) },
			NewClient: func(b base.Plugin, conn *grpc.ClientConn) Network {
				return &grpcClient{Plugin: b, c: pb.NewNetworkClient(conn)}
			},
		}},
	}
}

// Serve runs impl as a plugin process. It is the whole main of a network
// plugin binary: it returns only when the agent ends the plugin.
func Serve(impl Network, logger hclog.Logger) { base.Serve(Handshake, versionedPlugins(impl), logger) }

// LaunchConfig says how to start a plugin process.
type LaunchConfig = base.LaunchConfig

// Plugin is a running network plugin process.
type Plugin struct {
	Network
	// Overlays is always there; a plugin without the overlays capability
	// answers its methods with ErrUnsupported.
	Overlays
	*base.Process
}

// contract is what Launch checks of a network plugin.
var contract = base.Contract{
	Kind:      pluginName,
	Type:      basepb.PluginType_PLUGIN_TYPE_NETWORK,
	Version:   APIVersion,
	Handshake: Handshake,
	Plugins:   versionedPlugins(nil),
}

// Launch starts a network plugin process, checks its handshake, contract
// version and type, and returns a Network that talks to it. The process
// inherits the network namespace of the calling thread: that is where it
// makes its links.
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	proc, n, err := base.Launch[Network](ctx, contract, cfg)
	if err != nil {
		return nil, err
	}
	return &Plugin{Network: n, Overlays: n.(Overlays), Process: proc}, nil
}
