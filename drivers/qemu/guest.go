//go:build linux

package qemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/guest/protocol"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// agentClient returns the VM's guest agent connection, dialling it when there
// is none. QEMU's chardev socket takes one client at a time, so WaitReady,
// Exec and StopVM share this one.
func (v *vm) agentClient(ctx context.Context) (*protocol.Client, error) {
	v.agentMu.Lock()
	defer v.agentMu.Unlock()
	if v.agent != nil {
		return v.agent, nil
	}
	// QEMU made the socket before QMP answered, so a dial that does not
	// connect at once will not; bound it so a wedged socket reports quickly.
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := protocol.Dial(dctx, filepath.Join(v.ws, agentSock))
	if err != nil {
		return nil, err
	}
	v.agent = c
	return c, nil
}

// dropAgent forgets a connection that failed, so the next call redials.
func (v *vm) dropAgent(c *protocol.Client) {
	v.agentMu.Lock()
	defer v.agentMu.Unlock()
	if v.agent == c {
		_ = c.Close()
		v.agent = nil
	}
}

// closeAgent closes the guest agent connection, if any.
func (v *vm) closeAgent() {
	v.agentMu.Lock()
	defer v.agentMu.Unlock()
	if v.agent != nil {
		_ = v.agent.Close()
		v.agent = nil
	}
}

// runningCtx returns a context that also ends when the VM's process does.
func (v *vm) runningCtx(ctx context.Context) (context.Context, context.CancelFunc, error) {
	v.mu.Lock()
	done, state := v.done, v.state
	v.mu.Unlock()
	if state != pb.VMState_VM_STATE_RUNNING && state != pb.VMState_VM_STATE_PAUSED {
		return nil, nil, driver.Errorf(driver.ErrState, "vm %s is %s, not running", v.id, stateName(state))
	}
	rctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-done:
			cancel()
		case <-rctx.Done():
		}
	}()
	return rctx, cancel, nil
}

// stopped reports whether the VM's process has ended.
func (v *vm) stopped() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state != pb.VMState_VM_STATE_RUNNING && v.state != pb.VMState_VM_STATE_PAUSED
}

// WaitReady waits until the guest agent answers, redialling when the
// connection drops (QEMU keeps the socket while the guest boots).
func (d *Driver) WaitReady(ctx context.Context, id string) (map[string]string, error) {
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	rctx, cancel, err := v.runningCtx(ctx)
	if err != nil {
		return nil, err
	}
	defer cancel()
	for {
		c, err := v.agentClient(rctx)
		var info *protocol.Info
		if err == nil {
			info, err = c.WaitReady(rctx)
			if err != nil && errors.Is(err, protocol.ErrClosed) {
				v.dropAgent(c)
			}
		}
		if err == nil {
			v.mu.Lock()
			first := !v.agentReady
			v.agentReady = true
			v.mu.Unlock()
			guest := map[string]string{
				"agent_version": info.AgentVersion,
				"kernel":        info.Kernel,
				"hostname":      info.Hostname,
				"os":            info.OS,
				"uptime":        strconv.FormatFloat(info.Uptime, 'f', 2, 64),
			}
			if first {
				d.setUpNetwork(rctx, v, c, guest)
				d.emit(id, pb.EventType_EVENT_TYPE_GUEST_READY, info.AgentVersion)
				d.spareAfterResume(v)
			}
			return guest, nil
		}
		switch {
		case v.stopped():
			return nil, driver.Errorf(driver.ErrState, "vm %s stopped while waiting for its guest agent", id)
		case ctx.Err() == context.DeadlineExceeded:
			return nil, driver.Errorf(driver.ErrTimeout, "vm %s: the guest agent did not answer in time", id)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		select {
		case <-rctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Exec runs a command in the guest through its agent.
func (d *Driver) Exec(ctx context.Context, req *pb.ExecRequest, stdout, stderr io.Writer) (int, error) {
	v, err := d.lookup(req.GetId())
	if err != nil {
		return -1, err
	}
	preq := &protocol.ExecRequest{
		Argv:      req.GetArgv().GetArgs(),
		Shell:     req.GetShell(),
		Env:       req.Env,
		Stdin:     req.Stdin,
		TimeoutMS: req.TimeoutMs,
		Dir:       req.Dir,
	}
	if err := preq.Validate(); err != nil {
		return -1, driver.Errorf(driver.ErrInvalid, "exec in vm %s: %v", v.id, err)
	}
	v.mu.Lock()
	state := v.state
	v.mu.Unlock()
	if state == pb.VMState_VM_STATE_PAUSED {
		return -1, driver.Errorf(driver.ErrState, "vm %s is paused; resume it to run commands", v.id)
	}
	rctx, cancel, err := v.runningCtx(ctx)
	if err != nil {
		return -1, err
	}
	defer cancel()
	c, err := v.agentClient(rctx)
	if err != nil {
		if v.stopped() {
			return -1, driver.Errorf(driver.ErrState, "vm %s is not running", v.id)
		}
		return -1, driver.Errorf(driver.ErrUnavailable, "exec in vm %s: cannot reach the guest agent: %v", v.id, err)
	}
	code, err := c.Exec(rctx, preq, stdout, stderr)
	switch {
	case err == nil:
		return code, nil
	case errors.Is(err, protocol.ErrTimeout):
		return protocol.CodeTimeout, nil
	case ctx.Err() != nil:
		return -1, ctx.Err()
	case v.stopped():
		return -1, driver.Errorf(driver.ErrState, "vm %s stopped while the command ran", v.id)
	case errors.Is(err, protocol.ErrClosed):
		v.dropAgent(c)
		return -1, driver.Errorf(driver.ErrUnavailable, "exec in vm %s: the guest agent connection dropped: %v", v.id, err)
	}
	return -1, fmt.Errorf("exec in vm %s: %w", v.id, err)
}

// QEMU user-mode networking's fixed addresses (slirp's defaults).
const (
	userNetAddress = "10.0.2.15/24"
	userNetGateway = "10.0.2.2"
	userNetDNS     = "10.0.2.3"
)

// setUpNetwork configures the guest's NIC through its agent once it first
// answers. A failure does not fail readiness (commands still run); it is
// reported in the guest map and as an event.
func (d *Driver) setUpNetwork(ctx context.Context, v *vm, c *protocol.Client, guest map[string]string) {
	v.mu.Lock()
	resumed := v.resumed
	v.mu.Unlock()
	var cfg *protocol.NetworkConfig
	switch n := v.spec.GetNetwork(); n.GetMode() {
	case pb.NetworkMode_NETWORK_MODE_USER:
		if resumed {
			// A resumed guest runs on with the network its source set up
			// at its first ready: user-mode networking's addresses are
			// the same in every VM, and the guest's NIC kept the source's
			// MAC (it is in the saved memory), which a configuration by
			// the clone's MAC would not find.
			guest["network"] = userNetAddress
			return
		}
		cfg = &protocol.NetworkConfig{
			Interfaces: []protocol.Interface{{MAC: v.rec.MAC, Addresses: []string{userNetAddress}, Gateway: userNetGateway}},
			DNS:        []string{userNetDNS},
		}
	case pb.NetworkMode_NETWORK_MODE_TAP:
		// What the network plugin decided; without addresses the guest is
		// left to configure itself.
		if len(n.GetAddresses()) == 0 {
			return
		}
		cfg = &protocol.NetworkConfig{
			Interfaces: []protocol.Interface{{MAC: v.rec.MAC, Addresses: n.GetAddresses(), Gateway: n.GetGateway()}},
			DNS:        n.GetDns(),
		}
	default:
		return
	}
	err := c.ConfigureNetwork(ctx, cfg)
	if err != nil {
		guest["network"] = "error: " + err.Error()
		d.emit(v.id, pb.EventType_EVENT_TYPE_NETWORK_FAILED, err.Error())
		d.logger.Warn("guest network set-up failed", "vm", v.id, "error", err)
		return
	}
	guest["network"] = strings.Join(cfg.Interfaces[0].Addresses, ",")
}
