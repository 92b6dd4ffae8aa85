//go:build linux

package qemu

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	basepb "github.com/fluxvm/fluxvm/plugins/base/proto"
	"github.com/fluxvm/fluxvm/plugins/driver"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// testImages makes an image bundle (with stand-in kernel and initrd files and
// a real qcow2 disk) and a raw disk image under dir.
func testImages(t *testing.T, dir string) (bundle, raw string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Fatal("qemu-img not found: apt-get install qemu-system-x86 qemu-utils")
	}
	bundle = filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinux", "initrd.cpio", "initrd-display.cpio"} {
		if err := os.WriteFile(filepath.Join(bundle, f), []byte("stand-in"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := `{"format_version": 1, "name": "t", "guest_os": "linux", "arch": "x86_64", "kernel": "vmlinux",
		"initrd": "initrd.cpio", "display_initrd": "initrd-display.cpio", "disk": "disk.qcow2", "cmdline": "console=ttyS0",
		"agent": "virtio-serial:org.test.agent"}`
	if err := os.WriteFile(filepath.Join(bundle, "fluxvm-image.json"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	raw = filepath.Join(dir, "disk.raw")
	for _, c := range [][]string{
		{"create", "-q", "-f", "qcow2", filepath.Join(bundle, "disk.qcow2"), "16M"},
		{"create", "-q", "-f", "raw", raw, "16M"},
	} {
		if out, err := exec.Command("qemu-img", c...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", c, err, out)
		}
	}
	return bundle, raw
}

func TestValidateSpecResolvesBundlesAndDiskImages(t *testing.T) {
	bundle, raw := testImages(t, t.TempDir())
	cfg := defaultConfig()
	rec, format, err := validateSpec(context.Background(), cfg, &pb.VMSpec{Id: "b", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Machine != machineMicrovm || rec.Kernel != filepath.Join(bundle, "vmlinux") || rec.AgentPort != "org.test.agent" ||
		rec.Backing != filepath.Join(bundle, "disk.qcow2") || format != "qcow2" || rec.Cmdline != "console=ttyS0" {
		t.Errorf("bundle record = %+v, format %q", rec, format)
	}
	rec, format, err = validateSpec(context.Background(), cfg, &pb.VMSpec{
		Id: "r", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: raw, Vcpus: 1, MemoryMib: 128, Network: &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER},
		DriverConfigJson: []byte(`{"extra_cmdline": "quiet"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Machine != machinePC || rec.Kernel != "" || rec.Backing != raw || format != "raw" || !strings.HasPrefix(rec.MAC, "52:54:00:") {
		t.Errorf("disk record = %+v, format %q", rec, format)
	}
}

func TestValidateSpecBootsOnlyDisplayVMsFromTheDisplayInitrd(t *testing.T) {
	bundle, _ := testImages(t, t.TempDir())
	// The same bundle without a display initramfs, as images built before it had.
	older := filepath.Join(t.TempDir(), "older")
	if err := os.CopyFS(older, os.DirFS(bundle)); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(older, "fluxvm-image.json"))
	if err != nil {
		t.Fatal(err)
	}
	m = []byte(strings.Replace(string(m), `"display_initrd": "initrd-display.cpio", `, "", 1))
	if err := os.WriteFile(filepath.Join(older, "fluxvm-image.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		image   string
		display bool
		want    string
	}{
		{"headless", bundle, false, filepath.Join(bundle, "initrd.cpio")},
		{"display", bundle, true, filepath.Join(bundle, "initrd-display.cpio")},
		{"display, image without a display initrd", older, true, filepath.Join(older, "initrd.cpio")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, _, err := validateSpec(context.Background(), defaultConfig(), &pb.VMSpec{Id: "d", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: tc.image, Vcpus: 1, MemoryMib: 128, Display: tc.display})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Initrd != tc.want {
				t.Errorf("initrd = %s, want %s", rec.Initrd, tc.want)
			}
		})
	}
}

func TestValidateSpecRefusesBadSpecsWithTheRightKind(t *testing.T) {
	dir := t.TempDir()
	bundle, raw := testImages(t, dir)
	other := t.TempDir()
	ok := func() *pb.VMSpec {
		return &pb.VMSpec{Id: "vm-1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128}
	}
	cases := []struct {
		name    string
		cfg     func(*Config)
		edit    func(*pb.VMSpec)
		want    error
		mention string
	}{
		{"uppercase id", nil, func(s *pb.VMSpec) { s.Id = "VM" }, driver.ErrInvalid, "vm id"},
		{"long id", nil, func(s *pb.VMSpec) { s.Id = strings.Repeat("a", 64) }, driver.ErrInvalid, "vm id"},
		{"macos", nil, func(s *pb.VMSpec) { s.GuestOs = pb.GuestOS_GUEST_OS_MACOS }, driver.ErrInvalid, "MACOS"},
		{"no guest os", nil, func(s *pb.VMSpec) { s.GuestOs = pb.GuestOS_GUEST_OS_UNSPECIFIED }, driver.ErrInvalid, "guest_os"},
		{"no vcpus", nil, func(s *pb.VMSpec) { s.Vcpus = 0 }, driver.ErrInvalid, "vcpus"},
		{"too many vcpus", nil, func(s *pb.VMSpec) { s.Vcpus = 100000 }, driver.ErrNoCapacity, "vcpus"},
		{"too little memory", nil, func(s *pb.VMSpec) { s.MemoryMib = 63 }, driver.ErrInvalid, "memory_mib"},
		{"too much memory", nil, func(s *pb.VMSpec) { s.MemoryMib = 1 << 40 }, driver.ErrNoCapacity, "memory_mib"},
		{"tap without a tap", nil, func(s *pb.VMSpec) { s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP} }, driver.ErrInvalid, "network.tap"},
		{"tap name with a comma", nil, func(s *pb.VMSpec) {
			s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP, Tap: "t0,script=/x"}
		}, driver.ErrInvalid, "network.tap"},
		{"tap address not CIDR", nil, func(s *pb.VMSpec) {
			s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP, Tap: "t0", Addresses: []string{"10.230.7.2"}}
		}, driver.ErrInvalid, "CIDR"},
		{"tap bad gateway", nil, func(s *pb.VMSpec) {
			s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_TAP, Tap: "t0", Gateway: "gw"}
		}, driver.ErrInvalid, "gateway"},
		{"unknown network", nil, func(s *pb.VMSpec) { s.Network = &pb.Network{Mode: 99} }, driver.ErrInvalid, "99"},
		{"bad mac", nil, func(s *pb.VMSpec) { s.Network = &pb.Network{Mode: pb.NetworkMode_NETWORK_MODE_USER, Mac: "52:54"} }, driver.ErrInvalid, "mac"},
		{"unknown driver field", nil, func(s *pb.VMSpec) { s.DriverConfigJson = []byte(`{"cpu": "max"}`) }, driver.ErrInvalid, `"cpu"`},
		{"bad machine", nil, func(s *pb.VMSpec) { s.DriverConfigJson = []byte(`{"machine": "q35"}`) }, driver.ErrInvalid, "q35"},
		{"multi-line cmdline", nil, func(s *pb.VMSpec) { s.DriverConfigJson = []byte(`{"extra_cmdline": "a\nb"}`) }, driver.ErrInvalid, "one line"},
		{"no image", nil, func(s *pb.VMSpec) { s.Image = "" }, driver.ErrInvalid, "no image"},
		{"relative image", nil, func(s *pb.VMSpec) { s.Image = "images/x" }, driver.ErrInvalid, "absolute"},
		{"missing image", nil, func(s *pb.VMSpec) { s.Image = filepath.Join(dir, "nope.qcow2") }, driver.ErrNotFound, filepath.Join(dir, "nope.qcow2")},
		{"directory without manifest", nil, func(s *pb.VMSpec) { s.Image = other }, driver.ErrInvalid, "fluxvm-image.json"},
		{"disk image on microvm", nil, func(s *pb.VMSpec) { s.Image = raw; s.DriverConfigJson = []byte(`{"machine": "microvm"}`) }, driver.ErrInvalid, "pc"},
		{"outside image_dirs", func(c *Config) { c.ImageDirs = []string{other} }, nil, driver.ErrInvalid, "image_dirs"},
		{"image_dirs prefix trick", func(c *Config) { c.ImageDirs = []string{filepath.Join(dir, "bund")} }, nil, driver.ErrInvalid, "image_dirs"},
	}
	for _, c := range cases {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			cfg := defaultConfig()
			if c.cfg != nil {
				c.cfg(&cfg)
			}
			spec := ok()
			if c.edit != nil {
				c.edit(spec)
			}
			_, _, err := validateSpec(context.Background(), cfg, spec)
			if !errors.Is(err, c.want) {
				t.Fatalf("validateSpec = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Errorf("error %q does not mention %q", err, c.mention)
			}
		})
	}
	cfg := defaultConfig()
	cfg.ImageDirs = []string{dir}
	if _, _, err := validateSpec(context.Background(), cfg, ok()); err != nil {
		t.Errorf("an image inside image_dirs was refused: %v", err)
	}
}

func TestCreateVMLeavesNothingWhenTheOverlayFails(t *testing.T) {
	bundle, _ := testImages(t, t.TempDir())
	state := t.TempDir()
	// The real qemu-img answers "info"; "create" gets an option it refuses.
	shim := filepath.Join(t.TempDir(), "qemu-img")
	script := "#!/bin/sh\nif [ \"$1\" = create ]; then exec qemu-img create -q -f qcow2 -o no_such_option=1 \"$(dirname \"$0\")/x.qcow2\" 1M; fi\nexec qemu-img \"$@\"\n"
	if err := os.WriteFile(shim, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	d := New(nil).(*Driver)
	if err := d.SetConfig(context.Background(), &basepb.SetConfigRequest{
		ConfigJson: []byte(`{"accel": "tcg", "qemu_img": "` + shim + `"}`),
		Agent:      &basepb.AgentContext{StateDir: state},
	}); err != nil {
		t.Fatal(err)
	}
	_, err := d.CreateVM(context.Background(), &pb.VMSpec{Id: "vm-1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128})
	if err == nil || !strings.Contains(err.Error(), "overlay") {
		t.Fatalf("CreateVM with a failing overlay = %v, want an overlay error", err)
	}
	if _, err := os.Stat(filepath.Join(state, "vms", "vm-1")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed create left its workspace behind (%v)", err)
	}
	if _, err := d.InspectVM(context.Background(), "vm-1"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("a failed create left the vm known: %v", err)
	}
}

func TestCreateVMWritesAPrivateWorkspaceWithAnOverlay(t *testing.T) {
	bundle, _ := testImages(t, t.TempDir())
	state := t.TempDir()
	d := New(nil).(*Driver)
	if err := d.SetConfig(context.Background(), &basepb.SetConfigRequest{ConfigJson: []byte(`{"accel": "tcg"}`), Agent: &basepb.AgentContext{StateDir: state}}); err != nil {
		t.Fatal(err)
	}
	st, err := d.CreateVM(context.Background(), &pb.VMSpec{Id: "vm-1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128})
	if err != nil {
		t.Fatal(err)
	}
	if st.State != pb.VMState_VM_STATE_CREATED {
		t.Errorf("state %s, want CREATED", st.State)
	}
	ws := filepath.Join(state, "vms", "vm-1")
	for name, mode := range map[string]os.FileMode{".": 0o700, specFile: 0o600, overlayFile: 0o600} {
		fi, err := os.Stat(filepath.Join(ws, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v; want %v", name, err, fi.Mode().Perm(), mode)
		}
	}
	out, err := exec.Command("qemu-img", "info", "-U", filepath.Join(ws, overlayFile)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), filepath.Join(bundle, "disk.qcow2")) {
		t.Errorf("overlay does not back onto the image disk: %v\n%s", err, out)
	}
	if _, err := d.CreateVM(context.Background(), &pb.VMSpec{Id: "vm-1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128}); !errors.Is(err, driver.ErrExists) {
		t.Errorf("reusing the id = %v, want ErrExists", err)
	}
	// A new plugin process (a fresh Driver) sees the workspace and refuses the id too.
	d2 := New(nil).(*Driver)
	_ = d2.SetConfig(context.Background(), &basepb.SetConfigRequest{ConfigJson: []byte(`{"accel": "tcg"}`), Agent: &basepb.AgentContext{StateDir: state}})
	if _, err := d2.CreateVM(context.Background(), &pb.VMSpec{Id: "vm-1", GuestOs: pb.GuestOS_GUEST_OS_LINUX, Image: bundle, Vcpus: 1, MemoryMib: 128}); !errors.Is(err, driver.ErrExists) {
		t.Errorf("reusing the id after a restart = %v, want ErrExists", err)
	}
	if err := d2.DestroyVM(context.Background(), "vm-1", false); err != nil {
		t.Fatalf("destroying a created vm from a fresh plugin: %v", err)
	}
	if _, err := os.Stat(ws); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("workspace remains after destroy: %v", err)
	}
}

// TestImageFormatAsksQemuImgOncePerVersionOfTheFile: launches of one image
// ask qemu-img once; a file rewritten (here as raw) is asked again.
func TestImageFormatAsksQemuImgOncePerVersionOfTheFile(t *testing.T) {
	real, err := exec.LookPath("qemu-img")
	if err != nil {
		t.Skip("qemu-img not installed")
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	// qemu-img itself, counting its runs.
	wrapper := filepath.Join(dir, "qemu-img")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\necho x >> "+calls+"\nexec "+real+" \"$@\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.Command(real, "create", "-q", "-f", "qcow2", img, "1M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ctx := t.Context()
	for range 3 {
		if f, err := imageFormat(ctx, wrapper, img); err != nil || f != "qcow2" {
			t.Fatalf("format = %q, %v; want qcow2", f, err)
		}
	}
	if b, _ := os.ReadFile(calls); strings.Count(string(b), "x") != 1 {
		t.Fatalf("qemu-img ran %d times for three asks of one file, want 1", strings.Count(string(b), "x"))
	}
	time.Sleep(10 * time.Millisecond) // a new modification time even on coarse clocks
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	if f, err := imageFormat(ctx, wrapper, img); err != nil || f != "raw" {
		t.Fatalf("after rewriting the file as raw: format = %q, %v", f, err)
	}
}
