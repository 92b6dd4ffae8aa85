package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// RunVsock serves the agent on a virtio-vsock port, as an ordinary process
// (a launchd daemon in a macOS guest, a service in a Linux guest of the vz
// driver): the host connects through its vsock device, one connection per
// session, and each connection is served in turn like the agent port of a
// QEMU guest. A shutdown request powers the guest off with the system's
// own command.
func RunVsock(ctx context.Context, port uint32, logf func(string, ...any)) error {
	ln, err := listenVsock(port)
	if err != nil {
		return fmt.Errorf("listen on vsock port %d: %w", port, err)
	}
	defer ln.Close()
	logf("serving on vsock port %d", port)
	srv := NewServer(Options{
		Logf:     logf,
		PowerOff: func() error { return exec.Command(powerOffCommand[0], powerOffCommand[1:]...).Run() },
		Reboot:   func() error { return exec.Command(rebootCommand[0], rebootCommand[1:]...).Run() },
	})
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accept on vsock port %d: %w", port, err)
		}
		go func(c *os.File) {
			defer c.Close()
			if err := srv.Serve(ctx, c); err != nil {
				logf("vsock session: %v", err)
			}
		}(conn)
	}
}

// vsockListener is a listening vsock socket; Go's net package does not know
// the address family, so connections come back as files.
type vsockListener struct{ fd int }
