//go:build linux

package qemu

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// process is a running QEMU: either our child (cmd set) or one adopted from
// an earlier plugin process (pidfd set), which we cannot wait(2) for.
type process struct {
	pid   int
	cmd   *exec.Cmd
	pidfd int // -1 for a child
}

// signal sends sig without racing PID reuse: through the child's os.Process
// (which holds a pidfd) or the adopted process's pidfd.
func (p *process) signal(sig syscall.Signal) error {
	if p.cmd != nil {
		return p.cmd.Process.Signal(sig)
	}
	return unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
}

// exitStatus is how a QEMU process ended, as far as we can know.
type exitStatus struct {
	known  bool // false for an adopted process: not our child, no status
	code   int
	signal syscall.Signal // non-zero when killed by a signal
}

// wait blocks until the process ends. For an adopted process that is when
// its pidfd turns readable, i.e. when it exits (even if it stays a zombie
// because nobody reaps it).
func (p *process) wait() exitStatus {
	if p.cmd != nil {
		err := p.cmd.Wait()
		st := exitStatus{known: true}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				st.signal = ws.Signal()
			} else {
				st.code = ee.ExitCode()
			}
		} else if err != nil {
			st.known = false
		}
		return st
	}
	defer unix.Close(p.pidfd)
	for {
		fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 1000)
		if err == nil && n > 0 {
			return exitStatus{}
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			// No pidfd poll: fall back to looking at /proc.
			for processAlive(p.pid) {
				time.Sleep(200 * time.Millisecond)
			}
			return exitStatus{}
		}
	}
}

// adoptProcess takes hold of the QEMU running from workspace ws: the pid
// comes from the hint (a handle) or QEMU's pidfile, and it counts only if
// /proc/<pid>/cmdline names the workspace, or startedIn (the workspace a
// spare QEMU was started in, spare.go) when that is set, so a reused PID is
// never taken for ours. ok is false when no such process runs.
func adoptProcess(ws, startedIn string, pidHint int) (*process, bool) {
	candidates := []int{}
	if pidHint > 0 {
		candidates = append(candidates, pidHint)
	}
	if data, err := os.ReadFile(filepath.Join(ws, pidFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && pid > 0 && pid != pidHint {
			candidates = append(candidates, pid)
		}
	}
	for _, pid := range candidates {
		// Open the pidfd first and check the command line after: the pidfd then
		// surely refers to the process we checked.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if processAlive(pid) && (cmdlineMentions(pid, ws) || (startedIn != "" && cmdlineMentions(pid, startedIn))) {
			return &process{pid: pid, pidfd: fd}, true
		}
		unix.Close(fd)
	}
	return nil, false
}

// cmdlineMentions reports whether a process's command line names the
// workspace (QEMU's carries its socket and pidfile paths).
func cmdlineMentions(pid int, ws string) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	return bytes.Contains(data, []byte(ws+string(filepath.Separator)))
}

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	if err := unix.Kill(pid, 0); err != nil && !errors.Is(err, unix.EPERM) {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	state := s[i+2]
	return state != 'Z' && state != 'X'
}
