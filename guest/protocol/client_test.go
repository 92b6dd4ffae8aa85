package protocol_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/agent"
	"github.com/fluxvm/fluxvm/guest/protocol"
)

// startAgent serves a real agent on one end of a pipe and returns a client on the other.
func startAgent(t *testing.T, opts agent.Options) (*protocol.Client, net.Conn) {
	t.Helper()
	hostEnd, guestEnd := net.Pipe()
	srv := agent.NewServer(opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(context.Background(), guestEnd)
	}()
	c := protocol.NewClient(hostEnd)
	t.Cleanup(func() {
		c.Close()
		guestEnd.Close()
		<-done
	})
	return c, guestEnd
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestWaitReadyReturnsGuestInfo(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	info, err := c.WaitReady(ctxTimeout(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if info.AgentVersion != agent.Version || info.Kernel == "" || info.Uptime <= 0 || len(info.Interfaces) == 0 {
		t.Fatalf("info = %+v, want version, kernel, uptime and interfaces", info)
	}
}

func TestExecReportsOutputAndExitCodes(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	notExecutable := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		req        protocol.ExecRequest
		wantCode   int
		wantStdout string
		wantStderr string // substring
	}{
		{"argv", protocol.ExecRequest{Argv: []string{"echo", "hello", "world"}}, 0, "hello world\n", ""},
		{"shell exit code", protocol.ExecRequest{Shell: "echo out; echo err >&2; exit 3"}, 3, "out\n", "err"},
		{"command not found", protocol.ExecRequest{Argv: []string{"no-such-command-fluxvm"}}, 127, "", "not found"},
		{"not executable", protocol.ExecRequest{Argv: []string{notExecutable}}, 126, "", "permission denied"},
		{"killed by signal", protocol.ExecRequest{Shell: "kill -TERM $$"}, 128 + 15, "", ""},
		{"stdin", protocol.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("from stdin\x00\n")}, 0, "from stdin\x00\n", ""},
		{"env overrides", protocol.ExecRequest{Shell: `echo "$FOO:$HOME"`, Env: []string{"FOO=bar", "HOME=/tmp"}}, 0, "bar:/tmp\n", ""},
		{"default PATH", protocol.ExecRequest{Shell: `echo "$PATH"`}, 0, protocol.DefaultExecPath + "\n", ""},
		{"dir", protocol.ExecRequest{Argv: []string{"pwd"}, Dir: "/tmp"}, 0, "/tmp\n", ""},
		{"default dir is root", protocol.ExecRequest{Argv: []string{"pwd"}}, 0, "/\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code, err := c.Exec(ctxTimeout(t, 10*time.Second), &tc.req, &stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode {
				t.Errorf("code = %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			if stdout.String() != tc.wantStdout {
				t.Errorf("stdout = %q, want %q", stdout.String(), tc.wantStdout)
			}
			if !strings.Contains(strings.ToLower(stderr.String()), tc.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tc.wantStderr)
			}
		})
	}
}

func TestExecRejectsInvalidRequest(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	if _, err := c.Exec(ctxTimeout(t, 5*time.Second), &protocol.ExecRequest{Argv: []string{"true"}, Shell: "true"}, nil, nil); err == nil {
		t.Fatal("exec with both argv and shell succeeded")
	}
}

// chunkRecorder records the size of every write.
type chunkRecorder struct {
	mu    sync.Mutex
	sizes []int
	total int
}

func (w *chunkRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sizes = append(w.sizes, len(p))
	w.total += len(p)
	return len(p), nil
}

func TestExecStreamsLargeOutputInBoundedChunks(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	var w chunkRecorder
	const size = 1 << 20
	code, err := c.Exec(ctxTimeout(t, 20*time.Second), &protocol.ExecRequest{Shell: fmt.Sprintf("head -c %d /dev/zero", size)}, &w, nil)
	if err != nil || code != 0 {
		t.Fatalf("exec = %d, %v", code, err)
	}
	if w.total != size {
		t.Fatalf("got %d bytes of output, want %d", w.total, size)
	}
	for _, n := range w.sizes {
		if n > protocol.MaxChunk {
			t.Fatalf("chunk of %d bytes exceeds %d", n, protocol.MaxChunk)
		}
	}
}

func TestExecTimeoutKillsProcessGroupWith124(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	pidFile := filepath.Join(t.TempDir(), "bg.pid")
	start := time.Now()
	// The background sleep holds the output pipes: only killing the group ends it.
	code, err := c.Exec(ctxTimeout(t, 10*time.Second), &protocol.ExecRequest{
		Shell:     "sleep 30 & echo $! > " + pidFile + "; sleep 30",
		TimeoutMS: 300,
	}, nil, nil)
	if code != protocol.CodeTimeout || !errors.Is(err, protocol.ErrTimeout) {
		t.Fatalf("exec = %d, %v; want 124 and ErrTimeout", code, err)
	}
	if !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("error %q does not say how long", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("timeout took %s", el)
	}
	assertGone(t, pidFile)
}

// assertGone checks that the process whose PID is in pidFile has exited.
func assertGone(t *testing.T, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		// A killed child of a dead shell is reaped by init or a subreaper; until then
		// it is a zombie, which /proc/PID/stat shows as state Z.
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(st), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("process %d still running after the exec ended", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExecContextCancelKillsCommand(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	pidFile := filepath.Join(t.TempDir(), "sh.pid")
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			// The shell creates the file before it writes the pid: wait for the line.
			if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	_, err := c.Exec(ctx, &protocol.ExecRequest{Shell: "echo $$ > " + pidFile + "; exec sleep 30"}, nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	assertGone(t, pidFile)
	// The connection is still usable afterwards.
	if code, err := c.Exec(ctxTimeout(t, 5*time.Second), &protocol.ExecRequest{Argv: []string{"true"}}, nil, nil); err != nil || code != 0 {
		t.Fatalf("exec after cancel = %d, %v", code, err)
	}
}

func TestConcurrentExecsShareOneConnection(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	const n = 8
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			code, err := c.Exec(ctxTimeout(t, 10*time.Second), &protocol.ExecRequest{
				Shell: fmt.Sprintf("sleep 0.5; for j in 1 2 3; do echo %d-$j; done; exit %d", i, i),
			}, &out, nil)
			want := fmt.Sprintf("%d-1\n%d-2\n%d-3\n", i, i, i)
			if err != nil || code != i || out.String() != want {
				errs <- fmt.Errorf("exec %d = %d, %v, %q; want %d, %q", i, code, err, out.String(), i, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Eight half-second sleeps in sequence would take 4 s.
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("concurrent execs took %s: they ran one after another", el)
	}
}

func TestConnectionDropFailsPendingCalls(t *testing.T) {
	c, guestEnd := startAgent(t, agent.Options{})
	if _, err := c.WaitReady(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctxTimeout(t, 10*time.Second), &protocol.ExecRequest{Shell: "sleep 30"}, nil, nil)
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	guestEnd.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, protocol.ErrClosed) || !strings.Contains(err.Error(), "connection lost") {
			t.Fatalf("pending exec err = %v, want ErrClosed saying the connection was lost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pending exec did not fail after the connection dropped")
	}
	if _, err := c.Exec(ctxTimeout(t, time.Second), &protocol.ExecRequest{Argv: []string{"true"}}, nil, nil); !errors.Is(err, protocol.ErrClosed) {
		t.Fatalf("exec on a dropped connection: err = %v, want ErrClosed", err)
	}
}

func TestCloseFailsLaterCalls(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	c.Close()
	if _, err := c.WaitReady(ctxTimeout(t, time.Second)); !errors.Is(err, protocol.ErrClosed) {
		t.Fatalf("WaitReady after Close: err = %v, want ErrClosed", err)
	}
}

func TestShutdownAndRebootNeedInit(t *testing.T) {
	c, _ := startAgent(t, agent.Options{})
	ctx := ctxTimeout(t, 5*time.Second)
	if err := c.Shutdown(ctx); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Shutdown without init = %v, want 'not supported'", err)
	}
	if err := c.Reboot(ctx); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Fatalf("Reboot without init = %v, want 'not supported'", err)
	}
	if err := c.ConfigureNetwork(ctx, &protocol.NetworkConfig{Hostname: "x"}); err == nil || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("ConfigureNetwork without init = %v, want 'disabled'", err)
	}
}

func TestShutdownIsAcknowledgedBeforePowerOff(t *testing.T) {
	powered := make(chan struct{})
	c, _ := startAgent(t, agent.Options{PowerOff: func() error { close(powered); return nil }})
	if err := c.Shutdown(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-powered:
	case <-time.After(5 * time.Second):
		t.Fatal("PowerOff was not called")
	}
}

func TestAgentAnswersGarbageWithErrorsAndKeepsServing(t *testing.T) {
	hostEnd, guestEnd := net.Pipe()
	defer hostEnd.Close()
	go agent.NewServer(agent.Options{}).Serve(context.Background(), guestEnd)
	dec := protocol.NewDecoder(hostEnd)
	if m, err := dec.ReadMessage(); err != nil || m.Type != protocol.TypeReady || m.ID != 0 {
		t.Fatalf("first message = %+v, %v; want the unsolicited ready", m, err)
	}
	go func() {
		fmt.Fprint(hostEnd, "not json\n")
		fmt.Fprint(hostEnd, strings.Repeat("y", protocol.MaxLineSize+1)+"\n")
		fmt.Fprint(hostEnd, `{"id":5,"op":"frobnicate"}`+"\n")
		fmt.Fprint(hostEnd, `{"id":6,"op":"signal","signal":{"id":99,"signal":9}}`+"\n")
		fmt.Fprint(hostEnd, `{"id":7,"op":"ping"}`+"\n")
	}()
	for _, want := range []struct {
		id      uint64
		typ     string
		errPart string
	}{
		{0, protocol.TypeError, "not a JSON object"},
		{0, protocol.TypeError, "longer than"},
		{5, protocol.TypeError, `unknown op "frobnicate"`},
		{6, protocol.TypeError, "no running exec with id 99"},
		{7, protocol.TypeReady, ""},
	} {
		m, err := dec.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if m.ID != want.id || m.Type != want.typ || !strings.Contains(m.Error, want.errPart) {
			t.Fatalf("message = %+v, want id %d type %s error containing %q", m, want.id, want.typ, want.errPart)
		}
	}
}

func TestDialRetriesUntilSocketExists(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ga.sock")
	go func() {
		time.Sleep(300 * time.Millisecond)
		l, err := net.Listen("unix", sock)
		if err != nil {
			return
		}
		defer l.Close()
		conn, err := l.Accept()
		if err != nil {
			return
		}
		_ = agent.NewServer(agent.Options{}).Serve(context.Background(), conn)
	}()
	c, err := protocol.Dial(ctxTimeout(t, 5*time.Second), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out bytes.Buffer
	if code, err := c.Exec(ctxTimeout(t, 5*time.Second), &protocol.ExecRequest{Argv: []string{"echo", "over unix"}}, &out, nil); err != nil || code != 0 || out.String() != "over unix\n" {
		t.Fatalf("exec over unix socket = %d, %v, %q", code, err, out.String())
	}
}

func TestDialGivesUpWhenContextEnds(t *testing.T) {
	_, err := protocol.Dial(ctxTimeout(t, 200*time.Millisecond), filepath.Join(t.TempDir(), "missing.sock"))
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "missing.sock") {
		t.Fatalf("err = %v, want deadline exceeded naming the socket", err)
	}
}

// TestPingKeepsTheAnswerForWaitReady: a ready that answers Ping, arriving
// before anyone waits, is what the next WaitReady returns, at once (the
// guest here answers one ping only, so a WaitReady that sent its own and
// waited for it would time out).
func TestPingKeepsTheAnswerForWaitReady(t *testing.T) {
	hostEnd, guestEnd := net.Pipe()
	c := protocol.NewClient(hostEnd)
	t.Cleanup(func() { c.Close(); guestEnd.Close() })
	answered := make(chan struct{})
	go func() {
		dec := protocol.NewDecoder(guestEnd)
		enc := protocol.NewEncoder(guestEnd)
		line, err := dec.ReadLine()
		if err != nil {
			return
		}
		req, err := protocol.DecodeRequest(line)
		if err != nil || req.Op != protocol.OpPing {
			return
		}
		_ = enc.Encode(protocol.Message{ID: req.ID, Type: protocol.TypeReady, Info: &protocol.Info{AgentVersion: "first-answer"}})
		close(answered)
		for { // read on, answer nothing more
			if _, err := dec.ReadLine(); err != nil {
				return
			}
		}
	}()
	if err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-answered:
	case <-time.After(5 * time.Second):
		t.Fatal("the guest end never saw the ping")
	}
	time.Sleep(50 * time.Millisecond) // the answer reaches the read loop before WaitReady starts
	info, err := c.WaitReady(ctxTimeout(t, 2*time.Second))
	if err != nil {
		t.Fatalf("WaitReady after an answered Ping: %v", err)
	}
	if info.AgentVersion != "first-answer" {
		t.Fatalf("info = %+v, want the answer to Ping", info)
	}
	// Kept for one WaitReady only: the next one pings and waits again.
	if _, err := c.WaitReady(ctxTimeout(t, 700*time.Millisecond)); err == nil {
		t.Fatal("a second WaitReady returned the same kept answer")
	}
}
