package agent

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// setupWait bounds how long a request waits for the Setup: a set-up that hangs (a
// driver probing a device that never answers) must fail requests, not wedge the agent.
const setupWait = time.Minute

// Setup is the part of the guest's set-up that runs after the agent first announced
// itself: the agent answers as soon as its own port works, and what only commands
// need (the disk and network drivers) is done right after, off the boot's critical
// path. Requests that need the whole guest wait for it and report its error.
type Setup struct {
	run  func() error
	once sync.Once
	done chan struct{}
	err  error
}

// NewSetup returns a Setup that will do run once, when started.
func NewSetup(run func() error) *Setup {
	return &Setup{run: run, done: make(chan struct{})}
}

// Start runs the set-up in the background; only the first call does anything.
func (s *Setup) Start() {
	s.once.Do(func() {
		go func() {
			s.err = s.run()
			close(s.done)
		}()
	})
}

// Wait blocks until the set-up has finished and returns its error. It gives up when
// ctx ends or after setupWait; it does not start the set-up.
func (s *Setup) Wait(ctx context.Context) error {
	t := time.NewTimer(setupWait)
	defer t.Stop()
	select {
	case <-s.done:
		if s.err != nil {
			return fmt.Errorf("guest set-up failed: %w", s.err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("guest set-up (disk and network drivers) has not finished after %s", setupWait)
	case <-ctx.Done():
		return ctx.Err()
	}
}
