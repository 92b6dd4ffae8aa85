package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// Environment variables that stand in for the fleet flags.
const (
	envCentral    = "CENTRAL_URL"
	envFleetToken = "FLUXVM_AGENT_TOKEN"
)

// Hints shared by the fleet commands.
const (
	hintCentral    = "is central running (fluxvm-agent central, or fluxvm-agent dev)? point --central (or " + envCentral + ") at it, e.g. --central http://HOST:7799"
	hintQuota      = "fluxctl fleet tenant me shows your quota and what counts against it; delete VMs you no longer need (fluxctl fleet rm VM) or ask the operator to raise it"
	hintListVMs    = "fluxctl fleet vms lists your VMs with their nodes and IDs"
	hintListImages = "fluxctl fleet images lists the catalog"
	hintTenants    = "fluxctl fleet tenant list shows the tenants, by name and ID"
)

// fleet is `fluxctl fleet`: the commands that talk to central's fleet API,
// with the flags that say where central is and who is calling.
type fleet struct {
	a              *app
	central, token string
	cmd            *cobra.Command
}

func (a *app) fleetCommand() *cobra.Command {
	f := &fleet{a: a}
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Run VMs on a fleet of nodes through central",
		Long: `Run VMs on a fleet of nodes through central's fleet API: launch from the
image catalog, run commands, and (as the operator) manage nodes, tenants and
the catalog.

Central is --central (or $` + envCentral + `, default ` + sdk.DefaultCentralURL + `); the token
--token (or $` + envFleetToken + `): the operator's fleet token, a tenant's fvt_
token or one of its fvk_ API keys. VMs are named by name, by ID prefix, or as
NODE/NAME.`,
		Example: `  export ` + envCentral + `=http://fleet:7799 ` + envFleetToken + `=fvt_…
  fluxctl fleet status
  fluxctl fleet launch --image debian-minimal --wait
  fluxctl fleet run debian-minimal-1 -- uname -a
  fluxctl fleet rm debian-minimal-1 -y`,
		Args:                       subcommandArgs,
		RunE:                       func(c *cobra.Command, _ []string) error { return c.Help() },
		SuggestionsMinimumDistance: 2,
	}
	pf := c.PersistentFlags()
	// --token here shadows the root's node token: a fleet command is never
	// sent to a node.
	pf.StringVar(&f.central, "central", sdk.DefaultCentralURL, "central's URL (env "+envCentral+")")
	pf.StringVar(&f.token, "token", "", "the operator's fleet token, a tenant's fvt_ token or one of its fvk_ API keys (env "+envFleetToken+")")
	c.AddCommand(
		f.statusCmd(), f.launchCmd(), f.runCmd(), f.vmsCmd(), f.rmCmd(),
		f.powerCmd("start", "Start a stopped VM", "started", false),
		f.powerCmd("stop", "Shut a VM down (asks first on a terminal)", "stopped", true),
		f.powerCmd("restart", "Stop a VM and start it again (asks first on a terminal)", "restarted", true),
		f.powerCmd("pause", "Freeze a running VM's vCPUs", "paused", false),
		f.powerCmd("resume", "Continue a paused VM", "resumed", false),
		f.snapshotCmd(), f.snapshotsCmd(), f.restoreCmd(), f.snapshotRmCmd(), f.cloneCmd(),
		f.volumesCmd(), f.volumeCreateCmd(), f.volumeResizeCmd(), f.volumeRmCmd(),
		f.networksCmd(),
		f.logsCmd(), f.screenCmd(), f.nodesCmd(), f.nodeCmd(), f.capacityCmd(), f.imagesCmd(), f.tenantCmd(), f.keysCmd(), f.membersCmd(), f.memberAddCmd(), f.memberRoleCmd(), f.memberRmCmd(),
		f.eventsCmd(), f.reconcileCmd(),
		f.leaseCmd(), f.cordonCmd(), f.uncordonCmd(), f.drainCmd(), f.drainStatusCmd(), f.scrubCmd(),
		f.poolsCmd(), f.macOSPoolCmd(), f.rebalancePlanCmd(),
		f.pricesCmd(), f.billCmd(), f.budgetCmd(), f.usageCmd(),
		f.invoicesCmd(), f.billingCustomerCmd(), f.cardCmd(),
		f.notificationsCmd(), f.webhooksCmd(),
		f.sshCmd(), f.portForwardCmd(), f.tunnelsCmd(), f.tunnelStdioCmd(),
		f.inviteCmd(), f.joinCmd(), f.confirmJoinCmd(), f.requestsCmd(), f.approveCmd(), f.rejectCmd(), f.peersCmd(), f.removePeerCmd(), f.leaveCmd(),
		f.previewCmd(), f.previewsCmd(), f.previewRmCmd(),
		f.syncCmd(), f.historyCmd(), f.policyCmd(),
	)
	f.cmd = c
	explainAll(f, c)
	return c
}

// explainAll makes every fleet command's refusals say what to do in
// fluxctl's terms (see explain).
func explainAll(f *fleet, c *cobra.Command) {
	if run := c.RunE; run != nil {
		c.RunE = func(c *cobra.Command, args []string) error { return f.explain(run(c, args)) }
	}
	for _, sub := range c.Commands() {
		explainAll(f, sub)
	}
}

// subcommandArgs refuses an unknown subcommand of a command group with
// cobra's suggestions, instead of running the group's help.
func subcommandArgs(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	hint := "run " + c.CommandPath() + " --help to see the commands"
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		hint = "did you mean " + c.CommandPath() + " " + strings.Join(s, " or ") + "? " + hint
	}
	return &cliError{msg: fmt.Sprintf("unknown command %q for %s", args[0], c.CommandPath()), hint: hint}
}

// centralURL is --central, else $CENTRAL_URL, else the default. A bare
// host:port gets http:// in front.
func (f *fleet) centralURL() string {
	u := f.central
	if !f.cmd.PersistentFlags().Changed("central") {
		if env := strings.TrimSpace(f.a.getenv(envCentral)); env != "" {
			u = env
		}
	}
	if u != "" && !strings.Contains(u, "://") {
		u = "http://" + u
	}
	return u
}

// bearer is --token, else $FLUXVM_AGENT_TOKEN.
func (f *fleet) bearer() string {
	if f.cmd.PersistentFlags().Changed("token") {
		return f.token
	}
	return strings.TrimSpace(f.a.getenv(envFleetToken))
}

// asTenant reports whether the caller is a tenant: tenant tokens start
// with fvt_ and their API keys with fvk_; anything else is the operator's
// fleet token (or none, in lab mode).
func (f *fleet) asTenant() bool {
	b := f.bearer()
	return strings.HasPrefix(b, "fvt_") || strings.HasPrefix(b, sdk.APIKeyPrefix)
}

func (f *fleet) client() (*sdk.FleetClient, error) {
	if err := checkToken(f.bearer(), envFleetToken); err != nil {
		return nil, err
	}
	c, err := sdk.NewFleetClient(f.centralURL(), sdk.WithToken(f.bearer()), sdk.WithUserAgent("fluxctl/"+version))
	if err != nil {
		return nil, &cliError{msg: err.Error(), hint: "pass --central http://HOST:7799 (or set " + envCentral + ")"}
	}
	return c, nil
}

// checkToken refuses a token that cannot be sent as one header line (a
// line break or another control character, say from a file pasted whole),
// before it is taken for an unreachable central.
func checkToken(token, env string) error {
	i := strings.IndexFunc(token, func(r rune) bool { return r < 0x20 || r == 0x7f })
	if i < 0 {
		return nil
	}
	what := "a control character"
	if token[i] == '\n' || token[i] == '\r' {
		what = "a line break"
	}
	return &cliError{msg: fmt.Sprintf("the token has %s in it (after %d characters)", what, i),
		hint: "a token is one line: check --token or " + env + " (export " + env + "=\"$(head -n1 FILE)\" takes a file's first line)"}
}

// withClient makes the fleet client for run: every fleet command but those
// that find a VM (findVM) starts from it.
func (f *fleet) withClient(run func(c *cobra.Command, args []string, fc *sdk.FleetClient) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		fc, err := f.client()
		if err != nil {
			return err
		}
		return run(c, args, fc)
	}
}

// explain turns the SDK's errors into fluxctl's refusals: central's message
// with a hint in fluxctl's terms. Refusals fluxctl made itself pass as they
// are.
func (f *fleet) explain(err error) error {
	var (
		cli  *cliError
		code exitCode
		api  *sdk.APIError
		conn *sdk.ConnectError
		amb  *sdk.AmbiguousVMError
	)
	switch {
	case err == nil, errors.As(err, &cli), errors.As(err, &code):
		return err
	case errors.As(err, &amb):
		var refs []string
		for _, m := range amb.Matches {
			refs = append(refs, m.Node+"/"+m.ID)
		}
		return &cliError{msg: err.Error(), hint: "name one by a longer ID prefix or as NODE/ID: " + strings.Join(refs, ", ")}
	case errors.As(err, &conn):
		return &cliError{msg: err.Error(), hint: hintCentral}
	case !errors.As(err, &api):
		return err
	}
	hint := api.Hint
	switch api.Status {
	case 404:
		if strings.HasPrefix(api.Message, "no such endpoint") && strings.Contains(api.Hint, "node API") {
			return &cliError{msg: f.centralURL() + " is a node agent, not central",
				hint: "point --central (or " + envCentral + ") at central, which listens on :7799 by default (fluxvm-agent central, or fluxvm-agent dev); " +
					"for the node itself use fluxctl vm ... --node " + f.centralURL()}
		}
	case 401:
		if f.bearer() == "" {
			hint = "central needs a token: pass --token TOKEN or set " + envFleetToken + " (the operator's fleet token, or a tenant's fvt_ token)"
		} else {
			hint = "central does not know this token: check --token or " + envFleetToken +
				" (a rotated tenant token stops working at once, and so does a revoked or expired API key; ask for a new one)"
		}
	case 403:
		switch {
		case strings.HasPrefix(api.Message, "this route is for the operator"):
			hint = "this command is for the operator: pass central's fleet token with --token or " + envFleetToken +
				"; as a tenant, fluxctl fleet status shows your VMs and quota"
		case readOnlyKeyRefusal(api):
			hint = "make changes with a full API key or the tenant's primary token (fvt_), in --token or " + envFleetToken
		}
	case 429:
		hint = hintQuota
	}
	return &cliError{msg: api.Message, hint: hint}
}

// readOnlyKeyRefusal reports whether central refused a change because the
// caller's API key is read-only, which any changing command may meet.
func readOnlyKeyRefusal(api *sdk.APIError) bool {
	return api.Status == 403 && strings.HasPrefix(api.Message, "API key ") && strings.Contains(api.Message, " is read-only")
}

// withHints gives API refusals of the statuses in hints fluxctl's own hint
// instead of central's, which names API routes. A read-only key's refusal
// keeps the one hint that fits it (explain's).
func withHints(err error, hints map[int]string) error {
	var api *sdk.APIError
	if errors.As(err, &api) && !readOnlyKeyRefusal(api) {
		if h, ok := hints[api.Status]; ok {
			return &cliError{msg: api.Message, hint: h}
		}
	}
	return err
}

// confirm asks a yes/no question on the terminal. Without a terminal to
// ask on it refuses, and the hint shows the command with -y.
func (f *fleet) confirm(question, what, withYes string) error {
	if !f.a.stdinTTY {
		return &cliError{msg: "refusing to " + what + " without confirmation: stdin is not a terminal",
			hint: "pass -y to go ahead without asking: " + withYes}
	}
	fmt.Fprintf(f.a.stderr, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(f.a.stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return &cliError{msg: "nothing done", hint: "answer y to go ahead, or pass -y"}
	}
	return nil
}

// findVM makes the fleet client and resolves a VM reference with it, with
// fluxctl's hint when there is no such VM.
func (f *fleet) findVM(ctx context.Context, ref string) (*sdk.FleetClient, *sdk.FleetVM, error) {
	fc, err := f.client()
	if err != nil {
		return nil, nil, err
	}
	vm, err := fc.FindVM(ctx, ref)
	return fc, vm, withHints(err, map[int]string{404: hintListVMs})
}

// findAndAsk finds the VM ref names, then, unless yes, asks question of it
// on the terminal (see confirm: what and withYes say what a refusal
// without a terminal is).
func (f *fleet) findAndAsk(ctx context.Context, ref string, yes bool, question func(*sdk.FleetVM) string, what, withYes string) (*sdk.FleetClient, *sdk.FleetVM, error) {
	fc, vm, err := f.findVM(ctx, ref)
	if err != nil || yes {
		return fc, vm, err
	}
	if err := f.confirm(question(vm), what, withYes); err != nil {
		return nil, nil, err
	}
	return fc, vm, nil
}

// oneFleetVM accepts exactly one VM reference.
func oneFleetVM(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError(c, fmt.Sprintf("%s takes one VM (a name, an ID prefix or NODE/NAME), got %d arguments", c.CommandPath(), len(args)))
	}
	return nil
}

// oneName accepts exactly one name of what.
func oneName(what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usageError(c, fmt.Sprintf("%s takes one %s, got %d arguments", c.CommandPath(), what, len(args)))
		}
		return nil
	}
}

// complete makes a completion function that lists names from central; it
// completes only the first argument.
func (f *fleet) complete(list func(context.Context, *sdk.FleetClient) ([]cobra.Completion, error)) cobra.CompletionFunc {
	return func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		fc, err := f.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(c.Context(), 3*time.Second)
		defer cancel()
		all, err := list(ctx, fc)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, s := range all {
			if strings.HasPrefix(s, toComplete) {
				out = append(out, s)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func (f *fleet) completeVMs() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		list, err := fc.ListVMs(ctx)
		if err != nil {
			return nil, err
		}
		count := map[string]int{}
		for _, v := range list.VMs {
			count[v.Name]++
		}
		var out []cobra.Completion
		for _, v := range list.VMs {
			name := v.Name
			if count[name] > 1 { // the same name on two nodes: only NODE/NAME is unique
				name = v.Node + "/" + v.Name
			}
			out = append(out, cobra.CompletionWithDesc(name, v.State+" on "+v.Node))
		}
		return out, nil
	})
}

func (f *fleet) completeNodes() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		var out []cobra.Completion
		if !f.asTenant() {
			ns, err := fc.ListNodes(ctx)
			if err != nil {
				return nil, err
			}
			for _, n := range ns {
				out = append(out, cobra.CompletionWithDesc(n.Name, n.State))
			}
			return out, nil
		}
		// A tenant may not list nodes, but may see those it can launch on.
		rep, err := fc.Capacity(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range rep.Nodes {
			out = append(out, cobra.CompletionWithDesc(n.Node, fmt.Sprintf("%d vCPUs, %s free", n.Free.VCPUs, mib(n.Free.MemoryMiB))))
		}
		return out, nil
	})
}

func (f *fleet) completeImages() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		ims, err := fc.ListImages(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, im := range ims {
			out = append(out, cobra.CompletionWithDesc(im.Name, cmp.Or(im.DisplayName, im.GuestOS)))
		}
		return out, nil
	})
}

func (f *fleet) completeTenants() cobra.CompletionFunc {
	return f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
		ts, err := fc.ListTenants(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, t := range ts {
			out = append(out, cobra.CompletionWithDesc(t.Name, t.ID))
		}
		return out, nil
	})
}

// bar draws how much of limit is used in width cells: █ used, ░ free.
func bar(used, limit int64, width int) string {
	if limit <= 0 {
		return strings.Repeat(" ", width)
	}
	n := int((used*int64(width) + limit - 1) / limit)
	n = min(max(n, 0), width)
	return strings.Repeat("█", n) + strings.Repeat("░", width-n)
}

// plural is "1 vCPU" or "2 vCPUs".
func plural(n int64, one string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %ss", n, one)
}

// tenantNames names tenants by ID for tables, which show names: central
// is asked once, when a table first shows a tenant (the operator's list of
// tenants, or a tenant's own record), and an ID it cannot name shows as it
// is.
type tenantNames struct {
	ctx      context.Context
	fc       *sdk.FleetClient
	asTenant bool
	names    map[string]string // nil until asked
}

func (f *fleet) tenantNames(ctx context.Context, fc *sdk.FleetClient) *tenantNames {
	return &tenantNames{ctx: ctx, fc: fc, asTenant: f.asTenant()}
}

// name is the name of the tenant id, or id when central does not say.
func (t *tenantNames) name(id string) string {
	if id == "" || t == nil {
		return id
	}
	if t.names == nil {
		t.names = map[string]string{}
		if t.asTenant {
			if me, err := t.fc.TenantMe(t.ctx); err == nil {
				t.names[me.Tenant.ID] = me.Tenant.Name
			}
		} else if ts, err := t.fc.ListTenants(t.ctx); err == nil {
			for _, tn := range ts {
				t.names[tn.ID] = tn.Name
			}
		}
	}
	return cmp.Or(t.names[id], id)
}
