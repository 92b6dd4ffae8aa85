package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"syscall"

	"github.com/gorilla/websocket"
)

// DefaultTunnelPort is the guest port a tunnel reaches when none is given:
// the guest's SSH server.
const DefaultTunnelPort = 22

// TunnelEndedCode is the WebSocket close code central sends when it ended a
// tunnel itself (idle timeout, maximum lifetime, closed by the tenant or the
// operator, access revoked, central shutting down); the close message's
// text is the reason. A tunnel whose far end closed ends normally (1000),
// which reads as io.EOF.
const TunnelEndedCode = 4000

// TunnelEndedReason returns the reason central gave for ending a tunnel,
// when err (from reading a tunnel, or from Relay) is that ending.
func TunnelEndedReason(err error) (string, bool) {
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code == TunnelEndedCode {
		return ce.Text, true
	}
	return "", false
}

// TunnelDropped reports whether err (from reading or writing a tunnel, or
// from Relay) is its connection to central breaking without a close
// message: central stopped without closing it (killed, crashed, its host
// gone) or the network between broke. Nothing says why; a central that
// comes back has no tunnels from before, so the caller dials again. A
// tunnel closed by this side (net.ErrClosed) is not dropped.
func TunnelDropped(err error) bool {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return ce.Code == websocket.CloseAbnormalClosure // 1006: no close message came
	}
	var connect *ConnectError
	var ne net.Error
	if err == nil || errors.Is(err, net.ErrClosed) || errors.As(err, &connect) || (errors.As(err, &ne) && ne.Timeout()) {
		return false // never open, closed here, or a deadline of this side's
	}
	var oe *net.OpError
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.As(err, &oe)
}

// DialTunnel opens a tunnel through central to TCP port of VM vmID on node
// (GET /fleet/vms/{node}/{id}/tunnel?port=N, a WebSocket whose binary
// messages carry the bytes) and returns it as a byte stream: what is written
// reaches the guest's port, what the guest sends is read. port 0 means
// DefaultTunnelPort. ctx bounds the opening only; Close ends the tunnel.
//
// Central's refusals are *APIError values: IsNotFound (no such VM, or not
// yours), IsForbidden (a read-only key, a port the policy does not allow,
// tunnels disabled), IsQuota (the tenant's tunnels are all in use),
// IsConflict (the VM cannot be reached: stopped, or its address is not
// trusted).
func (f *FleetClient) DialTunnel(ctx context.Context, node, vmID string, port int) (net.Conn, error) {
	if port == 0 {
		port = DefaultTunnelPort
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("tunnel to %s/%s: port %d is not a TCP port (1-65535)", node, vmID, port)
	}
	if node == "" || vmID == "" {
		return nil, fmt.Errorf("tunnel: node and VM id are both required (got %q and %q)", node, vmID)
	}
	c, err := f.DialWebSocket(ctx, fleetVMPath(node, vmID, "tunnel")+"?port="+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// PortForward accepts connections on ln until ctx ends and relays each
// through a tunnel of its own to remotePort of VM vmID on node, as
// `ssh -L` does. A connection whose tunnel is refused or breaks is closed
// and the others go on. When ctx ends, PortForward closes ln and every open
// connection and returns ctx's error; when ln fails otherwise it returns
// that error. PortForwardNotify also reports each connection's error.
func (f *FleetClient) PortForward(ctx context.Context, node, vmID string, remotePort int, ln net.Listener) error {
	return f.PortForwardNotify(ctx, node, vmID, remotePort, ln, nil)
}

// PortForwardNotify is PortForward that hands the error of each connection
// whose tunnel was refused or broke to onError (called from the
// connection's own goroutine; nil ignores them).
func (f *FleetClient) PortForwardNotify(ctx context.Context, node, vmID string, remotePort int, ln net.Listener, onError func(error)) error {
	if onError == nil {
		onError = func(error) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		local, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("port forward to %s/%s port %d: accept on %s: %w", node, vmID, remotePort, ln.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer local.Close()
			remote, err := f.DialTunnel(ctx, node, vmID, remotePort)
			if err != nil {
				if ctx.Err() == nil {
					onError(fmt.Errorf("connection from %s: %w", local.RemoteAddr(), err))
				}
				return
			}
			defer remote.Close()
			if err := Relay(ctx, local, remote); err != nil && ctx.Err() == nil {
				onError(fmt.Errorf("connection from %s: %w", local.RemoteAddr(), err))
			}
		}()
	}
}

// Relay copies a to b and b to a until both directions have ended, or ctx
// ends, then closes both. When one side stops sending, the other is told
// so (CloseWrite) where it can be, and the other direction carries on: an
// scp whose upload ended still receives the answer. It returns the first
// error that was not a plain end of stream.
func Relay(ctx context.Context, a, b io.ReadWriteCloser) error {
	errs := make(chan error, 2)
	cp := func(dst, src io.ReadWriteCloser) {
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			// Without a half close the far side would wait for ever.
			_ = dst.Close()
			_ = src.Close()
		}
		errs <- err
	}
	go cp(a, b)
	go cp(b, a)
	var first error
	for done := 0; done < 2; {
		select {
		case err := <-errs:
			done++
			if err != nil && first == nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				first = err
			}
		case <-ctx.Done():
			a.Close()
			b.Close()
			ctx = context.Background()
		}
	}
	a.Close()
	b.Close()
	return first
}

// ListTunnels lists the caller's open tunnels (the operator's: all) with
// the policy's limits.
func (f *FleetClient) ListTunnels(ctx context.Context) (*TunnelList, error) {
	var out TunnelList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/tunnels", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Tunnels == nil {
		out.Tunnels = []Tunnel{}
	}
	return &out, nil
}

// CloseTunnel closes an open tunnel at once. A tunnel that is not open (or
// not the caller's) IsNotFound.
func (f *FleetClient) CloseTunnel(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("close tunnel: the tunnel id is required (fluxctl fleet tunnels lists them)")
	}
	return f.c.call(ctx, http.MethodDelete, "/fleet/tunnels/"+url.PathEscape(id), nil, nil, nil)
}
