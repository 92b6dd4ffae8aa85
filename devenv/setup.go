package devenv

import (
	"context"
	"fmt"
	"strconv"

	"github.com/fluxvm/fluxvm/billing"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
)

// demoVM is the size of the catalog image's VMs, which fitQuota counts in.
var demoVM = sdk.Resources{VCPUs: 1, MemoryMiB: 512}

// fitQuota sets the demo tenant's quota to demoQuota lowered to what the dev
// node holds (on a 2-vCPU machine: 2 VMs, 2 vCPUs), on every start, since the
// machine may have changed. It returns the quota set.
func fitQuota(ctx context.Context, op *caller, tenantID string) (sdk.Quotas, error) {
	var n store.Node
	if _, err := op.do(ctx, "GET", "/fleet/nodes/"+NodeName, op.token, nil, &n, 200); err != nil {
		return sdk.Quotas{}, fmt.Errorf("read node %s: %w", NodeName, err)
	}
	q := fitTo(demoQuota, n.Capacity.Total)
	patch := map[string]any{"quota": map[string]int64{"max_vms": q.MaxVMs, "max_vcpus": q.MaxVCPUs, "max_memory_mib": q.MaxMemoryMiB}}
	if _, err := op.do(ctx, "PATCH", "/fleet/tenants/"+tenantID, op.token, patch, nil, 200); err != nil {
		return sdk.Quotas{}, fmt.Errorf("set the quota of tenant %s: %w", TenantName, err)
	}
	return q, nil
}

// fitTo lowers q to what a node of total can run: no more vCPUs or memory
// than it has, and no more VMs than demoVMs fit in that. It keeps room for
// one VM even on a node too small for it, so the refusal a launch meets
// there is the node's, which says what is short.
func fitTo(q sdk.Quotas, total sdk.Resources) sdk.Quotas {
	q.MaxVCPUs = max(min(q.MaxVCPUs, total.VCPUs), demoVM.VCPUs)
	q.MaxMemoryMiB = max(min(q.MaxMemoryMiB, total.MemoryMiB), demoVM.MemoryMiB)
	q.MaxVMs = max(min(q.MaxVMs, q.MaxVCPUs/demoVM.VCPUs, q.MaxMemoryMiB/demoVM.MemoryMiB), 1)
	return q
}

// SampleNote marks the price list dev publishes.
const SampleNote = "A sample price list published by fluxvm-agent dev, not real prices; publish yours with fluxctl fleet prices --set FILE"

// samplePrices publishes a sample price list when none was ever published,
// so bills and estimates show amounts; one an operator published stays. It
// says which list is in effect, for the banner.
func samplePrices(ctx context.Context, op *caller) (string, error) {
	var h struct {
		Versions []billing.PriceVersion `json:"versions"`
	}
	if _, err := op.do(ctx, "GET", "/fleet/prices?history=true", op.token, nil, &h, 200); err != nil {
		return "", fmt.Errorf("read the price history: %w", err)
	}
	// With none published, the history is the default list alone, which
	// never took effect at a moment (zero effective_from).
	if n := len(h.Versions); n > 0 && !h.Versions[n-1].EffectiveFrom.IsZero() {
		if last := h.Versions[n-1]; last.Note != SampleNote {
			return "yours, in " + last.Currency + " (fluxctl fleet prices)", nil
		}
		return sampleLine, nil
	}
	p := billing.Prices{Currency: "USD", Note: SampleNote,
		MacClasses: []billing.MacClass{
			{Name: "Mac mini", MinVCPUs: 8, MinMemoryGiB: 16, PerHour: 850_000},
			{Name: "Mac Studio", MinVCPUs: 20, MinMemoryGiB: 64, PerHour: 1_950_000},
		},
		MacPerHour: 600_000, VMPerHour: 10_000, VCPUPerHour: 20_000, MemoryGiBPerHour: 4_000, MacOSVMPerHour: 100_000}
	if _, err := op.do(ctx, "PUT", "/fleet/prices", op.token, p, nil, 200); err != nil {
		return "", fmt.Errorf("publish the sample price list: %w", err)
	}
	return sampleLine, nil
}

const sampleLine = "a sample list, in USD, not real prices (fluxctl fleet prices)"

// freeName is a VM name the demo tenant does not use yet (web-1, web-2,
// …, the README's first), so the commands the banner prints work when
// pasted.
func freeName(ctx context.Context, op *caller, tenantToken string) (string, error) {
	var list sdk.FleetVMList
	if _, err := op.do(ctx, "GET", "/fleet/vms", tenantToken, nil, &list, 200); err != nil {
		return "", fmt.Errorf("list the VMs of tenant %s: %w", TenantName, err)
	}
	used := map[string]bool{}
	for _, vm := range list.VMs {
		used[vm.Name] = true
	}
	name := "web-1"
	for i := 2; used[name]; i++ {
		name = "web-" + strconv.Itoa(i)
	}
	return name, nil
}
