// Package drivertest is the conformance suite for FluxVM driver plugins. A
// driver's own test calls Run with a Harness that launches the driver as a
// real plugin process; the suite then checks every base RPC and every
// capability the driver claims, and nothing it does not claim.
package drivertest

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base/basetest"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
)

// Harness tells the suite how to run the driver under test.
type Harness struct {
	// Launch starts a new plugin process of the driver. The suite kills
	// plugin processes to test recovery, so each call must start a fresh one.
	Launch func(t testing.TB) *driver.Plugin
	// Config is the driver's configuration, as JSON, for SetConfig.
	Config []byte
	// StateDir is handed to SetConfig; the suite makes a temporary one if
	// empty. VM workspaces are expected under StateDir/vms/<id>/.
	StateDir string
	// Spec returns a valid spec for a small VM with the given id.
	Spec func(id string) *pb.VMSpec
	// ReadyTimeout bounds how long a VM may take until its guest agent
	// answers (default 2 minutes).
	ReadyTimeout time.Duration
	// ForwardPort is a guest TCP port the driver can forward in VMs made
	// from Spec (capability port_forward): for a simulator, one its Config
	// maps to a host server. 22 when 0.
	ForwardPort int
}

// LaunchCommand returns a Harness.Launch that runs the given command as the
// plugin, logs its output through the test and kills it when the test ends.
func LaunchCommand(name string, args ...string) func(t testing.TB) *driver.Plugin {
	return func(t testing.TB) *driver.Plugin {
		t.Helper()
		level := hclog.Debug
		if _, ok := t.(*testing.B); ok {
			level = hclog.Warn // benchmark logs are always printed
		}
		logger := hclog.New(&hclog.LoggerOptions{Name: filepath.Base(name), Level: level, Output: basetest.LogWriter(t)})
		p, err := driver.Launch(context.Background(), driver.LaunchConfig{Cmd: exec.Command(name, args...), Logger: logger})
		if err != nil {
			t.Fatalf("launch plugin %s: %v", name, err)
		}
		t.Cleanup(p.Kill)
		return p
	}
}

// Build compiles the Go main package pkg (run from dir, "" for the current
// directory) once per test binary and returns the path of the executable.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	return basetest.Build(t, dir, pkg)
}
