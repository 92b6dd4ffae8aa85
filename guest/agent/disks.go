package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// LinkDisks makes /dev/disk/by-id/virtio-<serial> for every virtio disk, as
// udev would (the FluxVM image has no udev): the host gives each volume the
// volume id as serial, so the guest finds a volume by id whatever order its
// disks come in. sysBlock is /sys/block and dev is /dev (other roots in
// tests). A link already there is replaced; a disk without a serial gets
// none. Links of disks that are gone are removed.
func LinkDisks(sysBlock, dev string) error {
	entries, err := os.ReadDir(sysBlock)
	if err != nil {
		return fmt.Errorf("link disks: %w", err)
	}
	byID := filepath.Join(dev, "disk", "by-id")
	if err := os.MkdirAll(byID, 0o755); err != nil {
		return fmt.Errorf("link disks: %w", err)
	}
	want := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "vd") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(sysBlock, name, "serial"))
		serial := strings.TrimSpace(string(b))
		if err != nil || serial == "" || strings.ContainsAny(serial, "/\x00") {
			continue
		}
		want["virtio-"+serial] = filepath.Join("..", "..", name)
	}
	var errs []error
	if old, err := os.ReadDir(byID); err == nil {
		for _, e := range old {
			if _, ok := want[e.Name()]; !ok && strings.HasPrefix(e.Name(), "virtio-") {
				_ = os.Remove(filepath.Join(byID, e.Name()))
			}
		}
	}
	for link, target := range want {
		p := filepath.Join(byID, link)
		if cur, err := os.Readlink(p); err == nil && cur == target {
			continue
		}
		_ = os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			errs = append(errs, fmt.Errorf("link disk %s: %w", link, err))
		}
	}
	return errors.Join(errs...)
}
