package protocol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// ErrClosed is returned by calls on a Client whose connection was closed or dropped.
var ErrClosed = errors.New("guest agent connection closed")

// ErrTimeout is returned by Exec when the guest killed the command because its
// TimeoutMS elapsed; the code is then CodeTimeout.
var ErrTimeout = errors.New("guest command timed out")

// pingInterval is how often WaitReady pings: the agent may come up, or the host
// side may reconnect, at any time, and virtio-serial does not tell the guest.
const pingInterval = 500 * time.Millisecond

// sigKill is the Linux SIGKILL number sent when an Exec's context ends.
const sigKill = 9

// Client talks to one guest agent over one connection. Calls may run concurrently;
// answers are matched to calls by request ID.
type Client struct {
	conn net.Conn
	enc  *Encoder

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	readyC  chan struct{} // closed and replaced when a ready message arrives
	info    *Info         // from the latest ready message
	primed  bool          // Ping was called and no ready has come since
	early   *Info         // a ready that came after Ping, for the next WaitReady
	err     error         // why the connection ended, once closed
	done    chan struct{} // closed when the connection ends
}

// call is an outstanding request; the read loop hands it the messages that answer it.
type call struct {
	msgs chan Message
	gone chan struct{} // closed when the caller stops listening
}

// Dial connects to the unix socket QEMU serves for the agent's virtio-serial port.
// QEMU creates the socket when it starts, so Dial retries until ctx ends.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", socketPath)
		if err == nil {
			return NewClient(conn), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial guest agent socket %s: %w (last error: %v)", socketPath, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// NewClient returns a Client speaking on conn, which it owns from now on.
func NewClient(conn net.Conn) *Client {
	c := &Client{
		conn:    conn,
		enc:     NewEncoder(conn),
		pending: make(map[uint64]*call),
		readyC:  make(chan struct{}),
		done:    make(chan struct{}),
		// IDs start at the clock so a reconnecting host does not reuse the IDs of
		// commands an earlier connection left running (kept below 2^53 for JSON readers).
		nextID: uint64(time.Now().UnixMicro()),
	}
	go c.readLoop()
	return c
}

func (c *Client) readLoop() {
	dec := NewDecoder(c.conn)
	for {
		line, err := dec.ReadLine()
		if errors.Is(err, ErrLineTooLong) {
			continue
		}
		if err != nil {
			c.fail(err)
			return
		}
		m, err := DecodeMessage(line)
		if err != nil {
			continue // a garbled line from the guest: skip it, the next one may be fine
		}
		c.mu.Lock()
		if m.Type == TypeReady {
			c.info = m.Info
			if c.primed {
				c.primed, c.early = false, m.Info
				if c.early == nil {
					c.early = &Info{}
				}
			}
			close(c.readyC)
			c.readyC = make(chan struct{})
		}
		cl := c.pending[m.ID]
		c.mu.Unlock()
		if cl == nil {
			continue // an unsolicited ready, or an answer to a call that gave up
		}
		select {
		case cl.msgs <- m:
		case <-cl.gone:
		}
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	if errors.Is(err, io.EOF) {
		c.err = fmt.Errorf("%w: guest agent connection lost (EOF)", ErrClosed)
	} else {
		c.err = fmt.Errorf("%w: guest agent connection lost: %v", ErrClosed, err)
	}
	close(c.done)
	c.conn.Close()
}

// Close closes the connection; pending and later calls fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return nil
	}
	c.err = ErrClosed
	close(c.done)
	c.mu.Unlock()
	return c.conn.Close()
}

func (c *Client) closedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// start registers a call and sends its request.
func (c *Client) start(req Request) (uint64, *call, error) {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return 0, nil, err
	}
	c.nextID++
	req.ID = c.nextID
	cl := &call{msgs: make(chan Message, 64), gone: make(chan struct{})}
	c.pending[req.ID] = cl
	c.mu.Unlock()
	if err := c.enc.Encode(req); err != nil {
		c.finish(req.ID, cl)
		if cerr := c.closedErr(); cerr != nil {
			return 0, nil, cerr
		}
		return 0, nil, fmt.Errorf("send %s request: %w", req.Op, err)
	}
	return req.ID, cl, nil
}

func (c *Client) finish(id uint64, cl *call) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
	close(cl.gone)
}

// send writes a request nobody waits an answer for.
func (c *Client) send(req Request) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	req.ID = c.nextID
	c.mu.Unlock()
	return c.enc.Encode(req)
}

// Ping sends a ping without waiting for the answer. The first ready that
// arrives after it is kept for the next WaitReady, which returns it at once:
// the driver pings a resumed guest as its vCPUs start, so the answer is on
// its way before anyone waits for it.
func (c *Client) Ping() error {
	c.mu.Lock()
	c.primed, c.early = true, nil
	c.mu.Unlock()
	return c.send(Request{Op: OpPing})
}

// WaitReady pings the agent every 500ms until a ready message arrives and returns the
// guest's Info. Any ready counts, even one answering an older ping, and so
// does one kept since Ping.
func (c *Client) WaitReady(ctx context.Context) (*Info, error) {
	tick := time.NewTicker(pingInterval)
	defer tick.Stop()
	for {
		c.mu.Lock()
		readyC, err, early := c.readyC, c.err, c.early
		c.early = nil
		c.mu.Unlock()
		if early != nil {
			return early, nil
		}
		if err != nil {
			return nil, err
		}
		if err := c.send(Request{Op: OpPing}); err != nil {
			if cerr := c.closedErr(); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("ping guest agent: %w", err)
		}
		select {
		case <-readyC:
			c.mu.Lock()
			info := c.info
			c.mu.Unlock()
			if info == nil {
				info = &Info{}
			}
			return info, nil
		case <-tick.C:
		case <-c.done:
			return nil, c.closedErr()
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for guest agent: %w", ctx.Err())
		}
	}
}

// Exec runs a command in the guest, copying its output to stdout and stderr (either may
// be nil to discard) as it arrives, and returns its exit code. A non-zero exit is not an
// error. If the guest killed the command for its timeout, the code is 124 and the error
// wraps ErrTimeout. If ctx ends first, the command's process group gets SIGKILL and
// ctx.Err() is returned.
func (c *Client) Exec(ctx context.Context, req *ExecRequest, stdout, stderr io.Writer) (int, error) {
	if err := req.Validate(); err != nil {
		return -1, err
	}
	id, cl, err := c.start(Request{Op: OpExec, Exec: req})
	if err != nil {
		return -1, err
	}
	defer c.finish(id, cl)
	for {
		select {
		case m := <-cl.msgs:
			switch m.Type {
			case TypeStdout:
				if stdout != nil {
					if _, err := stdout.Write(m.Data); err != nil {
						c.kill(id)
						return -1, fmt.Errorf("write guest command stdout: %w", err)
					}
				}
			case TypeStderr:
				if stderr != nil {
					if _, err := stderr.Write(m.Data); err != nil {
						c.kill(id)
						return -1, fmt.Errorf("write guest command stderr: %w", err)
					}
				}
			case TypeExit:
				if m.Code == CodeTimeout && m.Error != "" {
					return m.Code, fmt.Errorf("%w: %s", ErrTimeout, m.Error)
				}
				return m.Code, nil
			case TypeError:
				return -1, fmt.Errorf("guest agent: exec: %s", m.Error)
			}
		case <-c.done:
			return -1, c.closedErr()
		case <-ctx.Done():
			c.kill(id)
			return -1, ctx.Err()
		}
	}
}

// kill asks the guest to SIGKILL a running exec; best effort.
func (c *Client) kill(id uint64) {
	_ = c.send(Request{Op: OpSignal, Signal: &Signal{ID: id, Signal: sigKill}})
}

// Shutdown asks the guest to sync and power off. It returns once the guest acknowledged
// or the connection dropped, which is what a powering-off guest does.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.simple(ctx, Request{Op: OpShutdown}, true)
}

// Reboot asks the guest to sync and restart. Like Shutdown, a dropped connection after
// the request was sent counts as success.
func (c *Client) Reboot(ctx context.Context) error {
	return c.simple(ctx, Request{Op: OpReboot}, true)
}

// ConfigureNetwork sets up the guest's interfaces (matched by MAC), DNS and hostname.
func (c *Client) ConfigureNetwork(ctx context.Context, cfg *NetworkConfig) error {
	if cfg == nil {
		return errors.New("configure guest network: no config")
	}
	return c.simple(ctx, Request{Op: OpNetwork, Network: cfg}, false)
}

// simple sends a request answered by a single ok or error.
func (c *Client) simple(ctx context.Context, req Request, dropIsOK bool) error {
	id, cl, err := c.start(req)
	if err != nil {
		return fmt.Errorf("guest %s: %w", req.Op, err)
	}
	defer c.finish(id, cl)
	for {
		select {
		case m := <-cl.msgs:
			switch m.Type {
			case TypeOK:
				return nil
			case TypeError:
				return fmt.Errorf("guest %s: %s", req.Op, m.Error)
			}
		case <-c.done:
			if dropIsOK {
				return nil
			}
			return fmt.Errorf("guest %s: %w", req.Op, c.closedErr())
		case <-ctx.Done():
			return fmt.Errorf("guest %s: %w", req.Op, ctx.Err())
		}
	}
}

// LinkDisks has the guest (re)make /dev/disk/by-id/virtio-<serial> links of its disks.
func (c *Client) LinkDisks(ctx context.Context) error {
	return c.simple(ctx, Request{Op: OpDisks}, false)
}
