package vz

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// HostMain is `fluxvm-agent vz-host -workspace DIR`: the per-VM host process
// the plugin starts (detached, in a session of its own). It runs the VM of
// DIR/host.json with the framework and returns the process's exit code. On
// SIGTERM or SIGINT it presses the VM's power button and, after a grace
// period, stops it by force.
func HostMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("vz-host", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ws := fs.String("workspace", "", "the VM's workspace (<state_dir>/vms/<id>), holding host.json")
	grace := fs.Duration("grace", 30*time.Second, "how long the guest has to power off after SIGTERM before it is stopped by force")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *ws == "" || !filepath.IsAbs(*ws) || fs.NArg() != 0 {
		fmt.Fprintln(stderr, "usage: fluxvm-agent vz-host -workspace /abs/state_dir/vms/ID (the vz plugin starts it)")
		return 2
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s vz-host: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	if p := hostPlatform(); !p.Usable {
		logf("vz driver unusable: %s", p.Why)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	signal.Ignore(syscall.SIGHUP) // outlive the terminal or session that started it
	if err := runHost(ctx, *ws, newMachine, logf, *grace); err != nil {
		logf("%v", err)
		return 1
	}
	_ = os.Stdout.Sync()
	return 0
}
