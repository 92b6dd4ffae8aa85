//go:build darwin && arm64 && cgo

package vz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/Code-Hex/vz/v3"
	"golang.org/x/sys/unix"
)

// hostPlatform reads what this Mac offers: its macOS version decides what
// the framework can do (macOS guests from 12, disk serials from 12.3, saved
// machine state from 14).
func hostPlatform() Platform {
	ver, err := unix.Sysctl("kern.osproductversion")
	if err != nil {
		return Platform{Why: "cannot read the macOS version (sysctl kern.osproductversion): " + err.Error()}
	}
	major, minor := macOSVersion(ver)
	ncpu, _ := unix.SysctlUint32("hw.ncpu")
	mem, _ := unix.SysctlUint64("hw.memsize")
	p := Platform{
		OSVersion:   ver,
		CPUs:        int64(ncpu),
		MemoryMiB:   int64(mem >> 20),
		SaveRestore: major >= 14,
		Volumes:     major > 12 || major == 12 && minor >= 3,
	}
	if major < 12 {
		p.Why = fmt.Sprintf("macOS %s is older than 12, the first that runs macOS guests", ver)
		return p
	}
	p.Usable = true
	return p
}

// macOSVersion parses "14.5.1" into 14, 5.
func macOSVersion(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// vzMachine is a Machine backed by the Virtualization framework.
type vzMachine struct {
	cfg     *HostConfig
	vm      *vz.VirtualMachine
	changes chan MachineState
}

// newMachine builds the framework's configuration from cfg, validates it
// and makes the VM (not started).
func newMachine(cfg *HostConfig) (Machine, error) {
	vmc, err := vzConfig(cfg)
	if err != nil {
		return nil, err
	}
	if ok, err := vmc.Validate(); !ok || err != nil {
		return nil, fmt.Errorf("the framework refuses the VM's configuration: %v", err)
	}
	if cfg.RestoreFrom != "" {
		if ok, err := vmc.ValidateSaveRestoreSupport(); !ok || err != nil {
			return nil, fmt.Errorf("this VM's configuration cannot restore a saved state: %v", err)
		}
	}
	v, err := vz.NewVirtualMachine(vmc)
	if err != nil {
		return nil, fmt.Errorf("make VM: %w", err)
	}
	m := &vzMachine{cfg: cfg, vm: v, changes: make(chan MachineState, 16)}
	go m.relay()
	return m, nil
}

// vzConfig translates a host configuration into the framework's.
func vzConfig(cfg *HostConfig) (*vz.VirtualMachineConfiguration, error) {
	var boot vz.BootLoader
	var platform vz.PlatformConfiguration
	switch cfg.GuestOS {
	case "linux":
		store, err := efiVariableStore(cfg.EFIVars)
		if err != nil {
			return nil, err
		}
		efi, err := vz.NewEFIBootLoader(vz.WithEFIVariableStore(store))
		if err != nil {
			return nil, fmt.Errorf("EFI boot loader: %w", err)
		}
		id, err := genericMachineID(cfg.MachineID)
		if err != nil {
			return nil, err
		}
		gp, err := vz.NewGenericPlatformConfiguration(vz.WithGenericMachineIdentifier(id))
		if err != nil {
			return nil, fmt.Errorf("generic platform: %w", err)
		}
		boot, platform = efi, gp
	case "macos":
		hw, err := vz.NewMacHardwareModelWithDataPath(cfg.HardwareModel)
		if err != nil {
			return nil, fmt.Errorf("hardware model %s: %w", cfg.HardwareModel, err)
		}
		if !hw.Supported() {
			return nil, fmt.Errorf("hardware model %s is not supported on this Mac (the image needs a newer host)", cfg.HardwareModel)
		}
		id, err := macMachineID(cfg.MachineID)
		if err != nil {
			return nil, err
		}
		aux, err := vz.NewMacAuxiliaryStorage(cfg.AuxStorage)
		if err != nil {
			return nil, fmt.Errorf("auxiliary storage %s: %w", cfg.AuxStorage, err)
		}
		mp, err := vz.NewMacPlatformConfiguration(vz.WithMacHardwareModel(hw), vz.WithMacMachineIdentifier(id), vz.WithMacAuxiliaryStorage(aux))
		if err != nil {
			return nil, fmt.Errorf("mac platform: %w", err)
		}
		mb, err := vz.NewMacOSBootLoader()
		if err != nil {
			return nil, fmt.Errorf("macOS boot loader: %w", err)
		}
		boot, platform = mb, mp
	default:
		return nil, fmt.Errorf("guest os %q is not linux or macos", cfg.GuestOS)
	}
	vmc, err := vz.NewVirtualMachineConfiguration(boot, cfg.CPUs, cfg.MemoryMiB<<20)
	if err != nil {
		return nil, fmt.Errorf("VM configuration: %w", err)
	}
	vmc.SetPlatformVirtualMachineConfiguration(platform)

	disks := []vz.StorageDeviceConfiguration{}
	for _, d := range append([]HostVolume{{Path: cfg.Disk}}, cfg.Volumes...) {
		att, err := vz.NewDiskImageStorageDeviceAttachment(d.Path, false)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Path, err)
		}
		blk, err := vz.NewVirtioBlockDeviceConfiguration(att)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Path, err)
		}
		if d.ID != "" {
			// The guest sees it as /dev/disk/by-id/virtio-<id>.
			if err := blk.SetBlockDeviceIdentifier(d.ID); err != nil {
				return nil, fmt.Errorf("volume %s: serial: %w", d.ID, err)
			}
		}
		disks = append(disks, blk)
	}
	vmc.SetStorageDevicesVirtualMachineConfiguration(disks)

	nat, err := vz.NewNATNetworkDeviceAttachment()
	if err != nil {
		return nil, fmt.Errorf("NAT network: %w", err)
	}
	nic, err := vz.NewVirtioNetworkDeviceConfiguration(nat)
	if err != nil {
		return nil, fmt.Errorf("network device: %w", err)
	}
	var mac *vz.MACAddress
	if cfg.MAC != "" {
		hw, err := net.ParseMAC(cfg.MAC)
		if err != nil {
			return nil, fmt.Errorf("mac %s: %w", cfg.MAC, err)
		}
		mac, err = vz.NewMACAddress(hw)
		if err != nil {
			return nil, fmt.Errorf("mac %s: %w", cfg.MAC, err)
		}
	} else if mac, err = vz.NewRandomLocallyAdministeredMACAddress(); err != nil {
		return nil, fmt.Errorf("random mac: %w", err)
	}
	nic.SetMACAddress(mac)
	vmc.SetNetworkDevicesVirtualMachineConfiguration([]*vz.VirtioNetworkDeviceConfiguration{nic})

	serial, err := vz.NewFileSerialPortAttachment(cfg.Console, true)
	if err != nil {
		return nil, fmt.Errorf("console %s: %w", cfg.Console, err)
	}
	console, err := vz.NewVirtioConsoleDeviceSerialPortConfiguration(serial)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	vmc.SetSerialPortsVirtualMachineConfiguration([]*vz.VirtioConsoleDeviceSerialPortConfiguration{console})

	vsock, err := vz.NewVirtioSocketDeviceConfiguration()
	if err != nil {
		return nil, fmt.Errorf("vsock: %w", err)
	}
	vmc.SetSocketDevicesVirtualMachineConfiguration([]vz.SocketDeviceConfiguration{vsock})

	entropy, err := vz.NewVirtioEntropyDeviceConfiguration()
	if err != nil {
		return nil, fmt.Errorf("entropy device: %w", err)
	}
	vmc.SetEntropyDevicesVirtualMachineConfiguration([]*vz.VirtioEntropyDeviceConfiguration{entropy})

	if cfg.Display {
		if err := addDisplay(vmc, cfg.GuestOS); err != nil {
			return nil, err
		}
	}
	return vmc, nil
}

// addDisplay gives the guest a screen, keyboard and pointer of its own.
// Nothing on the host shows or drives them (see docs/design/014-vz-driver.md):
// they are there so that a macOS guest's own Screen Sharing has a display.
func addDisplay(vmc *vz.VirtualMachineConfiguration, guestOS string) error {
	if guestOS == "macos" {
		gpu, err := vz.NewMacGraphicsDeviceConfiguration()
		if err != nil {
			return fmt.Errorf("graphics: %w", err)
		}
		display, err := vz.NewMacGraphicsDisplayConfiguration(1920, 1200, 80)
		if err != nil {
			return fmt.Errorf("display: %w", err)
		}
		gpu.SetDisplays(display)
		vmc.SetGraphicsDevicesVirtualMachineConfiguration([]vz.GraphicsDeviceConfiguration{gpu})
		kbd, err := vz.NewMacKeyboardConfiguration()
		if err != nil {
			return fmt.Errorf("keyboard: %w", err)
		}
		vmc.SetKeyboardsVirtualMachineConfiguration([]vz.KeyboardConfiguration{kbd})
		pad, err := vz.NewMacTrackpadConfiguration()
		if err != nil {
			return fmt.Errorf("trackpad: %w", err)
		}
		vmc.SetPointingDevicesVirtualMachineConfiguration([]vz.PointingDeviceConfiguration{pad})
		return nil
	}
	gpu, err := vz.NewVirtioGraphicsDeviceConfiguration()
	if err != nil {
		return fmt.Errorf("graphics: %w", err)
	}
	scanout, err := vz.NewVirtioGraphicsScanoutConfiguration(1280, 800)
	if err != nil {
		return fmt.Errorf("scanout: %w", err)
	}
	gpu.SetScanouts(scanout)
	vmc.SetGraphicsDevicesVirtualMachineConfiguration([]vz.GraphicsDeviceConfiguration{gpu})
	kbd, err := vz.NewUSBKeyboardConfiguration()
	if err != nil {
		return fmt.Errorf("keyboard: %w", err)
	}
	vmc.SetKeyboardsVirtualMachineConfiguration([]vz.KeyboardConfiguration{kbd})
	ptr, err := vz.NewUSBScreenCoordinatePointingDeviceConfiguration()
	if err != nil {
		return fmt.Errorf("pointer: %w", err)
	}
	vmc.SetPointingDevicesVirtualMachineConfiguration([]vz.PointingDeviceConfiguration{ptr})
	return nil
}

// efiVariableStore opens the VM's EFI variable store, making it on first boot.
func efiVariableStore(path string) (*vz.EFIVariableStore, error) {
	var opts []vz.NewEFIVariableStoreOption
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		opts = append(opts, vz.WithCreatingEFIVariableStore())
	}
	store, err := vz.NewEFIVariableStore(path, opts...)
	if err != nil {
		return nil, fmt.Errorf("EFI variable store %s: %w", path, err)
	}
	return store, nil
}

// genericMachineID reads a Linux guest's machine identifier, making and
// keeping one on first boot (a saved state restores only into the same one).
func genericMachineID(path string) (*vz.GenericMachineIdentifier, error) {
	if _, err := os.Stat(path); err == nil {
		id, err := vz.NewGenericMachineIdentifierWithDataPath(path)
		if err != nil {
			return nil, fmt.Errorf("machine identifier %s: %w", path, err)
		}
		return id, nil
	}
	id, err := vz.NewGenericMachineIdentifier()
	if err != nil {
		return nil, fmt.Errorf("new machine identifier: %w", err)
	}
	if err := os.WriteFile(path, id.DataRepresentation(), 0o600); err != nil {
		return nil, fmt.Errorf("keep machine identifier: %w", err)
	}
	return id, nil
}

// macMachineID reads a macOS guest's machine identifier, making one for a
// new VM or a clone (the identifier is never copied from the source).
func macMachineID(path string) (*vz.MacMachineIdentifier, error) {
	if _, err := os.Stat(path); err == nil {
		id, err := vz.NewMacMachineIdentifierWithDataPath(path)
		if err != nil {
			return nil, fmt.Errorf("machine identifier %s: %w", path, err)
		}
		return id, nil
	}
	id, err := vz.NewMacMachineIdentifier()
	if err != nil {
		return nil, fmt.Errorf("new machine identifier: %w", err)
	}
	if err := os.WriteFile(path, id.DataRepresentation(), 0o600); err != nil {
		return nil, fmt.Errorf("keep machine identifier: %w", err)
	}
	return id, nil
}

// relay turns the framework's state notifications into MachineStates.
func (m *vzMachine) relay() {
	for st := range m.vm.StateChangedNotify() {
		ms := machineState(st)
		m.changes <- ms
		if ms == MachineStopped || ms == MachineError {
			return
		}
	}
}

func machineState(st vz.VirtualMachineState) MachineState {
	switch st {
	case vz.VirtualMachineStateRunning:
		return MachineRunning
	case vz.VirtualMachineStatePaused, vz.VirtualMachineStateSaving:
		return MachinePaused
	case vz.VirtualMachineStateStarting, vz.VirtualMachineStateResuming, vz.VirtualMachineStateRestoring, vz.VirtualMachineStatePausing:
		return MachineStarting
	case vz.VirtualMachineStateStopping:
		return MachineStopping
	case vz.VirtualMachineStateError:
		return MachineError
	}
	return MachineStopped
}

func (m *vzMachine) Start(context.Context) error {
	if m.cfg.RestoreFrom == "" {
		return m.vm.Start()
	}
	if err := m.vm.RestoreMachineStateFromURL(m.cfg.RestoreFrom); err != nil {
		return fmt.Errorf("restore saved state %s: %w", m.cfg.RestoreFrom, err)
	}
	return m.vm.Resume()
}

func (m *vzMachine) Pause(context.Context) error  { return m.vm.Pause() }
func (m *vzMachine) Resume(context.Context) error { return m.vm.Resume() }

func (m *vzMachine) RequestStop(context.Context) error {
	ok, err := m.vm.RequestStop()
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("the framework did not send the stop request")
	}
	return nil
}

func (m *vzMachine) Stop(context.Context) error { return m.vm.Stop() }

func (m *vzMachine) State() MachineState { return machineState(m.vm.State()) }

func (m *vzMachine) StateChanged() <-chan MachineState { return m.changes }

func (m *vzMachine) SaveState(_ context.Context, path string) error {
	return m.vm.SaveMachineStateToPath(path)
}

// DialVsock connects to the guest's port through the VM's virtio-vsock device.
func (m *vzMachine) DialVsock(_ context.Context, port uint32) (net.Conn, error) {
	devs := m.vm.SocketDevices()
	if len(devs) == 0 {
		return nil, errors.New("the VM has no vsock device")
	}
	return devs[0].Connect(port)
}
