// Package link is the node agent's line to central: it heartbeats the
// node's address, capacity, drivers, labels and VMs to central at the
// interval central asks for, so central can place VMs here and notice when
// this node goes quiet; and it keeps the node channel open (RunChannel),
// through which central calls the node's API.
package link

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// DefaultInterval is the heartbeat interval until central names another.
const DefaultInterval = 10 * time.Second

// repeatEvery is how often an unchanged failure is logged again.
const repeatEvery = 5 * time.Minute

// Options configure Run.
type Options struct {
	// CentralURL is central's base URL; Token its fleet token (empty: none).
	CentralURL, Token string
	// Node is this node's name in the fleet.
	Node string
	// Report builds the heartbeat: the node's state now.
	Report func(ctx context.Context) (sdk.Heartbeat, error)
	// Interval between heartbeats before central's first reply (default
	// DefaultInterval).
	Interval time.Duration
	Logger   hclog.Logger
	Version  string
}

// Run heartbeats until ctx ends: the first at once, then every interval
// central asks for. Failures are logged when they start, when they change
// and every few minutes while they last, and recovery once; a node whose
// central is away keeps running its VMs.
func Run(ctx context.Context, opts Options) error {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	client, err := sdk.NewFleetClient(opts.CentralURL, sdk.WithToken(opts.Token),
		sdk.WithUserAgent("fluxvm-agent/"+opts.Version))
	if err != nil {
		return fmt.Errorf("central link: %w", err)
	}
	log := opts.Logger
	interval := opts.Interval
	var lastErr string
	var lastLogged time.Time
	failing := false
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		reply, err := beat(ctx, client, opts, interval)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			msg := err.Error()
			if msg != lastErr || time.Since(lastLogged) >= repeatEvery {
				log.Warn("cannot heartbeat to central; retrying", "central", opts.CentralURL, "error", msg)
				lastErr, lastLogged = msg, time.Now()
			}
			failing = true
		default:
			if failing {
				log.Info("heartbeating to central again", "central", opts.CentralURL)
			} else if lastLogged.IsZero() {
				log.Info("reporting to central", "central", opts.CentralURL, "interval", reply.IntervalSeconds)
				lastLogged = time.Now()
			}
			failing, lastErr = false, ""
			if reply.IntervalSeconds > 0 {
				interval = time.Duration(reply.IntervalSeconds) * time.Second
			}
		}
		timer.Reset(interval)
	}
}

func beat(ctx context.Context, client *sdk.FleetClient, opts Options, interval time.Duration) (*sdk.HeartbeatReply, error) {
	// A heartbeat that takes longer than the interval is late anyway.
	ctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
	defer cancel()
	hb, err := opts.Report(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the node's state: %w", err)
	}
	return client.Heartbeat(ctx, opts.Node, hb)
}

// Snapshot builds a heartbeat from the node's health (its drivers and the
// network plugins that are up), each driver's guest operating systems and
// its VMs.
func Snapshot(url string, h *sdk.NodeHealth, guestOS map[string][]string, nested bool, vms []*sdk.VM) sdk.Heartbeat {
	hb := sdk.Heartbeat{URL: url, Version: h.Version, Labels: h.Labels, Capacity: h.Capacity, Nested: nested,
		Drivers: make([]sdk.HeartbeatDriver, 0, len(h.Drivers)), VMs: make([]sdk.HeartbeatVM, 0, len(vms))}
	for _, d := range h.Drivers {
		g := guestOS[d.Name]
		if g == nil {
			g = []string{}
		}
		hb.Drivers = append(hb.Drivers, sdk.HeartbeatDriver{Name: d.Name, Health: d.Health, Simulated: d.Simulated,
			GuestOS: g, Capabilities: d.Capabilities})
	}
	for _, n := range h.Networks {
		if n.Health == "up" {
			hb.Networks = append(hb.Networks, n.Name)
		}
	}
	for _, vm := range vms {
		hb.VMs = append(hb.VMs, sdk.HeartbeatVM{ID: vm.ID, Name: vm.Name, Tenant: vm.Tenant, State: vm.State,
			VCPUs: vm.VCPUs, MemoryMiB: vm.MemoryMiB, GuestOS: vm.GuestOS})
	}
	return hb
}
