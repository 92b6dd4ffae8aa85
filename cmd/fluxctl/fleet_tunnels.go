package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/spf13/cobra"
)

// The commands that reach a VM's TCP ports through central: fleet ssh,
// port-forward, tunnel-stdio (ssh's ProxyCommand) and tunnels. Nothing but
// central has to be reachable: each connection is a WebSocket tunnel
// (sdk.FleetClient.DialTunnel).

const hintTunnels = "fluxctl fleet tunnels lists your open tunnels with their IDs"

// tunnelRefusal gives central's refusals of a tunnel fluxctl's hints.
func tunnelRefusal(err error, vm string) error {
	return withHints(err, map[int]string{
		404: hintListVMs,
		403: "the fleet's policy decides which ports tunnels may reach (fluxctl fleet tunnels shows its limits); a read-only API key cannot open tunnels",
		429: "all the tunnels your tenant may have are open: " + hintTunnels + ", and fluxctl fleet tunnels close ID ends one",
		409: "is " + vm + " running? fluxctl fleet vms shows its state",
	})
}

// sshTarget is what fleet ssh connects to, and how.
type sshTarget struct {
	user, host string // host is the VM's name: what ssh and ~/.ssh/config see
	node, id   string
	proxy      string // the ProxyCommand
}

// sshTargetOf finds the VM of [USER@]VM and the login to use: USER, else
// the catalog image's ssh_user, else admin.
func (f *fleet) sshTargetOf(ctx context.Context, c *cobra.Command, ref string) (*sshTarget, error) {
	user, vmRef := "", ref
	if u, rest, ok := strings.Cut(ref, "@"); ok {
		user, vmRef = u, rest
		if user == "" || vmRef == "" || !safeWordRE.MatchString(user) {
			return nil, usageError(c, fmt.Sprintf("%q is not USER@VM", ref))
		}
	}
	fc, vm, err := f.findVM(ctx, vmRef)
	if err != nil {
		return nil, err
	}
	// What central says goes into a command line the shell runs and into a
	// config file: only names of the form central itself allows.
	for _, w := range []string{vm.Name, vm.Node, vm.ID} {
		if !safeWordRE.MatchString(w) {
			return nil, &cliError{msg: fmt.Sprintf("central named the VM with %q, which fluxctl will not put in an ssh command line", w),
				hint: "VM names, node names and IDs are letters, digits, '.', '_' and '-'; is --central the right server?"}
		}
	}
	if user == "" {
		user = sdk.DefaultSSHUser
		if vm.ImageName != "" {
			// The catalog says the image's login; a catalog that cannot be
			// read leaves the default, which ssh's refusal will make plain.
			if ims, err := fc.ListImages(ctx); err == nil {
				for _, im := range ims {
					if im.Name == vm.ImageName && im.SSHUser != "" {
						user = im.SSHUser
					}
				}
			}
		}
	}
	self, err := f.a.self()
	if err != nil {
		return nil, &cliError{msg: "cannot find the path of this fluxctl binary for ssh's ProxyCommand: " + err.Error(),
			hint: "run fluxctl by its full path"}
	}
	// ssh hands ProxyCommand to the shell and expands %-tokens in it: quote
	// the path for one, and double its % for the other.
	proxy := fmt.Sprintf("%s fleet --central %s tunnel-stdio %s/%s %%p",
		shellQuote(strings.ReplaceAll(self, "%", "%%")), shellQuote(strings.ReplaceAll(f.centralURL(), "%", "%%")), vm.Node, vm.ID)
	return &sshTarget{user: user, host: vm.Name, node: vm.Node, id: vm.ID, proxy: proxy}, nil
}

// safeWordRE is a login, VM name, node name or VM ID fluxctl puts in a
// ProxyCommand or a config block as it is.
var safeWordRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

// shellQuote quotes s for sh when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:+,=@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// hostKeyAlias is the name ssh keeps a VM's host key under in known_hosts:
// its ID, which stays when its name is reused.
func hostKeyAlias(id string) string { return "fluxvm-" + id }

func (f *fleet) sshCmd() *cobra.Command {
	var printConfig bool
	c := &cobra.Command{
		Use:   "ssh [USER@]VM [-- SSH-ARGS...]",
		Short: "Log in to a VM with your own ssh, through central",
		Long: `Run the system's OpenSSH client (ssh) to a VM, through a tunnel that central
relays: nothing but central has to be reachable. The login is USER, else the
catalog image's ssh_user (fluxctl fleet images), else admin; the VM
must have your public key (fluxctl fleet launch --ssh-key FILE).

fluxctl runs ssh with -o ProxyCommand="fluxctl fleet --central URL
tunnel-stdio NODE/ID %p" and -o HostKeyAlias=fluxvm-ID, so your keys, agent
and ssh options apply as usual, and the VM's host key is remembered under
its ID. The token reaches the ProxyCommand through the environment
($` + envFleetToken + `; --token is passed on the same way), never on a command
line. Whatever follows -- goes to ssh after the VM: options, or the command
to run.

--print-config prints a block for ~/.ssh/config instead, after which plain
ssh, scp and rsync -e ssh reach the VM by its name (with ` + envFleetToken + `
exported).`,
		Example: `  fluxctl fleet ssh web-1
  fluxctl fleet ssh debian@web-1 -- -L 5432:localhost:5432
  fluxctl fleet ssh web-1 -- uname -a
  fluxctl fleet ssh --print-config web-1 >> ~/.ssh/config && scp notes.txt web-1:`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 || c.ArgsLenAtDash() == 0 {
				return usageError(c, "fleet ssh takes a VM ([USER@]VM), then optionally -- and ssh's arguments")
			}
			if at := c.ArgsLenAtDash(); at > 1 || (at < 0 && len(args) > 1) {
				return usageError(c, "fleet ssh takes one VM; put ssh's options and the remote command after --")
			}
			if printConfig && len(args) > 1 {
				return usageError(c, "--print-config prints a config block: it takes no ssh arguments")
			}
			return nil
		},
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			ssh := ""
			if !printConfig {
				var err error
				if ssh, err = exec.LookPath("ssh"); err != nil {
					return &cliError{msg: "ssh (the OpenSSH client) is not installed or not on PATH",
						hint: "install it (Debian, Ubuntu: apt-get install openssh-client), or use fluxctl fleet ssh --print-config with another client"}
				}
			}
			tg, err := f.sshTargetOf(c.Context(), c, args[0])
			if err != nil {
				return err
			}
			if printConfig {
				fmt.Fprintf(f.a.stdout, "Host %s\n  User %s\n  HostKeyAlias %s\n  ProxyCommand %s\n", tg.host, tg.user, hostKeyAlias(tg.id), tg.proxy)
				if f.a.stderrTTY {
					fmt.Fprintf(f.a.stderr, "# ssh runs the ProxyCommand with your environment: export %s (and keep it out of the file)\n", envFleetToken)
				}
				return nil
			}
			argv := []string{"-o", "ProxyCommand=" + tg.proxy, "-o", "HostKeyAlias=" + hostKeyAlias(tg.id), tg.user + "@" + tg.host}
			argv = append(argv, args[1:]...)
			// Not bound to fluxctl's context: an interrupt reaches ssh from the
			// terminal, and ssh decides what it means (a remote command may
			// catch it); fluxctl waits for ssh and takes its exit code.
			cmd := exec.Command(ssh, argv...)
			cmd.Stdin, cmd.Stdout, cmd.Stderr = f.a.stdin, f.a.stdout, f.a.stderr
			cmd.Env = f.childEnv()
			// ssh's exit code is the remote command's (255: ssh's own failure,
			// which it has explained on stderr).
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) && ee.ExitCode() > 0 {
					return exitCode(ee.ExitCode())
				}
				return fmt.Errorf("run ssh: %w", err)
			}
			return nil
		},
	}
	c.Flags().BoolVar(&printConfig, "print-config", false, "print a ~/.ssh/config block for the VM instead of connecting")
	return c
}

// childEnv is the environment of a program fluxctl runs that runs fluxctl
// again (ssh's ProxyCommand): fluxctl's own, with the token it uses, so
// that --token reaches the child without appearing on a command line.
func (f *fleet) childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envFleetToken+"=") {
			env = append(env, kv)
		}
	}
	if tok := f.bearer(); tok != "" {
		env = append(env, envFleetToken+"="+tok)
	}
	return env
}

// parseNodeVM parses tunnel-stdio's NODE/ID.
func parseNodeVM(c *cobra.Command, s string) (node, id string, err error) {
	node, id, ok := strings.Cut(s, "/")
	if !ok || node == "" || id == "" || strings.Contains(id, "/") {
		return "", "", usageError(c, fmt.Sprintf("%q is not NODE/ID (fluxctl fleet vms -o wide shows both)", s))
	}
	return node, id, nil
}

// parsePort parses a TCP port; zero is allowed only with zeroOK.
func parsePort(s string, zeroOK bool) (int, bool) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 0 || p > 65535 || (p == 0 && !zeroOK) {
		return 0, false
	}
	return p, true
}

func (f *fleet) tunnelStdioCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "tunnel-stdio NODE/ID PORT",
		Short: "Relay stdin and stdout to a VM's port through central (ssh's ProxyCommand)",
		Long: `Open a tunnel to PORT of the VM ID on NODE and relay it to stdin and stdout
until either side ends: what fleet ssh gives ssh as its ProxyCommand, and
what a ~/.ssh/config block from fleet ssh --print-config runs. The token
comes from $` + envFleetToken + ` (or --token).`,
		Example: `  ssh -o ProxyCommand='fluxctl fleet --central https://cloud.example.com tunnel-stdio node-1/0b9c4e %p' admin@web-1`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError(c, fmt.Sprintf("fleet tunnel-stdio takes NODE/ID and PORT, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			node, id, err := parseNodeVM(c, args[0])
			if err != nil {
				return err
			}
			port, ok := parsePort(args[1], false)
			if !ok {
				return usageError(c, fmt.Sprintf("port %q is not a TCP port (1-65535)", args[1]))
			}
			fc, err := f.client()
			if err != nil {
				return err
			}
			conn, err := fc.DialTunnel(c.Context(), node, id, port)
			if err != nil {
				return tunnelRefusal(err, node+"/"+id)
			}
			return relayStdio(c.Context(), conn, f.a.stdin, f.a.stdout)
		},
	}
}

// relayStdio relays conn to in and out until conn ends (the VM closed the
// connection), in ends (ssh is done with it), or ctx ends.
func relayStdio(ctx context.Context, conn net.Conn, in io.Reader, out io.Writer) error {
	defer conn.Close()
	done := make(chan error, 2)
	go func() {
		_, err := io.Copy(conn, in)
		done <- err
	}()
	go func() {
		_, err := io.Copy(out, conn)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
			return tunnelEnded(err)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tunnelEnded says why a tunnel broke: central's reason when central ended
// it, that central went away when its connection broke without one, with
// what to do about it.
func tunnelEnded(err error) error {
	reason, ok := sdk.TunnelEndedReason(err)
	if !ok {
		if sdk.TunnelDropped(err) {
			return &cliError{msg: "the tunnel ended: central closed the connection without saying why (it stopped or restarted, or the network to it broke)",
				hint: "connect again once central answers (fluxctl fleet status); a restarted central keeps no tunnels from before"}
		}
		return fmt.Errorf("tunnel: %w", err)
	}
	hint := "connect again; " + hintTunnels
	switch {
	case strings.Contains(reason, "idle"):
		hint = "connect again; to keep an idle ssh session open, set ServerAliveInterval 60 (ssh -o, or the config block)"
	case strings.Contains(reason, "lifetime"):
		hint = "connect again: a tunnel lives at most the policy's max_lifetime_minutes, however busy"
	case strings.Contains(reason, "closed by"):
		hint = "someone closed it with fluxctl fleet tunnels close (or the console); connect again if you may"
	}
	return &cliError{msg: "central ended the tunnel: " + reason, hint: hint}
}

func (f *fleet) portForwardCmd() *cobra.Command {
	var address string
	c := &cobra.Command{
		Use:   "port-forward VM LOCAL:REMOTE [--address 127.0.0.1]",
		Short: "Serve a local port that reaches a port of a VM through central",
		Long: `Listen on LOCAL (on --address, 127.0.0.1 unless told otherwise) and relay
every connection to port REMOTE of the VM through a tunnel of its own,
until interrupted (Ctrl-C). LOCAL 0 picks a free port, which is printed. A
connection central refuses (the port is outside the policy, the tenant's
tunnels are all in use) is closed and the reason printed; the others go on.`,
		Example: `  fluxctl fleet port-forward web-1 8080:80
  fluxctl fleet port-forward db-1 5432:5432 --address 0.0.0.0`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageError(c, fmt.Sprintf("fleet port-forward takes a VM and LOCAL:REMOTE, got %d arguments", len(args)))
			}
			return nil
		},
		ValidArgsFunction: f.completeVMs(),
		RunE: func(c *cobra.Command, args []string) error {
			l, r, ok := strings.Cut(args[1], ":")
			local, okL := parsePort(l, true)
			remote, okR := parsePort(r, false)
			if !ok || !okL || !okR {
				return usageError(c, fmt.Sprintf("%q is not LOCAL:REMOTE: two TCP ports, e.g. 8080:80 (LOCAL 0 picks a free one)", args[1]))
			}
			if net.ParseIP(address) == nil && address != "localhost" {
				return usageError(c, fmt.Sprintf("--address %q is not an IP address to listen on, e.g. 127.0.0.1 or 0.0.0.0", address))
			}
			fc, vm, err := f.findVM(c.Context(), args[0])
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(local)))
			if err != nil {
				return &cliError{msg: fmt.Sprintf("cannot listen on %s port %d: %v", address, local, err),
					hint: "pick another LOCAL port (0 picks a free one), or stop what uses it"}
			}
			fmt.Fprintf(f.a.stderr, "Forwarding %s -> %s port %d (Ctrl-C to stop)\n", ln.Addr(), vm.Name, remote)
			err = fc.PortForwardNotify(c.Context(), vm.Node, vm.ID, remote, ln, func(err error) {
				msg, hint := err.Error(), ""
				var cli *cliError
				if _, ended := sdk.TunnelEndedReason(err); ended || sdk.TunnelDropped(err) {
					err = tunnelEnded(err)
				} else {
					err = f.explain(tunnelRefusal(err, vm.Name))
				}
				if errors.As(err, &cli) {
					msg, hint = cli.msg, cli.hint
				}
				fmt.Fprintf(f.a.stderr, "error: %s\n", msg)
				if hint != "" {
					fmt.Fprintf(f.a.stderr, "hint: %s\n", hint)
				}
			})
			if errors.Is(err, context.Canceled) {
				return nil // interrupted: the way to stop it
			}
			return err
		},
	}
	c.Flags().StringVar(&address, "address", "127.0.0.1", "the local address to listen on (0.0.0.0: every interface)")
	return c
}

// tunnelColumns are the columns of fleet tunnels.
func tunnelColumns(now time.Time) []column[sdk.Tunnel] {
	return []column[sdk.Tunnel]{
		{"id", "ID", false, func(t *sdk.Tunnel) string { return t.ID }},
		{"vm", "VM", false, func(t *sdk.Tunnel) string { return t.VMName }},
		{"port", "PORT", false, func(t *sdk.Tunnel) string {
			if t.Kind == sdk.TunnelScreen {
				return "screen"
			}
			return strconv.Itoa(t.Port)
		}},
		{"to-vm", "TO VM", false, func(t *sdk.Tunnel) string { return byteSize(t.BytesToVM) }},
		{"from-vm", "FROM VM", false, func(t *sdk.Tunnel) string { return byteSize(t.BytesFromVM) }},
		{"idle", "IDLE", false, func(t *sdk.Tunnel) string { return short(now.Sub(t.LastActive)) }},
		{"age", "AGE", true, func(t *sdk.Tunnel) string { return short(now.Sub(t.OpenedAt)) }},
		{"node", "NODE", true, func(t *sdk.Tunnel) string { return t.Node }},
		{"vm-id", "VM ID", true, func(t *sdk.Tunnel) string { return t.VM }},
		{"opened-by", "OPENED BY", true, func(t *sdk.Tunnel) string { return t.OpenedBy }},
		{"tenant", "TENANT", true, func(t *sdk.Tunnel) string { return cmp.Or(t.TenantName, t.Tenant) }},
	}
}

// byteSize formats a byte count for people: 512 B, 3.4 KiB, 12 MiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n), -1
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	if v < 10 {
		return fmt.Sprintf("%.1f %ciB", v, "KMGT"[i])
	}
	return fmt.Sprintf("%.0f %ciB", v, "KMGT"[i])
}

func (f *fleet) tunnelsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "tunnels",
		Aliases: []string{"tunnel"},
		Short:   "Your open tunnels (ssh, port-forward, screens): list, close",
		Long: `List the open tunnels: the VM and port each reaches, the bytes relayed each
way and how long it has been idle (-o wide adds its age, node, VM ID, who
opened it and, for the operator, the tenant). The policy's limits are in
the JSON output (-o json). "fleet tunnels close ID" ends one at once.`,
		Example: `  fluxctl fleet tunnels
  fluxctl fleet tunnels close tun_5c1e09a2b7f4`,
		Args: subcommandArgs,
		RunE: f.withClient(func(c *cobra.Command, _ []string, fc *sdk.FleetClient) error {
			list, err := fc.ListTunnels(c.Context())
			if err != nil {
				return err
			}
			return show(f.a, c, table[sdk.Tunnel]{raw: list, rows: list.Tunnels, cols: tunnelColumns(time.Now()),
				empty: "no open tunnels\nnext: fluxctl fleet ssh VM, or fluxctl fleet port-forward VM LOCAL:REMOTE\n"})
		}),
	}
	columnsFlag(c, tunnelColumns(time.Time{}))
	c.AddCommand(f.tunnelCloseCmd())
	return c
}

func (f *fleet) tunnelCloseCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "close ID",
		Aliases: []string{"rm"},
		Short:   "Close an open tunnel at once",
		Args:    oneName("tunnel ID"),
		ValidArgsFunction: f.complete(func(ctx context.Context, fc *sdk.FleetClient) ([]cobra.Completion, error) {
			list, err := fc.ListTunnels(ctx)
			if err != nil {
				return nil, err
			}
			var out []cobra.Completion
			for _, t := range list.Tunnels {
				out = append(out, cobra.CompletionWithDesc(t.ID, fmt.Sprintf("%s port %d", t.VMName, t.Port)))
			}
			return out, nil
		}),
		RunE: f.withClient(func(c *cobra.Command, args []string, fc *sdk.FleetClient) error {
			if err := fc.CloseTunnel(c.Context(), args[0]); err != nil {
				return withHints(err, map[int]string{404: "it may have closed already: " + hintTunnels})
			}
			if f.a.human() {
				f.a.done("", "Closed tunnel %s", args[0])
			}
			return nil
		}),
	}
}
