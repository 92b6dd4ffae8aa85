package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// drainGrace is how long output is still forwarded after the command exited: a
// background child may hold the pipes open forever, and the exit must not wait for it.
const drainGrace = 500 * time.Millisecond

// execution is one running exec request.
type execution struct {
	mu       sync.Mutex
	pgid     int
	timedOut bool
}

// kill signals the command's whole process group.
func (e *execution) kill(sig unix.Signal) error {
	if err := unix.Kill(-e.pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d: %w", e.pgid, err)
	}
	return nil
}

// startExec starts the command and streams its output and exit from a goroutine.
func (s *Server) startExec(ctx context.Context, ss *session, id uint64, req *protocol.ExecRequest) {
	ss.mu.Lock()
	if _, dup := ss.running[id]; dup {
		ss.mu.Unlock()
		s.send(ss, protocol.Message{ID: id, Type: protocol.TypeError, Error: fmt.Sprintf("an exec with id %d is already running", id)})
		return
	}
	ss.mu.Unlock()

	exit := func(code int, errText string) {
		s.send(ss, protocol.Message{ID: id, Type: protocol.TypeExit, Code: code, Error: errText})
	}
	argv := req.Argv
	if req.Shell != "" {
		argv = []string{"/bin/sh", "-c", req.Shell}
	}
	env := execEnv(req.Env)
	path, err := lookPath(argv[0], env)
	if err != nil {
		s.send(ss, protocol.Message{ID: id, Type: protocol.TypeStderr, Data: []byte(argv[0] + ": command not found\n")})
		exit(protocol.CodeNotFound, "")
		return
	}
	dir := req.Dir
	if dir == "" {
		dir = "/"
	}

	stdoutR, stdoutW, err := os.Pipe()
	if err != nil {
		s.send(ss, protocol.Message{ID: id, Type: protocol.TypeError, Error: "create stdout pipe: " + err.Error()})
		return
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdoutR.Close()
		stdoutW.Close()
		s.send(ss, protocol.Message{ID: id, Type: protocol.TypeError, Error: "create stderr pipe: " + err.Error()})
		return
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         env,
		Dir:         dir,
		Stdout:      stdoutW,
		Stderr:      stderrW,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	var stdinW *os.File
	if len(req.Stdin) > 0 {
		var stdinR *os.File
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			stdoutR.Close()
			stdoutW.Close()
			stderrR.Close()
			stderrW.Close()
			s.send(ss, protocol.Message{ID: id, Type: protocol.TypeError, Error: "create stdin pipe: " + err.Error()})
			return
		}
		cmd.Stdin = stdinR
		defer stdinR.Close()
	}

	wait, err := s.start(cmd)
	stdoutW.Close()
	stderrW.Close()
	if err != nil {
		stdoutR.Close()
		stderrR.Close()
		if stdinW != nil {
			stdinW.Close()
		}
		s.send(ss, protocol.Message{ID: id, Type: protocol.TypeStderr, Data: []byte(fmt.Sprintf("%s: %v\n", argv[0], startErr(err)))})
		code := protocol.CodeCannotRun
		if errors.Is(err, os.ErrNotExist) {
			code = protocol.CodeNotFound
		}
		exit(code, "")
		return
	}
	e := &execution{pgid: cmd.Process.Pid}
	ss.mu.Lock()
	ss.running[id] = e
	ss.mu.Unlock()
	ss.wg.Add(1)

	go func() {
		defer ss.wg.Done()
		if stdinW != nil {
			go func() {
				_, _ = stdinW.Write(req.Stdin) // EPIPE when the command ignores its input
				stdinW.Close()
			}()
		}
		var timer *time.Timer
		if req.TimeoutMS > 0 {
			timer = time.AfterFunc(time.Duration(req.TimeoutMS)*time.Millisecond, func() {
				e.mu.Lock()
				e.timedOut = true
				e.mu.Unlock()
				_ = e.kill(unix.SIGKILL)
			})
		}
		var streams sync.WaitGroup
		for _, p := range []struct {
			r   *os.File
			typ string
		}{{stdoutR, protocol.TypeStdout}, {stderrR, protocol.TypeStderr}} {
			streams.Add(1)
			go func() {
				defer streams.Done()
				buf := make([]byte, protocol.MaxChunk)
				for {
					n, err := p.r.Read(buf)
					if n > 0 {
						s.send(ss, protocol.Message{ID: id, Type: p.typ, Data: append([]byte(nil), buf[:n]...)})
					}
					if err != nil {
						return
					}
				}
			}()
		}

		ws, werr := wait()
		if timer != nil {
			timer.Stop()
		}
		drained := make(chan struct{})
		go func() { streams.Wait(); close(drained) }()
		select {
		case <-drained:
		case <-time.After(drainGrace):
			// Closing unblocks the readers; the background holder of the pipe gets EPIPE.
		}
		stdoutR.Close()
		stderrR.Close()
		<-drained

		ss.mu.Lock()
		delete(ss.running, id)
		ss.mu.Unlock()

		e.mu.Lock()
		timedOut := e.timedOut
		e.mu.Unlock()
		switch {
		case werr != nil:
			s.send(ss, protocol.Message{ID: id, Type: protocol.TypeError, Error: "wait for command: " + werr.Error()})
		case timedOut:
			exit(protocol.CodeTimeout, fmt.Sprintf("timed out after %s", time.Duration(req.TimeoutMS)*time.Millisecond))
		case ws.Signaled():
			exit(protocol.CodeSignalBase+int(ws.Signal()), "")
		default:
			exit(ws.ExitStatus(), "")
		}
	}()
}

// start starts cmd and returns how to wait for it: through the reaper when PID 1 reaps
// all children, else through os/exec.
func (s *Server) start(cmd *exec.Cmd) (func() (syscall.WaitStatus, error), error) {
	if s.opts.Reaper != nil {
		ch, err := s.opts.Reaper.Start(cmd)
		if err != nil {
			return nil, err
		}
		return func() (syscall.WaitStatus, error) {
			ws := <-ch
			_ = cmd.Process.Release()
			return ws, nil
		}, nil
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() (syscall.WaitStatus, error) {
		err := cmd.Wait()
		if cmd.ProcessState == nil {
			return 0, err
		}
		return cmd.ProcessState.Sys().(syscall.WaitStatus), nil
	}, nil
}

// run runs a helper command to completion and returns its combined output.
func (s *Server) run(ctx context.Context, argv ...string) (string, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return "", err
	}
	cmd := &exec.Cmd{Path: argv[0], Args: argv, Env: execEnv(nil), Stdout: w, Stderr: w}
	wait, err := s.start(cmd)
	w.Close()
	if err != nil {
		r.Close()
		return "", fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	out, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	r.Close()
	ws, err := wait()
	if err != nil {
		return string(out), err
	}
	if ws.ExitStatus() != 0 || ws.Signaled() {
		return string(out), fmt.Errorf("%s: exit status %d: %s", strings.Join(argv[1:], " "), ws.ExitStatus(), strings.TrimSpace(string(out)))
	}
	return string(out), ctx.Err()
}

func startErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// execEnv is the default environment overridden by the request's entries.
func execEnv(extra []string) []string {
	env := []string{"PATH=" + protocol.DefaultExecPath, "HOME=/"}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		replaced := false
		for i, old := range env {
			if ok, _, _ := strings.Cut(old, "="); ok == k {
				env[i], replaced = kv, true
			}
		}
		if !replaced {
			env = append(env, kv)
		}
	}
	return env
}

// lookPath finds name in the PATH of env (not the agent's own, as os/exec would).
func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := protocol.DefaultExecPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", exec.ErrNotFound
}
