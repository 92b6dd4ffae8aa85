// Package image reads FluxVM guest image bundles: a directory holding a kernel, an
// initramfs, a data disk and the fluxvm-image.json manifest that names them, as built
// by scripts/guest-image.sh (make guest-image).
package image

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ManifestFile is the manifest's file name inside an image directory.
const ManifestFile = "fluxvm-image.json"

// FormatVersion is the manifest format this package understands.
const FormatVersion = 1

// DefaultImageDir is where make guest-image puts the minimal Linux image, which boots
// FluxVM's own kernel (guest/kernel/config-6.1).
const DefaultImageDir = "/var/cache/fluxvm/images/debian-minimal"

// StockImageDir is where make guest-image-stock puts the same image with Debian's
// stock kernel and its modules.
const StockImageDir = "/var/cache/fluxvm/images/debian-minimal-stock"

// ErrNotBuilt is returned by Load when the directory holds no manifest.
var ErrNotBuilt = errors.New("guest image not built")

// Manifest describes a guest image bundle.
type Manifest struct {
	// FormatVersion is the manifest format (FormatVersion).
	FormatVersion int `json:"format_version"`
	// Name identifies the image, e.g. "debian-minimal".
	Name string `json:"name"`
	// GuestOS is "linux".
	GuestOS string `json:"guest_os"`
	// Arch is the guest architecture, e.g. "x86_64".
	Arch string `json:"arch"`
	// Kernel is the uncompressed kernel (ELF with a PVH entry), relative to the directory.
	Kernel string `json:"kernel"`
	// Initrd is the initramfs (uncompressed newc cpio), relative to the directory.
	Initrd string `json:"initrd"`
	// DisplayInitrd is the initramfs for a VM with a display, relative to the
	// directory: Initrd with the display drivers (DisplayModules) added, which a
	// headless VM has no use for. Optional; without it such a VM boots Initrd.
	DisplayInitrd string `json:"display_initrd,omitempty"`
	// Disk is an empty qcow2 data disk, relative to the directory; optional.
	Disk string `json:"disk,omitempty"`
	// Cmdline is the base kernel command line; drivers append their tuning.
	Cmdline string `json:"cmdline"`
	// Agent says how to reach the guest agent: "virtio-serial:<port name>".
	Agent string `json:"agent"`
	// KernelVersion is the kernel release (uname -r in the guest).
	KernelVersion string `json:"kernel_version"`
	// Modules are the kernel modules the initramfs loads, in order.
	Modules []string `json:"modules,omitempty"`
	// DisplayModules are the modules DisplayInitrd adds, which the guest agent loads
	// when the kernel command line says the VM has a display, in order.
	DisplayModules []string `json:"display_modules,omitempty"`
	// SSHServer is the path of the OpenSSH server inside the guest, which the guest
	// agent starts on port 22; empty for an image without one.
	SSHServer string `json:"ssh_server,omitempty"`
	// BuiltFrom records the inputs (package versions, agent source hash).
	BuiltFrom map[string]string `json:"built_from,omitempty"`

	dir string
}

// DefaultDir is $FLUXVM_IMAGE_DIR, or DefaultImageDir when that is unset.
func DefaultDir() string {
	if d := os.Getenv("FLUXVM_IMAGE_DIR"); d != "" {
		return d
	}
	return DefaultImageDir
}

// StockDir is $FLUXVM_STOCK_IMAGE_DIR, or StockImageDir when that is unset.
func StockDir() string {
	if d := os.Getenv("FLUXVM_STOCK_IMAGE_DIR"); d != "" {
		return d
	}
	return StockImageDir
}

// Load reads and validates the manifest in dir: the format version must be known, the
// required fields set, and the files it names must exist inside dir.
func Load(dir string) (*Manifest, error) {
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: no %s in %s (run make guest-image)", ErrNotBuilt, ManifestFile, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("read guest image manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse guest image manifest %s: %w", path, err)
	}
	m.dir = dir
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("guest image manifest %s: %w", path, err)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	if m.FormatVersion != FormatVersion {
		return fmt.Errorf("format_version %d is not supported (this FluxVM reads %d); rebuild the image", m.FormatVersion, FormatVersion)
	}
	for _, f := range []struct{ name, value string }{
		{"name", m.Name}, {"guest_os", m.GuestOS}, {"arch", m.Arch}, {"kernel", m.Kernel},
		{"initrd", m.Initrd}, {"agent", m.Agent},
	} {
		if f.value == "" {
			return fmt.Errorf("%q is missing", f.name)
		}
	}
	if m.GuestOS != "linux" {
		return fmt.Errorf("guest_os %q is not supported (want \"linux\")", m.GuestOS)
	}
	if _, ok := strings.CutPrefix(m.Agent, "virtio-serial:"); !ok || m.AgentPort() == "" {
		return fmt.Errorf("agent %q is not of the form virtio-serial:<port name>", m.Agent)
	}
	for _, f := range []struct{ name, value string }{{"kernel", m.Kernel}, {"initrd", m.Initrd}, {"display_initrd", m.DisplayInitrd}, {"disk", m.Disk}} {
		if f.value == "" {
			continue
		}
		if filepath.IsAbs(f.value) || !filepath.IsLocal(f.value) {
			return fmt.Errorf("%s %q must be a path inside the image directory", f.name, f.value)
		}
		fi, err := os.Stat(filepath.Join(m.dir, f.value))
		if err != nil {
			return fmt.Errorf("%s file: %w", f.name, err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s %s is not a regular file", f.name, f.value)
		}
	}
	return nil
}

// Dir is the image directory the manifest was loaded from.
func (m *Manifest) Dir() string { return m.dir }

// Path returns the absolute-or-dir-relative path of a file field: "kernel", "initrd",
// "display_initrd" or "disk". It returns "" for any other field and for an unset
// optional one.
func (m *Manifest) Path(field string) string {
	var v string
	switch field {
	case "kernel":
		v = m.Kernel
	case "initrd":
		v = m.Initrd
	case "display_initrd":
		v = m.DisplayInitrd
	case "disk":
		v = m.Disk
	}
	if v == "" {
		return ""
	}
	return filepath.Join(m.dir, v)
}

// AgentPort is the virtio-serial port name of the guest agent.
func (m *Manifest) AgentPort() string {
	return strings.TrimPrefix(m.Agent, "virtio-serial:")
}
