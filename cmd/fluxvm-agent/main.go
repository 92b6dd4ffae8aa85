// Command fluxvm-agent is FluxVM's server binary. Its subcommands run the node
// agent, central, and the built-in plugins:
//
//	fluxvm-agent node -config agent.hcl   the node agent
//	fluxvm-agent node -check -config F    validate a node config and exit
//	fluxvm-agent central -token T         central: the fleet API on etcd
//	fluxvm-agent scheduler -etcd-endpoints URLS   central's background loops in a process of their own
//	fluxvm-agent dev                      central, a node and a demo tenant in one process
//	fluxvm-agent plugin qemu              the QEMU driver plugin (the node agent starts it)
//	fluxvm-agent plugin sim               the simulated driver plugin
//	fluxvm-agent plugin vz                the Virtualization framework driver plugin (macOS on Apple silicon; elsewhere it reports why it cannot run)
//	fluxvm-agent vz-host -workspace DIR   one vz VM's host process (the vz plugin starts it)
//	fluxvm-agent vz-install -ipsw F -out DIR   make a macOS image for the vz driver from a restore image
//	fluxvm-agent plugin netns             the network plugin (Linux; the node agent starts it for plugin "netns" {})
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/agent"
	"github.com/fluxvm/fluxvm/agent/config"
	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/signup"
	"github.com/fluxvm/fluxvm/drivers/sim"
	"github.com/fluxvm/fluxvm/drivers/vz"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/network"
	"github.com/hashicorp/go-hclog"
)

// builtinDrivers are the driver plugins this binary carries.
// More are added per platform (drivers_linux.go).
var builtinDrivers = map[string]func(hclog.Logger) driver.Driver{
	"sim": sim.New,
	"vz":  vz.New, // usable on darwin/arm64 with cgo; elsewhere it says why not
}

// builtinNetworks are the network plugins this binary carries (netns, on
// Linux: drivers_linux.go).
var builtinNetworks = map[string]func(hclog.Logger) network.Network{}

// pluginHelpers are processes a built-in plugin starts of itself (the netns
// plugin's WireGuard tunnels, on Linux), run as `plugin NAME ARGS...`.
var pluginHelpers = map[string]func(args []string) int{}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "node":
		os.Exit(runNode(os.Args[2:]))
	case "central":
		os.Exit(runCentral(os.Args[2:]))
	case "scheduler":
		os.Exit(runScheduler(os.Args[2:]))
	case "dev":
		os.Exit(runDev(os.Args[2:]))
	case "plugin":
		os.Exit(runPlugin(os.Args[2:]))
	case "vz-host":
		os.Exit(vz.HostMain(os.Args[2:], os.Stderr))
	case "vz-install":
		os.Exit(vz.InstallMain(os.Args[2:], os.Stderr))
	case "version", "-version", "--version":
		fmt.Println("fluxvm-agent", version)
	case "-h", "-help", "--help", "help":
		usage()
	default:
		fmt.Fprintf(os.Stderr, "fluxvm-agent: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
}

// version is set at build time (-ldflags "-X main.version=...").
var version = "0.1.0-dev"

func usage() {
	fmt.Fprintf(os.Stderr, `usage:
  fluxvm-agent node -config agent.hcl [-check]
  fluxvm-agent node enroll -config agent.hcl -invite INVITE [-code CODE]
  fluxvm-agent central [-token T] [-listen ADDR] [-state-dir DIR] [-etcd-endpoints URLS | -etcd-listen URL] [-reconcile-secs N]
  fluxvm-agent scheduler -etcd-endpoints URLS [-token T] [-listen ADDR] [-reconcile-secs N] [-heartbeat-secs N]
  fluxvm-agent dev [-state-dir DIR] [-reset] [-listen ADDR] [-node-listen ADDR]
  fluxvm-agent plugin NAME
  fluxvm-agent vz-host -workspace DIR   (started by the vz plugin: one VM's host process)
  fluxvm-agent vz-install -ipsw RESTORE.ipsw -out DIR [-disk-gib N]   (macOS: make a macOS image for vz)
  fluxvm-agent version

built-in plugins: %v
`, pluginNames())
}

// runNode runs the node agent, or with -check validates its config.
func runNode(args []string) int {
	if len(args) > 0 && args[0] == "enroll" {
		return runEnroll(args[1:])
	}
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "the node's HCL config file (required)")
	check := fs.Bool("check", false, "validate the config (and each plugin block against its plugin) and exit")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cfgPath == "" {
		fmt.Fprintln(os.Stderr, "fluxvm-agent node: -config is required (see examples/agent-linux.hcl)")
		return 2
	}
	cfg, err := config.Load(*cfgPath)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent node: %v\n", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent node: %v\n", err)
		return 1
	}
	opts := agent.Options{
		Executable: exe, BuiltinPlugins: driverNames(), BuiltinNetworkPlugins: networkNames(), Version: version,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr}),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *check {
		if err := agent.Check(ctx, cfg, opts); err != nil {
			fmt.Fprintf(os.Stderr, "fluxvm-agent node: %v\n", err)
			return 1
		}
		fmt.Printf("%s: ok (%s)\n", *cfgPath, cfg)
		return 0
	}
	if err := agent.Run(ctx, cfg, opts); err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent node: %v\n", err)
		return 1
	}
	return 0
}

// runCentral runs central: the fleet API, its etcd store, and the
// leader-only loops.
func runCentral(args []string) int {
	fs := flag.NewFlagSet("central", flag.ContinueOnError)
	token := fs.String("token", os.Getenv("FLUXVM_FLEET_TOKEN"),
		"the operator's fleet token, which nodes heartbeat with (default $FLUXVM_FLEET_TOKEN; none: lab mode)")
	listen := fs.String("listen", central.DefaultListen, "the fleet API's host:port")
	stateDir := fs.String("state-dir", "/var/lib/fluxvm-central", "embedded etcd data (DIR/etcd) and the activity log")
	endpoints := fs.String("etcd-endpoints", "", "comma-separated client URLs of an external etcd (none: embedded etcd in the state dir)")
	etcdListen := fs.String("etcd-listen", "", "client URL of the embedded etcd, e.g. http://10.0.0.5:2379, so other centrals can join it with -etcd-endpoints (default: a free loopback port)")
	reconcileSecs := fs.Int("reconcile-secs", 60, "seconds between reconciler passes (leader only)")
	heartbeatSecs := fs.Int("heartbeat-secs", 10, "seconds between node heartbeats; a node silent for three is marked down")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	publicURL := fs.String("public-url", os.Getenv("FLUXVM_PUBLIC_URL"),
		"central's URL as browsers reach it (default $FLUXVM_PUBLIC_URL); with https the console's session cookie is Secure")
	sessionHours := fs.Int("session-hours", 12, "hours a console session lasts")
	issuer := fs.String("oidc-issuer", os.Getenv("FLUXVM_OIDC_ISSUER"),
		"the identity provider's issuer URL, for the console's sign-in (default $FLUXVM_OIDC_ISSUER; none: sign-in is off)")
	clientID := fs.String("oidc-client-id", os.Getenv("FLUXVM_OIDC_CLIENT_ID"), "central's client id at the identity provider (default $FLUXVM_OIDC_CLIENT_ID)")
	clientSecret := fs.String("oidc-client-secret", os.Getenv("FLUXVM_OIDC_CLIENT_SECRET"),
		"central's client secret at the identity provider (default $FLUXVM_OIDC_CLIENT_SECRET; none: a public client, PKCE either way)")
	clientSecretFile := fs.String("oidc-client-secret-file", "", "a file holding the client secret (instead of -oidc-client-secret)")
	providerName := fs.String("oidc-provider-name", "your identity provider", "the provider's name on the console's sign-in button")
	operators := splitList(os.Getenv("FLUXVM_SSO_OPERATORS"))
	fs.Func("sso-operator", "an email that signs in to the console as the operator (repeatable; default $FLUXVM_SSO_OPERATORS, comma-separated)",
		func(v string) error { operators = append(operators, v); return nil })
	// Stripe and sign-up (docs/billing.md, docs/signup.md). Secrets come best
	// from the environment or a file: a flag's value shows in ps.
	stripeKey := fs.String("stripe-secret-key", os.Getenv("FLUXVM_STRIPE_SECRET_KEY"),
		"Stripe's secret API key, which turns Stripe invoices on (default $FLUXVM_STRIPE_SECRET_KEY; none: off)")
	stripeKeyFile := fs.String("stripe-secret-key-file", "", "a file holding the Stripe secret key (instead of -stripe-secret-key)")
	stripeHook := fs.String("stripe-webhook-secret", os.Getenv("FLUXVM_STRIPE_WEBHOOK_SECRET"),
		"the signing secret of Stripe's webhook to central's /stripe/webhook (default $FLUXVM_STRIPE_WEBHOOK_SECRET; none: the webhook is refused)")
	stripeHookFile := fs.String("stripe-webhook-secret-file", "", "a file holding the webhook signing secret (instead of -stripe-webhook-secret)")
	stripeAPI := fs.String("stripe-api-base", "", "another base URL for Stripe's API, e.g. a local stripe-mock (default: Stripe's own)")
	signupOn := fs.Bool("signup", false, "open self-service sign-up (POST /signup); needs -token, -public-url, -smtp-host and -smtp-from")
	signupHours := fs.Int("signup-link-hours", 24, "hours a mailed sign-up link works (1 to 168)")
	smtpHost := fs.String("smtp-host", os.Getenv("FLUXVM_SMTP_HOST"), "the SMTP server sign-up mail goes through (default $FLUXVM_SMTP_HOST)")
	smtpPort := fs.Int("smtp-port", 587, "the SMTP server's port (1 to 65535)")
	smtpFrom := fs.String("smtp-from", os.Getenv("FLUXVM_SMTP_FROM"), "the sender of sign-up mail, e.g. 'FluxVM <signup@cloud.example.com>' (default $FLUXVM_SMTP_FROM)")
	smtpUser := fs.String("smtp-user", os.Getenv("FLUXVM_SMTP_USER"), "the SMTP login, if the server wants one (default $FLUXVM_SMTP_USER)")
	smtpPassword := fs.String("smtp-password", os.Getenv("FLUXVM_SMTP_PASSWORD"), "the SMTP password (default $FLUXVM_SMTP_PASSWORD)")
	smtpPasswordFile := fs.String("smtp-password-file", "", "a file holding the SMTP password (instead of -smtp-password)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *signupHours < 1 || *signupHours > 168 || *smtpPort < 1 || *smtpPort > 65535 {
		fmt.Fprintln(os.Stderr, "fluxvm-agent central: -signup-link-hours must be 1 to 168 and -smtp-port 1 to 65535")
		return 2
	}
	for _, f := range []struct {
		file string
		dst  *string
		name string
	}{{*stripeKeyFile, stripeKey, "-stripe-secret-key-file"}, {*stripeHookFile, stripeHook, "-stripe-webhook-secret-file"}, {*smtpPasswordFile, smtpPassword, "-smtp-password-file"}} {
		if f.file == "" {
			continue
		}
		b, err := os.ReadFile(f.file)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fluxvm-agent central: %s: %v\n", f.name, err)
			return 2
		}
		*f.dst = strings.TrimSpace(string(b))
	}
	if fs.NArg() > 0 || *reconcileSecs < 1 || *heartbeatSecs < 1 || *sessionHours < 1 || *sessionHours > 24*30 {
		fmt.Fprintln(os.Stderr, "fluxvm-agent central: -reconcile-secs and -heartbeat-secs must be at least 1, -session-hours 1 to 720, and no arguments follow the flags")
		return 2
	}
	if *clientSecretFile != "" {
		b, err := os.ReadFile(*clientSecretFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fluxvm-agent central: -oidc-client-secret-file: %v\n", err)
			return 2
		}
		*clientSecret = strings.TrimSpace(string(b))
	}
	eps := splitList(*endpoints)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := central.Run(ctx, central.Options{
		OIDC:             identity.OIDCConfig{Issuer: *issuer, ClientID: *clientID, ClientSecret: *clientSecret},
		OIDCProviderName: *providerName,
		Listen:           *listen, StateDir: *stateDir, EtcdEndpoints: eps, EtcdListen: *etcdListen, FleetToken: *token,
		ReconcileEvery: time.Duration(*reconcileSecs) * time.Second, HeartbeatInterval: time.Duration(*heartbeatSecs) * time.Second,
		Version: version, Logger: hclog.New(&hclog.LoggerOptions{Name: "central", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr}),
		Listening: func(addr string) { fmt.Printf("fluxvm central: http://%s\n", addr) },
		PublicURL: *publicURL, SessionTTL: time.Duration(*sessionHours) * time.Hour, OperatorEmails: operators,
		Payments: payments.Config{SecretKey: *stripeKey, WebhookSecret: *stripeHook, APIBase: *stripeAPI},
		Signup: api.SignupOptions{Enabled: *signupOn, LinkTTL: time.Duration(*signupHours) * time.Hour,
			SMTP: signup.SMTP{Host: *smtpHost, Port: *smtpPort, From: *smtpFrom, User: *smtpUser, Password: *smtpPassword}},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent central: %v\n", err)
		return 1
	}
	return 0
}

// runScheduler runs central's background loops apart from the API.
func runScheduler(args []string) int {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	endpoints := fs.String("etcd-endpoints", "", "comma-separated client URLs of the etcd the centrals use (required)")
	token := fs.String("token", os.Getenv("FLUXVM_FLEET_TOKEN"), "the operator's fleet token, which the loops call nodes with (default $FLUXVM_FLEET_TOKEN)")
	listen := fs.String("listen", "", "serve GET /healthz and GET /metrics on this host:port (none: no HTTP)")
	reconcileSecs := fs.Int("reconcile-secs", 60, "seconds between reconciler passes")
	heartbeatSecs := fs.Int("heartbeat-secs", 10, "the centrals' -heartbeat-secs: a node silent for three intervals is marked down")
	id := fs.String("id", "", "this scheduler's name in the election (default hostname-pid)")
	logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || *reconcileSecs < 1 || *heartbeatSecs < 1 {
		fmt.Fprintln(os.Stderr, "fluxvm-agent scheduler: -reconcile-secs and -heartbeat-secs must be at least 1, and no arguments follow the flags")
		return 2
	}
	eps := splitList(*endpoints)
	if len(eps) == 0 {
		fmt.Fprintln(os.Stderr, "fluxvm-agent scheduler: -etcd-endpoints is required: the etcd your centrals use "+
			"(a central's embedded etcd is shared with `fluxvm-agent central -etcd-listen http://ADDR:2379`)")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := central.RunScheduler(ctx, central.SchedulerOptions{
		EtcdEndpoints: eps, FleetToken: *token, Listen: *listen, ID: *id, Version: version,
		ReconcileEvery: time.Duration(*reconcileSecs) * time.Second, HeartbeatInterval: time.Duration(*heartbeatSecs) * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "scheduler", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr}),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "fluxvm-agent scheduler: %v\n", err)
		return 1
	}
	return 0
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

func driverNames() []string {
	var names []string
	for n := range builtinDrivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func networkNames() []string {
	var names []string
	for n := range builtinNetworks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// pluginNames lists every built-in plugin, drivers and networks.
func pluginNames() []string {
	names := driverNames()
	for n := range builtinNetworks {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// runPlugin serves a built-in driver or network plugin over go-plugin.
// Started by hand, it explains that the node agent starts it.
func runPlugin(args []string) int {
	if len(args) > 1 {
		if helper, ok := pluginHelpers[args[0]]; ok {
			return helper(args[1:])
		}
	}
	if len(args) != 1 {
		fmt.Fprintf(os.Stderr, "usage: fluxvm-agent plugin NAME (one of %v)\n", pluginNames())
		return 2
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: args[0], Level: hclog.Trace, Output: os.Stderr, JSONFormat: true})
	if newDriver, ok := builtinDrivers[args[0]]; ok {
		d := newDriver(logger)
		driver.Serve(d, logger)
		// The agent stopped the plugin: what the driver holds besides its VMs
		// (the QEMU driver's QEMUs started ahead) goes with it; the VMs run on.
		if c, ok := d.(io.Closer); ok {
			if err := c.Close(); err != nil {
				logger.Warn("close the driver", "error", err)
			}
		}
		return 0
	}
	if newNetwork, ok := builtinNetworks[args[0]]; ok {
		network.Serve(newNetwork(logger), logger)
		return 0
	}
	fmt.Fprintf(os.Stderr, "fluxvm-agent: no built-in plugin %q (built-in: %v)\n", args[0], pluginNames())
	return 2
}
