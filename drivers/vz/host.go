package vz

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/plugins/driver"
)

// host is the per-VM host process's server: it owns one Machine and answers
// the plugin over the VM's socket until the machine stops.
type host struct {
	cfg      *HostConfig
	ws       string
	ln       net.Listener
	m        Machine
	instance string
	started  time.Time
	logf     func(string, ...any)

	mu     sync.Mutex
	exit   *hostExit
	forced bool
	done   chan struct{} // closed when the machine has stopped
}

// RunHost is the whole of `fluxvm-agent vz-host -workspace DIR`: it reads
// DIR/host.json, makes the machine with newMachine, starts it, serves the
// plugin on the VM's socket, and returns once the VM has stopped (after
// writing exit.json). The process is started detached by the plugin, so the
// VM outlives plugin and agent.
func RunHost(ctx context.Context, workspace string, newMachine NewMachineFunc, logf func(string, ...any)) error {
	return runHost(ctx, workspace, newMachine, logf, 30*time.Second)
}

// runHost is RunHost with the grace period a guest has to power off once
// ctx ends (SIGTERM) before it is stopped by force.
func runHost(ctx context.Context, workspace string, newMachine NewMachineFunc, logf func(string, ...any), grace time.Duration) error {
	var cfg HostConfig
	if err := readJSON(filepath.Join(workspace, hostFile), &cfg); err != nil {
		return fmt.Errorf("vz host: read config: %w", err)
	}
	if filepath.Dir(cfg.Socket) != filepath.Clean(workspace) {
		return fmt.Errorf("vz host: socket %s is not in workspace %s", cfg.Socket, workspace)
	}
	m, err := newMachine(&cfg)
	if err != nil {
		return fmt.Errorf("vz host: vm %s: %w", cfg.VMID, err)
	}
	_ = os.Remove(filepath.Join(workspace, exitFile))
	// A socket file left by a host process that died is stale: nothing
	// listens on it, or this workspace's lock would be held.
	if c, err := net.DialTimeout("unix", cfg.Socket, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("vz host: vm %s: another host process serves %s", cfg.VMID, cfg.Socket)
	}
	_ = os.Remove(cfg.Socket)
	ln, err := net.Listen("unix", cfg.Socket)
	if err != nil {
		return fmt.Errorf("vz host: vm %s: listen: %w", cfg.VMID, err)
	}
	defer ln.Close()
	if err := os.Chmod(cfg.Socket, 0o600); err != nil {
		return fmt.Errorf("vz host: vm %s: %w", cfg.VMID, err)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	h := &host{cfg: &cfg, ws: workspace, ln: ln, m: m, instance: hex.EncodeToString(nonce[:]), logf: logf, done: make(chan struct{})}
	if err := m.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("vz host: vm %s: start: %w", cfg.VMID, err)
	}
	if cfg.RestoreFrom != "" {
		// The state is resumed; the marker must not resume it again.
		_ = os.Remove(filepath.Join(workspace, restoreMarker))
	}
	h.started = time.Now()
	logf("vm %s running (instance %s, pid %d)", cfg.VMID, h.instance, os.Getpid())
	go h.watch()
	go h.serve(ln)
	select {
	case <-h.done:
	case <-ctx.Done():
		logf("vm %s: signalled: powering off (stopped by force after %v)", cfg.VMID, grace)
		_, _ = h.stop(context.Background(), hostRequest{Op: opStop, TimeoutMS: grace.Milliseconds()})
	}
	// Let the waiters' replies go out before the process ends.
	time.Sleep(100 * time.Millisecond)
	h.mu.Lock()
	logf("vm %s %s: %s", cfg.VMID, h.exit.Reason, h.exit.Message)
	h.mu.Unlock()
	return nil
}

// watch follows the machine's states until it stops.
func (h *host) watch() {
	for st := range h.m.StateChanged() {
		if st != MachineStopped && st != MachineError {
			continue
		}
		h.mu.Lock()
		exit := &hostExit{Reason: "stopped", Message: "the guest powered off", StopTime: time.Now().UnixNano()}
		switch {
		case st == MachineError:
			exit.Reason, exit.Message = "crashed", "the framework stopped the VM with an error"
		case h.forced:
			exit.Reason, exit.Message = "killed", "stopped by force"
		}
		h.exit = exit
		h.mu.Unlock()
		// Before anyone hears of the stop: the exit record is written and
		// the socket is gone, so the VM can be started again at once.
		if err := writeJSON(filepath.Join(h.ws, exitFile), exit); err != nil {
			h.logf("write exit record: %v", err)
		}
		h.ln.Close()
		_ = os.Remove(h.cfg.Socket)
		close(h.done)
		return
	}
}

func (h *host) serve(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go h.handle(conn)
	}
}

// handle answers one request.
func (h *host) handle(conn net.Conn) {
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var req hostRequest
	if err := readLine(br, &req); err != nil {
		_ = writeLine(conn, replyError(driver.Errorf(driver.ErrInvalid, "bad request: %v", err)))
		conn.Close()
		return
	}
	_ = conn.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if req.Op == opVsock {
		guest, err := h.m.DialVsock(ctx, req.Port)
		if err != nil {
			_ = writeLine(conn, replyError(driver.Errorf(driver.ErrUnavailable, "vsock port %d: %v", req.Port, err)))
			conn.Close()
			return
		}
		if err := writeLine(conn, hostReply{}); err != nil {
			guest.Close()
			conn.Close()
			return
		}
		splice(&bufferedConn{Conn: conn, r: br}, guest)
		return
	}
	defer conn.Close()
	rep, err := h.do(ctx, req)
	if err != nil {
		rep = replyError(err)
	}
	_ = writeLine(conn, rep)
}

func (h *host) do(ctx context.Context, req hostRequest) (hostReply, error) {
	switch req.Op {
	case opHello:
		return hostReply{Hello: &hostHello{Protocol: protocolVersion, VMID: h.cfg.VMID, Instance: h.instance, PID: os.Getpid(), State: h.m.State(), StartedAt: h.started.UnixNano()}}, nil
	case opPause:
		return hostReply{}, h.m.Pause(ctx)
	case opResume:
		return hostReply{}, h.m.Resume(ctx)
	case opSave:
		if !filepath.IsAbs(req.Path) || filepath.Dir(filepath.Dir(filepath.Dir(req.Path))) != filepath.Dir(h.cfg.Socket) {
			return hostReply{}, driver.Errorf(driver.ErrInvalid, "save path %q is not a snapshot file of this VM's workspace", req.Path)
		}
		if h.m.State() != MachinePaused {
			return hostReply{}, driver.Errorf(driver.ErrState, "the VM must be paused to save its state (it is %s)", h.m.State())
		}
		return hostReply{}, h.m.SaveState(ctx, req.Path)
	case opWait:
		<-h.done
		h.mu.Lock()
		defer h.mu.Unlock()
		return hostReply{Exit: h.exit}, nil
	case opStop:
		return h.stop(ctx, req)
	}
	return hostReply{}, driver.Errorf(driver.ErrInvalid, "unknown op %q", req.Op)
}

// stop presses the power button unless Force, and pulls the plug if the VM
// still runs after TimeoutMS.
func (h *host) stop(ctx context.Context, req hostRequest) (hostReply, error) {
	if !req.Force {
		if err := h.m.RequestStop(ctx); err != nil {
			h.logf("vm %s: power button: %v; stopping by force", h.cfg.VMID, err)
			req.Force = true
		}
	}
	if !req.Force {
		timeout := time.Duration(req.TimeoutMS) * time.Millisecond
		select {
		case <-h.done:
		case <-time.After(timeout):
			req.Force = true
		}
	}
	if req.Force {
		h.mu.Lock()
		h.forced = h.exit == nil
		h.mu.Unlock()
		if err := h.m.Stop(ctx); err != nil {
			select {
			case <-h.done:
			default:
				return hostReply{}, fmt.Errorf("stop by force: %w", err)
			}
		}
		<-h.done
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return hostReply{Exit: h.exit}, nil
}

// splice copies both ways until either side ends, then closes both.
func splice(a, b net.Conn) {
	var once sync.Once
	closeBoth := func() { a.Close(); b.Close() }
	go func() { _, _ = io.Copy(a, b); once.Do(closeBoth) }()
	_, _ = io.Copy(b, a)
	once.Do(closeBoth)
}

func bytesReader(b []byte) io.Reader { return bytes.NewReader(b) }
