// Package network is the contract between the FluxVM node agent and network
// plugins, which give VMs their interfaces in per-tenant networks. A plugin
// implements Network and calls Serve; the agent calls Launch and gets a
// Network back that speaks to the plugin process over gRPC.
//
// The contract, RPC by RPC, is documented in proto/network.proto (the Network
// service) and ../base/proto/base.proto (the base service every FluxVM plugin
// serves); the methods below mirror those RPCs one to one and use their
// message types. Plugin authors import this package, its proto package and the
// base proto package, and nothing else from FluxVM.
package network

import (
	"context"

	"github.com/fluxvm/fluxvm/plugins/base"
	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
)

// APIVersion is the network contract version this package speaks: the
// go-plugin protocol version of the handshake.
const APIVersion = 1

// Network is a network backend. Each method is the RPC of the same name in
// proto/network.proto or ../base/proto/base.proto, which say what it must do
// and how it fails. Errors should wrap one of the sentinel errors of this
// package so they cross the process boundary with the right code.
type Network interface {
	// PluginInfo, ConfigSchema and SetConfig: the base service. PluginInfo's
	// type is PLUGIN_TYPE_NETWORK and its api_versions hold APIVersion.
	base.Plugin

	// Capabilities says what the plugin's networks promise.
	Capabilities(ctx context.Context) (*pb.CapabilitiesResponse, error)
	// EnsureNetwork makes the tenant's network if it is not there.
	EnsureNetwork(ctx context.Context, n *pb.TenantNetwork) (*pb.NetworkDetails, error)
	// DeleteNetwork removes the tenant's network once it has no interfaces.
	DeleteNetwork(ctx context.Context, tenant string) error
	// CreateInterface makes a VM's interface in its tenant's network.
	CreateInterface(ctx context.Context, req *pb.CreateInterfaceRequest) (*pb.Interface, error)
	// DeleteInterface removes a VM's interface; a missing one is no error.
	DeleteInterface(ctx context.Context, ref *pb.InterfaceRef) error
	// InterfaceExists says whether the VM has an interface.
	InterfaceExists(ctx context.Context, ref *pb.InterfaceRef) (bool, error)
	// InterfaceDetails describes the VM's interface (ErrNotFound if none).
	InterfaceDetails(ctx context.Context, ref *pb.InterfaceRef) (*pb.Interface, error)
	// ListInterfaces lists every interface the plugin made on this node.
	ListInterfaces(ctx context.Context) ([]*pb.Interface, error)
}

// The error kinds of the plugin contract (package base), under the names a
// network plugin uses. They are the same values as base's.
var (
	ErrInvalid     = base.ErrInvalid     // INVALID_ARGUMENT
	ErrNotFound    = base.ErrNotFound    // NOT_FOUND
	ErrExists      = base.ErrExists      // ALREADY_EXISTS
	ErrState       = base.ErrState       // FAILED_PRECONDITION
	ErrNoCapacity  = base.ErrNoCapacity  // RESOURCE_EXHAUSTED
	ErrUnsupported = base.ErrUnsupported // UNIMPLEMENTED
	ErrUnavailable = base.ErrUnavailable // UNAVAILABLE
)

// Errorf makes an error of the given kind (one of the sentinels above).
func Errorf(kind error, format string, args ...any) error {
	return base.Errorf(kind, format, args...)
}

// Overlays is the optional part of the contract a plugin with the overlays
// capability serves: a network joined across nodes by an encrypted tunnel.
// Each method is the RPC of the same name in proto/network.proto. A Network
// that does not implement it answers those RPCs with ErrUnsupported.
type Overlays interface {
	// EnsureOverlay makes or updates a network's overlay on this node.
	EnsureOverlay(ctx context.Context, o *pb.Overlay) (*pb.OverlayDetails, error)
	// DeleteOverlay removes a network's overlay; a missing one is no error.
	DeleteOverlay(ctx context.Context, network string) error
	// RotateOverlayKey makes the next key pair, or with commit puts it in use.
	RotateOverlayKey(ctx context.Context, network string, commit bool) (*pb.RotateOverlayKeyResponse, error)
	// ListOverlays lists the overlays on this node.
	ListOverlays(ctx context.Context) ([]*pb.OverlayDetails, error)
}
