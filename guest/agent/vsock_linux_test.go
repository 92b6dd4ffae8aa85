package agent

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// The vz driver's host reaches the agent on a vsock port; this host has no
// vsock peer to connect from, so the test proves the port is really bound.
func TestListenVsockBindsThePort(t *testing.T) {
	if _, err := os.Stat("/dev/vsock"); err != nil {
		t.Fatalf("no /dev/vsock (%v): load the vsock module with `modprobe vsock`", err)
	}
	ln, err := listenVsock(52001)
	if err != nil {
		t.Fatalf("listenVsock: %v", err)
	}
	defer ln.Close()
	if second, err := listenVsock(52001); !errors.Is(err, unix.EADDRINUSE) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second listener on the same port = %v, want EADDRINUSE", err)
	}
}
