//go:build linux

package qemu

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// hmp runs a human monitor command and returns its text. HMP reports its
// errors as a successful reply whose text starts with "Error:", so those
// come back as errors here.
func (m *monitor) hmp(ctx context.Context, line string) (string, error) {
	var out string
	if err := m.run(ctx, "human-monitor-command", map[string]any{"command-line": line}, &out); err != nil {
		return "", err
	}
	if t := strings.TrimSpace(out); strings.HasPrefix(t, "Error:") {
		return "", fmt.Errorf("hmp %q: %s", line, strings.TrimSpace(strings.TrimPrefix(t, "Error:")))
	}
	return out, nil
}

// hostForward is one line of "info usernet" for a host forward:
//
//	TCP[HOST_FORWARD]  13  127.0.0.1 40181  10.0.2.15  22  0  0
var hostForward = regexp.MustCompile(`(?m)^\s*TCP\[HOST_FORWARD\]\s+\S+\s+(127\.0\.0\.1)\s+(\d+)\s+\S+\s+(\d+)\b`)

// existingForward finds a loopback host forward QEMU already has for
// guestPort: one this or an earlier plugin process added.
func existingForward(usernet string, guestPort int) (string, bool) {
	for _, m := range hostForward.FindAllStringSubmatch(usernet, -1) {
		if m[3] == strconv.Itoa(guestPort) {
			return net.JoinHostPort(m[1], m[2]), true
		}
	}
	return "", false
}

// ForwardPort makes guestPort of a user-networking VM reachable on a
// loopback port of the host, through a slirp host forward added at run
// time (hostfwd_add). The forward lives in the QEMU process, so it is
// reused for the same VM and port (also across plugin restarts: "info
// usernet" lists it) and goes away when QEMU ends, on stop or destroy.
func (d *Driver) ForwardPort(ctx context.Context, id string, guestPort int) (string, error) {
	if err := driver.CheckGuestPort(guestPort); err != nil {
		return "", err
	}
	v, err := d.lookup(id)
	if err != nil {
		return "", err
	}
	if v.spec.GetNetwork().GetMode() != pb.NetworkMode_NETWORK_MODE_USER {
		return "", driver.Errorf(driver.ErrState, "vm %s has no user-mode network, so the qemu driver cannot forward its ports", id)
	}
	mon, err := v.monitor(ctx)
	if err != nil {
		return "", err
	}
	// One forward per VM and port: concurrent tunnels to a fresh port must
	// not add two.
	v.fwdMu.Lock()
	defer v.fwdMu.Unlock()
	usernet, err := mon.hmp(ctx, "info usernet")
	if err != nil {
		return "", fmt.Errorf("forward port %d of vm %s: %w", guestPort, id, err)
	}
	if addr, ok := existingForward(usernet, guestPort); ok {
		return addr, nil
	}
	// A free port can be taken between closing the probe and QEMU's bind;
	// try a few.
	var lastErr error
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("forward port %d of vm %s: find a free loopback port: %w", guestPort, id, err)
		}
		hostPort := l.Addr().(*net.TCPAddr).Port
		l.Close()
		_, lastErr = mon.hmp(ctx, fmt.Sprintf("hostfwd_add n0 tcp:127.0.0.1:%d-:%d", hostPort, guestPort))
		if lastErr == nil {
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)), nil
		}
	}
	return "", fmt.Errorf("forward port %d of vm %s: %w", guestPort, id, lastErr)
}
