//go:build linux

// Package qemu is FluxVM's QEMU hypervisor driver: it runs Linux guests in
// QEMU processes that outlive the plugin and controls them through QMP and the
// FluxVM guest agent. It is served by `fluxvm-agent plugin qemu`.
package qemu

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// Version is the driver's own version.
const Version = "0.1.0"

// fingerprintInterval is how often Fingerprint re-checks the host.
const fingerprintInterval = 30 * time.Second

// Driver is the QEMU driver. Construct it with New.
type Driver struct {
	logger hclog.Logger

	mu       sync.Mutex
	cfg      Config
	stateDir string // "" until SetConfig
	vms      map[string]*vm

	accelMu    sync.Mutex
	accel      *accelVerdict // cached per process
	accelDone  chan struct{} // closed when a probe finishes (replaced per probe)
	accelWatch []chan struct{}

	spares spares // QEMUs started ahead for resumes (spare.go)

	subMu sync.Mutex
	subs  map[chan *pb.Event]struct{}
}

var _ driver.Driver = (*Driver)(nil)

// New returns a QEMU driver that logs to logger.
func New(logger hclog.Logger) driver.Driver {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Driver{
		logger: logger,
		cfg:    defaultConfig(),
		vms:    map[string]*vm{},
		subs:   map[chan *pb.Event]struct{}{},
	}
}

// PluginInfo names the driver.
func (d *Driver) PluginInfo(context.Context) (*basepb.PluginInfoResponse, error) {
	return &basepb.PluginInfoResponse{
		Name:        driverName,
		Type:        basepb.PluginType_PLUGIN_TYPE_DRIVER,
		Version:     Version,
		ApiVersions: []uint32{driver.APIVersion},
		Description: "QEMU via QMP (microvm or pc, KVM when it works, else TCG)",
	}, nil
}

// ConfigSchema describes Config.
func (d *Driver) ConfigSchema(context.Context) (*basepb.ConfigSchemaResponse, error) {
	return ConfigSchema(), nil
}

// SetConfig validates and applies the configuration and makes the VM
// directory. It starts the acceleration probe in the background so the first
// StartVM does not pay for it.
func (d *Driver) SetConfig(_ context.Context, req *basepb.SetConfigRequest) error {
	cfg, err := parseConfig(req.GetConfigJson())
	if err != nil {
		return err
	}
	stateDir := req.GetAgent().GetStateDir()
	if stateDir == "" || !filepath.IsAbs(stateDir) {
		return driver.Errorf(driver.ErrInvalid, "qemu driver: agent.state_dir %q must be an absolute path", stateDir)
	}
	stateDir = filepath.Clean(stateDir)
	if err := os.MkdirAll(filepath.Join(stateDir, "vms"), 0o700); err != nil {
		return fmt.Errorf("qemu driver: make vm directory: %w", err)
	}
	d.mu.Lock()
	changed := d.cfg.QEMUBinary != cfg.QEMUBinary || d.cfg.Accel != cfg.Accel || d.cfg.Machine != cfg.Machine
	newDir := d.stateDir != stateDir
	d.cfg, d.stateDir = cfg, stateDir
	d.mu.Unlock()
	if newDir {
		clearSpares(stateDir) // an earlier plugin process's (spare.go)
	}
	d.accelMu.Lock()
	if changed {
		d.accel = nil
	}
	d.accelMu.Unlock()
	go func() { _, _ = d.accelerator(context.Background()) }()
	return nil
}

// config returns the current configuration and state directory.
func (d *Driver) config() (Config, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cfg, d.stateDir
}

// Capabilities lists what the driver supports.
func (d *Driver) Capabilities(context.Context) (*pb.CapabilitiesResponse, error) {
	return &pb.CapabilitiesResponse{
		Pause:      true,
		Screenshot: true,
		Input:      true,
		Exec:       true,
		GuestOs:    []pb.GuestOS{pb.GuestOS_GUEST_OS_LINUX},
		Headless:   true,
		// Internal qcow2 snapshots of the overlay disk (snapshot.go).
		DiskSnapshots:   true,
		MemorySnapshots: true,
		Clones:          true,
		// Host forwards of user-mode networking (forward.go).
		PortForward: true,
		// Raw files as extra virtio-blk disks (cmdline.go).
		Volumes: true,
	}, nil
}

// accelerator returns the accelerator VMs use: forced by config, cached for
// this process, cached on disk for this QEMU, kernel and machine, or probed.
func (d *Driver) accelerator(ctx context.Context) (accelVerdict, error) {
	cfg, stateDir := d.config()
	for {
		d.accelMu.Lock()
		if d.accel != nil {
			v := *d.accel
			d.accelMu.Unlock()
			return v, nil
		}
		if d.accelDone != nil { // a probe runs: wait for it
			done := d.accelDone
			d.accelMu.Unlock()
			select {
			case <-done:
				continue
			case <-ctx.Done():
				return accelVerdict{}, ctx.Err()
			}
		}
		d.accelDone = make(chan struct{})
		d.accelMu.Unlock()
		break
	}
	v := d.decideAccel(cfg, stateDir)
	d.accelMu.Lock()
	d.accel = &v
	close(d.accelDone)
	d.accelDone = nil
	watchers := d.accelWatch
	d.accelWatch = nil
	d.accelMu.Unlock()
	for _, w := range watchers {
		close(w)
	}
	return v, nil
}

// decideAccel works out the accelerator without any caching in memory.
func (d *Driver) decideAccel(cfg Config, stateDir string) accelVerdict {
	switch cfg.Accel {
	case "kvm":
		return accelVerdict{Accel: "kvm", Reason: "forced by config (accel = \"kvm\")"}
	case "tcg":
		return accelVerdict{Accel: "tcg", Reason: "forced by config (accel = \"tcg\")"}
	}
	version, err := qemuVersion(cfg.QEMUBinary)
	if err != nil {
		return accelVerdict{Accel: "tcg", Reason: fmt.Sprintf("cannot run %s to probe KVM: %v", cfg.QEMUBinary, err)}
	}
	key := accelKey(version, cfg.Machine)
	cache := ""
	if stateDir != "" {
		cache = filepath.Join(stateDir, "accel.json")
		// Plugin processes started together probe one at a time; the later
		// ones find the verdict cached.
		if lock, err := os.OpenFile(cache+".lock", os.O_CREATE|os.O_RDWR, 0o600); err == nil {
			defer lock.Close()
			_ = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		}
		if v, ok := loadAccelVerdict(cache, key); ok {
			return v
		}
	}
	ok, reason := probeKVM(context.Background(), cfg.QEMUBinary, cfg.Machine)
	v := accelVerdict{Accel: "tcg", Reason: reason, Key: key}
	if ok {
		v.Accel = "kvm"
	}
	d.logger.Info("acceleration probed", "accel", v.Accel, "reason", v.Reason)
	if cache != "" {
		if err := saveAccelVerdict(cache, v); err != nil {
			d.logger.Warn("cannot cache the acceleration verdict", "path", cache, "error", err)
		}
	}
	return v
}

// accelKnown returns the verdict if it is known now, and otherwise a channel
// closed when it is.
func (d *Driver) accelKnown() (*accelVerdict, <-chan struct{}) {
	d.accelMu.Lock()
	defer d.accelMu.Unlock()
	if d.accel != nil {
		v := *d.accel
		return &v, nil
	}
	w := make(chan struct{})
	d.accelWatch = append(d.accelWatch, w)
	return nil, w
}

// qemuVersion runs `qemu --version` and returns the version number.
func qemuVersion(binary string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %v: %s", binary, err, strings.TrimSpace(string(out)))
	}
	// "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
	first, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(first)
	for i, w := range f {
		if w == "version" && i+1 < len(f) {
			return f[i+1], nil
		}
	}
	return "", fmt.Errorf("%s --version printed no version: %q", binary, first)
}

// Fingerprint reports health at once, then every 30 s when it changed.
func (d *Driver) Fingerprint(ctx context.Context) (<-chan *pb.FingerprintResponse, error) {
	ch := make(chan *pb.FingerprintResponse, 1)
	go func() {
		defer close(ch)
		var last *pb.FingerprintResponse
		tick := time.NewTicker(fingerprintInterval)
		defer tick.Stop()
		for {
			fp, accelPending := d.fingerprint()
			if last == nil || !sameFingerprint(last, fp) {
				select {
				case ch <- fp:
					last = fp
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-accelPending: // nil (blocks forever) once the verdict is known
			}
		}
	}()
	return ch, nil
}

// fingerprint checks the host once. The channel is closed when a pending
// acceleration verdict becomes known (nil when it is known already).
func (d *Driver) fingerprint() (*pb.FingerprintResponse, <-chan struct{}) {
	cfg, _ := d.config()
	fp := &pb.FingerprintResponse{Attributes: map[string]string{"qemu.machine": cfg.Machine}}
	if _, err := exec.LookPath(cfg.QEMUBinary); err != nil {
		fp.Health = pb.Health_HEALTH_UNDETECTED
		fp.Description = fmt.Sprintf("%s not found: apt-get install qemu-system-x86 qemu-utils", cfg.QEMUBinary)
		return fp, nil
	}
	version, err := qemuVersion(cfg.QEMUBinary)
	if err != nil {
		fp.Health = pb.Health_HEALTH_UNHEALTHY
		fp.Description = fmt.Sprintf("QEMU does not run: %v", err)
		return fp, nil
	}
	fp.Attributes["qemu.version"] = version
	if _, err := exec.LookPath(cfg.QEMUImg); err != nil {
		fp.Health = pb.Health_HEALTH_UNHEALTHY
		fp.Description = fmt.Sprintf("%s not found (needed for overlay disks): apt-get install qemu-utils", cfg.QEMUImg)
		return fp, nil
	}
	var pending <-chan struct{}
	if v, wait := d.accelKnown(); v != nil {
		fp.Attributes["qemu.accel"] = v.Accel
		fp.Attributes["qemu.accel_reason"] = v.Reason
	} else {
		fp.Attributes["qemu.accel"] = "probing"
		pending = wait
		go func() { _, _ = d.accelerator(context.Background()) }()
	}
	fp.Health = pb.Health_HEALTH_HEALTHY
	fp.Description = fmt.Sprintf("QEMU %s, %s", version, fp.Attributes["qemu.accel"])
	vcpus := int64(runtime.NumCPU())
	if cfg.VCPUs > 0 {
		vcpus = cfg.VCPUs
	}
	fp.Resources = &pb.Resources{Vcpus: vcpus, MemoryMib: hostMemoryMiB()}
	return fp, pending
}

// sameFingerprint compares what the contract says counts as a change.
func sameFingerprint(a, b *pb.FingerprintResponse) bool {
	return a.Health == b.Health && a.Description == b.Description &&
		maps.Equal(a.Attributes, b.Attributes) &&
		a.GetResources().GetVcpus() == b.GetResources().GetVcpus() &&
		a.GetResources().GetMemoryMib() == b.GetResources().GetMemoryMib() &&
		a.GetResources().GetMacosSlots() == b.GetResources().GetMacosSlots()
}

// hostMemoryMiB reads MemTotal from /proc/meminfo.
func hostMemoryMiB() int64 { return meminfoMiB("MemTotal:") }

// availableMemoryMiB reads MemAvailable from /proc/meminfo.
func availableMemoryMiB() int64 { return meminfoMiB("MemAvailable:") }

// meminfoMiB reads one field of /proc/meminfo, in MiB; 0 when unknown.
func meminfoMiB(field string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb / 1024
		}
	}
	return 0
}

// Events sends VM state changes until ctx ends.
func (d *Driver) Events(ctx context.Context) (<-chan *pb.Event, error) {
	sub := make(chan *pb.Event, 256)
	d.subMu.Lock()
	d.subs[sub] = struct{}{}
	d.subMu.Unlock()
	out := make(chan *pb.Event)
	go func() {
		defer close(out)
		defer func() {
			d.subMu.Lock()
			delete(d.subs, sub)
			d.subMu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-sub:
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

// emit sends an event to every subscriber; a subscriber too slow to keep 256
// events buffered loses the newest.
func (d *Driver) emit(id string, typ pb.EventType, msg string) {
	ev := &pb.Event{VmId: id, Type: typ, Message: msg, TimeUnixNano: time.Now().UnixNano()}
	d.logger.Debug("vm event", "vm", id, "type", typ, "message", msg)
	d.subMu.Lock()
	defer d.subMu.Unlock()
	for sub := range d.subs {
		select {
		case sub <- ev:
		default:
			d.logger.Warn("event subscriber is not keeping up; dropped an event", "vm", id, "type", typ)
		}
	}
}
