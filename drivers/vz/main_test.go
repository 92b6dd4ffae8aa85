package vz

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/hashicorp/go-hclog"
)

// The test binary doubles as the processes the driver runs, with the fake VM
// in place of the framework: a host process (fakeHostEnv names its
// workspace) and a plugin process (fakePluginEnv), so that plugins can be
// killed and host processes outlive them, as on a Mac.
const (
	fakeHostEnv   = "FLUXVM_VZ_TEST_FAKE_HOST_WORKSPACE"
	fakePluginEnv = "FLUXVM_VZ_TEST_FAKE_PLUGIN"
)

func TestMain(m *testing.M) {
	if ws := os.Getenv(fakeHostEnv); ws != "" {
		logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, "vz-host (fake vm): "+format+"\n", args...) }
		if err := RunHost(context.Background(), ws, newFakeVM, logf); err != nil {
			logf("%v", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv(fakePluginEnv) != "" {
		logger := hclog.New(&hclog.LoggerOptions{Name: "vz (fake vm)", Level: hclog.Debug, Output: os.Stderr, JSONFormat: true})
		driver.Serve(NewWithOptions(logger, fakeOptions()), logger)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakePlatform is a Mac as the fake VM plays one: macOS 14, so memory
// snapshots are on. Volumes are off: the fake's "guest" is this host, which
// cannot show a volume as one of its disks, so volumes stay unproven here.
var fakePlatform = Platform{Usable: true, OSVersion: "14.0 (fake vm)", SaveRestore: true, Volumes: false, CPUs: 8, MemoryMiB: 16384}

// fakeOptions runs host processes as this test binary with the fake VM.
func fakeOptions() Options {
	return Options{
		Platform: fakePlatform,
		HostCommand: func(ws string) *exec.Cmd {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), fakeHostEnv+"="+ws)
			return cmd
		},
	}
}
