//go:build darwin && arm64 && cgo

// Package misuse gets Code-Hex/vz's API wrong on purpose, one mistake of
// each kind per function; darwincheck's tests expect each one reported at
// the line marked "want".
package misuse

import "github.com/Code-Hex/vz/v3"

func wrongType(boot vz.BootLoader) error {
	cpus := 2
	_, err := vz.NewVirtualMachineConfiguration(boot, cpus, 1<<30) // want: int where uint is needed
	return err
}

func missingMethod(vm *vz.VirtualMachine) error {
	return vm.Reboot() // want: VirtualMachine has no Reboot
}

func wrongResults(vm *vz.VirtualMachine) error {
	err := vm.RequestStop() // want: RequestStop returns two values
	return err
}
