// Package wsconn turns a WebSocket connection (gorilla/websocket) into a
// byte stream: a net.Conn whose writes are binary messages and whose reads
// run through the binary messages the peer sends, one after another. The
// node channel (yamux over one WebSocket), tunnels and the SDK's tunnel
// dial all carry bytes this way.
//
// Writes are not buffered: each Write sends one message and returns when
// the message is on the wire, so a slow reader holds the writer back
// (backpressure) and memory stays bounded by the largest message.
package wsconn

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// MaxMessage is the largest message a Conn reads (its read limit) and the
// most a Write puts in one message; longer writes are split.
const MaxMessage = 64 << 10

// Conn is a net.Conn over a WebSocket. One goroutine may read while
// another writes; concurrent writes are serialized.
type Conn struct {
	ws *websocket.Conn

	rmu sync.Mutex
	r   io.Reader // the message being read, nil between messages

	wmu sync.Mutex

	closeOnce sync.Once
	closeErr  error
}

// New wraps ws. The Conn owns ws from now on: close the Conn, not ws.
func New(ws *websocket.Conn) *Conn {
	ws.SetReadLimit(MaxMessage)
	return &Conn{ws: ws}
}

// WebSocket is the connection underneath, for its close code and headers.
func (c *Conn) WebSocket() *websocket.Conn { return c.ws }

// Read reads the bytes of binary messages in order. Text messages are
// skipped. A normal closure by the peer reads as io.EOF.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		if c.r == nil {
			typ, r, err := c.ws.NextReader()
			if err != nil {
				return 0, readErr(err)
			}
			if typ != websocket.BinaryMessage {
				continue
			}
			c.r = r
		}
		n, err := c.r.Read(p)
		if errors.Is(err, io.EOF) {
			c.r = nil
			if n == 0 {
				continue
			}
			err = nil
		}
		return n, err
	}
}

// readErr maps a peer's orderly close to io.EOF.
func readErr(err error) error {
	if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
		return io.EOF
	}
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, net.ErrClosed) {
		return net.ErrClosed
	}
	return err
}

// Write sends p as one or more binary messages of at most MaxMessage
// bytes, each on the wire before the next is written.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	n := 0
	for len(p) > 0 {
		chunk := p
		if len(chunk) > MaxMessage {
			chunk = chunk[:MaxMessage]
		}
		if err := c.ws.WriteMessage(websocket.BinaryMessage, chunk); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// CloseWith sends a close message with code and reason (at most 123 bytes)
// and closes the connection.
func (c *Conn) CloseWith(code int, reason string) error {
	if len(reason) > 123 {
		reason = reason[:123]
	}
	c.wmu.Lock()
	_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	c.wmu.Unlock()
	return c.Close()
}

// Close closes the connection (without a close message; CloseWith sends
// one). Closing twice is harmless.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.ws.Close() })
	return c.closeErr
}

func (c *Conn) LocalAddr() net.Addr  { return c.ws.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr { return c.ws.RemoteAddr() }

func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.ws.SetReadDeadline(t); err != nil {
		return err
	}
	return c.ws.SetWriteDeadline(t)
}
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.ws.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.ws.SetWriteDeadline(t) }
