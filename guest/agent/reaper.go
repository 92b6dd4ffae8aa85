package agent

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reaper reaps every child of PID 1 (orphans are re-parented to it) and hands the exit
// status of the children started through it to whoever started them.
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

// NewReaper returns a Reaper; call Run to start reaping.
func NewReaper() *Reaper {
	return &Reaper{waiting: make(map[int]chan syscall.WaitStatus)}
}

// Start starts cmd and returns a channel that receives its wait status. The lock held
// across Start and registration makes sure the reaper cannot see the child's exit
// before it knows whom it belongs to.
func (r *Reaper) Start(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[cmd.Process.Pid] = ch
	return ch, nil
}

// Run reaps children on every SIGCHLD until ctx ends.
func (r *Reaper) Run(ctx context.Context) {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	defer signal.Stop(sigs)
	for {
		r.reap()
		select {
		case <-sigs:
		case <-ctx.Done():
			return
		}
	}
}

func (r *Reaper) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		if ch, ok := r.waiting[pid]; ok {
			ch <- syscall.WaitStatus(ws)
			delete(r.waiting, pid)
		}
		r.mu.Unlock()
	}
}
