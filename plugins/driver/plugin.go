package driver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Handshake is what the agent and a driver plugin check before they talk. A
// binary started without it (by a person, say) explains itself and exits.
// The protocol version that counts is the one VersionedPlugins negotiates.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  APIVersion,
	MagicCookieKey:   "FLUXVM_DRIVER_PLUGIN",
	MagicCookieValue: "a3f9c1e2-driver-fluxvm",
}

// pluginName is the name under which the driver is dispensed.
const pluginName = "driver"

// versionedPlugins lists, per contract version, what the plugin serves and
// the agent speaks: version 2 only. Version 1 is not wire-compatible, so
// both sides leave it out and the handshake refuses a version 1 plugin (the
// agent says so, see Launch) instead of letting it fail RPC by RPC. A later
// version that the agent must speak next to this one adds an entry here.
func versionedPlugins(impl Driver) map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		APIVersion: {pluginName: &grpcPlugin{impl: impl}},
	}
}

// grpcPlugin is go-plugin's glue: a driver plugin serves the base service
// and the Driver service on one connection.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	impl Driver
}

func (p *grpcPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	base.RegisterServer(s, p.impl)
	pb.RegisterDriverServer(s, &grpcServer{impl: p.impl})
	return nil
}

func (p *grpcPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &grpcClient{Plugin: base.NewClient(c), c: pb.NewDriverClient(c)}, nil
}

// Serve runs impl as a plugin process. It is the whole main of a driver
// binary: it returns only when the agent ends the plugin.
func Serve(impl Driver, logger hclog.Logger) {
	if logger == nil {
		logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Trace, Output: os.Stderr, JSONFormat: true})
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(impl),
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           logger,
	})
}

// LaunchConfig says how to start a plugin process.
type LaunchConfig struct {
	// Cmd is the plugin command, not yet started. Its stdout and stderr
	// belong to go-plugin: the plugin's logs arrive through Logger.
	Cmd *exec.Cmd
	// Logger receives the plugin's own log lines; nil discards them.
	Logger hclog.Logger
	// StartTimeout bounds the handshake (default 20s), so a binary that is
	// not a FluxVM plugin fails instead of hanging.
	StartTimeout time.Duration
}

// Plugin is a running driver plugin process.
type Plugin struct {
	Driver
	client *plugin.Client
	cmd    *exec.Cmd
	// Info is what the plugin said of itself at launch.
	Info *basepb.PluginInfoResponse
}

// otherVersion finds go-plugin's complaint that the plugin negotiated a
// protocol version the agent does not speak, and the plugin's version in it.
var otherVersion = regexp.MustCompile(`(?i)incompatible API version with plugin\. Plugin version: (\d+)`)

// Launch starts a plugin process, checks its handshake and contract version,
// and returns a Driver that talks to it.
func Launch(ctx context.Context, cfg LaunchConfig) (*Plugin, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 20 * time.Second
	}
	name := cfg.Cmd.Path
	// The plugin leads a process group of its own, so that ending it also
	// ends any child of its that still holds its output open (go-plugin
	// waits for that output to close). VMs are not in it: drivers start them
	// in sessions of their own.
	if cfg.Cmd.SysProcAttr == nil {
		cfg.Cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cfg.Cmd.SysProcAttr.Setpgid = true
	dieWithParent(cfg.Cmd.SysProcAttr)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: versionedPlugins(nil),
		Cmd:              cfg.Cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           cfg.Logger,
		StartTimeout:     cfg.StartTimeout,
		AutoMTLS:         true,
		// The agent, not go-plugin, decides when a plugin ends.
		Managed: false,
	})
	p := &Plugin{client: client, cmd: cfg.Cmd}
	rpc, err := client.Client()
	if err != nil {
		p.Kill()
		if m := otherVersion.FindStringSubmatch(err.Error()); m != nil {
			fix := "rebuild the plugin against plugins/driver of this FluxVM release"
			if v, _ := strconv.Atoi(m[1]); v > APIVersion {
				fix = fmt.Sprintf("upgrade this agent, or use a build of the plugin for contract version %d", APIVersion)
			}
			return nil, fmt.Errorf("launch driver plugin %s: it failed the FluxVM plugin handshake: it speaks driver contract version %s, "+
				"and this agent speaks version %d only; %s (%w)", name, m[1], APIVersion, fix, err)
		}
		return nil, fmt.Errorf("launch driver plugin %s: it did not complete the FluxVM plugin handshake (is it a FluxVM driver plugin of contract version %d?): %w", name, APIVersion, err)
	}
	raw, err := rpc.Dispense(pluginName)
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("launch driver plugin %s: %w", name, err)
	}
	d, ok := raw.(Driver)
	if !ok {
		p.Kill()
		return nil, fmt.Errorf("launch driver plugin %s: it serves no driver", name)
	}
	p.Driver = d
	infoCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	p.Info, err = d.PluginInfo(infoCtx)
	if err != nil {
		p.Kill()
		return nil, fmt.Errorf("launch driver plugin %s: plugin info: %w", name, err)
	}
	if t := p.Info.GetType(); t != basepb.PluginType_PLUGIN_TYPE_DRIVER {
		p.Kill()
		return nil, fmt.Errorf("launch driver plugin %s: it says it is a plugin of type %s, not a driver", name, t)
	}
	return p, nil
}

// Pid is the plugin process's id.
func (p *Plugin) Pid() int {
	if p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Ping checks that the plugin process answers its health service.
func (p *Plugin) Ping() error {
	rpc, err := p.client.Client()
	if err != nil {
		return err
	}
	return rpc.Ping()
}

// Exited reports whether the plugin process has ended.
func (p *Plugin) Exited() bool { return p.client.Exited() }

// Kill ends the plugin process (gracefully, then by force). VMs it started
// keep running; a new plugin process takes them back with RecoverVM.
func (p *Plugin) Kill() {
	done := make(chan struct{})
	go func() { p.client.Kill(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		if pid := p.Pid(); pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		<-done
	}
}
