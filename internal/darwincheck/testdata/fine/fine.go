//go:build darwin && arm64 && cgo

// Package fine uses Code-Hex/vz's API correctly: darwincheck finds nothing.
package fine

import "github.com/Code-Hex/vz/v3"

func stop(vm *vz.VirtualMachine) error {
	ok, err := vm.RequestStop()
	if !ok && err == nil {
		return vm.Stop()
	}
	return err
}
