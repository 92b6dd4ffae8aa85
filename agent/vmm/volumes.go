package vmm

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
	"github.com/fluxvm/fluxvm/sdk"
)

// A volume is two files in the node's volume directory
// (<state_dir>/volumes): <id>.raw, the sparse disk (mode 0600), and
// <id>.json, its record. Which VM uses a volume is not stored with it: a
// volume is attached to the VM whose record names it (sdk.CreateVMRequest
// Volumes), so deleting the VM frees it, however the VM goes.

// volumeIDRE is a volume id: short enough to be a virtio-blk serial (20 bytes).
var volumeIDRE = regexp.MustCompile(`^vol-[0-9a-f]{12}$`)

const gib = int64(1) << 30

// volumeRecord is <id>.json.
type volumeRecord struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Tenant    string    `json:"tenant,omitempty"`
	SizeGiB   int64     `json:"size_gib"`
	CreatedAt time.Time `json:"created_at"`
}

// volumeDir is where the node keeps its volumes.
func (m *Manager) volumeDir() string {
	if m.opts.VolumeDir != "" {
		return m.opts.VolumeDir
	}
	return filepath.Join(filepath.Dir(m.opts.Store.Path()), "volumes")
}

func (m *Manager) volumeFile(id string) string { return filepath.Join(m.volumeDir(), id+".raw") }

// CheckVolumeSize is the one check of a volume's size on the node.
func CheckVolumeSize(sizeGiB int64) error {
	if sizeGiB < sdk.MinVolumeGiB || sizeGiB > sdk.MaxVolumeGiB {
		return fail(driver.ErrInvalid, fmt.Sprintf("give size_gib between %d and %d", sdk.MinVolumeGiB, sdk.MaxVolumeGiB),
			"size_gib %d is outside %d-%d GiB", sizeGiB, sdk.MinVolumeGiB, sdk.MaxVolumeGiB)
	}
	return nil
}

// readVolumes reads every volume record.
func (m *Manager) readVolumes() ([]volumeRecord, error) {
	entries, err := os.ReadDir(m.volumeDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read volumes: %w", err)
	}
	var out []volumeRecord
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(m.volumeDir(), e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read volume %s: %w", e.Name(), err)
		}
		var rec volumeRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			return nil, fmt.Errorf("read volume %s: %w", e.Name(), err)
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// findVolume finds a volume by name or id.
func (m *Manager) findVolume(nameOrID string) (volumeRecord, error) {
	vols, err := m.readVolumes()
	if err != nil {
		return volumeRecord{}, err
	}
	for _, v := range vols {
		if v.ID == nameOrID || v.Name == nameOrID {
			return v, nil
		}
	}
	return volumeRecord{}, fail(driver.ErrNotFound, "GET /v1/volumes lists the node's volumes", "no volume %q on node %s", jsonapi.Echo(nameOrID), m.opts.NodeName)
}

// attachments maps each volume id to the VM whose record names it.
func (m *Manager) attachments() (map[string]string, error) {
	vms, err := m.opts.Store.ListVMs()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, vm := range vms {
		var req sdk.CreateVMRequest
		if json.Unmarshal(vm.Spec, &req) != nil {
			continue
		}
		for _, id := range req.Volumes {
			out[id] = vm.ID
		}
	}
	return out, nil
}

func (m *Manager) volumeView(rec volumeRecord, attachedTo string) sdk.Volume {
	v := sdk.Volume{ID: rec.ID, Name: rec.Name, Tenant: rec.Tenant, SizeGiB: rec.SizeGiB, Path: m.volumeFile(rec.ID), AttachedTo: attachedTo}
	v.CreatedAt = rec.CreatedAt
	var st syscall.Stat_t
	if syscall.Stat(v.Path, &st) == nil {
		v.AllocatedBytes = st.Blocks * 512
	}
	return v
}

// Volumes lists the node's volumes by name.
func (m *Manager) Volumes() ([]sdk.Volume, error) {
	vols, err := m.readVolumes()
	if err != nil {
		return nil, err
	}
	att, err := m.attachments()
	if err != nil {
		return nil, err
	}
	out := make([]sdk.Volume, 0, len(vols))
	for _, v := range vols {
		out = append(out, m.volumeView(v, att[v.ID]))
	}
	return out, nil
}

// Volume returns one volume by name or id.
func (m *Manager) Volume(nameOrID string) (*sdk.Volume, error) {
	rec, err := m.findVolume(nameOrID)
	if err != nil {
		return nil, err
	}
	att, err := m.attachments()
	if err != nil {
		return nil, err
	}
	v := m.volumeView(rec, att[rec.ID])
	return &v, nil
}

// CreateVolume makes a sparse, zero volume of the asked size.
func (m *Manager) CreateVolume(req sdk.CreateVolumeRequest) (*sdk.Volume, error) {
	if !nameRE.MatchString(req.Name) {
		return nil, fail(driver.ErrInvalid, "use 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit", "volume name %q is not valid", jsonapi.Echo(req.Name))
	}
	if err := CheckVolumeSize(req.SizeGiB); err != nil {
		return nil, err
	}
	if len(req.Tenant) > 256 {
		return nil, fail(driver.ErrInvalid, "see the node API reference (docs/node.md)", "tenant stamp is longer than 256 characters")
	}
	if req.ID == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		req.ID = "vol-" + hex.EncodeToString(b)
	} else if !volumeIDRE.MatchString(req.ID) {
		return nil, fail(driver.ErrInvalid, `leave id out, or give "vol-" and 12 lowercase hex digits`, "volume id %q is not valid", jsonapi.Echo(req.ID))
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	vols, err := m.readVolumes()
	if err != nil {
		return nil, err
	}
	for _, v := range vols {
		if v.Name == req.Name || v.ID == req.ID {
			return nil, fail(driver.ErrExists, "pick another name, or delete the existing volume first", "a volume named %q (or with id %s) already exists on node %s", req.Name, req.ID, m.opts.NodeName)
		}
	}
	if err := os.MkdirAll(m.volumeDir(), 0o700); err != nil {
		return nil, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	path := m.volumeFile(req.ID)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	err = f.Truncate(req.SizeGiB * gib) // sparse: no block is written
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	rec := volumeRecord{ID: req.ID, Name: req.Name, Tenant: req.Tenant, SizeGiB: req.SizeGiB, CreatedAt: m.opts.Now().UTC()}
	if err == nil {
		err = m.writeVolume(rec)
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("create volume %s: %w", req.Name, err)
	}
	m.log.Info("volume created", "volume", rec.Name, "id", rec.ID, "size_gib", rec.SizeGiB)
	v := m.volumeView(rec, "")
	return &v, nil
}

func (m *Manager) writeVolume(rec volumeRecord) error {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(m.volumeDir(), rec.ID+".json.tmp")
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(m.volumeDir(), rec.ID+".json"))
}

// inUse is the refusal of a change to a volume a VM uses.
func (m *Manager) inUse(rec volumeRecord, vmID, what string) error {
	name := vmID
	if vm, err := m.opts.Store.GetVM(vmID); err == nil {
		name = vm.Name
	}
	return fail(driver.ErrState, "delete VM "+name+" first (a volume is used by one VM at a time, and freed when that VM is deleted)",
		"volume %s is attached to VM %s: it cannot be %s", rec.Name, name, what)
}

// DeleteVolume deletes a free volume and its data.
func (m *Manager) DeleteVolume(nameOrID string) error {
	m.createMu.Lock()
	defer m.createMu.Unlock()
	rec, err := m.findVolume(nameOrID)
	if err != nil {
		return err
	}
	att, err := m.attachments()
	if err != nil {
		return err
	}
	if vm := att[rec.ID]; vm != "" {
		return m.inUse(rec, vm, "deleted")
	}
	if err := os.Remove(m.volumeFile(rec.ID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete volume %s: %w", rec.Name, err)
	}
	if err := os.Remove(filepath.Join(m.volumeDir(), rec.ID+".json")); err != nil {
		return fmt.Errorf("delete volume %s: %w", rec.Name, err)
	}
	m.log.Info("volume deleted", "volume", rec.Name, "id", rec.ID)
	return nil
}

// ResizeVolume grows a free volume; the new space reads as zeros.
func (m *Manager) ResizeVolume(nameOrID string, sizeGiB int64) (*sdk.Volume, error) {
	if err := CheckVolumeSize(sizeGiB); err != nil {
		return nil, err
	}
	m.createMu.Lock()
	defer m.createMu.Unlock()
	rec, err := m.findVolume(nameOrID)
	if err != nil {
		return nil, err
	}
	if sizeGiB < rec.SizeGiB {
		return nil, fail(driver.ErrInvalid, fmt.Sprintf("volumes only grow: give size_gib of at least %d", rec.SizeGiB),
			"volume %s is %d GiB; shrinking it to %d GiB would cut off its data", rec.Name, rec.SizeGiB, sizeGiB)
	}
	att, err := m.attachments()
	if err != nil {
		return nil, err
	}
	if vm := att[rec.ID]; vm != "" {
		return nil, m.inUse(rec, vm, "resized")
	}
	if err := os.Truncate(m.volumeFile(rec.ID), sizeGiB*gib); err != nil {
		return nil, fmt.Errorf("resize volume %s: %w", rec.Name, err)
	}
	old := rec.SizeGiB
	rec.SizeGiB = sizeGiB
	if err := m.writeVolume(rec); err != nil {
		return nil, fmt.Errorf("resize volume %s: %w", rec.Name, err)
	}
	m.log.Info("volume resized", "volume", rec.Name, "id", rec.ID, "from_gib", old, "to_gib", sizeGiB)
	v := m.volumeView(rec, "")
	return &v, nil
}

// resolveVolumes turns a create's volume names or ids into ids (in place),
// refusing unknown ones and too many.
func (m *Manager) resolveVolumes(req *sdk.CreateVMRequest) error {
	if len(req.Volumes) == 0 {
		return nil
	}
	if len(req.Volumes) > driver.MaxVolumes {
		return fail(driver.ErrInvalid, fmt.Sprintf("attach at most %d volumes to one VM", driver.MaxVolumes), "%d volumes asked for", len(req.Volumes))
	}
	ids := make([]string, 0, len(req.Volumes))
	for _, nameOrID := range req.Volumes {
		rec, err := m.findVolume(nameOrID)
		if err != nil {
			return fail(driver.ErrInvalid, "create the volume first (POST /v1/volumes); GET /v1/volumes lists them", "no volume %q on node %s", jsonapi.Echo(nameOrID), m.opts.NodeName)
		}
		if req.Tenant != "" && rec.Tenant != "" && rec.Tenant != req.Tenant {
			return fail(driver.ErrInvalid, "attach volumes of the VM's own tenant", "no volume %q on node %s", jsonapi.Echo(nameOrID), m.opts.NodeName)
		}
		if slices.Contains(ids, rec.ID) {
			return fail(driver.ErrInvalid, "name each volume once", "volume %s is named twice", rec.Name)
		}
		ids = append(ids, rec.ID)
	}
	req.Volumes = ids
	return nil
}

// claimVolumes refuses volumes another VM uses; the caller holds createMu
// and writes the VM's record (which claims them) before letting it go.
func (m *Manager) claimVolumes(req sdk.CreateVMRequest) error {
	if len(req.Volumes) == 0 {
		return nil
	}
	att, err := m.attachments()
	if err != nil {
		return err
	}
	for _, id := range req.Volumes {
		if vm := att[id]; vm != "" {
			rec, err := m.findVolume(id)
			if err != nil {
				return err
			}
			return m.inUse(rec, vm, "attached to a second VM")
		}
	}
	return nil
}

// volumeSpecs are the driver's view of a create's volumes (ids resolved).
func (m *Manager) volumeSpecs(ids []string) []*pb.Volume {
	out := make([]*pb.Volume, 0, len(ids))
	for _, id := range ids {
		out = append(out, &pb.Volume{Id: id, Path: m.volumeFile(id)})
	}
	return out
}

// claims reports whether the named driver is up and claims c.
func (m *Manager) claims(drvName string, c driver.Capability) bool {
	for _, s := range m.opts.Drivers.Status() {
		if s.Name == drvName {
			return s.Capabilities != nil && c.ClaimedBy(s.Capabilities)
		}
	}
	return false
}
