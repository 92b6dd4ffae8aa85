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

// InstallMain is `fluxvm-agent vz-install -ipsw FILE -out DIR`: it makes a
// macOS image directory for the vz driver (disk.img, aux.img,
// hardware-model; docs/mac.md) by installing a macOS restore image into a
// new VM, and returns the process's exit code.
func InstallMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("vz-install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ipsw := fs.String("ipsw", "", "the macOS restore image (.ipsw) to install")
	out := fs.String("out", "", "the image directory to make (must not exist); a VM spec's image names it")
	diskGiB := fs.Int64("disk-gib", 64, "the disk's size in GiB (sparse), 32 to 2048")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *ipsw == "" || *out == "" || !filepath.IsAbs(*out) || fs.NArg() != 0 || *diskGiB < 32 || *diskGiB > 2048 {
		fmt.Fprintln(stderr, "usage: fluxvm-agent vz-install -ipsw RESTORE.ipsw -out /abs/image/dir [-disk-gib 32..2048]")
		return 2
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s vz-install: %s\n", time.Now().UTC().Format(time.RFC3339), fmt.Sprintf(format, a...))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := installMacOS(ctx, *ipsw, *out, *diskGiB<<30, logf); err != nil {
		logf("%v", err)
		return 1
	}
	logf("macOS installed: image %s", *out)
	return 0
}
