package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// Environment variables that stand in for the global flags.
const (
	envNode  = "FLUXVM_NODE"
	envToken = "FLUXVM_NODE_TOKEN"
)

// app is one run of fluxctl: its streams, whether they are terminals, its
// environment and the global flags. main fills it from the process; tests
// fill it with buffers and run it in-process.
type app struct {
	stdin                          io.Reader
	stdout, stderr                 io.Writer
	stdinTTY, stdoutTTY, stderrTTY bool
	getenv                         func(string) string
	// executable is the path of this fluxctl binary, for commands that have
	// another program run it again (fleet ssh's ProxyCommand); empty means
	// os.Executable's answer.
	executable string

	// Global flags, as parsed.
	node, token, output string
	root                *cobra.Command
}

// self is the path of this fluxctl binary.
func (a *app) self() (string, error) {
	if a.executable != "" {
		return a.executable, nil
	}
	return os.Executable()
}

// run executes args and returns the process's exit code.
func (a *app) run(ctx context.Context, args []string) int {
	root := a.newRoot()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	return a.report(err)
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "fluxctl",
		Short: "Drive FluxVM nodes and fleets",
		Long: `fluxctl drives FluxVM. "fluxctl fleet" talks to central (launch, run,
leases, tenants, ...); "fluxctl vm" talks to one node agent's API directly.

On a terminal it prints tables, short confirmations and the next command to
run. Piped, or with -o json, it prints the API's JSON, so scripts keep working;
-o yaml prints the same as YAML. Commands that list take -o wide (IDs and
details), -o csv, and -c to pick the columns, e.g. -c name,node,state.`,
		Version:           version,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: func(c *cobra.Command, _ []string) error { return a.checkOutput(c) },
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError(c, err.Error()) })
	pf := root.PersistentFlags()
	pf.StringVar(&a.node, "node", sdk.DefaultNodeURL, "the node agent's API URL (env "+envNode+")")
	pf.StringVar(&a.token, "token", "", "the node's API token (env "+envToken+")")
	pf.StringVarP(&a.output, "output", "o", "", "table, wide, json, yaml or csv (default: table on a terminal, json when piped; csv for commands that list)")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
	root.AddCommand(a.vmCommand(), a.vmImageCommand(), a.fleetCommand())
	a.root = root
	return root
}

// nodeURL is --node, else $FLUXVM_NODE, else the default. A bare host:port
// gets http:// in front.
func (a *app) nodeURL() string {
	u := a.node
	if !a.root.PersistentFlags().Changed("node") {
		if env := strings.TrimSpace(a.getenv(envNode)); env != "" {
			u = env
		}
	}
	if u != "" && !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return u
}

// nodeToken is --token, else $FLUXVM_NODE_TOKEN.
func (a *app) nodeToken() string {
	if a.root.PersistentFlags().Changed("token") {
		return a.token
	}
	return strings.TrimSpace(a.getenv(envToken))
}

func (a *app) nodeClient() (*sdk.NodeClient, error) {
	if err := checkToken(a.nodeToken(), envToken); err != nil {
		return nil, err
	}
	c, err := sdk.NewNodeClient(a.nodeURL(), sdk.WithToken(a.nodeToken()), sdk.WithUserAgent("fluxctl/"+version))
	if err != nil {
		return nil, &cliError{msg: err.Error(), hint: "pass --node http://HOST:7777 (or set " + envNode + ")"}
	}
	return c, nil
}

// maxBody is the most central and the nodes take as a request body.
const maxBody = 1 << 20

// errTooLarge is an input larger than maxBody.
var errTooLarge = fmt.Errorf("larger than %d KiB, more than central takes", maxBody>>10)

// readInput reads a request body from the file name, or from stdin for
// "-", refusing more than maxBody with errTooLarge. source is what to call
// it in messages: the file's name, or stdin.
func (a *app) readInput(name string) (data []byte, source string, err error) {
	if name == "-" {
		data, err = io.ReadAll(io.LimitReader(a.stdin, maxBody+1))
		name = "stdin"
	} else {
		data, err = os.ReadFile(name)
	}
	if err == nil && len(data) > maxBody {
		err = errTooLarge
	}
	return data, name, err
}

// withNode makes the node client for run: every vm command starts from it.
func (a *app) withNode(run func(c *cobra.Command, args []string, nc *sdk.NodeClient) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		nc, err := a.nodeClient()
		if err != nil {
			return err
		}
		return run(c, args, nc)
	}
}

// cliError is a refusal fluxctl makes itself, with what to do instead.
type cliError struct {
	msg, hint string
}

func (e *cliError) Error() string { return e.msg }

// usageError is a command line fluxctl cannot make sense of; the hint shows
// the command's usage line.
func usageError(c *cobra.Command, msg string) error {
	return &cliError{msg: msg, hint: "usage: " + c.UseLine() + " (see " + c.CommandPath() + " --help)"}
}

// parseLabels turns --label KEY=VALUE flags into labels (nil for none).
func parseLabels(c *cobra.Command, labels []string) (map[string]string, error) {
	var out map[string]string
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return nil, usageError(c, fmt.Sprintf("--label %q: want KEY=VALUE", l))
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out, nil
}

// exitCode ends fluxctl with a code and no message: the guest command of
// `vm exec` failed and already said why on its stderr.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

// report prints err for people (error: …, hint: …) and returns the exit
// code.
func (a *app) report(err error) int {
	var code exitCode
	if errors.As(err, &code) {
		return int(code)
	}
	msg, hint := err.Error(), ""
	var (
		cli  *cliError
		api  *sdk.APIError
		conn *sdk.ConnectError
	)
	switch {
	case errors.As(err, &cli):
		hint = cli.hint
	case errors.As(err, &conn):
		hint = fmt.Sprintf("is the node agent running (fluxvm-agent node -config agent.hcl)? point --node (or %s) at its API, e.g. --node http://HOST:7777", envNode)
	case errors.As(err, &api) && api.Status == 401:
		if a.root != nil && a.nodeToken() == "" {
			hint = fmt.Sprintf("this node needs a token: pass --token TOKEN or set %s (the node's config lists them in tokens { admin = [...] })", envToken)
		} else {
			hint = fmt.Sprintf("the node does not know this token: check --token or %s against tokens { ... } in the node's config", envToken)
		}
	case errors.As(err, &api) && api.Status == 403 && strings.Contains(api.Message, "read-only"):
		hint = fmt.Sprintf("pass an admin token with --token or %s; read-only tokens may only look", envToken)
	case errors.As(err, &api) && api.Status == 404 && strings.HasPrefix(api.Message, "no VM "):
		hint = "fluxctl vm list shows the VMs on this node"
	case errors.As(err, &api):
		hint = api.Hint
	case errors.Is(err, context.Canceled):
		msg = "interrupted"
	case strings.HasPrefix(msg, "unknown command"):
		msg, hint = unknownCommand(msg)
	}
	fmt.Fprintf(a.stderr, "error: %s\n", msg)
	if hint != "" {
		fmt.Fprintf(a.stderr, "hint: %s\n", hint)
	}
	return 1
}

// unknownCommand reshapes cobra's multi-line "unknown command" error into a
// one-line message and a hint with its suggestion and help command.
func unknownCommand(cobraMsg string) (msg, hint string) {
	lines := strings.Split(cobraMsg, "\n")
	msg, hint = lines[0], "run fluxctl --help to see the commands"
	var suggestions []string
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "\t"):
			suggestions = append(suggestions, strings.TrimSpace(l))
		case strings.HasPrefix(l, "Run '"):
			help := strings.TrimSuffix(strings.TrimPrefix(l, "Run '"), "' for usage.")
			hint = "run " + help + " to see the commands"
		}
	}
	if len(suggestions) > 0 {
		hint = "did you mean " + strings.Join(suggestions, " or ") + "? " + hint
	}
	return msg, hint
}
