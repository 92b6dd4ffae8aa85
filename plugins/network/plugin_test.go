package network

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/plugins/base/basetest"
)

// TestLaunchRefusesADriver: a driver plugin started where a network plugin
// is expected fails at the handshake, quickly and saying what it expected.
func TestLaunchRefusesADriver(t *testing.T) {
	bin := basetest.Build(t, "../..", "./cmd/fluxvm-agent")
	start := time.Now()
	p, err := Launch(context.Background(), LaunchConfig{Cmd: exec.Command(bin, "plugin", "sim"), StartTimeout: 5 * time.Second})
	if err == nil {
		p.Kill()
		t.Fatal("Launch of the sim driver as a network plugin succeeded")
	}
	if !strings.Contains(err.Error(), "FluxVM network plugin of contract version 1") {
		t.Errorf("error %q does not say a network plugin was expected", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Launch took %v to fail", d)
	}
}
