package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/plugins/base/basetest"
)

// examples/agent-mac.hcl is a config the agent takes: its plugin "vz" block
// decodes against the vz plugin's own schema (the plugin runs, as a stub,
// on any host).
func TestExampleAgentMacConfigPassesCheck(t *testing.T) {
	bin := basetest.Build(t, "../..", "./cmd/fluxvm-agent")
	out, err := exec.Command(bin, "node", "-check", "-config", "../../examples/agent-mac.hcl").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "plugins=[vz]") {
		t.Fatalf("node -check of examples/agent-mac.hcl = %v:\n%s", err, out)
	}
}
