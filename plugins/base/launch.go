package base

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"time"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
)

// Contract names one plugin contract (driver, network) for Launch: what the
// handshake checks and what the plugin must say it is.
type Contract struct {
	// Kind is the contract's short name ("driver"): the name the plugin is
	// dispensed under, and the word error messages use.
	Kind string
	// Type is what the plugin's PluginInfo must say.
	Type basepb.PluginType
	// Version is the newest contract version the agent speaks.
	Version int
	// MinVersion is the oldest it still speaks; 0 when Version is the only one.
	MinVersion int
	Handshake  plugin.HandshakeConfig
	// Plugins is the contract's go-plugin set per version, as the agent
	// speaks it (the plugin implementation left nil).
	Plugins map[int]plugin.PluginSet
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

// Process is a running plugin process.
type Process struct {
	client *plugin.Client
	cmd    *exec.Cmd
	// Info is what the plugin said of itself at launch.
	Info *basepb.PluginInfoResponse
}

// otherVersion finds go-plugin's complaint that the plugin negotiated a
// protocol version the agent does not speak, and the plugin's version in it.
var otherVersion = regexp.MustCompile(`(?i)incompatible API version with plugin\. Plugin version: (\d+)`)

// Launch starts a plugin process, checks its handshake, contract version and
// type, and returns the process and the contract's client (T) talking to it.
func Launch[T Plugin](ctx context.Context, c Contract, cfg LaunchConfig) (*Process, T, error) {
	var none T
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
		HandshakeConfig:  c.Handshake,
		VersionedPlugins: c.Plugins,
		Cmd:              cfg.Cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		Logger:           cfg.Logger,
		StartTimeout:     cfg.StartTimeout,
		AutoMTLS:         true,
		// The agent, not go-plugin, decides when a plugin ends.
		Managed: false,
	})
	p := &Process{client: client, cmd: cfg.Cmd}
	rpc, err := client.Client()
	if err != nil {
		p.Kill()
		if m := otherVersion.FindStringSubmatch(err.Error()); m != nil {
			fix := "rebuild the plugin against plugins/" + c.Kind + " of this FluxVM release"
			if v, _ := strconv.Atoi(m[1]); v > c.Version {
				fix = fmt.Sprintf("upgrade this agent, or use a build of the plugin for contract version %d", c.Version)
			}
			speaks := fmt.Sprintf("version %d only", c.Version)
			if c.MinVersion > 0 && c.MinVersion < c.Version {
				speaks = fmt.Sprintf("versions %d to %d", c.MinVersion, c.Version)
			}
			return nil, none, fmt.Errorf("launch %s plugin %s: it failed the FluxVM plugin handshake: it speaks %s contract version %s, "+
				"and this agent speaks %s; %s (%w)", c.Kind, name, c.Kind, m[1], speaks, fix, err)
		}
		return nil, none, fmt.Errorf("launch %s plugin %s: it did not complete the FluxVM plugin handshake (is it a FluxVM %s plugin of contract version %d?): %w",
			c.Kind, name, c.Kind, c.Version, err)
	}
	raw, err := rpc.Dispense(c.Kind)
	if err != nil {
		p.Kill()
		return nil, none, fmt.Errorf("launch %s plugin %s: %w", c.Kind, name, err)
	}
	impl, ok := raw.(T)
	if !ok {
		p.Kill()
		return nil, none, fmt.Errorf("launch %s plugin %s: it serves no %s", c.Kind, name, c.Kind)
	}
	infoCtx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	p.Info, err = impl.PluginInfo(infoCtx)
	if err != nil {
		p.Kill()
		return nil, none, fmt.Errorf("launch %s plugin %s: plugin info: %w", c.Kind, name, err)
	}
	if t := p.Info.GetType(); t != c.Type {
		p.Kill()
		return nil, none, fmt.Errorf("launch %s plugin %s: it says it is a plugin of type %s, not a %s", c.Kind, name, t, c.Kind)
	}
	return p, impl, nil
}

// Version is the contract version the handshake settled on.
func (p *Process) Version() int { return p.client.NegotiatedVersion() }

// Pid is the plugin process's id.
func (p *Process) Pid() int {
	if p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Ping checks that the plugin process answers its health service.
func (p *Process) Ping() error {
	rpc, err := p.client.Client()
	if err != nil {
		return err
	}
	return rpc.Ping()
}

// Exited reports whether the plugin process has ended.
func (p *Process) Exited() bool { return p.client.Exited() }

// Kill ends the plugin process (gracefully, then by force). What it started
// (VMs, links) keeps running; a new plugin process takes it back.
func (p *Process) Kill() {
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
