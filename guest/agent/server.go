// Package agent is the FluxVM guest agent: it serves the host's requests (exec,
// shutdown, network, ...) over the agent port and, as PID 1 of a minimal initramfs,
// sets the guest up far enough to do so.
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// Version is the agent version reported in Info.
const Version = "0.1.0"

// Options configure a Server. The zero value serves ping and exec only.
type Options struct {
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
	// PowerOff and Reboot are called after the "ok" for a shutdown or reboot request was
	// sent. Nil answers those requests with an error.
	PowerOff func() error
	Reboot   func() error
	// ManageNetwork lets network requests change interfaces, /etc/resolv.conf and the
	// hostname; only set it where the agent owns the machine (PID 1 in a guest).
	ManageNetwork bool
	// Reaper, when set, waits for children instead of os/exec: PID 1 reaps every
	// orphan with wait4(-1), which would otherwise steal the exit status of our execs.
	Reaper *Reaper
	// Setup, when set, is started once the first ready message is sent. Exec and
	// network requests wait for it (in order: the connection reads nothing else
	// meanwhile) and fail with its error; ping, signal, shutdown and reboot do not wait.
	Setup *Setup
	// LinkDisks, when set, makes /dev/disk/by-id links of the guest's disks
	// (LinkDisks): before every exec, so a command finds its volumes by id,
	// and on a disks request. Nil answers disks requests with an error.
	LinkDisks func() error
}

// Server serves agent requests. One Server may serve several connections in turn.
type Server struct {
	opts Options
}

// NewServer returns a Server with the given options.
func NewServer(opts Options) *Server {
	return &Server{opts: opts}
}

func (s *Server) logf(format string, args ...any) {
	if s.opts.Logf != nil {
		s.opts.Logf(format, args...)
	}
}

// session is one Serve call: its writer and its running execs, by request ID.
type session struct {
	enc     *protocol.Encoder
	mu      sync.Mutex
	running map[uint64]*execution
	wg      sync.WaitGroup
}

func (s *Server) send(ss *session, m protocol.Message) {
	if err := ss.enc.Encode(m); err != nil {
		// The host may simply not be connected (virtio-serial drops writes then); it
		// pings when it comes back, so nothing is lost that it cannot ask again.
		s.logf("send %s for request %d: %v", m.Type, m.ID, err)
	}
}

// Serve announces readiness on rw and answers requests read from it until reading
// fails or hits EOF (returning nil for EOF). Execs still running then are killed.
// Over virtio-serial, wrap the port so EOF (host not connected) is retried instead.
func (s *Server) Serve(ctx context.Context, rw io.ReadWriter) error {
	ctx, cancel := context.WithCancel(ctx)
	ss := &session{enc: protocol.NewEncoder(rw), running: make(map[uint64]*execution)}
	defer func() {
		cancel()
		ss.mu.Lock()
		for _, e := range ss.running {
			e.kill(unix.SIGKILL)
		}
		ss.mu.Unlock()
		ss.wg.Wait()
	}()
	s.send(ss, protocol.Message{ID: 0, Type: protocol.TypeReady, Info: s.Info()})
	if s.opts.Setup != nil {
		// Only now: on a one-vCPU guest, loading drivers would delay the announcement.
		s.opts.Setup.Start()
	}
	dec := protocol.NewDecoder(rw)
	for {
		line, err := dec.ReadLine()
		if errors.Is(err, protocol.ErrLineTooLong) {
			s.send(ss, protocol.Message{Type: protocol.TypeError, Error: err.Error()})
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read agent request: %w", err)
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		req, err := protocol.DecodeRequest(line)
		if err != nil {
			s.send(ss, protocol.Message{Type: protocol.TypeError, Error: err.Error()})
			continue
		}
		s.handle(ctx, ss, req)
	}
}

func (s *Server) handle(ctx context.Context, ss *session, req protocol.Request) {
	reply := func(err error) {
		if err != nil {
			s.send(ss, protocol.Message{ID: req.ID, Type: protocol.TypeError, Error: err.Error()})
			return
		}
		s.send(ss, protocol.Message{ID: req.ID, Type: protocol.TypeOK})
	}
	switch req.Op {
	case protocol.OpPing:
		s.send(ss, protocol.Message{ID: req.ID, Type: protocol.TypeReady, Info: s.Info()})
	case protocol.OpExec:
		if err := req.Exec.Validate(); err != nil {
			reply(err)
			return
		}
		if err := s.setUp(ctx); err != nil {
			reply(err)
			return
		}
		if s.opts.LinkDisks != nil {
			if err := s.opts.LinkDisks(); err != nil {
				s.logf("%v", err)
			}
		}
		s.startExec(ctx, ss, req.ID, req.Exec)
	case protocol.OpSignal:
		reply(s.signal(ss, req.Signal))
	case protocol.OpShutdown, protocol.OpReboot:
		do := s.opts.PowerOff
		if req.Op == protocol.OpReboot {
			do = s.opts.Reboot
		}
		if do == nil {
			reply(fmt.Errorf("%s is not supported: the agent does not run as the guest's init", req.Op))
			return
		}
		reply(nil)
		if err := do(); err != nil {
			s.logf("%s: %v", req.Op, err)
		}
	case protocol.OpNetwork:
		if !s.opts.ManageNetwork {
			reply(errors.New("network configuration is disabled: the agent does not run as the guest's init"))
			return
		}
		if req.Network == nil {
			reply(errors.New("network request without a network config"))
			return
		}
		if err := s.setUp(ctx); err != nil {
			reply(err)
			return
		}
		reply(s.configureNetwork(ctx, req.Network))
	case protocol.OpDisks:
		if s.opts.LinkDisks == nil {
			reply(errors.New("disk links are disabled: the agent does not run as the guest's init"))
			return
		}
		reply(s.opts.LinkDisks())
	default:
		reply(fmt.Errorf("unknown op %q", req.Op))
	}
}

// setUp waits for the guest's set-up, if the server has one, and returns its error.
func (s *Server) setUp(ctx context.Context) error {
	if s.opts.Setup == nil {
		return nil
	}
	return s.opts.Setup.Wait(ctx)
}

func (s *Server) signal(ss *session, sig *protocol.Signal) error {
	if sig == nil {
		return errors.New("signal request without a signal")
	}
	if sig.Signal <= 0 || sig.Signal > 64 {
		return fmt.Errorf("signal %d is not a valid signal number", sig.Signal)
	}
	ss.mu.Lock()
	e := ss.running[sig.ID]
	ss.mu.Unlock()
	if e == nil {
		return fmt.Errorf("no running exec with id %d", sig.ID)
	}
	return e.kill(unix.Signal(sig.Signal))
}

// Info describes this guest. It answers every ping, and a resumed guest's
// first answer runs under a new QEMU whose TCG has translated none of the
// guest's code yet (each code path taken the first time costs then), so it
// takes few paths: one uname for the kernel and hostname, the OS name read
// once, the interfaces' names from /sys/class/net rather than a netlink dump.
func (s *Server) Info() *protocol.Info {
	info := &protocol.Info{AgentVersion: Version, OS: "Linux"}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		info.Kernel = unix.ByteSliceToString(uts.Release[:])
		info.OS = unix.ByteSliceToString(uts.Sysname[:])
		info.Hostname = unix.ByteSliceToString(uts.Nodename[:])
	} else {
		info.Hostname, _ = os.Hostname()
	}
	if name := osPrettyName(); name != "" {
		info.OS = name
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			info.Uptime, _ = strconv.ParseFloat(f[0], 64)
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, e := range ents {
			info.Interfaces = append(info.Interfaces, e.Name())
		}
	} else if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			info.Interfaces = append(info.Interfaces, i.Name)
		}
	}
	return info
}

// osPrettyName is /etc/os-release's PRETTY_NAME, read once: it does not
// change while the guest runs.
var osPrettyName = sync.OnceValue(func() string {
	b, err := os.ReadFile("/etc/os-release")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PRETTY_NAME="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
})
