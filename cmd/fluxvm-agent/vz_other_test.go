//go:build !(darwin && arm64 && cgo)

package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/plugins/base/basetest"
)

// Off a Mac, vz-host says why it cannot run a VM and exits 1; without a
// workspace it prints its usage and exits 2.
func TestVZHostOffAMacSaysWhy(t *testing.T) {
	bin := basetest.Build(t, "../..", "./cmd/fluxvm-agent")
	cases := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"vz-host"}, 2, "usage: fluxvm-agent vz-host -workspace"},
		{[]string{"vz-host", "-workspace", t.TempDir()}, 1, "darwin/arm64"},
		{[]string{"vz-install", "-ipsw", "/x.ipsw", "-out", t.TempDir() + "/img"}, 1, "darwin/arm64"},
	}
	for _, c := range cases {
		out, err := exec.Command(bin, c.args...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != c.code || !strings.Contains(string(out), c.says) {
			t.Errorf("fluxvm-agent %v = %v:\n%s\nwant exit %d saying %q", c.args, err, out, c.code, c.says)
		}
	}
}
