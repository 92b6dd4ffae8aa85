package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fluxvm/fluxvm/wsconn"
	"github.com/gorilla/websocket"
)

// DialWebSocket opens a WebSocket to one of central's byte-stream routes
// (a tunnel, a screen ticket) and returns it as a byte stream: binary
// messages each way, see package wsconn. path is escaped like the other
// calls' paths and may carry a query. The token and User-Agent go with the
// upgrade request, over ws:// or wss://, through the dialer and TLS
// settings of the client's *http.Client when its transport is an
// *http.Transport. ctx bounds the handshake only. A refused upgrade is an
// *APIError (so IsNotFound and the other Is* helpers work), a server that
// cannot be reached a *ConnectError.
func (f *FleetClient) DialWebSocket(ctx context.Context, path string) (*wsconn.Conn, error) {
	return f.c.dialWebSocket(ctx, path)
}

// DialWebSocket opens a WebSocket to one of the node's byte-stream routes,
// as FleetClient.DialWebSocket does on central's.
func (n *NodeClient) DialWebSocket(ctx context.Context, path string) (*wsconn.Conn, error) {
	return n.c.dialWebSocket(ctx, path)
}

func (c *client) dialWebSocket(ctx context.Context, path string) (*wsconn.Conn, error) {
	ws, err := c.dialWS(ctx, path)
	if err != nil {
		return nil, err
	}
	return wsconn.New(ws), nil
}

// dialWS is the upgrade every WebSocket of the SDK goes through.
func (c *client) dialWS(ctx context.Context, path string) (*websocket.Conn, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, fmt.Errorf("websocket %q: the path must start with /", path)
	}
	target := c.base + path
	if _, err := url.Parse(target); err != nil {
		return nil, fmt.Errorf("websocket %s: %w", path, err)
	}
	// base is http:// or https:// (newClient checked).
	if rest, ok := strings.CutPrefix(target, "https://"); ok {
		target = "wss://" + rest
	} else {
		target = "ws://" + strings.TrimPrefix(target, "http://")
	}
	h := http.Header{}
	if c.opts.token != "" {
		h.Set("Authorization", "Bearer "+c.opts.token)
	}
	if c.opts.userAgent != "" {
		h.Set("User-Agent", c.opts.userAgent)
	}
	// Buffers the size of a wsconn message: a message goes out in one
	// frame and one write, which is what a tunnel's throughput rests on.
	d := websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 0, ReadBufferSize: wsconn.MaxMessage, WriteBufferSize: wsconn.MaxMessage}
	if tr, ok := c.opts.hc.Transport.(*http.Transport); ok {
		d.NetDialContext = tr.DialContext
		d.Proxy = tr.Proxy
		d.TLSClientConfig = tr.TLSClientConfig
	} else if c.opts.hc.Transport == nil {
		tr := http.DefaultTransport.(*http.Transport)
		d.NetDialContext = tr.DialContext
		d.TLSClientConfig = tr.TLSClientConfig
	}
	ws, resp, err := d.DialContext(ctx, target, h)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("websocket %s: %w", path, ctx.Err())
		case resp == nil:
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, &ConnectError{Service: c.service, URL: c.shown, Err: err}
		case resp.StatusCode < 200 || resp.StatusCode >= 300:
			defer resp.Body.Close()
			return nil, c.decodeError(resp)
		}
		return nil, fmt.Errorf("websocket %s: %s answered %d %s without upgrading to a WebSocket: is this a streaming route? (%v)",
			path, c.service, resp.StatusCode, http.StatusText(resp.StatusCode), err)
	}
	return ws, nil
}
