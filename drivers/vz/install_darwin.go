//go:build darwin && arm64 && cgo

package vz

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/Code-Hex/vz/v3"
)

// installMacOS makes a macOS image directory (disk.img, aux.img,
// hardware-model) by installing a restore image (.ipsw) into a new VM. The
// machine identifier used for the install is thrown away: every VM made
// from the image gets its own.
func installMacOS(ctx context.Context, ipsw, out string, diskBytes int64, logf func(string, ...any)) error {
	img, err := vz.LoadMacOSRestoreImageFromPath(ipsw)
	if err != nil {
		return fmt.Errorf("load restore image %s: %w", ipsw, err)
	}
	req := img.MostFeaturefulSupportedConfiguration()
	if req == nil {
		return fmt.Errorf("restore image %s (build %s) has no configuration this Mac supports", ipsw, img.BuildVersion())
	}
	hw := req.HardwareModel()
	if !hw.Supported() {
		return fmt.Errorf("restore image %s needs a hardware model this Mac does not support", ipsw)
	}
	if err := os.Mkdir(out, 0o700); err != nil {
		return fmt.Errorf("image directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, hwModelName), hw.DataRepresentation(), 0o600); err != nil {
		return err
	}
	disk, err := os.OpenFile(filepath.Join(out, diskName), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	err = disk.Truncate(diskBytes) // sparse: space is used as macOS writes
	if cerr := disk.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	if _, err := vz.NewMacAuxiliaryStorage(filepath.Join(out, auxName), vz.WithCreatingMacAuxiliaryStorage(hw)); err != nil {
		return fmt.Errorf("auxiliary storage: %w", err)
	}
	tmpID := filepath.Join(out, ".install-"+machineIDName)
	defer os.Remove(tmpID)
	cfg := &HostConfig{
		GuestOS:       "macos",
		CPUs:          uint(max(req.MinimumSupportedCPUCount(), 2)),
		MemoryMiB:     max(req.MinimumSupportedMemorySize()>>20, 4096),
		Disk:          filepath.Join(out, diskName),
		HardwareModel: filepath.Join(out, hwModelName),
		MachineID:     tmpID,
		AuxStorage:    filepath.Join(out, auxName),
		Console:       filepath.Join(out, "install-console.log"),
	}
	vmc, err := vzConfig(cfg)
	if err != nil {
		return err
	}
	if ok, err := vmc.Validate(); !ok || err != nil {
		return fmt.Errorf("the framework refuses the install VM's configuration: %v", err)
	}
	v, err := vz.NewVirtualMachine(vmc)
	if err != nil {
		return fmt.Errorf("make install VM: %w", err)
	}
	inst, err := vz.NewMacOSInstaller(v, ipsw)
	if err != nil {
		return fmt.Errorf("installer: %w", err)
	}
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-inst.Done():
				return
			case <-t.C:
				logf("installing macOS %s: %.0f%%", img.BuildVersion(), inst.FractionCompleted()*100)
			}
		}
	}()
	if err := inst.Install(ctx); err != nil {
		return fmt.Errorf("install macOS from %s: %w", ipsw, err)
	}
	if v.CanStop() {
		if err := v.Stop(); err != nil && !errors.Is(err, context.Canceled) {
			logf("stop install VM: %v", err)
		}
	}
	return nil
}
