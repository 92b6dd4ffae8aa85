//go:build linux

package qemu

import (
	"slices"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/guest/protocol"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// argValue returns the value after the first occurrence of flag.
func argValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// argValues returns the values of every occurrence of flag.
func argValues(args []string, flag string) []string {
	var out []string
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			out = append(out, args[i+1])
		}
	}
	return out
}

func baseLaunch() launch {
	return launch{
		ID: "web-1", UUID: "6f1c1c7e-1111-4222-8333-444455556666", Workspace: "/s/vms/web-1",
		Machine: machineMicrovm, Accel: "tcg", VCPUs: 2, MemoryMiB: 512,
		Kernel: "/img/vmlinux", Initrd: "/img/initrd.cpio", Cmdline: "console=ttyS0",
		AgentPort: "org.fluxvm.agent", Disk: "/s/vms/web-1/overlay.qcow2", Network: "none",
	}
}

func TestArgsMicrovmHeadless(t *testing.T) {
	a := baseLaunch().args()
	checks := map[string]string{
		"-name": "guest=web-1,debug-threads=off", "-uuid": "6f1c1c7e-1111-4222-8333-444455556666",
		"-M": "microvm,acpi=on", "-accel": "tcg", "-smp": "2", "-m": "512", "-display": "none",
		"-kernel": "/img/vmlinux", "-initrd": "/img/initrd.cpio", "-append": "console=ttyS0",
		"-serial": "chardev:con", "-qmp": "unix:/s/vms/web-1/qmp.sock,server=on,wait=off",
		"-pidfile":  "/s/vms/web-1/qemu.pid",
		"-blockdev": "driver=qcow2,node-name=disk0,file.driver=file,file.filename=/s/vms/web-1/overlay.qcow2",
	}
	for flag, want := range checks {
		if got := argValue(a, flag); got != want {
			t.Errorf("%s = %q, want %q", flag, got, want)
		}
	}
	for _, flag := range []string{"-no-reboot", "-nodefaults", "-no-user-config"} {
		if !slices.Contains(a, flag) {
			t.Errorf("missing %s", flag)
		}
	}
	devices := argValues(a, "-device")
	want := []string{"virtio-serial-device", "virtserialport,chardev=ga,name=org.fluxvm.agent", "virtio-blk-device,drive=disk0,serial=web-1"}
	if !slices.Equal(devices, want) {
		t.Errorf("devices = %q, want %q", devices, want)
	}
	chardevs := argValues(a, "-chardev")
	if !slices.Equal(chardevs, []string{"file,id=con,path=/s/vms/web-1/console.log", "socket,id=ga,path=/s/vms/web-1/agent.sock,server=on,wait=off"}) {
		t.Errorf("chardevs = %q", chardevs)
	}
	for _, flag := range []string{"-vnc", "-netdev", "-global"} {
		if slices.Contains(a, flag) {
			t.Errorf("headless vm without network has %s", flag)
		}
	}
}

func TestArgsDisplayAndNetworkDevicesFollowTheMachine(t *testing.T) {
	cases := []struct {
		machine string
		want    []string
		globals []string // modern virtio-mmio for virtio-gpu and virtio-input on microvm
	}{
		{machineMicrovm, []string{"virtio-net-device,netdev=n0,mac=52:54:00:aa:bb:cc", "virtio-gpu-device", "virtio-keyboard-device", "virtio-tablet-device"}, []string{"virtio-mmio.force-legacy=false"}},
		{machinePC, []string{"virtio-net-pci,netdev=n0,mac=52:54:00:aa:bb:cc", "VGA", "qemu-xhci,id=usb", "usb-tablet,bus=usb.0"}, nil},
	}
	for _, c := range cases {
		t.Run(c.machine, func(t *testing.T) {
			l := baseLaunch()
			l.Machine, l.Display, l.Network, l.MAC = c.machine, true, "user", "52:54:00:aa:bb:cc"
			a := l.args()
			devices := argValues(a, "-device")
			for _, w := range c.want {
				if !slices.Contains(devices, w) {
					t.Errorf("devices %q lack %q", devices, w)
				}
			}
			if got := argValues(a, "-global"); !slices.Equal(got, c.globals) {
				t.Errorf("-global = %q, want %q", got, c.globals)
			}
			if got := argValue(a, "-vnc"); got != "unix:/s/vms/web-1/vnc.sock" {
				t.Errorf("-vnc = %q", got)
			}
			if got := argValue(a, "-netdev"); got != "user,id=n0" {
				t.Errorf("-netdev = %q", got)
			}
			if got := argValue(a, "-display"); got != "none" {
				t.Errorf("-display = %q: a display device must not open a window", got)
			}
		})
	}
}

func TestArgsDiskImageBootsThroughFirmware(t *testing.T) {
	l := baseLaunch()
	l.Machine, l.Kernel, l.Initrd, l.Cmdline = machinePC, "", "", ""
	a := l.args()
	for _, flag := range []string{"-kernel", "-initrd", "-append"} {
		if slices.Contains(a, flag) {
			t.Errorf("disk boot has %s", flag)
		}
	}
	if got := argValue(a, "-M"); got != "pc" {
		t.Errorf("-M = %q", got)
	}
	if !slices.Contains(argValues(a, "-device"), "virtio-blk-pci,drive=disk0,serial=web-1,bootindex=0") {
		t.Errorf("devices %q lack a bootable virtio-blk-pci", argValues(a, "-device"))
	}
}

func TestDiskSerialFitsVirtioBlk(t *testing.T) {
	id := strings.Repeat("a", 63)
	if s := diskSerial(id); len(s) != 20 {
		t.Errorf("serial %q is %d bytes, virtio-blk carries 20", s, len(s))
	}
	if s := diskSerial("short"); s != "short" {
		t.Errorf("serial = %q", s)
	}
}

func TestKernelCmdlineTunesOnceAndPutsExtraLast(t *testing.T) {
	got := kernelCmdline("console=ttyS0 quiet panic=-1 tsc=unstable", "loglevel=7 init=/bin/sh", 2299998, machineMicrovm, false)
	want := "console=ttyS0 quiet panic=-1 tsc=unstable tsc_early_khz=2299998 no_timer_check i8042.noaux i8042.nokbd pci=lastbus=0 random.trust_cpu=on noreplace-smp loglevel=7 init=/bin/sh"
	if got != want {
		t.Errorf("cmdline\n got %q\nwant %q", got, want)
	}
	pc := kernelCmdline("console=ttyS0", "", 0, machinePC, true)
	if strings.Contains(pc, "i8042") || strings.Contains(pc, "tsc_early_khz") {
		t.Errorf("pc with a display must keep its PS/2 keyboard and an unknown TSC adds no tsc_early_khz: %q", pc)
	}
}

func TestKernelCmdlineByMachineAndDisplay(t *testing.T) {
	const image = "console=ttyS0 quiet panic=-1"
	for _, tc := range []struct {
		name, base, extra, machine string
		display                    bool
		want, wantNot              []string
	}{
		{"microvm headless", image, "", machineMicrovm, false, []string{"loglevel=3"}, []string{"console=tty0", protocol.DisplayParam}},
		{"microvm display", image, "", machineMicrovm, true, []string{"loglevel=3", "console=tty0", protocol.DisplayParam}, nil},
		{"pc headless", image, "", machinePC, false, nil, []string{"loglevel=3", "console=tty0", protocol.DisplayParam}},
		{"pc display", image, "", machinePC, true, []string{"console=tty0", protocol.DisplayParam}, []string{"loglevel=3"}},
		{"microvm, image not quiet", "console=ttyS0", "", machineMicrovm, false, nil, []string{"loglevel=3"}},
		{"microvm, spec asks for debug", image, "debug", machineMicrovm, false, []string{"debug"}, []string{"loglevel=3"}},
		{"microvm, spec sets the level", image, "loglevel=5", machineMicrovm, false, []string{"loglevel=5"}, []string{"loglevel=3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := strings.Fields(kernelCmdline(tc.base, tc.extra, 0, tc.machine, tc.display))
			for _, w := range tc.want {
				if !slices.Contains(params, w) {
					t.Errorf("%q lacks %s", params, w)
				}
			}
			for _, w := range tc.wantNot {
				if slices.Contains(params, w) {
					t.Errorf("%q has %s", params, w)
				}
			}
			// The last console= is /dev/console: the serial one, where the agent
			// announces itself and ConsoleLog reads.
			var last string
			for _, p := range params {
				if strings.HasPrefix(p, "console=") {
					last = p
				}
			}
			if last != "console=ttyS0" {
				t.Errorf("%q: last console is %q, want console=ttyS0", params, last)
			}
		})
	}
}

func TestHostTSCkHzIsPlausible(t *testing.T) {
	khz := hostTSCkHz()
	if khz < 100_000 || khz > 10_000_000 {
		t.Errorf("host TSC %d kHz is not between 100 MHz and 10 GHz", khz)
	}
}

// TestArgsNoAnnounceTurnsOffTheNICsGuestAnnounce: a launch with NoAnnounce
// (a memory_file VM, or a clone resuming from one) offers the guest no
// announce feature; any other keeps QEMU's default.
func TestArgsNoAnnounceTurnsOffTheNICsGuestAnnounce(t *testing.T) {
	for _, network := range []string{"user", "tap"} {
		l := baseLaunch()
		l.Network, l.Tap, l.MAC = network, "fxtap0123456789", "02:aa:bb:cc:dd:ee"
		if devices := argValues(l.args(), "-device"); !slices.Contains(devices, "virtio-net-device,netdev=n0,mac=02:aa:bb:cc:dd:ee") {
			t.Errorf("%s: devices %q lack the NIC with QEMU's defaults", network, devices)
		}
		l.NoAnnounce = true
		if devices := argValues(l.args(), "-device"); !slices.Contains(devices, "virtio-net-device,netdev=n0,mac=02:aa:bb:cc:dd:ee,guest_announce=off") {
			t.Errorf("%s with NoAnnounce: devices %q lack the NIC with guest_announce=off", network, devices)
		}
	}
}

func TestArgsTapNetworkOpensThePluginsTap(t *testing.T) {
	l := baseLaunch()
	l.Network, l.Tap, l.MAC = "tap", "fxtap0123456789", "02:aa:bb:cc:dd:ee"
	a := l.args()
	if got := argValue(a, "-netdev"); got != "tap,id=n0,ifname=fxtap0123456789,script=no,downscript=no" {
		t.Errorf("-netdev = %q", got)
	}
	if devices := argValues(a, "-device"); !slices.Contains(devices, "virtio-net-device,netdev=n0,mac=02:aa:bb:cc:dd:ee") {
		t.Errorf("devices %q lack the virtio-net NIC on the tap", devices)
	}
}

// TestArgsAttachVolumesAsRawDisksWithTheirIDAsSerial: each volume is a raw
// blockdev after the VM's own disk, on the machine's virtio-blk device, with
// the volume id as serial (what the guest's /dev/disk/by-id link is named
// after) and a comma in its path doubled.
func TestArgsAttachVolumesAsRawDisksWithTheirIDAsSerial(t *testing.T) {
	for _, machine := range []string{machineMicrovm, machinePC} {
		l := baseLaunch()
		l.Machine = machine
		l.Volumes = []*pb.Volume{{Id: "vol-0123456789ab", Path: "/s/volumes/vol-0123456789ab.raw"}, {Id: "vol-2", Path: "/s/vol,2.raw"}}
		a := l.args()
		dev := "virtio-blk-device"
		if machine == machinePC {
			dev = "virtio-blk-pci"
		}
		blockdevs := argValues(a, "-blockdev")
		wantBlock := []string{"driver=qcow2,node-name=disk0,file.driver=file,file.filename=/s/vms/web-1/overlay.qcow2",
			"driver=raw,node-name=vol0,file.driver=file,file.filename=/s/volumes/vol-0123456789ab.raw",
			"driver=raw,node-name=vol1,file.driver=file,file.filename=/s/vol,,2.raw"}
		if !slices.Equal(blockdevs, wantBlock) {
			t.Errorf("%s: blockdevs = %q, want %q", machine, blockdevs, wantBlock)
		}
		devices := argValues(a, "-device")
		for _, want := range []string{dev + ",drive=vol0,serial=vol-0123456789ab", dev + ",drive=vol1,serial=vol-2"} {
			if !slices.Contains(devices, want) {
				t.Errorf("%s: devices %q lack %q", machine, devices, want)
			}
		}
	}
}
