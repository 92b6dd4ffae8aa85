package vz

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"

	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// Files of a VM workspace (<state_dir>/vms/<id>/).
const (
	specFile      = "spec.json"      // the VMSpec, as the driver took it
	hostFile      = "host.json"      // the HostConfig the host process runs
	exitFile      = "exit.json"      // how the last host process ended, written by it
	hostLog       = "host.log"       // the host process's standard output and error
	consoleLog    = "console.log"    // the guest's serial console
	socketName    = "host.sock"      // the host process's unix socket
	diskName      = "disk.img"       // the boot disk, an APFS clone of the image's
	efiVarsName   = "efi-vars.fd"    // Linux guests: the EFI variable store
	auxName       = "aux.img"        // macOS guests: the auxiliary storage
	hwModelName   = "hardware-model" // macOS guests: the hardware model (data representation)
	machineIDName = "machine-id"     // macOS guests: the machine identifier (data representation)
	stateFileName = "state.vzvmsave" // memory snapshots: saved machine state
	snapshotsDir  = "snapshots"      // snapshots/<tag>/
	snapMetaFile  = "snapshot.json"  // snapshots/<tag>/snapshot.json
	restoreMarker = "restore-from"   // names a saved state the next start resumes
)

// maxSocketPath is the longest unix socket path macOS takes (sun_path is
// 104 bytes, with the terminating zero).
const maxSocketPath = 103

// AgentPort is the virtio-vsock port the guest agent (fluxvm-guest -vsock)
// listens on in both kinds of guest.
const AgentPort = 1024

// HostConfig is what a host process runs: the translation of a VMSpec into
// the framework's terms, written to host.json in the VM workspace. Paths are
// absolute and inside the workspace, except volumes.
type HostConfig struct {
	// VMID is the VM's id; the host process answers hello with it, so a
	// plugin can tell which VM a socket serves.
	VMID string `json:"vm_id"`
	// GuestOS is "linux" or "macos".
	GuestOS string `json:"guest_os"`
	// CPUs and MemoryMiB size the VM.
	CPUs      uint   `json:"cpus"`
	MemoryMiB uint64 `json:"memory_mib"`
	// Disk is the boot disk (raw image).
	Disk string `json:"disk"`
	// EFIVars is a Linux guest's EFI variable store (made when missing).
	EFIVars string `json:"efi_vars,omitempty"`
	// HardwareModel and AuxStorage are a macOS guest's platform files, from
	// the image (a clone keeps its source's). MachineID is the VM's own
	// machine identifier, either kind of guest (made at first start, never
	// copied to a clone; a saved state restores only into the same one).
	HardwareModel string `json:"hardware_model,omitempty"`
	MachineID     string `json:"machine_id,omitempty"`
	AuxStorage    string `json:"aux_storage,omitempty"`
	// MAC is the NAT network interface's address ("" for a random one).
	MAC string `json:"mac,omitempty"`
	// Volumes are extra virtio disks (Linux guests), by serial.
	Volumes []HostVolume `json:"volumes,omitempty"`
	// Console is the file the serial console is written to.
	Console string `json:"console"`
	// Display adds a graphics device, keyboard and pointer (the guest's own
	// screen; see docs/design/014-vz-driver.md for why no screenshots).
	Display bool `json:"display,omitempty"`
	// AgentPort is the guest agent's vsock port.
	AgentPort uint32 `json:"agent_port"`
	// Socket is where the host process listens.
	Socket string `json:"socket"`
	// RestoreFrom, when set, is a saved machine state the next start
	// restores instead of booting.
	RestoreFrom string `json:"restore_from,omitempty"`
}

// HostVolume is one extra disk.
type HostVolume struct {
	ID   string `json:"id"`
	Path string `json:"path"`
}

// idPattern is what VM ids look like (the contract's rule).
var idPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Limits of one VM, checked in translate: the framework's own minimum is 1
// vCPU and 128 MiB; macOS guests need far more, which macOS itself checks.
const (
	maxVCPUs     = 64
	minMemoryMiB = 128
	maxMemoryMiB = 1 << 20
)

// translate turns a spec into the host configuration of the VM in workspace
// ws, checking everything the framework would refuse later, so that CreateVM
// fails with a reason instead of the host process.
func translate(spec *pb.VMSpec, ws string, os_ pb.GuestOS) (*HostConfig, error) {
	id := spec.GetId()
	if !idPattern.MatchString(id) {
		return nil, driver.Errorf(driver.ErrInvalid, "vm id %q is not 1-63 of [a-z0-9-] starting with a letter or digit", id)
	}
	if spec.GetVcpus() < 1 || spec.GetVcpus() > maxVCPUs {
		return nil, driver.Errorf(driver.ErrInvalid, "vm %s: vcpus %d is out of range 1-%d", id, spec.GetVcpus(), maxVCPUs)
	}
	if spec.GetMemoryMib() < minMemoryMiB || spec.GetMemoryMib() > maxMemoryMiB {
		return nil, driver.Errorf(driver.ErrInvalid, "vm %s: memory_mib %d is out of range %d-%d", id, spec.GetMemoryMib(), minMemoryMiB, maxMemoryMiB)
	}
	if spec.GetImage() == "" || !filepath.IsAbs(spec.GetImage()) {
		return nil, driver.Errorf(driver.ErrInvalid, "vm %s: image %q is not an absolute path", id, spec.GetImage())
	}
	if len(spec.GetDriverConfigJson()) > 0 && !bytes.Equal(bytes.TrimSpace(spec.GetDriverConfigJson()), []byte("{}")) {
		return nil, driver.Errorf(driver.ErrInvalid, "vm %s: the vz driver takes no per-VM driver config", id)
	}
	sock := filepath.Join(ws, socketName)
	if len(sock) > maxSocketPath {
		return nil, driver.Errorf(driver.ErrInvalid, "vm %s: socket path %s is %d bytes, longer than the %d macOS allows: use a shorter state_dir", id, sock, len(sock), maxSocketPath)
	}
	cfg := &HostConfig{
		VMID:      id,
		CPUs:      uint(spec.GetVcpus()),
		MemoryMiB: uint64(spec.GetMemoryMib()),
		Disk:      filepath.Join(ws, diskName),
		Console:   filepath.Join(ws, consoleLog),
		Display:   spec.GetDisplay(),
		AgentPort: AgentPort,
		Socket:    sock,
	}
	switch os_ {
	case pb.GuestOS_GUEST_OS_LINUX:
		cfg.GuestOS = "linux"
		cfg.EFIVars = filepath.Join(ws, efiVarsName)
		cfg.MachineID = filepath.Join(ws, machineIDName)
	case pb.GuestOS_GUEST_OS_MACOS:
		cfg.GuestOS = "macos"
		cfg.HardwareModel = filepath.Join(ws, hwModelName)
		cfg.MachineID = filepath.Join(ws, machineIDName)
		cfg.AuxStorage = filepath.Join(ws, auxName)
		if len(spec.GetVolumes()) > 0 {
			return nil, driver.Errorf(driver.ErrInvalid, "vm %s: volumes attach to Linux guests only: the vz driver gives macOS guests no extra disks", id)
		}
	default:
		return nil, driver.Errorf(driver.ErrInvalid, "vm %s: guest_os %v is not linux or macos", id, os_)
	}
	if n := spec.GetNetwork(); n != nil {
		if n.GetMode() != pb.NetworkMode_NETWORK_MODE_UNSPECIFIED && n.GetMode() != pb.NetworkMode_NETWORK_MODE_USER {
			return nil, driver.Errorf(driver.ErrInvalid, "vm %s: network mode %v: the vz driver offers the framework's NAT network only (mode user)", id, n.GetMode())
		}
		if n.GetMac() != "" {
			hw, err := net.ParseMAC(n.GetMac())
			if err != nil || len(hw) != 6 || hw[0]&1 != 0 {
				return nil, driver.Errorf(driver.ErrInvalid, "vm %s: mac %q is not a unicast Ethernet address", id, n.GetMac())
			}
			cfg.MAC = hw.String()
		}
	}
	if err := driver.CheckVolumes(spec); err != nil {
		return nil, err
	}
	for _, v := range spec.GetVolumes() {
		cfg.Volumes = append(cfg.Volumes, HostVolume{ID: v.GetId(), Path: v.GetPath()})
	}
	return cfg, nil
}

// imageFiles names the files of an image that CreateVM clones into a new
// workspace, source to destination name: a Linux image is one raw disk; a
// macOS image is a directory holding disk.img, aux.img and hardware-model
// (the layout docs/mac.md describes installing into).
func imageFiles(image string, os_ pb.GuestOS) (map[string]string, error) {
	fi, err := os.Stat(image)
	if err != nil {
		return nil, driver.Errorf(driver.ErrNotFound, "image %s: %v", image, err)
	}
	if os_ == pb.GuestOS_GUEST_OS_LINUX {
		if !fi.Mode().IsRegular() {
			return nil, driver.Errorf(driver.ErrInvalid, "image %s: a Linux image is a raw disk file", image)
		}
		return map[string]string{image: diskName}, nil
	}
	if !fi.IsDir() {
		return nil, driver.Errorf(driver.ErrInvalid, "image %s: a macOS image is a directory with %s, %s and %s", image, diskName, auxName, hwModelName)
	}
	files := map[string]string{}
	for _, name := range []string{diskName, auxName, hwModelName} {
		p := filepath.Join(image, name)
		if _, err := os.Stat(p); err != nil {
			return nil, driver.Errorf(driver.ErrNotFound, "macOS image %s lacks %s: %v", image, name, err)
		}
		files[p] = name
	}
	return files, nil
}

// readJSON decodes a workspace file strictly.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", path, err)
	}
	return nil
}

// writeJSON writes a workspace file (mode 0600) atomically.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
