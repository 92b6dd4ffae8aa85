// Package pluginhost starts the node's driver and network plugins and keeps
// them running: it configures each one, follows a driver's fingerprint, and
// when a plugin process dies it starts a new one (with backoff); for a driver
// it tells the agent, which then recovers that driver's VMs (a network
// plugin recovers its own state from the kernel). The drivers it hands out
// call an optional RPC only when the plugin claims its capability (see gate).
package pluginhost

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/plugins/network"
	netpb "github.com/fluxvm/fluxvm/plugins/network/proto"
	"github.com/hashicorp/go-hclog"
)

// Plugin says how to run one driver or network plugin.
type Plugin struct {
	Name string
	// Network is set for a network plugin (the network contract, package
	// plugins/network); otherwise the plugin is a driver.
	Network bool
	// Command makes the command that starts the plugin (a new one each time).
	Command func() *exec.Cmd
	// Config turns the plugin's schema into its configuration JSON (the
	// agent decodes the HCL block against it).
	Config func(schema *basepb.ConfigSchemaResponse) ([]byte, error)
}

// Options configure a Host.
type Options struct {
	// StateDir is the agent's state directory: plugin N keeps its state in
	// StateDir/drivers/N (a network plugin in StateDir/networks/N) and logs
	// to StateDir/logs/N.log.
	StateDir string
	NodeName string
	Logger   hclog.Logger
	// Ready is called (from the plugin's supervisor goroutine) each time a
	// plugin process is up and configured: at start and after each restart.
	// d is the same capability-gated driver that Driver returns.
	Ready func(ctx context.Context, name string, d driver.Driver)
	// NetworkReady is Ready's counterpart for network plugins: called each
	// time a network plugin process is up and configured.
	NetworkReady func(ctx context.Context, name string, n network.Network)
	// MinBackoff and MaxBackoff bound the wait before restarting a plugin
	// (defaults 250ms and 30s).
	MinBackoff, MaxBackoff time.Duration
}

// Status is one plugin as the host sees it.
type Status struct {
	Name string
	// Network is set for a network plugin: then NetworkCapabilities is
	// set, and Capabilities and Fingerprint are not.
	Network             bool
	Up                  bool
	Info                *basepb.PluginInfoResponse
	Capabilities        *pb.CapabilitiesResponse
	Fingerprint         *pb.FingerprintResponse
	NetworkCapabilities *netpb.CapabilitiesResponse
	Restarts            int
	LastError           string
	Pid                 int
}

// Host runs a set of plugins.
type Host struct {
	opts    Options
	mu      sync.Mutex
	plugins map[string]*supervised
	wg      sync.WaitGroup
}

type supervised struct {
	spec   Plugin
	logger hclog.Logger
	status Status
	proc   *base.Process
	// driver is a driver plugin's proc behind the gate of the
	// capabilities it claimed.
	driver driver.Driver
	// net is a network plugin's proc.
	net network.Network
}

// New makes a Host; Start launches the plugins.
func New(opts Options) *Host {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.MinBackoff == 0 {
		opts.MinBackoff = 250 * time.Millisecond
	}
	if opts.MaxBackoff == 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	return &Host{opts: opts, plugins: map[string]*supervised{}}
}

// StateDir is where the named plugin keeps its state (and its VMs'
// workspaces, under vms/).
func (h *Host) StateDir(name string) string {
	return filepath.Join(h.opts.StateDir, "drivers", name)
}

// networkStateDir is where the named network plugin may keep state.
func (h *Host) networkStateDir(name string) string {
	return filepath.Join(h.opts.StateDir, "networks", name)
}

// Start launches every plugin once and returns the first error (a plugin
// that cannot start or whose config does not decode), after killing what it
// started. Then each plugin is supervised until ctx ends.
func (h *Host) Start(ctx context.Context, plugins []Plugin) error {
	for _, p := range plugins {
		logger, err := h.pluginLogger(p.Name)
		if err != nil {
			h.Close()
			return err
		}
		s := &supervised{spec: p, logger: logger, status: Status{Name: p.Name, Network: p.Network}}
		h.mu.Lock()
		h.plugins[p.Name] = s
		h.mu.Unlock()
		if err := h.launch(ctx, s); err != nil {
			h.Close()
			return err
		}
	}
	for _, s := range h.plugins {
		h.wg.Add(1)
		go h.supervise(ctx, s)
	}
	return nil
}

// launch starts one plugin process, configures it and starts following its
// fingerprint.
func (h *Host) launch(ctx context.Context, s *supervised) error {
	if s.spec.Network {
		return h.launchNetwork(ctx, s)
	}
	name := s.spec.Name
	p, err := driver.Launch(ctx, driver.LaunchConfig{Cmd: s.spec.Command(), Logger: s.logger})
	if err != nil {
		return fmt.Errorf("plugin %s: %w", name, err)
	}
	fail := func(err error) error { p.Kill(); return fmt.Errorf("plugin %s: %w", name, err) }
	if err := h.configure(ctx, p, s, h.StateDir(name)); err != nil {
		return fail(err)
	}
	// The contract says capabilities do not change while a plugin process
	// runs: asked once here, they gate every optional call to this process.
	caps, err := p.Capabilities(ctx)
	if err != nil {
		return fail(fmt.Errorf("capabilities: %w", err))
	}
	gated := &gate{Driver: p, name: name, caps: caps}
	fctx, cancel := context.WithCancel(ctx)
	fps, err := p.Fingerprint(fctx)
	if err != nil {
		cancel()
		return fail(fmt.Errorf("fingerprint: %w", err))
	}
	// The first fingerprint comes at once (the contract says so); wait for
	// it so that health is known when Start returns.
	var first *pb.FingerprintResponse
	select {
	case first = <-fps:
	case <-time.After(30 * time.Second):
	}
	h.mu.Lock()
	s.proc, s.driver = p.Process, gated
	s.status.Up = true
	s.status.Info = p.Info
	s.status.Capabilities = caps
	s.status.Fingerprint = first
	s.status.Pid = p.Pid()
	s.status.LastError = ""
	h.mu.Unlock()
	if first != nil && first.Health != pb.Health_HEALTH_HEALTHY {
		h.opts.Logger.Warn("driver is not healthy", "plugin", name, "health", first.Health.String(), "why", first.Description)
	}
	go func() {
		defer cancel()
		for fp := range fps {
			h.mu.Lock()
			s.status.Fingerprint = fp
			h.mu.Unlock()
		}
	}()
	if h.opts.Ready != nil {
		h.opts.Ready(ctx, name, gated)
	}
	return nil
}

// configure hands a launched plugin (a driver or a network plugin: both
// serve the base service) its HCL block, checked against the schema the
// plugin describes, and its state directory dir, made 0700 if missing.
func (h *Host) configure(ctx context.Context, p base.Plugin, s *supervised, dir string) error {
	schema, err := p.ConfigSchema(ctx)
	if err != nil {
		return fmt.Errorf("config schema: %w", err)
	}
	cfg, err := s.spec.Config(schema)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := p.SetConfig(ctx, &basepb.SetConfigRequest{ConfigJson: cfg, Agent: &basepb.AgentContext{
		StateDir: dir, NodeName: h.opts.NodeName, LogLevel: basepb.LogLevel_LOG_LEVEL_DEBUG,
	}}); err != nil {
		return fmt.Errorf("set config: %w", err)
	}
	return nil
}

// supervise restarts the plugin whenever its process ends, until ctx ends.
func (h *Host) supervise(ctx context.Context, s *supervised) {
	defer h.wg.Done()
	backoff := h.opts.MinBackoff
	for {
		h.mu.Lock()
		p := s.proc
		h.mu.Unlock()
		if p != nil {
			up := time.Now()
			for !p.Exited() {
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
			if time.Since(up) > time.Minute {
				backoff = h.opts.MinBackoff
			}
			h.mu.Lock()
			s.proc, s.driver, s.net = nil, nil, nil
			s.status.Up = false
			s.status.Pid = 0
			s.status.LastError = "plugin process exited"
			h.mu.Unlock()
			h.opts.Logger.Error("plugin exited; restarting", "plugin", s.spec.Name, "network", s.spec.Network, "after", backoff)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		h.mu.Lock()
		s.status.Restarts++
		h.mu.Unlock()
		if err := h.launch(ctx, s); err != nil {
			h.mu.Lock()
			s.status.LastError = err.Error()
			h.mu.Unlock()
			h.opts.Logger.Error("restart plugin", "plugin", s.spec.Name, "error", err)
			backoff = min(backoff*2, h.opts.MaxBackoff)
			continue
		}
		h.opts.Logger.Info("plugin restarted", "plugin", s.spec.Name)
	}
}

// pluginLogger logs a plugin's lines to StateDir/logs/NAME.log (kept across
// restarts of the plugin and of the agent) and to the agent's logger.
func (h *Host) pluginLogger(name string) (hclog.Logger, error) {
	dir := filepath.Join(h.opts.StateDir, "logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("plugin %s log: %w", name, err)
	}
	// The file stays open for the agent's life.
	var out io.Writer = f
	if w := h.opts.Logger.StandardWriter(&hclog.StandardLoggerOptions{InferLevels: true}); w != nil {
		out = io.MultiWriter(f, w)
	}
	return hclog.New(&hclog.LoggerOptions{Name: "plugin." + name, Level: hclog.Debug, Output: out}), nil
}

// Driver returns the named plugin's driver, behind the gate of its
// capabilities, or a driver.ErrUnavailable error while it is being
// restarted.
func (h *Host) Driver(name string) (driver.Driver, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.plugins[name]
	if !ok || s.spec.Network {
		return nil, driver.Errorf(driver.ErrInvalid, "no driver plugin %q on this node", name)
	}
	if s.driver == nil {
		return nil, &driver.Error{Kind: driver.ErrUnavailable, Msg: fmt.Sprintf("driver plugin %s is down (restarting)", name)}
	}
	return s.driver, nil
}

// Status reports every plugin, sorted by name.
func (h *Host) Status() []Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Status, 0, len(h.plugins))
	for _, s := range h.plugins {
		out = append(out, s.status)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Close kills every plugin process. VMs keep running.
func (h *Host) Close() {
	h.mu.Lock()
	var procs []*base.Process
	for _, s := range h.plugins {
		if s.proc != nil {
			procs = append(procs, s.proc)
			s.proc, s.driver, s.net = nil, nil, nil
			s.status.Up = false
		}
	}
	h.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
}

// Wait waits for the supervisors to end (after ctx given to Start ends).
func (h *Host) Wait() { h.wg.Wait() }
