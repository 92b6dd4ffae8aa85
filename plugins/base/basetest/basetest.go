// Package basetest holds what the plugin conformance suites
// (plugins/driver/drivertest, plugins/network/networktest) share: building a
// plugin binary, sending its logs to the test, and the checks of the base
// service.
package basetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
)

// LogWriter sends a plugin's log lines to the test log while the test runs.
func LogWriter(t testing.TB) io.Writer { return testWriter{t} }

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

// CheckSchema checks that the plugin's config schema is well formed: named,
// unique, typed and described attributes whose defaults are JSON.
func CheckSchema(t *testing.T, p base.Plugin) {
	schema, err := p.ConfigSchema(t.Context())
	if err != nil {
		t.Fatalf("ConfigSchema: %v", err)
	}
	seen := map[string]bool{}
	for _, a := range schema.Attributes {
		if a.Name == "" || seen[a.Name] {
			t.Errorf("attribute name %q is empty or repeated", a.Name)
		}
		seen[a.Name] = true
		if base.EnumName(a.Type) == "" {
			t.Errorf("attribute %s: unknown type %v", a.Name, a.Type)
		}
		if a.DefaultJson != "" && !json.Valid([]byte(a.DefaultJson)) {
			t.Errorf("attribute %s: default %q is not JSON", a.Name, a.DefaultJson)
		}
		if a.Description == "" {
			t.Errorf("attribute %s has no description", a.Name)
		}
	}
}

// CheckBadConfig checks that SetConfig refuses config that is not JSON or
// names an attribute the plugin does not have, with ErrInvalid.
func CheckBadConfig(t *testing.T, p base.Plugin, stateDir string) {
	for _, bad := range []string{`not json`, `{"no_such_attribute_anywhere": 1}`} {
		err := p.SetConfig(t.Context(), &basepb.SetConfigRequest{
			ConfigJson: []byte(bad),
			Agent:      &basepb.AgentContext{StateDir: stateDir, NodeName: "conformance"},
		})
		if !errors.Is(err, base.ErrInvalid) {
			t.Errorf("SetConfig(%s) = %v, want an ErrInvalid error", bad, err)
		}
	}
}

// CheckInfo checks what a plugin says of itself: a name of [a-z0-9_-]+, the
// contract's type, the contract version among its api_versions, a version
// and a description.
func CheckInfo(t *testing.T, info *basepb.PluginInfoResponse, want basepb.PluginType, apiVersion uint32) {
	if !regexp.MustCompile(`^[a-z0-9_-]+$`).MatchString(info.Name) {
		t.Errorf("name %q is not [a-z0-9_-]+", info.Name)
	}
	if info.Type != want {
		t.Errorf("type is %s, want %s", info.Type, want)
	}
	if !slices.Contains(info.ApiVersions, apiVersion) {
		t.Errorf("api_versions %v lacks %d", info.ApiVersions, apiVersion)
	}
	if info.Version == "" || info.Description == "" {
		t.Errorf("version %q and description %q must be set", info.Version, info.Description)
	}
}
