//go:build !darwin

package vz

import (
	"io"
	"os"
)

// cloneFile copies src to dst. Only the tests on Linux use it: the driver
// runs VMs on macOS, where cloneFile is an APFS clone (clone_darwin.go).
func cloneFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
