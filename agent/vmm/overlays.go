package vmm

import (
	"context"
	"errors"

	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/network"
	netpb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

// Overlays: the node's parts of networks joined across nodes. Central says
// what each member node's part and peers are; the node's network plugin
// makes them, with keys of its own (only public keys leave the node).

// overlays returns the node's network plugin's overlay part.
func (m *Manager) overlays(what string) (network.Overlays, error) {
	n, err := m.network()
	if err != nil {
		return nil, networkErr(err, "%s", what)
	}
	o, ok := n.(network.Overlays)
	if !ok {
		return nil, fail(driver.ErrUnsupported, "use a network plugin with the overlays capability (netns has it)", "%s: the node's network plugin has no overlays", what)
	}
	return o, nil
}

// EnsureOverlay makes or updates the node's part of the overlay of network.
func (m *Manager) EnsureOverlay(ctx context.Context, netw string, req sdk.NodeOverlay) (*sdk.NodeOverlayStatus, error) {
	what := "overlay " + netw
	if !networkIDPattern.MatchString(netw) {
		return nil, fail(driver.ErrInvalid, "a network id is 1 to 64 characters from [A-Za-z0-9_-]", "%s: not a network id", what)
	}
	if req.ListenPort < 1024 || req.ListenPort > 65535 {
		return nil, fail(driver.ErrInvalid, "listen_port is from 1024 to 65535", "%s: listen port %d is out of range", what, req.ListenPort)
	}
	if len(req.Peers) > sdk.MaxOverlayMembers {
		return nil, fail(driver.ErrInvalid, "an overlay has at most 16 nodes", "%s: %d peers", what, len(req.Peers))
	}
	o, err := m.overlays(what)
	if err != nil {
		return nil, err
	}
	in := &netpb.Overlay{Network: netw, Subnet: req.Subnet, LocalSubnet: req.LocalSubnet, ListenPort: uint32(req.ListenPort)}
	for _, p := range req.Peers {
		in.Peers = append(in.Peers, &netpb.OverlayPeer{PublicKey: p.PublicKey, NextPublicKey: p.NextPublicKey, Endpoint: p.Endpoint, Subnet: p.Subnet})
	}
	d, err := o.EnsureOverlay(ctx, in)
	if err != nil {
		return nil, networkErr(err, "%s", what)
	}
	st := overlayStatus(d)
	return &st, nil
}

// DeleteOverlay removes the node's part of the overlay, and the network
// once no VM is left in it.
func (m *Manager) DeleteOverlay(ctx context.Context, netw string) error {
	what := "delete overlay " + netw
	if !networkIDPattern.MatchString(netw) {
		return fail(driver.ErrInvalid, "a network id is 1 to 64 characters from [A-Za-z0-9_-]", "%s: not a network id", what)
	}
	o, err := m.overlays(what)
	if err != nil {
		return err
	}
	n, err := m.network()
	if err != nil {
		return networkErr(err, "%s", what)
	}
	ifcs, err := n.ListInterfaces(ctx)
	if err != nil {
		return networkErr(err, "%s", what)
	}
	for _, ifc := range ifcs {
		if ifc.GetRef().GetTenant() == netw {
			return fail(driver.ErrState, "delete the overlay's VMs on this node first", "%s: vm %s is still in it", what, ifc.GetRef().GetVmId())
		}
	}
	if err := o.DeleteOverlay(ctx, netw); err != nil {
		return networkErr(err, "%s", what)
	}
	if err := n.DeleteNetwork(ctx, netw); err != nil && !errors.Is(err, network.ErrState) {
		return networkErr(err, "%s: its network", what) // ErrState: VMs are still in it
	}
	return nil
}

// OverlayKey makes the node's next key for the overlay, or puts it in use.
func (m *Manager) OverlayKey(ctx context.Context, netw string, commit bool) (*sdk.OverlayKey, error) {
	what := "overlay key of " + netw
	if !networkIDPattern.MatchString(netw) {
		return nil, fail(driver.ErrInvalid, "a network id is 1 to 64 characters from [A-Za-z0-9_-]", "%s: not a network id", what)
	}
	o, err := m.overlays(what)
	if err != nil {
		return nil, err
	}
	r, err := o.RotateOverlayKey(ctx, netw, commit)
	if err != nil {
		return nil, networkErr(err, "%s", what)
	}
	return &sdk.OverlayKey{PublicKey: r.GetPublicKey(), NextPublicKey: r.GetNextPublicKey()}, nil
}

// Overlays lists the node's overlays.
func (m *Manager) Overlays(ctx context.Context) ([]sdk.NodeOverlayStatus, error) {
	o, err := m.overlays("list overlays")
	if err != nil {
		return nil, err
	}
	l, err := o.ListOverlays(ctx)
	if err != nil {
		return nil, networkErr(err, "list overlays")
	}
	out := []sdk.NodeOverlayStatus{}
	for _, d := range l {
		out = append(out, overlayStatus(d))
	}
	return out, nil
}

func overlayStatus(d *netpb.OverlayDetails) sdk.NodeOverlayStatus {
	st := sdk.NodeOverlayStatus{Network: d.GetNetwork(), Subnet: d.GetSubnet(), ListenPort: int64(d.GetListenPort()), Device: d.GetDevice(),
		PublicKey: d.GetPublicKey(), NextPublicKey: d.GetNextPublicKey(), Endpoint: d.GetEndpoint(), Peers: []sdk.NodeOverlayPeerStatus{}}
	for _, p := range d.GetPeers() {
		st.Peers = append(st.Peers, sdk.NodeOverlayPeerStatus{PublicKey: p.GetPublicKey(), Endpoint: p.GetEndpoint(), Subnet: p.GetSubnet(),
			LastHandshakeUnix: p.GetLastHandshakeUnix(), RxBytes: int64(p.GetRxBytes()), TxBytes: int64(p.GetTxBytes())})
	}
	return st
}
