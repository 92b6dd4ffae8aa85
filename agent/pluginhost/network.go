package pluginhost

import (
	"context"
	"fmt"

	"github.com/fluxvm/fluxvm/plugins/network"
)

// launchNetwork starts one network plugin process and configures it. A
// network plugin has no fingerprint: it is up while its process answers.
// Its state is its own (the netns plugin reads it back from the kernel), so
// a restarted plugin needs nothing from the agent, and the VMs' taps, with
// the traffic through them, stay while no plugin process runs.
func (h *Host) launchNetwork(ctx context.Context, s *supervised) error {
	name := s.spec.Name
	p, err := network.Launch(ctx, network.LaunchConfig{Cmd: s.spec.Command(), Logger: s.logger})
	if err != nil {
		return fmt.Errorf("network plugin %s: %w", name, err)
	}
	fail := func(err error) error { p.Kill(); return fmt.Errorf("network plugin %s: %w", name, err) }
	if err := h.configure(ctx, p, s, h.networkStateDir(name)); err != nil {
		return fail(err)
	}
	caps, err := p.Capabilities(ctx)
	if err != nil {
		return fail(fmt.Errorf("capabilities: %w", err))
	}
	h.mu.Lock()
	s.proc, s.net = p.Process, p.Network
	s.status.Up = true
	s.status.Info = p.Info
	s.status.NetworkCapabilities = caps
	s.status.Pid = p.Pid()
	s.status.LastError = ""
	h.mu.Unlock()
	if h.opts.NetworkReady != nil {
		h.opts.NetworkReady(ctx, name, p.Network)
	}
	return nil
}

// Network returns the named network plugin, or a network.ErrUnavailable
// error while it is being restarted.
func (h *Host) Network(name string) (network.Network, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.plugins[name]
	if !ok || !s.spec.Network {
		return nil, network.Errorf(network.ErrInvalid, "no network plugin %q on this node", name)
	}
	if s.net == nil {
		return nil, network.Errorf(network.ErrUnavailable, "network plugin %s is down (restarting)", name)
	}
	return s.net, nil
}
