//go:build !linux

package agent

import (
	"context"
	"errors"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// errNotLinux is what the guest-only duties report elsewhere: the agent runs in Linux guests.
var errNotLinux = errors.New("the FluxVM guest agent runs on Linux only")

func (s *Server) configureNetwork(context.Context, *protocol.NetworkConfig) error { return errNotLinux }

// RunInit is the PID 1 entry point; it needs Linux.
func RunInit(ctx context.Context) error { return errNotLinux }

// RunPort serves on a port path; it needs Linux.
func RunPort(ctx context.Context, path string, logf func(string, ...any)) error { return errNotLinux }
