package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// serveWithSetup serves a Server with the given options on one end of a pipe and
// returns a client on the other.
func serveWithSetup(t *testing.T, opts Options) *protocol.Client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hostEnd, guestEnd := net.Pipe()
	served := make(chan struct{})
	go func() { _ = NewServer(opts).Serve(ctx, guestEnd); close(served) }()
	c := protocol.NewClient(hostEnd)
	t.Cleanup(func() { c.Close(); cancel(); guestEnd.Close(); <-served })
	return c
}

// TestExecRightAfterReadyWaitsForSetup is the guest's promise: ready comes before the
// disk and network drivers, yet a command sent at once sees what the set-up made.
func TestExecRightAfterReadyWaitsForSetup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	marker := filepath.Join(t.TempDir(), "vda")
	release := make(chan struct{})
	setup := NewSetup(func() error {
		<-release
		return os.WriteFile(marker, []byte("disk is here\n"), 0o644)
	})
	c := serveWithSetup(t, Options{Setup: setup})
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatalf("ready while the set-up is still running: %v", err)
	}
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	var out bytes.Buffer
	code, err := c.Exec(ctx, &protocol.ExecRequest{Argv: []string{"cat", marker}}, &out, io.Discard)
	if err != nil || code != 0 || out.String() != "disk is here\n" {
		t.Fatalf("exec sent right after ready = %d, %v, %q; want it to wait for the set-up and print the marker", code, err, out.String())
	}
}

// TestSetupStartsOnlyAfterReadyWasSent checks the order that makes readiness fast on a
// one-vCPU guest: the set-up's work must not compete with the announcement.
func TestSetupStartsOnlyAfterReadyWasSent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hostEnd, guestEnd := net.Pipe()
	defer hostEnd.Close()
	rw := &recordingConn{Conn: guestEnd}
	startedAfterReady := make(chan bool, 1)
	setup := NewSetup(func() error {
		startedAfterReady <- rw.wrote.Load()
		return nil
	})
	go func() { _ = NewServer(Options{Setup: setup}).Serve(ctx, rw) }()
	c := protocol.NewClient(hostEnd)
	defer c.Close()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case ok := <-startedAfterReady:
		if !ok {
			t.Fatal("the set-up started before the ready message was written")
		}
	case <-ctx.Done():
		t.Fatal("the set-up never started")
	}
}

// recordingConn notes that a write completed; over net.Pipe that means the peer read it.
type recordingConn struct {
	net.Conn
	wrote atomic.Bool
}

func (r *recordingConn) Write(p []byte) (int, error) {
	n, err := r.Conn.Write(p)
	r.wrote.Store(true)
	return n, err
}

func TestSetupFailureIsReportedByExecAndNetworkOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	setup := NewSetup(func() error { return errors.New("load module virtio_net: invalid module format") })
	// ManageNetwork is on so that the network request reaches the set-up check; the
	// MAC matches no interface, so nothing on this host could be changed anyway.
	c := serveWithSetup(t, Options{Setup: setup, ManageNetwork: true})
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatalf("ping must not depend on the set-up: %v", err)
	}
	_, err := c.Exec(ctx, &protocol.ExecRequest{Argv: []string{"true"}}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "guest set-up failed: load module virtio_net") {
		t.Errorf("exec after a failed set-up: %v; want the set-up's error", err)
	}
	err = c.ConfigureNetwork(ctx, &protocol.NetworkConfig{Interfaces: []protocol.Interface{{MAC: "02:00:00:00:00:01"}}})
	if err == nil || !strings.Contains(err.Error(), "guest set-up failed: load module virtio_net") {
		t.Errorf("network after a failed set-up: %v; want the set-up's error", err)
	}
	if _, err := c.WaitReady(ctx); err != nil {
		t.Errorf("ping after a failed set-up: %v", err)
	}
}

func TestSetupWaitEndsWithTheContext(t *testing.T) {
	setup := NewSetup(func() error { select {} })
	setup.Start()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := setup.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a set-up that never ends = %v; want the context's error", err)
	}
}
