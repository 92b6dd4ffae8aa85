package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const validManifest = `{
  "format_version": 1,
  "name": "debian-minimal",
  "guest_os": "linux",
  "arch": "x86_64",
  "kernel": "vmlinux",
  "initrd": "initrd.cpio",
  "display_initrd": "initrd-display.cpio",
  "disk": "disk.qcow2",
  "cmdline": "console=ttyS0 quiet panic=-1",
  "agent": "virtio-serial:org.fluxvm.agent",
  "kernel_version": "6.1.0-57-amd64",
  "modules": ["virtio_ring", "virtio"],
  "display_modules": ["drm", "virtio_gpu"],
  "built_from": {"kernel_package_version": "6.1.192-3", "agent_source_sha256": "abc"}
}`

// writeImage creates an image directory with the given manifest and files.
func writeImage(t *testing.T, manifest string, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if manifest != "" {
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte(manifest), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadValidManifest(t *testing.T) {
	dir := writeImage(t, validManifest, "vmlinux", "initrd.cpio", "initrd-display.cpio", "disk.qcow2")
	m, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "debian-minimal" || m.KernelVersion != "6.1.0-57-amd64" || m.BuiltFrom["kernel_package_version"] != "6.1.192-3" || len(m.Modules) != 2 || len(m.DisplayModules) != 2 {
		t.Fatalf("manifest = %+v", m)
	}
	for field, want := range map[string]string{
		"kernel":         filepath.Join(dir, "vmlinux"),
		"initrd":         filepath.Join(dir, "initrd.cpio"),
		"display_initrd": filepath.Join(dir, "initrd-display.cpio"),
		"disk":           filepath.Join(dir, "disk.qcow2"),
		"cmdline":        "",
		"nonsense":       "",
	} {
		if got := m.Path(field); got != want {
			t.Errorf("Path(%q) = %q, want %q", field, got, want)
		}
	}
	if m.AgentPort() != "org.fluxvm.agent" || m.Dir() != dir {
		t.Errorf("AgentPort() = %q, Dir() = %q", m.AgentPort(), m.Dir())
	}
}

func TestLoadRejectsBrokenImages(t *testing.T) {
	edit := func(old, new string) string {
		if !strings.Contains(validManifest, old) {
			t.Fatalf("test bug: %q not in the manifest", old)
		}
		return strings.Replace(validManifest, old, new, 1)
	}
	all := []string{"vmlinux", "initrd.cpio", "initrd-display.cpio", "disk.qcow2"}
	for _, tc := range []struct {
		name     string
		manifest string
		files    []string
		wantErr  string
	}{
		{"no manifest", "", all, "run make guest-image"},
		{"not json", "{", all, "parse guest image manifest"},
		{"unknown format", edit(`"format_version": 1`, `"format_version": 2`), all, "format_version 2 is not supported"},
		{"no format", edit(`"format_version": 1,`, ``), all, "format_version 0 is not supported"},
		{"missing kernel field", edit(`"kernel": "vmlinux",`, ``), all, `"kernel" is missing`},
		{"missing name", edit(`"name": "debian-minimal",`, ``), all, `"name" is missing`},
		{"kernel file missing", validManifest, []string{"initrd.cpio", "initrd-display.cpio", "disk.qcow2"}, "kernel file"},
		{"initrd file missing", validManifest, []string{"vmlinux", "initrd-display.cpio", "disk.qcow2"}, "initrd file"},
		{"display initrd file missing", validManifest, []string{"vmlinux", "initrd.cpio", "disk.qcow2"}, "display_initrd file"},
		{"display initrd escapes dir", edit(`"display_initrd": "initrd-display.cpio"`, `"display_initrd": "../x.cpio"`), all, "inside the image directory"},
		{"disk file missing", validManifest, []string{"vmlinux", "initrd.cpio", "initrd-display.cpio"}, "disk file"},
		{"kernel escapes dir", edit(`"kernel": "vmlinux"`, `"kernel": "../vmlinux"`), all, "inside the image directory"},
		{"kernel absolute", edit(`"kernel": "vmlinux"`, `"kernel": "/boot/vmlinux"`), all, "inside the image directory"},
		{"windows guest", edit(`"guest_os": "linux"`, `"guest_os": "windows"`), all, `guest_os "windows" is not supported`},
		{"bad agent", edit(`"agent": "virtio-serial:org.fluxvm.agent"`, `"agent": "vsock:3"`), all, "virtio-serial:<port name>"},
		{"empty agent port", edit(`"agent": "virtio-serial:org.fluxvm.agent"`, `"agent": "virtio-serial:"`), all, "virtio-serial:<port name>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeImage(t, tc.manifest, tc.files...)
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Load() err = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestLoadReportsNotBuilt(t *testing.T) {
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNotBuilt) {
		t.Fatalf("err = %v, want ErrNotBuilt", err)
	}
}

func TestLoadAllowsImageWithoutDiskOrDisplayInitrd(t *testing.T) {
	m := strings.Replace(validManifest, `"disk": "disk.qcow2",`, ``, 1)
	m = strings.Replace(m, `"display_initrd": "initrd-display.cpio",`, ``, 1)
	got, err := Load(writeImage(t, m, "vmlinux", "initrd.cpio"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Path("disk") != "" || got.Path("display_initrd") != "" {
		t.Fatalf("Path(disk) = %q, Path(display_initrd) = %q for an image without them", got.Path("disk"), got.Path("display_initrd"))
	}
}

func TestLoadRejectsDirectoryAsFile(t *testing.T) {
	dir := writeImage(t, validManifest, "initrd.cpio", "initrd-display.cpio", "disk.qcow2")
	if err := os.Mkdir(filepath.Join(dir, "vmlinux"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err = %v, want 'not a regular file'", err)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("FLUXVM_IMAGE_DIR", "")
	if got := DefaultDir(); got != DefaultImageDir {
		t.Errorf("DefaultDir() without env = %q, want %q", got, DefaultImageDir)
	}
	t.Setenv("FLUXVM_IMAGE_DIR", "/srv/img")
	if got := DefaultDir(); got != "/srv/img" {
		t.Errorf("DefaultDir() with env = %q, want /srv/img", got)
	}
}

func TestStockDirFollowsItsVariableAndDiffersFromTheDefault(t *testing.T) {
	t.Setenv("FLUXVM_STOCK_IMAGE_DIR", "")
	if got := StockDir(); got != StockImageDir || got == DefaultImageDir {
		t.Errorf("StockDir() without env = %q, want %q (not the default image's %q)", got, StockImageDir, DefaultImageDir)
	}
	t.Setenv("FLUXVM_STOCK_IMAGE_DIR", "/srv/stock")
	if got := StockDir(); got != "/srv/stock" {
		t.Errorf("StockDir() with env = %q, want /srv/stock", got)
	}
}
