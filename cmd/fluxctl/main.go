// Command fluxctl is FluxVM's command line. `fluxctl vm …` drives the VMs of
// one node through its node API; everything it does goes through sdk/, so a
// Go program can do the same.
//
//	fluxctl vm list
//	fluxctl vm create web-1 --image /var/cache/fluxvm/images/debian.img --wait
//	fluxctl vm exec web-1 -- uname -a
//
// On a terminal it prints tables and short confirmations; piped, or with
// -o json, it prints the API's JSON (-o yaml: as YAML). Every table goes
// through one renderer (table.go), which also prints CSV and picks columns.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "0.1.0-dev"

func main() {
	a := &app{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		stdinTTY:  term.IsTerminal(int(os.Stdin.Fd())),
		stdoutTTY: term.IsTerminal(int(os.Stdout.Fd())),
		stderrTTY: term.IsTerminal(int(os.Stderr.Fd())),
		getenv:    os.Getenv,
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := a.run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
