package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fluxvm/fluxvm/agent/config"
	"github.com/fluxvm/fluxvm/agent/link"
)

// runEnroll pairs this node with central (docs/fleets.md): the invite is
// redeemed, the code shown, the operator's code asked for and compared,
// and the credential central hands over once written into the state dir.
func runEnroll(args []string) int {
	fs := flag.NewFlagSet("node enroll", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "the node's HCL config file (required): its name, state_dir and central { url }")
	invite := fs.String("invite", os.Getenv("FLUXVM_INVITE"), "the invite central's operator minted (fluxctl fleet invite --node; default $FLUXVM_INVITE)")
	code := fs.String("code", "", "the six-digit code central's operator reads out from their request (asked for when not given)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" || *invite == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: fluxvm-agent node enroll -config agent.hcl -invite INVITE [-code CODE]")
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent node enroll: %v\n", err)
		return 1
	}
	if cfg.Central == nil {
		fmt.Fprintln(os.Stderr, "fluxvm-agent node enroll: the config has no central { url = \"...\" } block to enroll into")
		return 1
	}
	if cfg.Central.Token != "" {
		fmt.Fprintln(os.Stderr, "fluxvm-agent node enroll: the config holds central { token }: remove it, an enrolled node uses its own credential")
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	in := bufio.NewReader(os.Stdin)
	ownerCode := func() (string, error) {
		if *code != "" {
			return *code, nil
		}
		fmt.Print("Type the code central's operator reads out to you: ")
		line, _ := in.ReadString('\n')
		if strings.TrimSpace(line) == "" {
			return "", errors.New("no code typed")
		}
		return strings.TrimSpace(line), nil
	}
	_, err = link.Enroll(ctx, link.EnrollOptions{CentralURL: cfg.Central.URL, Node: cfg.Name, Invite: *invite, StateDir: cfg.StateDir,
		Out: os.Stdout, OwnerCode: ownerCode, Version: version})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent node enroll: %v\n", err)
		return 1
	}
	fmt.Printf("Start the node: fluxvm-agent node -config %s\n", *cfgPath)
	return 0
}
