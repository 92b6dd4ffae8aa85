//go:build linux

package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/fluxvm/fluxvm/plugins/driver"
)

// monitor is the one QMP connection the driver keeps to a VM. go-qemu's
// SocketMonitor has no timeouts and stalls every reply while its event channel
// is not drained, so monitor drains events from the start and bounds each
// command; a command that does not answer in time closes the connection (the
// VM then gets a fresh one on next use).
type monitor struct {
	sock   *qmp.SocketMonitor
	closed chan struct{} // closed once the connection is gone
	once   sync.Once
}

// dialMonitor connects to a QMP socket and starts draining its events into
// onEvent (called from one goroutine, in order). It fails fast when nothing
// listens; it gives up after timeout when something listens but does not
// greet, as QEMU does while another client holds its QMP socket.
func dialMonitor(path string, timeout time.Duration, onEvent func(qmp.Event)) (*monitor, error) {
	sock, err := qmp.NewSocketMonitor("unix", path, timeout)
	if err != nil {
		return nil, err
	}
	connected := make(chan error, 1)
	go func() { connected <- sock.Connect() }()
	select {
	case err = <-connected:
	case <-time.After(timeout):
		_ = sock.Disconnect()
		<-connected
		return nil, fmt.Errorf("qmp socket %s accepted but did not greet within %s (another client may hold it)", path, timeout)
	}
	if err != nil {
		_ = sock.Disconnect()
		return nil, fmt.Errorf("qmp handshake on %s: %w", path, err)
	}
	events, err := sock.Events(context.Background())
	if err != nil {
		_ = sock.Disconnect()
		return nil, err
	}
	m := &monitor{sock: sock, closed: make(chan struct{})}
	go func() {
		// The event channel closes when the connection ends.
		for ev := range events {
			if onEvent != nil {
				onEvent(ev)
			}
		}
		m.once.Do(func() { close(m.closed) })
	}()
	return m, nil
}

// qmpTimeout bounds one QMP command.
const qmpTimeout = 10 * time.Second

// run executes a QMP command with arguments (nil for none) and decodes its
// "return" into out (nil to ignore it). QEMU's own errors come back as
// ErrState-free plain errors naming the command; a dead or silent connection
// is ErrUnavailable.
func (m *monitor) run(ctx context.Context, command string, args any, out any) error {
	cmd, err := json.Marshal(qmp.Command{Execute: command, Args: args})
	if err != nil {
		return err
	}
	type result struct {
		raw []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		raw, err := m.sock.Run(cmd)
		done <- result{raw, err}
	}()
	timer := time.NewTimer(qmpTimeout)
	defer timer.Stop()
	var r result
	select {
	case r = <-done:
	case <-m.closed:
		return driver.Errorf(driver.ErrUnavailable, "qmp %s: connection to qemu closed", command)
	case <-timer.C:
		m.close()
		return driver.Errorf(driver.ErrUnavailable, "qmp %s: qemu did not answer within %s", command, qmpTimeout)
	case <-ctx.Done():
		m.close()
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
	if r.err != nil {
		select {
		case <-m.closed:
			return driver.Errorf(driver.ErrUnavailable, "qmp %s: connection to qemu closed", command)
		default:
		}
		return fmt.Errorf("qmp %s: %w", command, r.err)
	}
	if out == nil {
		return nil
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(r.raw, &resp); err != nil {
		return fmt.Errorf("qmp %s: decode reply: %w", command, err)
	}
	if err := json.Unmarshal(resp.Return, out); err != nil {
		return fmt.Errorf("qmp %s: decode reply: %w", command, err)
	}
	return nil
}

// close ends the connection; safe to call more than once.
func (m *monitor) close() {
	go func() { _ = m.sock.Disconnect() }() // Disconnect waits for the reader to finish
	select {
	case <-m.closed:
	case <-time.After(2 * time.Second):
	}
}

// isClosed reports whether the connection is gone.
func (m *monitor) isClosed() bool {
	select {
	case <-m.closed:
		return true
	default:
		return false
	}
}

// identity is what a QEMU process says it is.
type identity struct {
	Name string
	UUID string
}

// queryIdentity asks QEMU for its -name and -uuid.
func (m *monitor) queryIdentity(ctx context.Context) (identity, error) {
	var name struct {
		Name string `json:"name"`
	}
	var uuid struct {
		UUID string `json:"UUID"`
	}
	if err := m.run(ctx, "query-name", nil, &name); err != nil {
		return identity{}, err
	}
	if err := m.run(ctx, "query-uuid", nil, &uuid); err != nil {
		return identity{}, err
	}
	return identity{Name: name.Name, UUID: uuid.UUID}, nil
}

// queryStatus returns QEMU's run state ("running", "paused", "shutdown", ...).
func (m *monitor) queryStatus(ctx context.Context) (string, error) {
	var st struct {
		Status string `json:"status"`
	}
	if err := m.run(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}
