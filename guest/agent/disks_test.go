package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLinkDisksMapsSerialsToByIDLinks builds a fake /sys/block with two
// virtio disks (one with a volume id as serial, one without a serial) and a
// non-virtio disk, and checks that only the serial disk gets
// /dev/disk/by-id/virtio-<serial> pointing at its node, that running it
// again changes nothing, and that a link of a disk that is gone goes.
func TestLinkDisksMapsSerialsToByIDLinks(t *testing.T) {
	root := t.TempDir()
	sys, dev := filepath.Join(root, "sys", "block"), filepath.Join(root, "dev")
	disk := func(name, serial string) {
		dir := filepath.Join(sys, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if serial != "" {
			if err := os.WriteFile(filepath.Join(dir, "serial"), []byte(serial+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	disk("vda", "")
	disk("vdb", "vol-0123456789ab")
	disk("sda", "not-virtio")
	stale := filepath.Join(dev, "disk", "by-id", "virtio-vol-gone")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../vdz", stale); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := LinkDisks(sys, dev); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(dev, "disk", "by-id"))
	if len(entries) != 1 || entries[0].Name() != "virtio-vol-0123456789ab" {
		t.Fatalf("by-id = %v, want only virtio-vol-0123456789ab", entries)
	}
	target, err := os.Readlink(filepath.Join(dev, "disk", "by-id", "virtio-vol-0123456789ab"))
	if err != nil || target != "../../vdb" {
		t.Errorf("link -> %q, %v; want ../../vdb", target, err)
	}
}
