// Package drivertest is the conformance suite for FluxVM driver plugins. A
// driver's own test calls Run with a Harness that launches the driver as a
// real plugin process; the suite then checks every base RPC and every
// capability the driver claims, and nothing it does not claim.
package drivertest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
		logger := hclog.New(&hclog.LoggerOptions{Name: filepath.Base(name), Level: level, Output: testWriter{t}})
		p, err := driver.Launch(context.Background(), driver.LaunchConfig{Cmd: exec.Command(name, args...), Logger: logger})
		if err != nil {
			t.Fatalf("launch plugin %s: %v", name, err)
		}
		t.Cleanup(p.Kill)
		return p
	}
}

// testWriter sends plugin log lines to the test log while the test runs.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a plugin may log after its test ended
	w.t.Logf("%s", p)
	return len(p), nil
}

var (
	buildMu     sync.Mutex
	buildCache  = map[string]string{}
	sweepBuilds sync.Once
)

// buildPrefix starts the name of Build's folders in the temporary directory:
// fluxvm-build-<pid>-<random>. A test binary cannot remove its folder when it
// exits (nothing runs then), so the next Build removes the folders of
// processes that are gone.
const buildPrefix = "fluxvm-build-"

// removeStaleBuilds deletes Build folders whose process no longer runs, and
// folders of the older naming (fluxvm-plugin-build-*) older than an hour.
func removeStaleBuilds() {
	if _, err := os.Stat("/proc/self"); err != nil {
		return // no /proc to tell live processes from gone ones (macOS): keep all
	}
	tmp := os.TempDir()
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, buildPrefix):
			pid, _, ok := strings.Cut(strings.TrimPrefix(name, buildPrefix), "-")
			if !ok {
				continue
			}
			if _, err := os.Stat(filepath.Join("/proc", pid)); errors.Is(err, fs.ErrNotExist) {
				_ = os.RemoveAll(filepath.Join(tmp, name))
			}
		case strings.HasPrefix(name, "fluxvm-plugin-build-"):
			if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
				_ = os.RemoveAll(filepath.Join(tmp, name))
			}
		}
	}
}

// Build compiles the Go main package pkg (run from dir, "" for the current
// directory) once per test binary and returns the path of the executable.
func Build(t testing.TB, dir, pkg string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := dir + "\x00" + pkg
	if p, ok := buildCache[key]; ok {
		return p
	}
	sweepBuilds.Do(removeStaleBuilds)
	out, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", buildPrefix, os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Base(pkg)
	if name == "." || name == "/" {
		name = "plugin"
	}
	bin := filepath.Join(out, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
	}
	buildCache[key] = bin
	return bin
}
