package sdk

import (
	"context"
	"net/http"
	"net/url"
)

// NodeOverlay is PUT /v1/overlays/{network}: a node's part of an overlay,
// a network joined across nodes by an encrypted tunnel. Central sends it to
// every member node; the node's network plugin makes the network (with
// LocalSubnet), the tunnel and the routes. Keys are made on the node: only
// public keys travel.
type NodeOverlay struct {
	// Subnet is the whole overlay ("10.231.4.0/24").
	Subnet string `json:"subnet"`
	// LocalSubnet is this node's part of it ("10.231.4.16/28").
	LocalSubnet string `json:"local_subnet"`
	// ListenPort is the node's UDP port for the overlay, 1024-65535.
	ListenPort int64 `json:"listen_port"`
	// Peers are the other member nodes.
	Peers []NodeOverlayPeer `json:"peers"`
}

// NodeOverlayPeer is another member node of an overlay.
type NodeOverlayPeer struct {
	// PublicKey is the peer's key in use, base64.
	PublicKey string `json:"public_key"`
	// NextPublicKey is the peer's next key while it rotates, else empty.
	NextPublicKey string `json:"next_public_key,omitempty"`
	// Endpoint is where the peer listens, ADDRESS:PORT.
	Endpoint string `json:"endpoint"`
	// Subnet is the peer's part of the overlay.
	Subnet string `json:"subnet"`
}

// NodeOverlayStatus is a node's overlay as its network plugin made it.
type NodeOverlayStatus struct {
	Network    string `json:"network"`
	Subnet     string `json:"subnet"`
	ListenPort int64  `json:"listen_port"`
	Device     string `json:"device"`
	// PublicKey is the node's key in use; NextPublicKey its next one while it
	// rotates.
	PublicKey     string `json:"public_key"`
	NextPublicKey string `json:"next_public_key,omitempty"`
	// Endpoint is where other nodes reach this one, when the plugin's
	// configuration names the node's address (netns: overlay_address).
	Endpoint string                  `json:"endpoint,omitempty"`
	Peers    []NodeOverlayPeerStatus `json:"peers"`
}

// NodeOverlayPeerStatus is a peer as the node's tunnel sees it.
type NodeOverlayPeerStatus struct {
	PublicKey string `json:"public_key"`
	Endpoint  string `json:"endpoint,omitempty"`
	Subnet    string `json:"subnet,omitempty"`
	// LastHandshakeUnix is the last completed handshake, 0 for none yet.
	LastHandshakeUnix int64 `json:"last_handshake_unix"`
	RxBytes           int64 `json:"rx_bytes"`
	TxBytes           int64 `json:"tx_bytes"`
}

// OverlayKeyRequest is POST /v1/overlays/{network}/key: without Commit the
// node makes its next key pair; with Commit it puts it in use.
type OverlayKeyRequest struct {
	Commit bool `json:"commit"`
}

// OverlayKey is the node's answer: its key in use and its next key.
type OverlayKey struct {
	PublicKey     string `json:"public_key"`
	NextPublicKey string `json:"next_public_key,omitempty"`
}

func overlayPath(network string, rest ...string) string {
	p := "/v1/overlays/" + url.PathEscape(network)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// Overlays lists the node's overlays.
func (n *NodeClient) Overlays(ctx context.Context) ([]NodeOverlayStatus, error) {
	var out []NodeOverlayStatus
	if err := n.c.call(ctx, http.MethodGet, "/v1/overlays", nil, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// EnsureOverlay makes or updates the node's part of an overlay.
func (n *NodeClient) EnsureOverlay(ctx context.Context, network string, req NodeOverlay) (*NodeOverlayStatus, error) {
	var out NodeOverlayStatus
	if err := n.c.call(ctx, http.MethodPut, overlayPath(network), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteOverlay removes the node's part of an overlay (a missing one is no
// error), and the network with it when no VM is left in it.
func (n *NodeClient) DeleteOverlay(ctx context.Context, network string) error {
	return n.c.call(ctx, http.MethodDelete, overlayPath(network), nil, nil, nil)
}

// OverlayKey makes the node's next overlay key, or with commit puts it in use.
func (n *NodeClient) OverlayKey(ctx context.Context, network string, commit bool) (*OverlayKey, error) {
	var out OverlayKey
	if err := n.c.call(ctx, http.MethodPost, overlayPath(network, "key"), nil, OverlayKeyRequest{Commit: commit}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// MaxOverlayMembers is how many nodes an overlay holds: each has a /28 of
// the overlay's /24.
const MaxOverlayMembers = 16
