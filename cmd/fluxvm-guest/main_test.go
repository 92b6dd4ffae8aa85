package main

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/guest/protocol"
)

// TestPortModeServesAndExitsOnShutdown runs the real binary with -port against a unix
// socket, as a developer would outside a VM.
func TestPortModeServesAndExitsOnShutdown(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fluxvm-guest")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(build.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sock := filepath.Join(dir, "ga.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	var stderr bytes.Buffer
	cmd := exec.Command(bin, "-port", sock)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()

	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := protocol.NewClient(conn)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code, err := c.Exec(ctx, &protocol.ExecRequest{Shell: "echo $((6*7))"}, &out, nil); err != nil || code != 0 || out.String() != "42\n" {
		t.Fatalf("exec = %d, %v, %q", code, err, out.String())
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("agent exited with %v: %s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("agent still running after shutdown")
	}
	if !strings.Contains(stderr.String(), "shutdown requested") {
		t.Errorf("stderr = %q, want it to log the shutdown", stderr.String())
	}
}

func TestRefusesToRunAsOrdinaryProcessWithoutPort(t *testing.T) {
	out, err := exec.Command("go", "run", ".").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pass -port PATH") {
		t.Fatalf("run without -port = %v, %q; want a failure explaining -port", err, out)
	}
}
