package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// TestReaperServesExecsAndReapsOrphans runs the agent the way PID 1 does: one reaper
// owns wait4(-1). The test process becomes a child subreaper, so the orphan the shell
// leaves behind is re-parented to it exactly as it would be to init.
func TestReaperServesExecsAndReapsOrphans(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reaper := NewReaper()
	go reaper.Run(ctx)

	hostEnd, guestEnd := net.Pipe()
	defer hostEnd.Close()
	go NewServer(Options{Reaper: reaper}).Serve(ctx, guestEnd)
	c := protocol.NewClient(hostEnd)
	defer c.Close()

	pidFile := filepath.Join(t.TempDir(), "orphan.pid")
	var out bytes.Buffer
	// The orphan closes its output so the exec does not wait for it.
	code, err := c.Exec(ctx, &protocol.ExecRequest{Shell: "sleep 0.2 >/dev/null 2>&1 & echo $! > " + pidFile + "; echo hi; exit 7"}, &out, nil)
	if err != nil || code != 7 || out.String() != "hi\n" {
		t.Fatalf("exec through the reaper = %d, %v, %q; want 7, hi", code, err, out.String())
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			break // exited and reaped: no zombie left
		}
		if time.Now().After(deadline) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			t.Fatalf("orphan %d not reaped: %s", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Helper commands (network set-up uses them) go through the reaper too.
	if got, err := NewServer(Options{Reaper: reaper}).run(ctx, "/bin/sh", "-c", "echo helper"); err != nil || got != "helper\n" {
		t.Fatalf("run through the reaper = %q, %v", got, err)
	}
}

func TestExecEnvOverridesDefaults(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		want  []string
	}{
		{"defaults", nil, []string{"PATH=" + protocol.DefaultExecPath, "HOME=/"}},
		{"override PATH", []string{"PATH=/opt/bin"}, []string{"PATH=/opt/bin", "HOME=/"}},
		{"add and override", []string{"A=1", "HOME=/root", "A=2"}, []string{"PATH=" + protocol.DefaultExecPath, "HOME=/root", "A=2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := execEnv(tc.extra); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("execEnv(%v) = %v, want %v", tc.extra, got, tc.want)
			}
		})
	}
}

func TestLookPathUsesTheCommandsPATH(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "fluxvm-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/nonexistent:" + dir}
	if got, err := lookPath("fluxvm-tool", env); err != nil || got != tool {
		t.Errorf("lookPath = %q, %v; want %q", got, err, tool)
	}
	if _, err := lookPath("fluxvm-tool", nil); err == nil {
		t.Error("found a tool outside the default PATH")
	}
	if _, err := lookPath("plain", env); err == nil {
		t.Error("found a file that is not executable")
	}
	if got, _ := lookPath("./rel/x", env); got != "./rel/x" {
		t.Errorf("a name with a slash must be used as is, got %q", got)
	}
}

func TestValidHostname(t *testing.T) {
	for name, ok := range map[string]bool{
		"fluxvm": true, "vm-1.example": true, "": false, "-x": false, ".x": false,
		"a b": false, "x;rm": false, strings.Repeat("a", 65): false,
	} {
		if validHostname(name) != ok {
			t.Errorf("validHostname(%q) = %v, want %v", name, !ok, ok)
		}
	}
}

// eofThenData reads like a virtio port whose host connects late: EOF a few times, then data.
type eofThenData struct {
	eofs int
	data io.Reader
}

func (r *eofThenData) Read(p []byte) (int, error) {
	if r.eofs > 0 {
		r.eofs--
		return 0, io.EOF
	}
	return r.data.Read(p)
}

func (r *eofThenData) Write(p []byte) (int, error) { return len(p), nil }

func TestRetryEOFWaitsForTheHost(t *testing.T) {
	r := &retryEOF{rw: &eofThenData{eofs: 3, data: strings.NewReader("ping\n")}}
	start := time.Now()
	buf := make([]byte, 16)
	n, err := r.Read(buf)
	if err != nil || string(buf[:n]) != "ping\n" {
		t.Fatalf("Read = %q, %v", buf[:n], err)
	}
	if el := time.Since(start); el < 3*eofRetry {
		t.Fatalf("returned after %s: it must pause between EOFs, not spin", el)
	}
}
