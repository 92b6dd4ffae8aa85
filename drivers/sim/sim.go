// Package sim is FluxVM's simulated hypervisor: a driver plugin that boots no
// guests but keeps honest VM state and resource accounting on disk, so it
// survives plugin restarts like a real driver. It serves scale tests, demos and
// hosts without a hypervisor, and says that it is a simulator everywhere it
// shows up (plugin info, fingerprint, VM attributes, console, screen, logs).
package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base"
	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
)

const (
	driverName = "sim"
	// handleVersion is the newest (and only) handle format this driver
	// writes and reads.
	handleVersion = 1
	version       = "0.1.0"
	description   = "simulated hypervisor: boots no guests"
)

// config is the driver's configuration block.
type config struct {
	// VCPUs and MemoryMiB are what the simulated host offers to VMs.
	VCPUs     int64 `json:"vcpus"`
	MemoryMiB int64 `json:"memory_mib"`
	// MacOSSlots bounds macOS VMs running (or paused) at once.
	MacOSSlots int64 `json:"macos_slots"`
	// BootDelayMS is how long a simulated boot takes until the "guest
	// agent" answers, for demos that want boots to take time.
	BootDelayMS int64 `json:"boot_delay_ms"`
	// GuestOS lists the guest systems the simulator accepts.
	GuestOS []string `json:"guest_os"`
	// PortForwards maps a guest TCP port ("22") to a host address
	// ("127.0.0.1:2222") that ForwardPort returns for that port of every
	// running VM, so that a test, a benchmark or a demo can serve a
	// simulated VM's "guest port" from a real server on the host.
	PortForwards map[string]string `json:"port_forwards"`
}

func defaultConfig() config {
	return config{VCPUs: 64, MemoryMiB: 262144, MacOSSlots: 2, BootDelayMS: 0, GuestOS: []string{"linux", "macos"}}
}

// parseConfig decodes config JSON over the defaults and checks its values.
func parseConfig(data []byte) (config, error) {
	c := defaultConfig()
	if len(bytes.TrimSpace(data)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return config{}, driver.Errorf(driver.ErrInvalid, "sim config: %v", err)
		}
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"vcpus", c.VCPUs}, {"memory_mib", c.MemoryMiB}, {"macos_slots", c.MacOSSlots}, {"boot_delay_ms", c.BootDelayMS}} {
		if f.v < 0 {
			return config{}, driver.Errorf(driver.ErrInvalid, "sim config: %s must not be negative (got %d)", f.name, f.v)
		}
	}
	seen := map[string]bool{}
	for _, os := range c.GuestOS {
		if _, ok := base.ParseEnum[pb.GuestOS](os); !ok {
			return config{}, driver.Errorf(driver.ErrInvalid, "sim config: guest_os %q is not one of \"linux\", \"macos\"", os)
		}
		if seen[os] {
			return config{}, driver.Errorf(driver.ErrInvalid, "sim config: guest_os lists %q twice", os)
		}
		seen[os] = true
	}
	for port, addr := range c.PortForwards {
		if err := checkPortForward(port, addr); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// runs reports whether the configuration lets the simulator run os.
func (c config) runs(os pb.GuestOS) bool {
	return slices.Contains(c.GuestOS, base.EnumName(os))
}

// Driver is the simulated hypervisor. All its state lives in VM workspaces
// under the state directory; memory holds only what this process knows and
// who listens.
type Driver struct {
	log hclog.Logger
	now func() time.Time

	mu         sync.Mutex
	cfg        config
	stateDir   string // empty until SetConfig
	vms        map[string]*vm
	active     map[string]usage // running and paused VMs on disk, known or not
	fpSubs     map[*notifier]struct{}
	eventSubs  map[*eventQueue]struct{}
	configured bool
}

// usage is what one running or paused VM takes from the host.
type usage struct {
	vcpus, memoryMiB int64
	macos            bool
}

var _ driver.Driver = (*Driver)(nil)

// New returns the simulated driver. It logs through logger.
func New(logger hclog.Logger) driver.Driver {
	return newDriver(logger, time.Now)
}

func newDriver(logger hclog.Logger, now func() time.Time) *Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Driver{
		log:       logger,
		now:       now,
		cfg:       defaultConfig(),
		vms:       map[string]*vm{},
		active:    map[string]usage{},
		fpSubs:    map[*notifier]struct{}{},
		eventSubs: map[*eventQueue]struct{}{},
	}
}

// PluginInfo names the driver and says that it is a simulator.
func (d *Driver) PluginInfo(context.Context) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Name:        driverName,
		Type:        basepb.PluginType_PLUGIN_TYPE_DRIVER,
		Version:     version,
		ApiVersions: []uint32{driver.APIVersion},
		Description: description,
		Simulated:   true,
	}, nil
}

// ConfigSchema describes the sim's configuration block.
func (d *Driver) ConfigSchema(context.Context) (*basepb.ConfigSchemaResponse, error) {
	def := defaultConfig()
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	const number, list = basepb.AttributeType_ATTRIBUTE_TYPE_NUMBER, basepb.AttributeType_ATTRIBUTE_TYPE_LIST_STRING
	return &basepb.ConfigSchemaResponse{Attributes: []*basepb.ConfigAttribute{
		{Name: "vcpus", Type: number, DefaultJson: js(def.VCPUs), Description: "vCPUs the simulated host offers to VMs"},
		{Name: "memory_mib", Type: number, DefaultJson: js(def.MemoryMiB), Description: "memory (MiB) the simulated host offers to VMs"},
		{Name: "macos_slots", Type: number, DefaultJson: js(def.MacOSSlots), Description: "macOS VMs that may run at once"},
		{Name: "boot_delay_ms", Type: number, DefaultJson: js(def.BootDelayMS), Description: "how long a simulated boot takes until the guest agent is ready"},
		{Name: "guest_os", Type: list, DefaultJson: js(def.GuestOS), Description: "guest systems the simulator accepts: linux, macos"},
		{Name: "port_forwards", Type: basepb.AttributeType_ATTRIBUTE_TYPE_MAP_STRING, DefaultJson: "{}", Description: `guest TCP port -> host "ip:port" that ForwardPort answers for every running VM (a host server standing in for the guest's port)`},
	}}, nil
}

// SetConfig takes the configuration and reads the VMs already on disk, so
// that resources held by VMs of an earlier plugin process stay accounted for.
func (d *Driver) SetConfig(_ context.Context, req *basepb.SetConfigRequest) error {
	c, err := parseConfig(req.GetConfigJson())
	if err != nil {
		return err
	}
	dir := req.GetAgent().GetStateDir()
	if dir == "" || !filepath.IsAbs(dir) {
		return driver.Errorf(driver.ErrInvalid, "sim config: the agent's state_dir must be an absolute path (got %q)", dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "vms"), 0o700); err != nil {
		return fmt.Errorf("sim: create state dir: %w", err)
	}
	active := map[string]usage{}
	entries, err := os.ReadDir(filepath.Join(dir, "vms"))
	if err != nil {
		return fmt.Errorf("sim: read state dir: %w", err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		rec, spec, err := readRecord(filepath.Join(dir, "vms", e.Name()))
		if err != nil {
			d.log.Warn("sim: skipping unreadable vm workspace", "vm", e.Name(), "error", err)
			continue
		}
		if rec.State == stateRunning || rec.State == statePaused {
			active[spec.Id] = usageOf(spec)
		}
	}

	d.mu.Lock()
	if d.stateDir != "" && d.stateDir != dir && len(d.vms) > 0 {
		d.mu.Unlock()
		return driver.Errorf(driver.ErrInvalid, "sim config: state_dir changed from %s to %s while this plugin holds VMs", d.stateDir, dir)
	}
	d.cfg, d.stateDir, d.active, d.configured = c, dir, active, true
	d.notifyFingerprintLocked()
	d.mu.Unlock()
	d.log.Info("sim: configured simulated host", "state_dir", dir, "vcpus", c.VCPUs, "memory_mib", c.MemoryMiB,
		"macos_slots", c.MacOSSlots, "active_vms_on_disk", len(active))
	return nil
}

// Capabilities: pause, screen and input are simulated honestly (state
// changes, a rendered screen that shows what was typed); so are snapshots
// and clones (see snapshot.go). Exec is false: a
// simulator has no guest to run commands in and must not invent output.
func (d *Driver) Capabilities(context.Context) (*pb.CapabilitiesResponse, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	guestOS := make([]pb.GuestOS, 0, len(d.cfg.GuestOS))
	for _, name := range d.cfg.GuestOS {
		os, _ := base.ParseEnum[pb.GuestOS](name) // parseConfig checked it
		guestOS = append(guestOS, os)
	}
	return &pb.CapabilitiesResponse{
		Pause:           true,
		Screenshot:      true,
		Input:           true,
		Exec:            false,
		Headless:        true,
		GuestOs:         guestOS,
		DiskSnapshots:   true,
		MemorySnapshots: true,
		Clones:          true,
		PortForward:     true,
		Volumes:         true,
	}, nil
}

// Exec is refused: the simulator runs no guest and fakes no output.
func (d *Driver) Exec(context.Context, *pb.ExecRequest, io.Writer, io.Writer) (int, error) {
	return 0, driver.Errorf(driver.ErrUnsupported, "sim: a simulated VM runs no guest, so it cannot run commands (exec capability is false)")
}

// fingerprintLocked describes the simulated host as it is now.
func (d *Driver) fingerprintLocked() *pb.FingerprintResponse {
	var vcpus, mem, macos int64
	for _, u := range d.active {
		vcpus += u.vcpus
		mem += u.memoryMiB
		if u.macos {
			macos++
		}
	}
	slots := d.cfg.MacOSSlots
	if !d.cfg.runs(pb.GuestOS_GUEST_OS_MACOS) {
		slots = 0
	}
	desc := "simulator: simulated hypervisor, boots no guests; resources are simulated"
	if !d.configured {
		desc += " (not configured yet: showing defaults)"
	}
	return &pb.FingerprintResponse{
		Health:      pb.Health_HEALTH_HEALTHY,
		Description: desc,
		Attributes: map[string]string{
			"sim.simulated":        "true",
			"sim.version":          version,
			"sim.vcpus_free":       fmt.Sprint(d.cfg.VCPUs - vcpus),
			"sim.memory_mib_free":  fmt.Sprint(d.cfg.MemoryMiB - mem),
			"sim.macos_slots_free": fmt.Sprint(max(slots-macos, 0)),
			"sim.boot_delay_ms":    fmt.Sprint(d.cfg.BootDelayMS),
		},
		Resources: &pb.Resources{Vcpus: d.cfg.VCPUs, MemoryMib: d.cfg.MemoryMiB, MacosSlots: slots},
	}
}

// notifier wakes one listener; a pending wake-up absorbs further ones.
type notifier struct{ c chan struct{} }

func (n *notifier) wake() {
	select {
	case n.c <- struct{}{}:
	default:
	}
}

func (d *Driver) notifyFingerprintLocked() {
	for n := range d.fpSubs {
		n.wake()
	}
}

// Fingerprint sends the simulated host's state at once and again whenever it
// changes (free resources, config).
func (d *Driver) Fingerprint(ctx context.Context) (<-chan *pb.FingerprintResponse, error) {
	n := &notifier{c: make(chan struct{}, 1)}
	d.mu.Lock()
	d.fpSubs[n] = struct{}{}
	first := d.fingerprintLocked()
	d.mu.Unlock()
	out := make(chan *pb.FingerprintResponse, 1)
	go func() {
		defer close(out)
		defer func() {
			d.mu.Lock()
			delete(d.fpSubs, n)
			d.mu.Unlock()
		}()
		last := first
		msg := first
		for {
			if msg != nil {
				select {
				case out <- msg:
				case <-ctx.Done():
					return
				}
				last = msg
			}
			select {
			case <-n.c:
			case <-ctx.Done():
				return
			}
			d.mu.Lock()
			next := d.fingerprintLocked()
			d.mu.Unlock()
			msg = nil
			if !proto.Equal(next, last) {
				msg = next
			}
		}
	}()
	return out, nil
}

// eventQueue buffers events for one Events listener without bounds, so a
// slow listener never blocks the driver and never loses an event.
type eventQueue struct {
	mu      sync.Mutex
	pending []*pb.Event
	n       notifier
}

func (d *Driver) publishLocked(id string, typ pb.EventType, msg string) {
	ev := &pb.Event{VmId: id, Type: typ, Message: "sim: " + msg, TimeUnixNano: d.now().UnixNano()}
	for q := range d.eventSubs {
		q.mu.Lock()
		q.pending = append(q.pending, ev)
		q.mu.Unlock()
		q.n.wake()
	}
}

// Events streams the state changes of every VM of this plugin process.
func (d *Driver) Events(ctx context.Context) (<-chan *pb.Event, error) {
	q := &eventQueue{n: notifier{c: make(chan struct{}, 1)}}
	d.mu.Lock()
	d.eventSubs[q] = struct{}{}
	d.mu.Unlock()
	out := make(chan *pb.Event, 16)
	go func() {
		defer close(out)
		defer func() {
			d.mu.Lock()
			delete(d.eventSubs, q)
			d.mu.Unlock()
		}()
		for {
			select {
			case <-q.n.c:
			case <-ctx.Done():
				return
			}
			q.mu.Lock()
			batch := q.pending
			q.pending = nil
			q.mu.Unlock()
			for _, ev := range batch {
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
