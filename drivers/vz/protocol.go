package vz

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
)

// The host-process protocol: the plugin dials the host process's unix socket
// and sends one JSON request line per connection; the host answers with one
// JSON reply line. A "vsock" request that succeeds turns the connection into
// a byte stream to the guest's vsock port; a "wait" request is answered only
// when the VM has stopped. Requests and replies are bounded (maxLine).
const (
	// protocolVersion is what hello answers; a plugin refuses a host that
	// speaks another.
	protocolVersion = 1
	maxLine         = 64 << 10
)

// Host-process operations.
const (
	opHello  = "hello"  // who are you: VM id, instance, pid, state
	opPause  = "pause"  // freeze the vCPUs
	opResume = "resume" // unfreeze
	opStop   = "stop"   // power button, then (Force or after TimeoutMS) pull the plug
	opSave   = "save"   // save machine state of the paused VM to Path
	opWait   = "wait"   // reply when the VM has stopped
	opVsock  = "vsock"  // connect the connection to guest vsock Port
)

// hostRequest is one request line.
type hostRequest struct {
	Op        string `json:"op"`
	Force     bool   `json:"force,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	Path      string `json:"path,omitempty"`
	Port      uint32 `json:"port,omitempty"`
}

// hostReply is one reply line. Kind names the contract error kind of Error
// (see errorKinds), so errors keep their meaning across the socket.
type hostReply struct {
	Error string     `json:"error,omitempty"`
	Kind  string     `json:"kind,omitempty"`
	Hello *hostHello `json:"hello,omitempty"`
	Exit  *hostExit  `json:"exit,omitempty"`
}

// hostHello is how a host process identifies itself. Instance is random per
// host process, so a handle names one run of one VM: a socket answering with
// another VM id or another instance is not the VM the handle recorded.
type hostHello struct {
	Protocol  int          `json:"protocol"`
	VMID      string       `json:"vm_id"`
	Instance  string       `json:"instance"`
	PID       int          `json:"pid"`
	State     MachineState `json:"state"`
	StartedAt int64        `json:"started_at_unix_nano"`
}

// hostExit is how a host process's VM ended; the host process also writes
// it to exit.json before it exits.
type hostExit struct {
	// Reason is "stopped" (the guest powered off or was asked to), "killed"
	// (stopped by force) or "crashed" (the framework's error state).
	Reason   string `json:"reason"`
	Message  string `json:"message,omitempty"`
	StopTime int64  `json:"stop_time_unix_nano"`
}

// errorKinds maps the contract's error kinds to names on the wire.
var errorKinds = map[string]error{
	"invalid":     driver.ErrInvalid,
	"not_found":   driver.ErrNotFound,
	"state":       driver.ErrState,
	"unsupported": driver.ErrUnsupported,
	"unavailable": driver.ErrUnavailable,
	"timeout":     driver.ErrTimeout,
}

// replyError makes the reply for err.
func replyError(err error) hostReply {
	for name, kind := range errorKinds {
		if errors.Is(err, kind) {
			return hostReply{Error: err.Error(), Kind: name}
		}
	}
	return hostReply{Error: err.Error()}
}

// err turns a reply's error back into an error of its kind.
func (r hostReply) err() error {
	if r.Error == "" {
		return nil
	}
	if kind, ok := errorKinds[r.Kind]; ok {
		return driver.Errorf(kind, "vz host: %s", r.Error)
	}
	return fmt.Errorf("vz host: %s", r.Error)
}

// readLine reads one bounded line; the reader must be the connection's only
// reader until then.
func readLine(r *bufio.Reader, v any) error {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return err
		}
		line = append(line, chunk...)
		if len(line) > maxLine {
			return fmt.Errorf("line longer than %d bytes", maxLine)
		}
		if !isPrefix {
			break
		}
	}
	dec := json.NewDecoder(bytesReader(line))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func writeLine(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// hostClient speaks to one host process's socket.
type hostClient struct{ socket string }

// call sends req on a new connection and reads the reply. For opVsock the
// open connection is returned as well (nil otherwise).
func (c hostClient) call(ctx context.Context, req hostRequest) (hostReply, net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return hostReply{}, nil, driver.Errorf(driver.ErrUnavailable, "dial vz host %s: %v", c.socket, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := writeLine(conn, req); err != nil {
		conn.Close()
		return hostReply{}, nil, fmt.Errorf("vz host %s: send %s: %w", c.socket, req.Op, err)
	}
	br := bufio.NewReader(conn)
	var rep hostReply
	if err := readLine(br, &rep); err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return hostReply{}, nil, driver.Errorf(driver.ErrTimeout, "vz host %s: %s: %v", c.socket, req.Op, ctx.Err())
		}
		return hostReply{}, nil, driver.Errorf(driver.ErrUnavailable, "vz host %s: %s: no reply: %v", c.socket, req.Op, err)
	}
	if err := rep.err(); err != nil {
		conn.Close()
		return rep, nil, err
	}
	if req.Op == opVsock {
		if !stop() {
			conn.Close()
			return rep, nil, driver.Errorf(driver.ErrTimeout, "vz host %s: vsock: %v", c.socket, ctx.Err())
		}
		return rep, &bufferedConn{Conn: conn, r: br}, nil
	}
	conn.Close()
	return rep, nil, nil
}

// hello asks the host process who it is.
func (c hostClient) hello(ctx context.Context) (*hostHello, error) {
	rep, _, err := c.call(ctx, hostRequest{Op: opHello})
	if err != nil {
		return nil, err
	}
	if rep.Hello == nil {
		return nil, driver.Errorf(driver.ErrUnavailable, "vz host %s: hello without an answer", c.socket)
	}
	if rep.Hello.Protocol != protocolVersion {
		return nil, driver.Errorf(driver.ErrState, "vz host %s speaks protocol %d, this plugin %d: stop the VM and start it with this plugin", c.socket, rep.Hello.Protocol, protocolVersion)
	}
	return rep.Hello, nil
}

// bufferedConn is a connection whose first bytes may sit in a reader.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
