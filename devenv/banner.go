package devenv

import (
	"fmt"
	"strings"

	"github.com/fluxvm/fluxvm/sdk"
)

// banner is what dev prints once it is up: where things are, the tokens,
// and lines a person pastes into another shell, each of which works as
// printed (a test runs them).
type banner struct {
	dir, logs, driver string
	central, node     string
	operator, tenant  string
	// nodeToken is the node API's admin token (the operator's in a state
	// dir from before dev enrolled its node).
	nodeToken string
	quota     sdk.Quotas
	image     string
	prices    string // which price list is in effect
	// vm is a name the demo tenant does not use yet.
	vm  string
	sim bool
	// fluxctlDir goes on PATH in the export line ("": fluxctl is on PATH).
	fluxctlDir string
}

// Export is the line that hands fluxctl the URL and a token.
func (b banner) export(token string) string {
	path := ""
	if b.fluxctlDir != "" {
		path = "PATH=" + shellQuote(b.fluxctlDir) + ":$PATH "
	}
	return "export " + path + "CENTRAL_URL=" + b.central + " FLUXVM_AGENT_TOKEN=" + token
}

// try is the README's commands for the demo tenant: launch, use, look,
// delete. A sim VM runs no guest, so with sim the second lists VMs instead
// of running one.
func (b banner) try() []string {
	use := "fluxctl fleet run " + b.vm + " -- uname -a"
	if b.sim {
		use = "fluxctl fleet vms"
	}
	return []string{
		"fluxctl fleet launch " + b.vm + " --image " + b.image + " --wait",
		use,
		"fluxctl fleet status",
		"fluxctl fleet rm " + b.vm + " -y",
	}
}

func (b banner) String() string {
	var w strings.Builder
	fmt.Fprintf(&w, "FluxVM dev is up. State: %s  Logs: %s\n%s\n\n", b.dir, b.logs, b.driver)
	fmt.Fprintf(&w, "  central URL     %s\n", b.central)
	fmt.Fprintf(&w, "  operator token  %s\n", b.operator)
	fmt.Fprintf(&w, "  tenant token    %s   (tenant %s: %d VMs, %d vCPUs, %d MiB, what node %s holds)\n",
		b.tenant, TenantName, b.quota.MaxVMs, b.quota.MaxVCPUs, b.quota.MaxMemoryMiB, NodeName)
	if b.nodeToken == b.operator {
		fmt.Fprintf(&w, "  node            %s at %s (admin token: the operator token)\n", NodeName, b.node)
	} else {
		fmt.Fprintf(&w, "  node            %s at %s (enrolled into central; its API's admin token %s)\n", NodeName, b.node, b.nodeToken)
	}
	fmt.Fprintf(&w, "  catalog image   %s\n", b.image)
	fmt.Fprintf(&w, "  prices          %s\n\n", b.prices)
	fmt.Fprintf(&w, "In another shell, as tenant %s, paste:\n  %s\n", TenantName, b.export(b.tenant))
	for _, c := range b.try() {
		fmt.Fprintf(&w, "  %s\n", c)
	}
	fmt.Fprintf(&w, "As the operator: FLUXVM_AGENT_TOKEN=%s fluxctl fleet nodes\n", b.operator)
	fmt.Fprintf(&w, "The node directly: fluxctl vm list --node %s --token %s\n\n", b.node, b.nodeToken)
	fmt.Fprintf(&w, "Ctrl-C stops FluxVM; VMs keep running and the next fluxvm-agent dev picks them up.\n")
	return w.String()
}

// shellQuote quotes s for sh when it holds anything but plain path characters.
func shellQuote(s string) string {
	if strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+,:@%", r))
	}) < 0 && s != "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
