//go:build linux

package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fluxvm/fluxvm/guest/image"
	"github.com/fluxvm/fluxvm/plugins/base"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// vmConfig is the spec's driver_config_json: the driver-specific fields.
type vmConfig struct {
	// Machine overrides the driver's machine type: "microvm" or "pc".
	Machine string `json:"machine"`
	// ExtraCmdline is appended to the kernel command line (image bundles only).
	ExtraCmdline string `json:"extra_cmdline"`
	// MemoryFile keeps the guest's RAM in a file of the workspace (ram),
	// so that a memory snapshot is that file and the device state beside
	// it, which clones resume from in a fraction of a boot (memfile.go).
	// The file takes as much disk as the guest touched of its memory.
	MemoryFile bool `json:"memory_file"`
}

// vmRecord is spec.json: the spec and everything CreateVM derived from it, so
// any later plugin process can start, recover or destroy the VM.
type vmRecord struct {
	Spec      json.RawMessage `json:"spec"` // pb.VMSpec (driver.MarshalSpecJSON)
	UUID      string          `json:"uuid"`
	Machine   string          `json:"machine"`
	Kernel    string          `json:"kernel,omitempty"`
	Initrd    string          `json:"initrd,omitempty"`
	Cmdline   string          `json:"cmdline,omitempty"` // the image's, before tuning
	Extra     string          `json:"extra_cmdline,omitempty"`
	AgentPort string          `json:"agent_port"`
	Disk      string          `json:"disk,omitempty"` // the overlay; empty when the image has no disk
	Backing   string          `json:"backing,omitempty"`
	MAC       string          `json:"mac,omitempty"`
	CreatedAt int64           `json:"created_at_unix_nano"`
	// MemoryFile: the guest's RAM is the workspace's ram file.
	MemoryFile bool `json:"memory_file,omitempty"`
	// NoAnnounce: the NIC does not offer the guest virtio-net's announce feature
	// (guest_announce=off). A memory_file VM is made so, because a guest resumed
	// from it would otherwise spend the first moments after the resume sending
	// its own announcements, a burst of guest CPU under TCG that delays its
	// first answer, and QEMU announces the NIC's address on the guest's behalf
	// anyway. A resumed clone takes its source's setting: the saved device state
	// loads only into a NIC with the same features. Records written before the
	// field have it false, so guests saved then still resume.
	NoAnnounce bool `json:"no_guest_announce,omitempty"`
	// StartedIn and QEMUName: the VM's QEMU was started ahead, as a spare
	// (spare.go), in another workspace and under another -name, which its
	// command line and QMP still show; they are cleared when the VM starts a
	// QEMU of its own.
	StartedIn string `json:"qemu_started_in,omitempty"`
	QEMUName  string `json:"qemu_name,omitempty"`
	// Resume, when set, makes the next start resume from a saved guest
	// instead of booting (a clone with resume_memory); it is cleared once
	// that start has succeeded.
	Resume *resumeFrom `json:"resume,omitempty"`
}

// validateSpec checks a spec against the contract and this host and returns
// the record CreateVM will write (without the overlay made yet).
func validateSpec(ctx context.Context, cfg Config, spec *pb.VMSpec) (*vmRecord, string, error) {
	if spec == nil {
		return nil, "", driver.Errorf(driver.ErrInvalid, "no vm spec given")
	}
	if !idPattern.MatchString(spec.Id) {
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm id %q does not match [a-z0-9][a-z0-9-]{0,62}", spec.Id)
	}
	if spec.GuestOs != pb.GuestOS_GUEST_OS_LINUX {
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: guest_os %v is not supported by the qemu driver (GUEST_OS_LINUX only)", spec.Id, spec.GuestOs)
	}
	if spec.Vcpus < 1 {
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: vcpus %d must be at least 1", spec.Id, spec.Vcpus)
	}
	if n := int64(runtime.NumCPU()); spec.Vcpus > n {
		return nil, "", driver.Errorf(driver.ErrNoCapacity, "vm %s: vcpus %d is more than this host's %d", spec.Id, spec.Vcpus, n)
	}
	if spec.MemoryMib < 64 {
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: memory_mib %d must be at least 64", spec.Id, spec.MemoryMib)
	}
	if m := hostMemoryMiB(); m > 0 && spec.MemoryMib > m {
		return nil, "", driver.Errorf(driver.ErrNoCapacity, "vm %s: memory_mib %d is more than this host's %d MiB", spec.Id, spec.MemoryMib, m)
	}
	if err := driver.CheckVolumes(spec); err != nil {
		return nil, "", err
	}
	rec := &vmRecord{Machine: cfg.Machine, AgentPort: "org.fluxvm.agent", CreatedAt: time.Now().UnixNano()}
	switch spec.GetNetwork().GetMode() {
	case pb.NetworkMode_NETWORK_MODE_UNSPECIFIED, pb.NetworkMode_NETWORK_MODE_NONE:
	case pb.NetworkMode_NETWORK_MODE_USER:
		rec.MAC = spec.GetNetwork().GetMac()
		if rec.MAC == "" {
			rec.MAC = macFor(spec.Id)
		} else if hw, err := net.ParseMAC(rec.MAC); err != nil || len(hw) != 6 {
			return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: network.mac %q is not a MAC address", spec.Id, rec.MAC)
		}
	case pb.NetworkMode_NETWORK_MODE_TAP:
		n := spec.GetNetwork()
		// The tap's name goes into QEMU's -netdev option: a comma would
		// start another option.
		if t := n.GetTap(); t == "" || len(t) > 15 || strings.ContainsAny(t, ",/= \x00") {
			return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: network mode TAP needs network.tap, the name of an existing tap device (1-15 characters, no ',', '/', '=' or spaces), not %q", spec.Id, n.GetTap())
		}
		rec.MAC = n.GetMac()
		if rec.MAC == "" {
			rec.MAC = macFor(spec.Id)
		} else if hw, err := net.ParseMAC(rec.MAC); err != nil || len(hw) != 6 {
			return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: network.mac %q is not a MAC address", spec.Id, rec.MAC)
		}
		for _, a := range n.GetAddresses() {
			if _, err := netip.ParsePrefix(a); err != nil {
				return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: network.addresses: %q is not an address in CIDR form (10.230.7.2/24)", spec.Id, a)
			}
		}
		if g := n.GetGateway(); g != "" {
			if _, err := netip.ParseAddr(g); err != nil {
				return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: network.gateway %q is not an IP address", spec.Id, g)
			}
		}
	default:
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: network mode %v is not one of NONE, USER, TAP", spec.Id, spec.GetNetwork().GetMode())
	}
	var vc vmConfig
	if len(bytes.TrimSpace(spec.DriverConfigJson)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(spec.DriverConfigJson))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&vc); err != nil {
			return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: driver_config_json: %s", spec.Id, jsonProblem(err))
		}
	}
	switch vc.Machine {
	case "":
	case machineMicrovm, machinePC:
		rec.Machine = vc.Machine
	default:
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: driver_config_json: machine %q is not one of microvm, pc", spec.Id, vc.Machine)
	}
	if strings.ContainsAny(vc.ExtraCmdline, "\x00\n") {
		return nil, "", driver.Errorf(driver.ErrInvalid, "vm %s: driver_config_json: extra_cmdline must be one line", spec.Id)
	}
	rec.Extra = vc.ExtraCmdline
	rec.MemoryFile = vc.MemoryFile
	rec.NoAnnounce = vc.MemoryFile

	disk, err := resolveImage(cfg, spec, rec, vc)
	if err != nil {
		return nil, "", err
	}
	if disk != "" {
		format, err := imageFormat(ctx, cfg.QEMUImg, disk)
		if err != nil {
			return nil, "", fmt.Errorf("vm %s: %w", spec.Id, err)
		}
		rec.Backing = disk
		return rec, format, nil
	}
	return rec, "", nil
}

// resolveImage checks spec.image and fills the record's boot fields. It
// returns the disk to put the overlay over ("" for none).
func resolveImage(cfg Config, spec *pb.VMSpec, rec *vmRecord, vc vmConfig) (string, error) {
	path := spec.Image
	if path == "" {
		return "", driver.Errorf(driver.ErrInvalid, "vm %s: no image given", spec.Id)
	}
	if !filepath.IsAbs(path) {
		return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %q is not an absolute path", spec.Id, path)
	}
	path = filepath.Clean(path)
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", driver.Errorf(driver.ErrNotFound, "vm %s: image %s does not exist", spec.Id, path)
	}
	if err != nil {
		return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %s: %v", spec.Id, path, err)
	}
	if len(cfg.ImageDirs) > 0 {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %s: %v", spec.Id, path, err)
		}
		allowed := false
		for _, dir := range cfg.ImageDirs {
			if rd, err := filepath.EvalSymlinks(dir); err == nil {
				dir = rd
			}
			if rel, err := filepath.Rel(dir, real); err == nil && filepath.IsLocal(rel) || real == dir {
				allowed = true
				break
			}
		}
		if !allowed {
			return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %s is outside the allowed image_dirs %v", spec.Id, path, cfg.ImageDirs)
		}
	}
	if !fi.IsDir() {
		// A plain disk image boots through the firmware, which microvm lacks.
		if vc.Machine == machineMicrovm {
			return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %s is a disk image, which boots on machine \"pc\" only", spec.Id, path)
		}
		rec.Machine = machinePC
		return path, nil
	}
	m, err := image.Load(path)
	if errors.Is(err, image.ErrNotBuilt) {
		return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %s is a directory without %s", spec.Id, path, image.ManifestFile)
	}
	if errors.Is(err, os.ErrNotExist) {
		return "", driver.Errorf(driver.ErrNotFound, "vm %s: image %s is incomplete: %v", spec.Id, path, err)
	}
	if err != nil {
		return "", driver.Errorf(driver.ErrInvalid, "vm %s: %v", spec.Id, err)
	}
	if want := base.EnumName(spec.GuestOs); m.GuestOS != want {
		return "", driver.Errorf(driver.ErrInvalid, "vm %s: image %s holds a %s guest, the spec asks for %s", spec.Id, path, m.GuestOS, want)
	}
	rec.Kernel, rec.Initrd, rec.Cmdline, rec.AgentPort = m.Path("kernel"), m.Path("initrd"), m.Cmdline, m.AgentPort()
	if spec.Display && m.DisplayInitrd != "" {
		// The display drivers; a headless VM boots without them, and faster.
		rec.Initrd = m.Path("display_initrd")
	}
	return m.Path("disk"), nil
}

// formatKey is an image file as it is now: a file replaced or rewritten
// gets another key.
type formatKey struct {
	qemuImg, path string
	dev, ino      uint64
	size, mtime   int64
}

// formats holds qemu-img's answers by formatKey: every launch and clone of
// an image asked it again, a process start (5 to 10 ms) on the way to a
// VM running.
var formats sync.Map

// imageFormat asks qemu-img for a disk image's format ("qcow2", "raw", ...),
// once per version of the file.
func imageFormat(ctx context.Context, qemuImg, path string) (string, error) {
	var key *formatKey
	var st syscall.Stat_t
	if syscall.Stat(path, &st) == nil {
		key = &formatKey{qemuImg: qemuImg, path: path, dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano()}
		if f, ok := formats.Load(*key); ok {
			return f.(string), nil
		}
	}
	f, err := askImageFormat(ctx, qemuImg, path)
	if err == nil && key != nil {
		formats.Store(*key, f)
	}
	return f, err
}

func askImageFormat(ctx context.Context, qemuImg, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, qemuImg, "info", "-U", "--output=json", path).Output()
	if err != nil {
		return "", fmt.Errorf("qemu-img info %s: %v%s", path, err, exitStderr(err))
	}
	var info struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(out, &info); err != nil || info.Format == "" {
		return "", fmt.Errorf("qemu-img info %s: no format in its output", path)
	}
	return info.Format, nil
}

// createOverlay makes the VM's copy-on-write disk over the image's.
func createOverlay(ctx context.Context, qemuImg, backing, format, overlay string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, qemuImg, "create", "-q", "-f", "qcow2", "-F", format, "-b", backing, overlay).CombinedOutput()
	if err != nil {
		return fmt.Errorf("qemu-img create overlay over %s: %v: %s", backing, err, strings.TrimSpace(string(out)))
	}
	return os.Chmod(overlay, 0o600)
}

// exitStderr returns ": <stderr>" of a failed exec.Cmd.Output, or "".
func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}

// macFor derives a stable, locally administered MAC from the VM id.
func macFor(id string) string {
	h := sha256.Sum256([]byte(id))
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", h[0], h[1], h[2])
}

// newUUID returns a random RFC 4122 version 4 UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// writeFileAtomic writes data to path through a temporary file, mode 0600.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
