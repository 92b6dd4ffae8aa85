// Package agent is the node agent (`fluxvm-agent node`): it wires the local
// store, the driver plugins, the VM manager and the node API together, and
// recovers every VM when it starts.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/agent/api"
	"github.com/fluxvm/fluxvm/agent/config"
	"github.com/fluxvm/fluxvm/agent/images"
	"github.com/fluxvm/fluxvm/agent/link"
	"github.com/fluxvm/fluxvm/agent/pluginhost"
	"github.com/fluxvm/fluxvm/agent/store"
	"github.com/fluxvm/fluxvm/agent/vmm"
	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	"github.com/fluxvm/fluxvm/plugins/driver/reaper"
	"github.com/fluxvm/fluxvm/plugins/network"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// DefaultImageDir is where images may come from when the config names none.
const DefaultImageDir = "/var/cache/fluxvm/images"

// Options are what the agent takes besides its config file.
type Options struct {
	// Executable is this binary, which runs the built-in plugins as
	// `EXECUTABLE plugin NAME`.
	Executable string
	// BuiltinPlugins are the driver plugins the binary carries.
	BuiltinPlugins []string
	// BuiltinNetworkPlugins are the network plugins it carries (netns).
	BuiltinNetworkPlugins []string
	Version               string
	Logger                hclog.Logger
	// Listening, if set, receives the API's address once it listens.
	Listening func(addr string)
}

// Run runs the node agent until ctx ends. VMs keep running after it returns.
func Run(ctx context.Context, cfg *config.Config, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Info})
	}
	if err := reaper.Start(); err != nil {
		log.Warn("cannot become a child subreaper; VMs orphaned by a plugin crash may linger as zombies", "error", err)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	st, err := store.Open(filepath.Join(cfg.StateDir, store.FileName))
	if err != nil {
		return err
	}
	defer st.Close()

	plugins, order, err := Plugins(cfg, opts)
	if err != nil {
		return err
	}
	netPlugin := ""
	for _, p := range plugins {
		if p.Network {
			netPlugin = p.Name
		}
	}
	imageDirs := cfg.Policy.AllowedImageDirs
	if len(imageDirs) == 0 {
		imageDirs = []string{DefaultImageDir}
	}
	var mgr *vmm.Manager
	host := pluginhost.New(pluginhost.Options{
		StateDir: cfg.StateDir, NodeName: cfg.Name, Logger: log.Named("plugins"),
		Ready:        func(ctx context.Context, name string, d driver.Driver) { mgr.Recover(ctx, name, d) },
		NetworkReady: func(ctx context.Context, _ string, n network.Network) { mgr.ReconcileInterfaces(ctx, n) },
	})
	mgr = vmm.New(vmm.Options{
		Store: st, Drivers: host, Networks: host, NetworkPlugin: netPlugin, DriverOrder: order, AllowedImageDirs: imageDirs,
		Reserved: sdk.Resources{VCPUs: cfg.Reserved.VCPUs, MemoryMiB: cfg.Reserved.MemoryMiB},
		NodeName: cfg.Name, Version: opts.Version, Labels: cfg.Labels, Logger: log.Named("vms"),
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := host.Start(ctx, plugins); err != nil {
		return err
	}
	defer host.Close()
	go mgr.Run(ctx, time.Second)

	ln, err := listen(cfg)
	if err != nil {
		return fmt.Errorf("node api: %w", err)
	}
	handler := api.New(api.Options{
		Manager: mgr, Images: images.New(images.Options{Dir: imageDirs[0], AllowedDirs: imageDirs}), AdminTokens: reveal(cfg.Tokens.Admin), ReadOnlyTokens: reveal(cfg.Tokens.ReadOnly),
		Logger: log.Named("api"), Version: opts.Version,
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	log.Info("node api listening", "addr", listenAddr(ln), "node", cfg.Name)
	if opts.Listening != nil {
		opts.Listening(listenAddr(ln))
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	// channelDone closes when the channel to central has ended (at once
	// without a central), so that stopping waits for its orderly close.
	channelDone := make(chan struct{})
	if cfg.Central == nil {
		close(channelDone)
	}
	if c := cfg.Central; c != nil {
		token, channelHandler := c.Token.Reveal(), handler
		if token == "" {
			// An enrolled node (fluxvm-agent node enroll) holds its own
			// credential; central calls it only through its channel.
			cred, err := link.LoadCredential(cfg.StateDir)
			switch {
			case err != nil:
				return err
			case cred == nil:
				log.Warn("this node is not enrolled and its config holds no central token: central will refuse it",
					"fix", "run fluxvm-agent node enroll -config CONFIG -invite INVITE")
			case cred.CentralURL != c.URL || cred.Node != cfg.Name:
				return fmt.Errorf("the node's credential is for node %q at %s, its config says %q at %s: enroll again", cred.Node, cred.CentralURL, cfg.Name, c.URL)
			default:
				token, channelHandler = cred.Credential, api.FromCentral(handler)
			}
		}
		go startLink(ctx, c, token, cfg.Name, ln.Addr(), host, mgr, opts.Version, log.Named("link"))
		go func() {
			defer close(channelDone)
			_ = link.RunChannel(ctx, link.ChannelOptions{CentralURL: c.URL, Token: token, Node: cfg.Name,
				Handler: channelHandler, Logger: log.Named("channel"), Version: opts.Version})
		}()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return fmt.Errorf("node api: %w", err)
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	select { // the channel's close message, so central logs an orderly end
	case <-channelDone:
	case <-sctx.Done():
	}
	log.Info("node agent stopped; VMs keep running")
	return nil
}

// listen opens the node API's listener: TCP, or a unix socket of mode 0600
// (a stale socket file from an earlier run is replaced).
func listen(cfg *config.Config) (net.Listener, error) {
	path := cfg.ListenSocket()
	if path == "" {
		return net.Listen("tcp", cfg.Listen)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == os.ModeSocket {
		_ = os.Remove(path)
	}
	// The socket is created with the umask's bits; none for group and
	// others from the start, not chmod after a window.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// listenAddr names the listener's address for logs and Options.Listening:
// host:port, or unix:PATH.
func listenAddr(ln net.Listener) string {
	if a, ok := ln.Addr().(*net.UnixAddr); ok {
		return "unix:" + a.Name
	}
	return ln.Addr().String()
}

// startLink heartbeats to central (see package link). Central calls this
// node through its channel (RunChannel) or, without one, at the advertised
// URL, with its fleet token, which the node's tokens.admin must list. A
// node whose API listens on a unix socket advertises no URL unless its
// config names one: central reaches it only through the channel.
func startLink(ctx context.Context, c *config.Central, token, node string, addr net.Addr, host *pluginhost.Host, mgr *vmm.Manager, version string, log hclog.Logger) {
	advertise := c.Advertise
	if _, unix := addr.(*net.UnixAddr); advertise == "" && !unix {
		advertise = advertiseURL(addr)
	}
	report := func(ctx context.Context) (sdk.Heartbeat, error) {
		vms, err := mgr.List(ctx)
		if err != nil {
			return sdk.Heartbeat{}, err
		}
		guestOS := map[string][]string{}
		for _, s := range host.Status() {
			for _, os := range s.Capabilities.GetGuestOs() {
				guestOS[s.Name] = append(guestOS[s.Name], base.EnumName(os))
			}
		}
		return link.Snapshot(advertise, mgr.Health(), guestOS, false, vms), nil
	}
	err := link.Run(ctx, link.Options{CentralURL: c.URL, Token: token, Node: node, Report: report,
		Logger: log, Version: version})
	if err != nil {
		log.Error("no link to central", "error", err)
	}
}

// advertiseURL is the node API's URL as others reach it: the listen address,
// or this machine's host name when it listens on every address.
func advertiseURL(addr net.Addr) string {
	host, port, _ := net.SplitHostPort(addr.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return "http://" + net.JoinHostPort(host, port)
}

func reveal(s []config.Secret) []string {
	out := make([]string, len(s))
	for i, t := range s {
		out[i] = t.Reveal()
	}
	return out
}

// Plugins turns the config's plugin blocks into plugins to launch: built-in
// ones run as `EXECUTABLE plugin NAME`, others from plugin_dir. It also
// returns the drivers' names in config order. A block is a network plugin
// when it says `type = "network"` or names a built-in network plugin
// (netns); a node has at most one, and at least one driver.
func Plugins(cfg *config.Config, opts Options) ([]pluginhost.Plugin, []string, error) {
	var out []pluginhost.Plugin
	var order []string
	netPlugin := ""
	for _, p := range cfg.Plugins {
		name := p.Name
		isNetwork := p.Type == config.PluginTypeNetwork || (p.Type == "" && slices.Contains(opts.BuiltinNetworkPlugins, name))
		builtin, kind := opts.BuiltinPlugins, "driver"
		if isNetwork {
			builtin, kind = opts.BuiltinNetworkPlugins, "network"
		}
		var command func() *exec.Cmd
		if bin, ok := thirdParty(cfg.PluginDir, name); ok {
			command = func() *exec.Cmd { return exec.Command(bin) }
		} else if slices.Contains(builtin, name) {
			command = func() *exec.Cmd { return exec.Command(opts.Executable, "plugin", name) }
		} else {
			where := "no plugin_dir is set"
			if cfg.PluginDir != "" {
				where = "no executable " + filepath.Join(cfg.PluginDir, name) + " exists"
			}
			hint := ""
			if !isNetwork && slices.Contains(opts.BuiltinNetworkPlugins, name) {
				hint = fmt.Sprintf(`; %q is a network plugin: leave type out or set type = "network"`, name)
			} else if isNetwork && slices.Contains(opts.BuiltinPlugins, name) {
				hint = fmt.Sprintf(`; %q is a driver: leave type out or set type = "driver"`, name)
			}
			return nil, nil, fmt.Errorf("%s: %s plugin %q is not built in (built-in %s plugins: %v) and %s%s",
				p.DeclRange.String(), kind, name, kind, builtin, where, hint)
		}
		if isNetwork {
			if netPlugin != "" {
				return nil, nil, fmt.Errorf("%s: network plugin %q: the node already has network plugin %q, and takes one",
					p.DeclRange.String(), name, netPlugin)
			}
			netPlugin = name
		}
		out = append(out, pluginhost.Plugin{
			Name: name, Network: isNetwork, Command: command,
			Config: func(schema *basepb.ConfigSchemaResponse) ([]byte, error) {
				js, diags := cfg.DecodePluginConfig(name, schema)
				if diags.HasErrors() {
					return nil, config.DiagnosticsError(diags)
				}
				return js, nil
			},
		})
		if !isNetwork {
			order = append(order, name)
		}
	}
	if len(order) == 0 {
		return nil, nil, errors.New(`the config has no driver plugin block: add one, e.g. plugin "qemu" {}`)
	}
	return out, order, nil
}

// thirdParty finds an executable for the named plugin in dir.
func thirdParty(dir, name string) (string, bool) {
	if dir == "" {
		return "", false
	}
	p := filepath.Join(dir, name)
	if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return p, true
	}
	return "", false
}

// Check validates a config fully, as `fluxvm-agent node -check` does: the
// file, and each plugin block against its plugin's own schema (the plugins
// are started for that and stopped again).
func Check(ctx context.Context, cfg *config.Config, opts Options) error {
	plugins, _, err := Plugins(cfg, opts)
	if err != nil {
		return err
	}
	for _, p := range plugins {
		var proc interface {
			ConfigSchema(context.Context) (*basepb.ConfigSchemaResponse, error)
			Kill()
		}
		var err error
		if p.Network {
			proc, err = network.Launch(ctx, network.LaunchConfig{Cmd: p.Command()})
		} else {
			proc, err = driver.Launch(ctx, driver.LaunchConfig{Cmd: p.Command()})
		}
		if err != nil {
			return fmt.Errorf("plugin %s: %w", p.Name, err)
		}
		schema, err := proc.ConfigSchema(ctx)
		if err == nil {
			_, err = p.Config(schema)
		}
		proc.Kill()
		if err != nil {
			return fmt.Errorf("plugin %s: %w", p.Name, err)
		}
	}
	return nil
}
