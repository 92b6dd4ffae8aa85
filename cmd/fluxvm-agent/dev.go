package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluxvm/fluxvm/devenv"
)

// runDev runs central, a node and a demo tenant in one process: the one
// command a newcomer runs (see package devenv).
func runDev(args []string) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	stateDir := fs.String("state-dir", devenv.DefaultStateDir(), "tokens, central's etcd, the node's VMs and the logs; kept across restarts")
	reset := fs.Bool("reset", false, "wipe the state dir first: new tokens, no VMs")
	listen := fs.String("listen", devenv.DefaultListen, "central's fleet API host:port")
	nodeListen := fs.String("node-listen", devenv.DefaultNodeListen, "the node API's host:port")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error (the log file's)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "fluxvm-agent dev: no arguments follow the flags")
		return 2
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent dev: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = devenv.Run(ctx, devenv.Options{
		StateDir: *stateDir, Reset: *reset, Listen: *listen, NodeListen: *nodeListen,
		Executable: exe, BuiltinPlugins: driverNames(), Version: version, LogLevel: *logLevel, Out: os.Stdout,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent dev: %v\n", err)
		return 1
	}
	return 0
}
