//go:build linux

package qemu

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/fluxvm/fluxvm/guest/protocol"
	pb "github.com/fluxvm/fluxvm/plugins/driver/proto"
)

// Machine types the driver runs.
const (
	machineMicrovm = "microvm"
	machinePC      = "pc"
)

// Workspace file names, under <state_dir>/vms/<id>/.
const (
	specFile    = "spec.json" // the VM's spec and what CreateVM derived from it
	runFile     = "run.json"  // the handle state of the latest start
	overlayFile = "overlay.qcow2"
	qmpSock     = "qmp.sock"
	agentSock   = "agent.sock"
	vncSock     = "vnc.sock"
	consoleFile = "console.log"
	qemuLogFile = "qemu.log"
	pidFile     = "qemu.pid"
)

// launch is everything one QEMU command line is made of.
type launch struct {
	ID        string
	UUID      string
	Workspace string
	Machine   string // machineMicrovm or machinePC
	Accel     string // "kvm" or "tcg"
	VCPUs     int64
	MemoryMiB int64
	// Kernel, Initrd and Cmdline boot a kernel directly; an empty Kernel boots
	// from the disk through the firmware.
	Kernel  string
	Initrd  string
	Cmdline string
	// AgentPort is the virtio-serial port name the guest agent listens on.
	AgentPort string
	// Disk is the overlay disk; empty for none.
	Disk string
	// Volumes are raw files attached after Disk, serial = volume id.
	Volumes []*pb.Volume
	Display bool
	// Network is "none", "user" or "tap"; MAC is the NIC's address for
	// "user" and "tap"; Tap is the tap device's name for "tap".
	Network string
	MAC     string
	Tap     string
	// NoAnnounce turns off the NIC's guest_announce (vmRecord.NoAnnounce).
	NoAnnounce bool
	// RAMFile backs the guest's RAM with a file: shared (writes reach the
	// file) for a VM created with memory_file, private (copy on write) for
	// one resuming from a saved guest's RAM.
	RAMFile   string
	RAMShared bool
	// Incoming starts QEMU waiting for a saved state (-incoming defer).
	Incoming bool
}

// args returns QEMU's arguments (without the binary). Device names differ by
// machine: microvm has virtio-mmio ("-device" suffix), pc has PCI.
func (l launch) args() []string {
	ws := l.Workspace
	dev := "-pci"
	machine := "pc"
	if l.Machine == machineMicrovm {
		dev = "-device"
		// The Debian kernel finds microvm's virtio-mmio devices through ACPI only.
		machine = "microvm,acpi=on"
	}
	if l.RAMFile != "" {
		machine += ",memory-backend=ram0"
	}
	a := []string{
		"-name", "guest=" + l.ID + ",debug-threads=off",
		"-uuid", l.UUID,
		"-M", machine,
		"-accel", l.Accel,
		"-smp", strconv.FormatInt(l.VCPUs, 10),
		"-m", strconv.FormatInt(l.MemoryMiB, 10),
		"-no-reboot",
		"-nodefaults",
		"-no-user-config",
		// No window, ever: screendump and VNC work from the display device alone.
		"-display", "none",
	}
	if l.RAMFile != "" {
		share := "off"
		if l.RAMShared {
			share = "on"
		}
		a = append(a, "-object", "memory-backend-file,id=ram0,size="+strconv.FormatInt(l.MemoryMiB, 10)+"M,mem-path="+optPath(l.RAMFile)+",share="+share)
	}
	if l.Incoming {
		a = append(a, "-incoming", "defer")
	}
	if l.Kernel != "" {
		a = append(a, "-kernel", l.Kernel)
		if l.Initrd != "" {
			a = append(a, "-initrd", l.Initrd)
		}
		a = append(a, "-append", l.Cmdline)
	}
	a = append(a,
		"-chardev", "file,id=con,path="+optPath(filepath.Join(ws, consoleFile)),
		"-serial", "chardev:con",
		"-device", "virtio-serial"+dev,
		"-chardev", "socket,id=ga,path="+optPath(filepath.Join(ws, agentSock))+",server=on,wait=off",
		"-device", "virtserialport,chardev=ga,name="+l.AgentPort,
	)
	if l.Disk != "" {
		a = append(a,
			"-blockdev", "driver=qcow2,node-name=disk0,file.driver=file,file.filename="+optPath(l.Disk),
			"-device", "virtio-blk"+dev+",drive=disk0,serial="+diskSerial(l.ID))
		if l.Kernel == "" {
			a[len(a)-1] += ",bootindex=0"
		}
	}
	for i, v := range l.Volumes {
		node := "vol" + strconv.Itoa(i)
		a = append(a,
			"-blockdev", "driver=raw,node-name="+node+",file.driver=file,file.filename="+optPath(v.GetPath()),
			"-device", "virtio-blk"+dev+",drive="+node+",serial="+v.GetId())
	}
	if l.Network == "user" {
		a = append(a,
			"-netdev", "user,id=n0",
			"-device", "virtio-net"+dev+",netdev=n0,mac="+l.MAC+l.announce())
	}
	if l.Network == "tap" {
		// The network plugin made the tap and put it on the tenant's
		// bridge; QEMU only opens it (no scripts: the agent runs no
		// commands on QEMU's behalf).
		a = append(a,
			"-netdev", "tap,id=n0,ifname="+l.Tap+",script=no,downscript=no",
			"-device", "virtio-net"+dev+",netdev=n0,mac="+l.MAC+l.announce())
	}
	if l.Display {
		if l.Machine == machineMicrovm {
			a = append(a,
				// microvm's virtio-mmio transports are legacy (virtio 0.9) unless
				// told otherwise, and Linux's virtio-gpu and virtio-input drivers
				// bind to modern (1.0) devices only. It applies to every transport,
				// so headless VMs, which need neither, keep the default.
				"-global", "virtio-mmio.force-legacy=false",
				"-device", "virtio-gpu-device",
				"-device", "virtio-keyboard-device",
				"-device", "virtio-tablet-device")
		} else {
			// pc keeps its PS/2 keyboard; the tablet gives absolute pointing.
			a = append(a,
				"-device", "VGA",
				"-device", "qemu-xhci,id=usb",
				"-device", "usb-tablet,bus=usb.0")
		}
		a = append(a, "-vnc", "unix:"+optPath(filepath.Join(ws, vncSock)))
	}
	a = append(a,
		"-qmp", "unix:"+optPath(filepath.Join(ws, qmpSock))+",server=on,wait=off",
		"-pidfile", filepath.Join(ws, pidFile))
	return a
}

// optPath escapes a path for a QEMU option string, where a comma separates
// options unless doubled.
func optPath(p string) string { return strings.ReplaceAll(p, ",", ",,") }

// maxSocketPath is the longest unix socket path Linux accepts (sun_path
// holds 108 bytes with the terminating NUL).
const maxSocketPath = 107

// diskSerial is the disk's serial number: the VM id cut to the 20 bytes
// virtio-blk carries.
func diskSerial(id string) string {
	if len(id) > 20 {
		return id[:20]
	}
	return id
}

// kernelCmdline is the image's command line plus the parameters that make a
// kernel boot fast under QEMU, plus the spec's extra parameters last (so they
// win). A parameter the image already sets is not added twice. A VM with a
// display also gets the kernel console on the screen and tells the guest agent
// to draw it (protocol.DisplayParam).
func kernelCmdline(base, extra string, tscKHz int64, machine string, display bool) string {
	params := strings.Fields(base)
	has := map[string]bool{}
	for _, p := range params {
		k, _, _ := strings.Cut(p, "=")
		has[k] = true
	}
	if display && !slices.Contains(params, "console=tty0") {
		// First: the last console= is /dev/console, which must stay the serial
		// console the agent announces itself on and ConsoleLog reads.
		params = append([]string{"console=tty0"}, params...)
	}
	add := func(p string) {
		k, _, _ := strings.Cut(p, "=")
		if !has[k] {
			params = append(params, p)
			has[k] = true
		}
	}
	if tscKHz > 0 {
		// Without it, microvm under TCG hangs calibrating the TSC.
		add("tsc_early_khz=" + strconv.FormatInt(tscKHz, 10))
	}
	add("tsc=reliable")
	add("no_timer_check")
	if machine == machineMicrovm || !display {
		// No PS/2 keyboard or mouse to probe (pc with a display keeps them).
		add("i8042.noaux")
		add("i8042.nokbd")
	}
	add("pci=lastbus=0")
	extraParams := strings.Fields(extra)
	verbose := has["debug"] // or told how loud to be by the spec
	for _, p := range extraParams {
		k, _, _ := strings.Cut(p, "=")
		verbose = verbose || k == "debug" || k == "loglevel"
	}
	if machine == machineMicrovm && has["quiet"] && !verbose {
		// microvm has no PCI configuration space, and a kernel built with PCI
		// says "PCI: Fatal: No config space access function found" at KERN_ERR
		// on every boot, even with pci=off (pci_arch_init finds no way to reach
		// one and says so). It is harmless: keep it off the console by booting
		// one level quieter than quiet; the FluxVM guest agent, as PID 1, sets
		// the quiet level back, so every later error is shown.
		add("loglevel=3")
	}
	add("random.trust_cpu=on")
	add("noreplace-smp")
	if display {
		add(protocol.DisplayParam)
	}
	params = append(params, extraParams...)
	return strings.Join(params, " ")
}

// hostTSCkHz is the host's TSC frequency in kHz, 0 when unknown.
func hostTSCkHz() int64 {
	if data, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		if khz, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64); err == nil && khz > 0 {
			return khz
		}
	}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || mhz <= 0 {
			return 0
		}
		return int64(mhz*1000 + 0.5)
	}
	return 0
}

// announce is the NIC's guest_announce property when it is turned off.
func (l launch) announce() string {
	if l.NoAnnounce {
		return ",guest_announce=off"
	}
	return ""
}
