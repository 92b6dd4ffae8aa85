package sdk

import (
	"context"
	"net/http"
	"strconv"

	"github.com/fluxvm/fluxvm/wsconn"
)

// DialTunnel opens a byte stream to a TCP port of a running VM's guest
// (GET /v1/vms/{id}/tunnel?port=N, a WebSocket the node relays to the
// port). It needs an admin token. Refusals are *APIError: 404 no such VM,
// 409 not running or a driver that cannot forward ports, 400 a bad port,
// 502 nothing listens on the port in the guest.
func (n *NodeClient) DialTunnel(ctx context.Context, idOrName string, port int) (*wsconn.Conn, error) {
	return n.DialWebSocket(ctx, vmPath(idOrName, "tunnel")+"?port="+strconv.Itoa(port))
}

// ScreenTicket asks for a one-use ticket to a running VM's graphical
// console (POST /v1/vms/{id}/ws-ticket {"kind":"vnc"}): DialWebSocket of
// its Path, within ExpiresIn seconds and once, relays raw RFB. A VM
// without a VNC console is a 409 *APIError with the reason.
func (n *NodeClient) ScreenTicket(ctx context.Context, idOrName string) (*WSTicket, error) {
	var t WSTicket
	if err := n.c.call(ctx, http.MethodPost, vmPath(idOrName, "ws-ticket"), nil, WSTicketRequest{Kind: "vnc"}, &t); err != nil {
		return nil, err
	}
	return &t, nil
}
