package driver

import (
	"context"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is what the agent and a driver plugin check before they talk. A
// binary started without it (by a person, say) explains itself and exits.
// The protocol version that counts is the one VersionedPlugins negotiates.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "FLUXVM_DRIVER_PLUGIN",
	MagicCookieValue: "a3f9c1e2-driver-fluxvm",
}

// pluginName is the name under which the driver is dispensed.
const pluginName = "driver"

// versionedPlugins lists, per contract version, what the plugin serves and
// the agent speaks: versions 2 and 3, through the same code, since version 3
// only adds fields and RPCs to version 2's wire form (a version 2 plugin
// claims none of version 3's capabilities, so the agent never calls their
// RPCs on it). go-plugin picks the newest version both sides have. Version 1
// is not wire-compatible, so both sides leave it out and the handshake
// refuses a version 1 plugin (the agent says so, see Launch) instead of
// letting it fail RPC by RPC.
func versionedPlugins(impl Driver) map[int]plugin.PluginSet {
	set := plugin.PluginSet{pluginName: &base.Service[Driver]{
		Impl:     impl,
		Register: func(s *grpc.Server, impl Driver) { pb.RegisterDriverServer(s, &grpcServer{impl: impl}) },
		NewClient: func(b base.Plugin, conn *grpc.ClientConn) Driver {
			return &grpcClient{Plugin: b, c: pb.NewDriverClient(conn)}
		},
	}}
	versions := map[int]plugin.PluginSet{}
	for v := MinAPIVersion; v <= APIVersion; v++ {
		versions[v] = set
	}
	return versions
}

// Serve runs impl as a plugin process. It is the whole main of a driver
// binary: it returns only when the agent ends the plugin.
func Serve(impl Driver, logger hclog.Logger) { base.Serve(Handshake, versionedPlugins(impl), logger) }

// LaunchConfig says how to start a plugin process.
type LaunchConfig = base.LaunchConfig

// Plugin is a running driver plugin process.
type Plugin struct {
	Driver
	*base.Process
}

// contract is what Launch checks of a driver plugin.
var contract = base.Contract{
	Kind:       pluginName,
	Type:       basepb.PluginType_PLUGIN_TYPE_DRIVER,
	Version:    APIVersion,
	MinVersion: MinAPIVersion,
	Handshake:  Handshake,
	Plugins:    versionedPlugins(nil),
}

// Launch starts a plugin process, checks its handshake and contract version,
// and returns a Driver that talks to it.
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	proc, d, err := base.Launch[Driver](ctx, contract, cfg)
	if err != nil {
		return nil, err
	}
	return &Plugin{Driver: d, Process: proc}, nil
}
