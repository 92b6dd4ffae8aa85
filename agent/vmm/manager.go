// Package vmm is the node's VM manager: it turns node API requests into
// driver calls, keeps every VM's record (and driver handle) in the local
// store, enforces the node's policy and capacity, deletes VMs whose TTL ran
// out, and recovers VMs whenever a driver plugin (re)starts.
package vmm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/agent/pluginhost"
	"github.com/fluxvm/fluxvm/agent/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	"golang.org/x/image/draw"
	"google.golang.org/protobuf/proto"
)

// Drivers is what the manager needs of the plugin host.
type Drivers interface {
	// Driver returns a running plugin's driver (ErrUnavailable while down).
	// Its optional RPCs refuse with ErrUnsupported, without calling the
	// plugin, when the plugin lacks their capability.
	Driver(name string) (driver.Driver, error)
	// Status reports every plugin.
	Status() []pluginhost.Status
	// StateDir is the directory of the named driver (VM workspaces in vms/).
	StateDir(name string) string
}

// Options configure a Manager.
type Options struct {
	Store   *store.Store
	Drivers Drivers
	// Networks are the node's network plugins; NetworkPlugin names the one
	// that gives VMs of network "tenant" their interfaces (empty: the node
	// has none, and refuses such VMs).
	Networks      Networks
	NetworkPlugin string
	// DriverOrder is the configured order of drivers; the first one that is
	// up and runs the guest OS takes a VM that names no driver, and the first
	// one's resources are the node's capacity.
	DriverOrder []string
	// AllowedImageDirs are the only directories images may come from.
	AllowedImageDirs []string
	// Reserved is kept for the host and never given to VMs.
	Reserved sdk.Resources
	NodeName string
	Version  string
	Labels   map[string]string
	Logger   hclog.Logger
	// Now is the clock (time.Now by default); TTLs are measured with it.
	Now func() time.Time
	// StopTimeout is how long a stop waits for a graceful shutdown (30s).
	StopTimeout time.Duration
	// VolumeDir holds the node's volumes (volumes.go); "volumes" next to
	// the store when empty.
	VolumeDir string
}

// Manager manages the node's VMs.
type Manager struct {
	opts     Options
	log      hclog.Logger
	createMu sync.Mutex // serialises name and capacity checks
	mu       sync.Mutex
	vmLocks  map[string]*sync.Mutex
	ready    map[string]bool // guest agent answered since the last start
	// keysDue holds the VMs whose SSH keys are not installed since the last
	// start: they do not read as ready, whatever the driver says, until the
	// keys are in (or failed).
	keysDue  map[string]bool
	watching map[string]context.CancelFunc // readiness watchers
	// watched holds, per VM, a channel its latest readiness watch closes
	// when it ends (the guest answered, or it gave up): AwaitReady waits
	// on it rather than have clients poll.
	watched map[string]chan struct{}
}

// New makes a Manager. Call Recover for each driver as it comes up (the
// plugin host's Ready callback) and Run for the TTL loop.
func New(opts Options) *Manager {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StopTimeout == 0 {
		opts.StopTimeout = 30 * time.Second
	}
	return &Manager{
		opts: opts, log: opts.Logger,
		vmLocks:  map[string]*sync.Mutex{},
		ready:    map[string]bool{},
		keysDue:  map[string]bool{},
		watching: map[string]context.CancelFunc{},
		watched:  map[string]chan struct{}{},
	}
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	labelRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`)
)

// lock serialises operations on one VM.
func (m *Manager) lock(id string) func() {
	m.mu.Lock()
	l, ok := m.vmLocks[id]
	if !ok {
		l = &sync.Mutex{}
		m.vmLocks[id] = l
	}
	m.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Create validates a request against the node's policy and capacity, then
// creates and starts the VM. It returns once the VM runs; readiness of the
// guest agent follows (VM.AgentReady).
func (m *Manager) Create(ctx context.Context, req sdk.CreateVMRequest) (*sdk.VM, error) {
	if err := m.validate(&req); err != nil {
		return nil, err
	}
	return m.create(ctx, req, func(d driver.Driver, id string, net *pb.Network) error {
		spec := toSpec(id, req, net)
		spec.Volumes = m.volumeSpecs(req.Volumes)
		_, err := d.CreateVM(ctx, spec)
		if errors.Is(err, driver.ErrNotFound) {
			return fail(driver.ErrInvalid, "check the path; images live under "+strings.Join(m.opts.AllowedImageDirs, ", "),
				"create vm %s: %v", req.Name, err)
		}
		return err
	})
}

// create records a new VM, gives it its interface in its tenant's network
// if it asks for one, has the driver make it (makeVM, given the driver, the
// VM's new id and its network, nil for the request's own mode) and starts
// it; on failure it leaves nothing.
func (m *Manager) create(ctx context.Context, req sdk.CreateVMRequest, makeVM func(d driver.Driver, id string, net *pb.Network) error) (*sdk.VM, error) {
	drvName, err := m.pickDriver(req.Driver, req.GuestOS)
	if err != nil {
		return nil, err
	}
	d, err := m.opts.Drivers.Driver(drvName)
	if err != nil {
		return nil, driverErr(err, "create vm %s", req.Name)
	}
	if len(req.Volumes) > 0 && !m.claims(drvName, driver.CapVolumes) {
		return nil, fail(driver.ErrInvalid, "run VMs with volumes on a driver that claims the volumes capability (GET /v1/health lists them)",
			"driver %s cannot attach volumes", drvName)
	}
	spec, _ := json.Marshal(req)
	now := m.opts.Now().UTC()
	rec := &store.VM{
		ID: newID(), Name: req.Name, Driver: drvName, Spec: spec, Tenant: req.Tenant,
		Labels: req.Labels, State: sdk.StateCreating, CreatedAt: now,
	}
	if req.TTLSeconds > 0 {
		rec.ExpiresAt = now.Add(time.Duration(req.TTLSeconds) * time.Second)
	}

	// The VM's own lock is held from before its record is written: a
	// delete that finds the record "creating" waits for the create to
	// finish, instead of removing it while the driver creates the VM (which
	// would leave a running VM without a record).
	unlock := m.lock(rec.ID)
	recorded := false
	defer func() {
		unlock()
		if !recorded { // refused: the lock of an id nobody knows goes
			m.mu.Lock()
			delete(m.vmLocks, rec.ID)
			m.mu.Unlock()
		}
	}()
	// Name and capacity are checked and the record written under one lock,
	// so two creates cannot both take the last free vCPU or the same name.
	m.createMu.Lock()
	if _, err := m.opts.Store.GetTenantVMByName(req.Tenant, req.Name); err == nil {
		m.createMu.Unlock()
		return nil, fail(driver.ErrExists, "pick another name, or delete the existing VM first",
			"a VM named %q already exists on node %s", req.Name, m.opts.NodeName)
	}
	if err := m.checkCapacity(req); err != nil {
		m.createMu.Unlock()
		return nil, err
	}
	if err := m.claimVolumes(req); err != nil {
		m.createMu.Unlock()
		return nil, err
	}
	if err := m.opts.Store.PutVM(rec); err != nil {
		m.createMu.Unlock()
		if errors.Is(err, store.ErrNameTaken) {
			return nil, fail(driver.ErrExists, "pick another name", "a VM named %q already exists", req.Name)
		}
		return nil, fmt.Errorf("create vm %s: record: %w", req.Name, err)
	}
	recorded = true
	m.createMu.Unlock()

	var net *pb.Network
	if req.Network == networkTenant {
		if net, err = m.attach(ctx, rec.ID, req); err != nil {
			_ = m.opts.Store.DeleteVM(rec.ID)
			recorded = false
			return nil, err
		}
	}
	undo := func(cause error) error {
		ctx := context.WithoutCancel(ctx)
		_ = d.DestroyVM(ctx, rec.ID, true)
		if net != nil {
			if err := m.detach(ctx, rec.ID, req); err != nil {
				m.log.Warn("remove the interface of a vm whose create failed", "vm", rec.ID, "error", err)
			}
		}
		_ = m.opts.Store.DeleteVM(rec.ID)
		return cause
	}
	if err := makeVM(d, rec.ID, net); err != nil {
		return nil, undo(driverErr(err, "create vm %s", req.Name))
	}
	// No write between create and start: a crash here leaves the record
	// "creating", which recovery destroys and marks lost, as it should.
	if err := m.start(ctx, d, rec); err != nil {
		return nil, undo(err)
	}
	m.event(rec.ID, "created", fmt.Sprintf("created on driver %s", drvName))
	return m.view(ctx, rec), nil
}

func (m *Manager) validate(req *sdk.CreateVMRequest) error {
	const hint = "see the node API reference (docs/node.md)"
	if req.Name == "" {
		return fail(driver.ErrInvalid, "give the VM a name: letters, digits, '.', '_' or '-'", "name is required")
	}
	if !nameRE.MatchString(req.Name) {
		return fail(driver.ErrInvalid, "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", "name %q is not valid", jsonapi.Echo(req.Name))
	}
	if req.GuestOS == "" {
		req.GuestOS = "linux"
	}
	if req.GuestOS != "linux" && req.GuestOS != "macos" {
		return fail(driver.ErrInvalid, `use "linux" or "macos"`, "guest_os %q is not known", jsonapi.Echo(req.GuestOS))
	}
	if req.VCPUs < 1 || req.VCPUs > 1024 {
		return fail(driver.ErrInvalid, "ask for 1 or more vCPUs", "vcpus must be between 1 and 1024, not %d", req.VCPUs)
	}
	if req.MemoryMiB < 64 || req.MemoryMiB > 16<<20 {
		return fail(driver.ErrInvalid, "ask for at least 64 MiB", "memory_mib must be between 64 and 16777216, not %d", req.MemoryMiB)
	}
	if req.TTLSeconds < 0 {
		return fail(driver.ErrInvalid, "leave ttl_seconds out for a VM that lives until deleted", "ttl_seconds must not be negative")
	}
	if len(req.Tenant) > 256 {
		return fail(driver.ErrInvalid, hint, "tenant stamp is longer than 256 characters")
	}
	if err := m.checkNetwork(req); err != nil {
		return err
	}
	if len(req.Labels) > 64 {
		return fail(driver.ErrInvalid, hint, "at most 64 labels")
	}
	for k, v := range req.Labels {
		if !labelRE.MatchString(k) || len(v) > 256 {
			return fail(driver.ErrInvalid, "label keys are 1-63 letters, digits, '.', '_', '/' or '-'; values at most 256 characters", "label %q is not valid", jsonapi.Echo(k))
		}
	}
	if len(req.DriverConfig) > 0 && !json.Valid(req.DriverConfig) {
		return fail(driver.ErrInvalid, "driver_config is a JSON object of driver-specific fields", "driver_config is not valid JSON")
	}
	if err := checkSSHKeys(req); err != nil {
		return err
	}
	if err := m.checkImage(req.Image); err != nil {
		return err
	}
	return m.resolveVolumes(req)
}

// maxEchoPath is how much of an image path a message repeats: more than a
// name (jsonapi.MaxEcho), as real paths are longer, but never the whole of a
// path that could fill a request body.
const maxEchoPath = 256

// checkImage enforces allowed_image_dirs, following symlinks so a link
// inside an allowed directory cannot point outside it.
func (m *Manager) checkImage(img string) error {
	allowed := strings.Join(m.opts.AllowedImageDirs, ", ")
	if img == "" {
		return fail(driver.ErrInvalid, "name an image under "+allowed, "image is required")
	}
	if !filepath.IsAbs(img) {
		return fail(driver.ErrInvalid, "give the image's absolute path on the node", "image %q is not an absolute path", jsonapi.Echo(img))
	}
	real, err := filepath.EvalSymlinks(img)
	if err != nil {
		real = filepath.Clean(img)
	}
	for _, dir := range m.opts.AllowedImageDirs {
		d, err := filepath.EvalSymlinks(dir)
		if err != nil {
			d = filepath.Clean(dir)
		}
		if real == d || strings.HasPrefix(real, d+string(filepath.Separator)) {
			if _, err := os.Stat(real); err != nil {
				return fail(driver.ErrInvalid, "check the path; images on this node live under "+allowed, "image %s does not exist", jsonapi.Clip(img, maxEchoPath))
			}
			return nil
		}
	}
	return fail(ErrForbidden, "this node only takes images under: "+allowed+" (policy.allowed_image_dirs in its config)",
		"image %s is outside the node's allowed image directories", jsonapi.Clip(img, maxEchoPath))
}

// pickDriver chooses the driver for a VM.
func (m *Manager) pickDriver(want, guestOS string) (string, error) {
	os, _ := base.ParseEnum[pb.GuestOS](guestOS) // validate checked it
	status := m.opts.Drivers.Status()
	byName := map[string]pluginhost.Status{}
	for _, s := range status {
		byName[s.Name] = s
	}
	runs := func(s pluginhost.Status) bool {
		return s.Up && s.Capabilities != nil && slices.Contains(s.Capabilities.GuestOs, os) &&
			s.Fingerprint.GetHealth() == pb.Health_HEALTH_HEALTHY
	}
	if want != "" {
		s, ok := byName[want]
		if !ok {
			return "", fail(driver.ErrInvalid, "drivers on this node: "+strings.Join(m.opts.DriverOrder, ", "), "no driver %q on this node", jsonapi.Echo(want))
		}
		if !runs(s) {
			return "", fail(driver.ErrUnavailable, "GET /v1/health shows each driver's health", "driver %s cannot run a %s guest now", want, guestOS)
		}
		return want, nil
	}
	for _, name := range m.opts.DriverOrder {
		if runs(byName[name]) {
			return name, nil
		}
	}
	return "", fail(driver.ErrUnavailable, "GET /v1/health shows each driver's health", "no healthy driver on node %s runs %s guests", m.opts.NodeName, guestOS)
}

// Capacity is the node's total, reserved and free resources.
func (m *Manager) Capacity() sdk.Capacity {
	var total sdk.Resources
	for _, s := range m.opts.Drivers.Status() {
		if len(m.opts.DriverOrder) > 0 && s.Name == m.opts.DriverOrder[0] && s.Fingerprint != nil {
			r := s.Fingerprint.GetResources()
			total = sdk.Resources{VCPUs: r.GetVcpus(), MemoryMiB: r.GetMemoryMib(), MacOSSlots: r.GetMacosSlots()}
		}
	}
	free := sdk.Resources{
		VCPUs:      total.VCPUs - m.opts.Reserved.VCPUs,
		MemoryMiB:  total.MemoryMiB - m.opts.Reserved.MemoryMiB,
		MacOSSlots: total.MacOSSlots,
	}
	vms, _ := m.opts.Store.ListVMs()
	for _, v := range vms {
		if v.State == sdk.StateStopped || v.State == sdk.StateLost {
			continue
		}
		var req sdk.CreateVMRequest
		_ = json.Unmarshal(v.Spec, &req)
		free.VCPUs -= req.VCPUs
		free.MemoryMiB -= req.MemoryMiB
		if req.GuestOS == "macos" {
			free.MacOSSlots--
		}
	}
	return sdk.Capacity{Total: total, Reserved: m.opts.Reserved, Free: free}
}

func (m *Manager) checkCapacity(req sdk.CreateVMRequest) error {
	c := m.Capacity()
	hint := fmt.Sprintf("free now: %d vCPUs, %d MiB, %d macOS slots; stop or delete VMs, or ask for less", c.Free.VCPUs, c.Free.MemoryMiB, c.Free.MacOSSlots)
	switch {
	case req.VCPUs > c.Total.VCPUs-c.Reserved.VCPUs:
		return fail(driver.ErrInvalid, fmt.Sprintf("this node offers VMs at most %d vCPUs", c.Total.VCPUs-c.Reserved.VCPUs),
			"vcpus %d is more than node %s has", req.VCPUs, m.opts.NodeName)
	case req.MemoryMiB > c.Total.MemoryMiB-c.Reserved.MemoryMiB:
		return fail(driver.ErrInvalid, fmt.Sprintf("this node offers VMs at most %d MiB", c.Total.MemoryMiB-c.Reserved.MemoryMiB),
			"memory_mib %d is more than node %s has", req.MemoryMiB, m.opts.NodeName)
	case req.VCPUs > c.Free.VCPUs:
		return fail(driver.ErrNoCapacity, hint, "not enough free vCPUs on node %s: %d asked, %d free", m.opts.NodeName, req.VCPUs, c.Free.VCPUs)
	case req.MemoryMiB > c.Free.MemoryMiB:
		return fail(driver.ErrNoCapacity, hint, "not enough free memory on node %s: %d MiB asked, %d MiB free", m.opts.NodeName, req.MemoryMiB, c.Free.MemoryMiB)
	case req.GuestOS == "macos" && c.Free.MacOSSlots < 1:
		return fail(driver.ErrNoCapacity, hint, "no free macOS slot on node %s (Apple's licence allows %d)", m.opts.NodeName, c.Total.MacOSSlots)
	}
	return nil
}

// start boots a created or stopped VM and stores its handle at once.
func (m *Manager) start(ctx context.Context, d driver.Driver, rec *store.VM) error {
	h, _, err := d.StartVM(ctx, rec.ID)
	if err != nil {
		return driverErr(err, "start vm %s", rec.Name)
	}
	raw, err := proto.Marshal(h)
	if err != nil {
		return fmt.Errorf("start vm %s: encode handle: %w", rec.Name, err)
	}
	rec.Handle = raw
	rec.State = sdk.StateRunning
	rec.StartedAt = m.opts.Now().UTC()
	rec.LastError = ""
	if err := m.opts.Store.PutVM(rec); err != nil {
		return fmt.Errorf("start vm %s: record handle: %w", rec.Name, err)
	}
	m.watchReady(rec.ID, d)
	return nil
}

// watchReady waits in the background for the guest agent of a VM that just
// started (or was recovered).
func (m *Manager) watchReady(id string, d driver.Driver) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	keysDue := m.hasSSHKeys(id)
	m.mu.Lock()
	if old, ok := m.watching[id]; ok {
		old()
	}
	m.watching[id] = cancel
	m.ready[id] = false
	m.keysDue[id] = keysDue
	done := make(chan struct{})
	m.watched[id] = done
	m.mu.Unlock()
	go func() {
		defer close(done)
		defer cancel()
		guest, err := d.WaitReady(ctx, id)
		if err != nil {
			if ctx.Err() == nil {
				m.event(id, "not-ready", err.Error())
			}
			return
		}
		// Before the VM reads as ready, so that a client that waited for it
		// finds its key in place.
		if err := m.installSSHKeys(ctx, id, d); err != nil && ctx.Err() == nil {
			m.log.Warn("install ssh keys", "vm", id, "error", err)
			m.event(id, "ssh-keys-failed", err.Error())
		}
		m.mu.Lock()
		m.ready[id] = true
		delete(m.keysDue, id)
		m.mu.Unlock()
		m.event(id, "guest-ready", fmt.Sprintf("guest agent %s answered", guest["agent_version"]))
	}()
}

func (m *Manager) stopWatching(id string) {
	m.mu.Lock()
	if cancel, ok := m.watching[id]; ok {
		cancel()
		delete(m.watching, id)
	}
	m.ready[id] = false
	delete(m.keysDue, id)
	m.mu.Unlock()
}

// get finds a VM by id, or by name.
func (m *Manager) get(idOrName string) (*store.VM, error) {
	rec, err := m.opts.Store.GetVM(idOrName)
	if errors.Is(err, store.ErrNotFound) {
		rec, err = m.opts.Store.GetVMByName(idOrName)
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fail(driver.ErrNotFound, "GET /v1/vms lists the VMs on this node", "no VM %q on node %s", jsonapi.Echo(idOrName), m.opts.NodeName)
	case errors.Is(err, store.ErrAmbiguous):
		return nil, fail(driver.ErrExists, "name the VM by its id: GET /v1/vms lists the VMs with their tenants",
			"several tenants have a VM named %q on node %s", jsonapi.Echo(idOrName), m.opts.NodeName)
	}
	return rec, err
}

// Get returns a VM (by id or name) with its live state from its driver.
func (m *Manager) Get(ctx context.Context, idOrName string) (*sdk.VM, error) {
	rec, err := m.get(idOrName)
	if err != nil {
		return nil, err
	}
	return m.view(ctx, rec), nil
}

// AwaitReady is Get, answered once the VM's guest agent is ready, or its
// readiness watch gave up (the VM stopped), or max passed, or ctx ended,
// whichever comes first: a client waiting for a VM asks once instead of
// polling (every poll is a round trip to the driver's process, and on a
// small host polling at 10 ms took CPU a resuming guest needed:
// docs/benchmarks.md, "Snapshot-mode warm pools"). A VM nothing watches
// (stopped, never started, or recovered as ready) answers at once.
func (m *Manager) AwaitReady(ctx context.Context, idOrName string, max time.Duration) (*sdk.VM, error) {
	rec, err := m.get(idOrName)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	done := m.watched[rec.ID]
	m.mu.Unlock()
	if done != nil && max > 0 {
		t := time.NewTimer(max)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return m.Get(ctx, rec.ID)
}

// List returns every VM on the node, oldest first, with its live state.
// It asks each driver once (ListVMs) rather than once per VM (InspectVM):
// every call is a round trip to the plugin's process, and with 200 VMs one
// InspectVM each took 30-150 ms (docs/benchmarks.md, "The console"). A VM
// its driver's process does not list, or every VM of a driver whose
// ListVMs fails, is inspected on its own.
func (m *Manager) List(ctx context.Context) ([]*sdk.VM, error) {
	recs, err := m.opts.Store.ListVMs()
	if err != nil {
		return nil, err
	}
	listed := map[string]map[string]*pb.VMStatus{} // driver name -> VM id -> status
	statusOf := func(rec *store.VM) *pb.VMStatus {
		byID, ok := listed[rec.Driver]
		if !ok {
			byID = map[string]*pb.VMStatus{}
			if d, err := m.opts.Drivers.Driver(rec.Driver); err == nil {
				if sts, err := d.ListVMs(ctx); err == nil {
					for _, st := range sts {
						byID[st.GetId()] = st
					}
				}
			}
			listed[rec.Driver] = byID
		}
		return byID[rec.ID]
	}
	out := make([]*sdk.VM, 0, len(recs))
	for _, r := range recs {
		var st *pb.VMStatus
		if r.State != sdk.StateLost && r.State != sdk.StateCreating {
			st = statusOf(r)
		}
		out = append(out, m.viewWith(ctx, r, st))
	}
	return out, nil
}

// view merges a record with what its driver says now.
func (m *Manager) view(ctx context.Context, rec *store.VM) *sdk.VM {
	return m.viewWith(ctx, rec, nil)
}

// viewWith is view with the driver's status already at hand (from
// ListVMs); with st nil it asks the driver (InspectVM).
func (m *Manager) viewWith(ctx context.Context, rec *store.VM, st *pb.VMStatus) *sdk.VM {
	var req sdk.CreateVMRequest
	_ = json.Unmarshal(rec.Spec, &req)
	v := &sdk.VM{
		ID: rec.ID, Name: rec.Name, Driver: rec.Driver, GuestOS: req.GuestOS, Image: req.Image,
		VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB, Display: req.Display, Network: req.Network,
		Labels: rec.Labels, Tenant: rec.Tenant, State: rec.State, CreatedAt: rec.CreatedAt,
		LastError: rec.LastError,
	}
	if !rec.StartedAt.IsZero() {
		t := rec.StartedAt
		v.StartedAt = &t
	}
	if !rec.ExpiresAt.IsZero() {
		t := rec.ExpiresAt
		v.ExpiresAt = &t
	}
	if rec.State == sdk.StateLost || rec.State == sdk.StateCreating {
		return v
	}
	if req.Network == networkTenant {
		if a, err := m.guestAddress(ctx, rec.ID, req); err == nil {
			v.Address = a.String()
		}
	}
	if st == nil {
		d, err := m.opts.Drivers.Driver(rec.Driver)
		if err != nil {
			v.LastError = err.Error()
			return v
		}
		if st, err = d.InspectVM(ctx, rec.ID); err != nil {
			v.LastError = err.Error()
			return v
		}
	}
	v.Attributes = st.Attributes
	if s := stateName(st.State); s != "" && s != rec.State {
		v.State = s
		if s == sdk.StateStopped || s == sdk.StatePaused || s == sdk.StateRunning {
			_ = m.opts.Store.SetState(rec.ID, s)
		}
	}
	m.mu.Lock()
	v.AgentReady = (m.ready[rec.ID] || st.AgentReady && !m.keysDue[rec.ID]) && v.State == sdk.StateRunning
	m.mu.Unlock()
	return v
}

func stateName(s pb.VMState) string {
	switch s {
	case pb.VMState_VM_STATE_CREATED:
		return sdk.StateCreated
	case pb.VMState_VM_STATE_RUNNING:
		return sdk.StateRunning
	case pb.VMState_VM_STATE_PAUSED:
		return sdk.StatePaused
	case pb.VMState_VM_STATE_STOPPED:
		return sdk.StateStopped
	}
	return ""
}

// withVM runs f on a VM's record and driver under the VM's lock.
func (m *Manager) withVM(ctx context.Context, idOrName string, f func(d driver.Driver, rec *store.VM) error) (*sdk.VM, error) {
	rec, err := m.get(idOrName)
	if err != nil {
		return nil, err
	}
	unlock := m.lock(rec.ID)
	defer unlock()
	if rec, err = m.opts.Store.GetVM(rec.ID); err != nil {
		return nil, fail(driver.ErrNotFound, "", "vm %s was deleted meanwhile", idOrName)
	}
	if rec.State == sdk.StateLost {
		return nil, fail(driver.ErrState, "delete it; its record says why it was lost", "vm %s was lost: %s", rec.Name, rec.LastError)
	}
	d, err := m.opts.Drivers.Driver(rec.Driver)
	if err != nil {
		return nil, driverErr(err, "vm %s", rec.Name)
	}
	if err := f(d, rec); err != nil {
		return nil, err
	}
	return m.view(ctx, rec), nil
}

// Start boots a stopped VM, if the node has room for it again.
func (m *Manager) Start(ctx context.Context, id string) (*sdk.VM, error) {
	return m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		// A stopped VM holds no capacity; check it like a create, under the
		// same lock, so it cannot take what a concurrent create was promised.
		m.createMu.Lock()
		defer m.createMu.Unlock()
		if rec.State == sdk.StateStopped {
			var req sdk.CreateVMRequest
			_ = json.Unmarshal(rec.Spec, &req)
			if err := m.checkCapacity(req); err != nil {
				return err
			}
		}
		if err := m.start(ctx, d, rec); err != nil {
			return err
		}
		m.event(rec.ID, "started", "")
		return nil
	})
}

// Stop shuts a VM down, gracefully within timeout (0: the default).
func (m *Manager) Stop(ctx context.Context, id string, timeout time.Duration) (*sdk.VM, error) {
	if timeout <= 0 {
		timeout = m.opts.StopTimeout
	}
	return m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		m.stopWatching(rec.ID)
		exit, err := d.StopVM(ctx, rec.ID, timeout)
		if err != nil {
			return driverErr(err, "stop vm %s", rec.Name)
		}
		rec.State = sdk.StateStopped
		if err := m.opts.Store.PutVM(rec); err != nil {
			return err
		}
		m.event(rec.ID, "stopped", base.EnumName(exit.GetReason()))
		return nil
	})
}

// Restart stops a VM (if it runs) and starts it again.
func (m *Manager) Restart(ctx context.Context, id string) (*sdk.VM, error) {
	return m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		m.stopWatching(rec.ID)
		if _, err := d.StopVM(ctx, rec.ID, m.opts.StopTimeout); err != nil {
			return driverErr(err, "restart vm %s: stop", rec.Name)
		}
		if err := m.start(ctx, d, rec); err != nil {
			return err
		}
		m.event(rec.ID, "restarted", "")
		return nil
	})
}

// Pause freezes a running VM.
func (m *Manager) Pause(ctx context.Context, id string) (*sdk.VM, error) {
	return m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		if err := d.PauseVM(ctx, rec.ID); err != nil {
			return driverErr(err, "pause vm %s", rec.Name)
		}
		rec.State = sdk.StatePaused
		return m.opts.Store.PutVM(rec)
	})
}

// Resume unfreezes a paused VM.
func (m *Manager) Resume(ctx context.Context, id string) (*sdk.VM, error) {
	return m.withVM(ctx, id, func(d driver.Driver, rec *store.VM) error {
		if err := d.ResumeVM(ctx, rec.ID); err != nil {
			return driverErr(err, "resume vm %s", rec.Name)
		}
		rec.State = sdk.StateRunning
		return m.opts.Store.PutVM(rec)
	})
}

// Delete destroys a VM, its process and workspace, and forgets it. While its
// driver is down the VM is kept (deleting the record would leak the VM).
func (m *Manager) Delete(ctx context.Context, idOrName string) error {
	rec, err := m.get(idOrName)
	if err != nil {
		return err
	}
	unlock := m.lock(rec.ID)
	defer unlock()
	var req sdk.CreateVMRequest
	_ = json.Unmarshal(rec.Spec, &req)
	detach := req.Network == networkTenant
	if detach {
		_, err := m.network()
		switch {
		case errors.Is(err, driver.ErrInvalid):
			// The node has no network plugin any more: nothing can remove
			// the tap now, so forget it and say what may be left.
			m.log.Warn("deleting a tenant vm on a node without its network plugin; its tap may remain", "vm", rec.ID, "tenant", req.Tenant)
			detach = false
		case err != nil:
			// Without its network plugin the VM's tap could not go with it:
			// keep the VM until the plugin is back, as for a driver that is down.
			return networkErr(err, "delete vm %s", rec.Name)
		}
	}
	m.stopWatching(rec.ID)
	d, err := m.opts.Drivers.Driver(rec.Driver)
	switch {
	case errors.Is(err, driver.ErrInvalid):
		// Its driver is no longer configured: nothing can destroy the VM
		// now, so forget it and say what may be left.
		m.log.Warn("deleting the record of a vm whose driver is no longer configured; its workspace may remain",
			"vm", rec.ID, "driver", rec.Driver, "workspace", filepath.Join(m.opts.Drivers.StateDir(rec.Driver), "vms", rec.ID))
	case err != nil:
		return driverErr(err, "delete vm %s", rec.Name)
	default:
		if err := d.DestroyVM(ctx, rec.ID, true); err != nil {
			return driverErr(err, "delete vm %s", rec.Name)
		}
	}
	if detach {
		// The VM is gone; should this fail, the record stays and a retry
		// of the delete removes the interface (deletes of what is not
		// there succeed, in both contracts).
		if err := m.detach(ctx, rec.ID, req); err != nil {
			return err
		}
	}
	if err := m.opts.Store.DeleteVM(rec.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	m.mu.Lock()
	delete(m.ready, rec.ID)
	delete(m.watched, rec.ID)
	delete(m.vmLocks, rec.ID)
	m.mu.Unlock()
	m.log.Info("vm deleted", "vm", rec.ID, "name", rec.Name)
	return nil
}

// maxExecOutput bounds what an exec keeps of each stream.
const maxExecOutput = 8 << 20

// Exec runs a command in a VM and collects its output.
func (m *Manager) Exec(ctx context.Context, id string, req sdk.ExecRequest) (*sdk.ExecResult, error) {
	if len(req.Command.Argv) == 0 && strings.TrimSpace(req.Command.Shell) == "" {
		return nil, fail(driver.ErrInvalid, `"command": ["uname", "-a"] or "command": "uname -a | tr a-z A-Z"`, "command is required")
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > 24*3600 {
		return nil, fail(driver.ErrInvalid, "timeout_seconds is 1 to 86400; leave it out for the default (300)", "timeout_seconds %d is out of range", req.TimeoutSeconds)
	}
	if req.TimeoutSeconds == 0 {
		req.TimeoutSeconds = 300
	}
	rec, err := m.get(id)
	if err != nil {
		return nil, err
	}
	if rec.State == sdk.StateLost {
		return nil, fail(driver.ErrState, "delete it; its record says why it was lost", "vm %s was lost: %s", rec.Name, rec.LastError)
	}
	d, err := m.opts.Drivers.Driver(rec.Driver)
	if err != nil {
		return nil, driverErr(err, "exec in vm %s", rec.Name)
	}
	stdout, stderr := &capped{max: maxExecOutput}, &capped{max: maxExecOutput}
	start := time.Now()
	preq := &pb.ExecRequest{Id: rec.ID, Env: req.Env, Stdin: []byte(req.Stdin), TimeoutMs: req.TimeoutSeconds * 1000}
	if len(req.Command.Argv) > 0 {
		preq.Command = &pb.ExecRequest_Argv{Argv: &pb.Argv{Args: req.Command.Argv}}
	} else {
		preq.Command = &pb.ExecRequest_Shell{Shell: req.Command.Shell}
	}
	code, err := d.Exec(ctx, preq, stdout, stderr)
	if err != nil {
		return nil, driverErr(err, "exec in vm %s", rec.Name)
	}
	return &sdk.ExecResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String(),
		DurationMS: time.Since(start).Milliseconds()}, nil
}

// capped keeps the first max bytes written and counts the rest.
type capped struct {
	bytes.Buffer
	max     int
	dropped int
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	if room := max(c.max-c.Len(), 0); room < len(p) {
		c.dropped += len(p) - room
		p = p[:room]
	}
	c.Buffer.Write(p)
	return n, nil
}

func (c *capped) String() string {
	if c.dropped > 0 {
		return c.Buffer.String() + fmt.Sprintf("\n[fluxvm: %d more bytes dropped]\n", c.dropped)
	}
	return c.Buffer.String()
}

// Logs returns the last lines of a VM's console.
func (m *Manager) Logs(ctx context.Context, id string, lines int) ([]byte, error) {
	if lines <= 0 || lines > 100000 {
		return nil, fail(driver.ErrInvalid, "lines is 1 to 100000", "lines %d is out of range", lines)
	}
	rec, err := m.get(id)
	if err != nil {
		return nil, err
	}
	d, err := m.opts.Drivers.Driver(rec.Driver)
	if err != nil {
		return nil, driverErr(err, "logs of vm %s", rec.Name)
	}
	data, err := d.ConsoleLog(ctx, rec.ID, 4<<20)
	if err != nil {
		return nil, driverErr(err, "logs of vm %s", rec.Name)
	}
	return lastLines(data, lines), nil
}

func lastLines(data []byte, n int) []byte {
	data = bytes.TrimRight(data, "\n")
	i := len(data)
	for ; n > 0 && i > 0; n-- {
		j := bytes.LastIndexByte(data[:i], '\n')
		if j < 0 {
			i = 0
			break
		}
		i = j
	}
	if i > 0 {
		i++ // skip the newline
	}
	if len(data) == 0 {
		return nil
	}
	return append(data[i:len(data):len(data)], '\n')
}

// Screenshot returns a VM's screen as PNG, scaled down to maxWidth if set.
func (m *Manager) Screenshot(ctx context.Context, id string, maxWidth int) ([]byte, error) {
	if maxWidth < 0 || maxWidth > 16384 {
		return nil, fail(driver.ErrInvalid, "max_width is 1 to 16384 pixels", "max_width %d is out of range", maxWidth)
	}
	rec, err := m.get(id)
	if err != nil {
		return nil, err
	}
	d, err := m.opts.Drivers.Driver(rec.Driver)
	if err != nil {
		return nil, driverErr(err, "screenshot of vm %s", rec.Name)
	}
	shot, err := d.Screenshot(ctx, rec.ID)
	if err != nil {
		return nil, driverErr(err, "screenshot of vm %s", rec.Name)
	}
	if maxWidth == 0 || int(shot.Width) <= maxWidth {
		return shot.Png, nil
	}
	src, err := png.Decode(bytes.NewReader(shot.Png))
	if err != nil {
		return nil, fmt.Errorf("screenshot of vm %s: the driver sent no PNG: %w", rec.Name, err)
	}
	b := src.Bounds()
	h := max(1, b.Dy()*maxWidth/b.Dx())
	dst := image.NewRGBA(image.Rect(0, 0, maxWidth, h))
	draw.ApproxBiLinear.Scale(dst, dst.Bounds(), src, b, draw.Src, nil)
	var out bytes.Buffer
	if err := png.Encode(&out, dst); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// Input plays keyboard and pointer actions on a VM's display.
func (m *Manager) Input(ctx context.Context, id string, actions []sdk.InputAction) error {
	if len(actions) == 0 || len(actions) > 1000 {
		return fail(driver.ErrInvalid, `{"actions": [{"kind": "text", "text": "hello"}, {"kind": "key", "keys": ["enter"]}]}`, "send 1 to 1000 actions, not %d", len(actions))
	}
	pa, err := inputActions(actions)
	if err != nil {
		return err
	}
	rec, err := m.get(id)
	if err != nil {
		return err
	}
	d, err := m.opts.Drivers.Driver(rec.Driver)
	if err != nil {
		return driverErr(err, "input to vm %s", rec.Name)
	}
	return driverErr(d.SendInput(ctx, rec.ID, pa), "input to vm %s", rec.Name)
}

// inputActions turns the node API's actions into the contract's, refusing
// a kind or button the contract does not have.
func inputActions(actions []sdk.InputAction) ([]*pb.InputAction, error) {
	const hint = "kind is key, text, move, click or scroll; button is left, right or middle"
	out := make([]*pb.InputAction, len(actions))
	for i, a := range actions {
		at := &pb.Point{X: a.X, Y: a.Y}
		switch a.Kind {
		case "key":
			out[i] = &pb.InputAction{Action: &pb.InputAction_Key{Key: &pb.KeyChord{Keys: a.Keys}}}
		case "text":
			out[i] = &pb.InputAction{Action: &pb.InputAction_Text{Text: a.Text}}
		case "move":
			out[i] = &pb.InputAction{Action: &pb.InputAction_Move{Move: at}}
		case "click":
			var button pb.MouseButton // unspecified: left
			if a.Button != "" {
				b, ok := base.ParseEnum[pb.MouseButton](a.Button)
				if !ok {
					return nil, fail(driver.ErrInvalid, hint, "action %d: button %q is not known", i, a.Button)
				}
				button = b
			}
			out[i] = &pb.InputAction{Action: &pb.InputAction_Click{Click: &pb.Click{Button: button, At: at}}}
		case "scroll":
			out[i] = &pb.InputAction{Action: &pb.InputAction_Scroll{Scroll: &pb.Scroll{Dy: a.DY}}}
		default:
			return nil, fail(driver.ErrInvalid, hint, "action %d: kind %q is not known", i, a.Kind)
		}
	}
	return out, nil
}

// Health reports the node, its drivers and its capacity.
func (m *Manager) Health() *sdk.NodeHealth {
	h := &sdk.NodeHealth{Node: m.opts.NodeName, Version: m.opts.Version, Labels: m.opts.Labels, Capacity: m.Capacity()}
	for _, s := range m.opts.Drivers.Status() {
		if s.Network {
			h.Networks = append(h.Networks, networkHealth(s))
			continue
		}
		dh := sdk.DriverHealth{Name: s.Name, Restarts: s.Restarts, Health: "down", Description: s.LastError}
		if s.Info != nil {
			dh.Version = s.Info.Version
			dh.Simulated = s.Info.Simulated
		}
		if s.Up && s.Fingerprint != nil {
			dh.Health = strings.ToLower(strings.TrimPrefix(s.Fingerprint.Health.String(), "HEALTH_"))
			dh.Description = s.Fingerprint.Description
			dh.Attributes = s.Fingerprint.Attributes
		}
		for _, c := range driver.Capabilities() {
			if c.ClaimedBy(s.Capabilities) {
				dh.Capabilities = append(dh.Capabilities, string(c))
			}
		}
		h.Drivers = append(h.Drivers, dh)
	}
	vms, _ := m.opts.Store.ListVMs()
	h.VMs = len(vms)
	return h
}

// toSpec turns a validated request into the driver's spec; net is the
// tenant network's tap (nil: the request's own mode, user or none).
func toSpec(id string, req sdk.CreateVMRequest, net *pb.Network) *pb.VMSpec {
	os, _ := base.ParseEnum[pb.GuestOS](req.GuestOS)
	if net == nil {
		mode, _ := base.ParseEnum[pb.NetworkMode](req.Network)
		net = &pb.Network{Mode: mode}
	}
	return &pb.VMSpec{
		Id: id, Name: req.Name, GuestOs: os, Image: req.Image, Vcpus: req.VCPUs,
		MemoryMib: req.MemoryMiB, Display: req.Display, Network: net,
		Labels: req.Labels, DriverConfigJson: req.DriverConfig,
	}
}

func (m *Manager) event(id, kind, msg string) {
	if err := m.opts.Store.AppendEvent(id, kind, msg, m.opts.Now().UTC()); err != nil && !errors.Is(err, store.ErrNotFound) {
		m.log.Warn("record vm event", "vm", id, "error", err)
	}
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID makes a VM id: "vm-" and 16 random base32 characters.
func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return "vm-" + idEncoding.EncodeToString(b)
}
