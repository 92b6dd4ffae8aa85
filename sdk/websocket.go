package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// MaxStreamMessage is the largest message a Stream reads: 1 MiB, room for
// a burst of console output or a screen update. A larger message ends the
// stream with an error.
const MaxStreamMessage = 1 << 20

// Stream is a WebSocket connection to one of the APIs' streaming routes.
// One goroutine may read (Next, ReadJSON) while others write (Send,
// WriteJSON). Cancelling the context of a read or write in progress closes
// the stream: a half-read message cannot be resumed.
type Stream struct {
	conn    *websocket.Conn
	service string // "node" or "central", for messages
	path    string
	// readErr is the error that ended reading, returned again by every
	// later read. Only the one reading goroutine touches it.
	readErr error
	// wmu serializes writers: gorilla allows one at a time.
	wmu       sync.Mutex
	closeOnce sync.Once
}

// Message is one WebSocket message.
type Message struct {
	// Binary marks a binary message (raw console bytes, an image); a text
	// message (JSON) has it false.
	Binary bool
	Data   []byte
}

// StreamClosedError is a stream the server closed with a status other than
// a normal closure, which reads report as io.EOF instead.
type StreamClosedError struct {
	// Service is what closed it: "node" or "central".
	Service string
	// Path is the route streamed.
	Path string
	// Code is the WebSocket close status (1001 going away, 1008 policy
	// violation, 1011 internal error, ...) and Reason the server's words.
	Code   int
	Reason string
}

func (e *StreamClosedError) Error() string {
	msg := fmt.Sprintf("%s closed stream %s with status %d", e.Service, e.Path, e.Code)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Stream opens a WebSocket on one of central's streaming routes. No route
// streams yet; the VM console, screens and events will. path is escaped
// like the other calls' paths and may carry a query. The client's token
// and User-Agent go with the upgrade request, over ws:// for an http://
// client and wss:// for https://, through the dialer and TLS settings of
// the client's *http.Client (as DialWebSocket). ctx bounds the handshake
// only. A refused upgrade is an *APIError, as any
// refused call is, so IsNotFound and the other Is* helpers work on it; a
// server that cannot be reached is a *ConnectError.
func (f *FleetClient) Stream(ctx context.Context, path string) (*Stream, error) {
	return f.c.stream(ctx, path)
}

// Stream opens a WebSocket on one of the node's streaming routes, as
// FleetClient.Stream does on central's.
func (n *NodeClient) Stream(ctx context.Context, path string) (*Stream, error) {
	return n.c.stream(ctx, path)
}

func (c *client) stream(ctx context.Context, path string) (*Stream, error) {
	conn, err := c.dialWS(ctx, path)
	if err != nil {
		return nil, err
	}
	conn.SetReadLimit(MaxStreamMessage)
	return &Stream{conn: conn, service: c.service, path: path}, nil
}

// closeNow drops the connection without a close message: what a cancelled
// read or write leaves behind.
func (s *Stream) closeNow() {
	s.closeOnce.Do(func() { _ = s.conn.Close() })
}

// Next waits for the next message. It returns io.EOF once the server has
// closed the stream normally, a *StreamClosedError when it closed it with
// another status, and ctx's error (wrapped) when ctx ends first.
func (s *Stream) Next(ctx context.Context) (Message, error) {
	if s.readErr != nil {
		return Message{}, s.readErr
	}
	stop := context.AfterFunc(ctx, s.closeNow)
	typ, data, err := s.conn.ReadMessage()
	stop()
	if err != nil {
		s.readErr = s.readError(ctx, err)
		return Message{}, s.readErr
	}
	return Message{Binary: typ == websocket.BinaryMessage, Data: data}, nil
}

func (s *Stream) readError(ctx context.Context, err error) error {
	var ce *websocket.CloseError
	switch {
	case errors.As(err, &ce) && (ce.Code == websocket.CloseNormalClosure || ce.Code == websocket.CloseNoStatusReceived):
		return io.EOF
	case errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure: // 1006: dropped, no close message
		return &StreamClosedError{Service: s.service, Path: s.path, Code: ce.Code, Reason: ce.Text}
	case ctx.Err() != nil:
		return fmt.Errorf("stream %s: read: %w", s.path, ctx.Err())
	case errors.Is(err, websocket.ErrReadLimit):
		s.closeNow()
		return fmt.Errorf("stream %s: %s sent a message larger than %d bytes", s.path, s.service, MaxStreamMessage)
	case errors.Is(err, net.ErrClosed):
		return fmt.Errorf("stream %s: read: %w", s.path, net.ErrClosed)
	}
	// The connection dropped or broke the protocol: nothing more can come,
	// so let it go now and Close has nothing left to say.
	s.closeNow()
	// %v, not %w: a dropped connection can carry io.EOF inside, and must
	// not pass for the server's normal close.
	return fmt.Errorf("stream %s: read: %v", s.path, err)
}

// ReadJSON waits for the next message and decodes it into v. A binary
// message is an error; the stream stays open.
func (s *Stream) ReadJSON(ctx context.Context, v any) error {
	m, err := s.Next(ctx)
	if err != nil {
		return err
	}
	if m.Binary {
		return fmt.Errorf("stream %s: want a JSON text message, got %d binary bytes", s.path, len(m.Data))
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		return fmt.Errorf("stream %s: decode message: %w", s.path, err)
	}
	return nil
}

// Send writes one message, text or binary.
func (s *Stream) Send(ctx context.Context, m Message) error {
	typ := websocket.TextMessage
	if m.Binary {
		typ = websocket.BinaryMessage
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	stop := context.AfterFunc(ctx, s.closeNow)
	err := s.conn.WriteMessage(typ, m.Data)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("stream %s: write: %w", s.path, ctx.Err())
		}
		return fmt.Errorf("stream %s: write: %w", s.path, err)
	}
	return nil
}

// WriteJSON writes v as one JSON text message.
func (s *Stream) WriteJSON(ctx context.Context, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("stream %s: encode message: %w", s.path, err)
	}
	return s.Send(ctx, Message{Data: b})
}

// Close ends the stream with a normal closure and closes the connection.
// Closing a stream the server (or a cancelled context) already closed
// returns nil.
func (s *Stream) Close() error {
	err := s.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""),
		time.Now().Add(5*time.Second))
	s.closeNow()
	if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, websocket.ErrCloseSent) && !isDropped(err) {
		return fmt.Errorf("stream %s: close: %w", s.path, err)
	}
	return nil
}

// isDropped is a write to a connection the peer already closed.
func isDropped(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe)
}
