package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/vishvananda/netns"
)

// pluginEgressRules reads the egress rules (comment "fluxvm egress=...")
// the netns plugin of node n keeps in its own network namespace, each as
// "drop 192.0.2.7/32", "accept 192.0.2.0/24", or "drop" (the rest).
func pluginEgressRules(t *testing.T, n *fxNode) []string {
	t.Helper()
	var pid int
	for _, c := range childrenOf(n.cmd.Process.Pid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c)); strings.Contains(string(b), "plugin\x00netns") {
			pid = c
		}
	}
	if pid == 0 {
		t.Fatalf("node %s runs no netns plugin", n.name)
	}
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tb := &nftables.Table{Family: nftables.TableFamilyINet, Name: "fluxvm"}
	rules, err := c.GetRules(tb, &nftables.Chain{Name: "forward", Table: tb})
	if err != nil {
		t.Fatalf("list the plugin's rules: %v", err)
	}
	var out []string
	for _, r := range rules {
		if comment, _ := userdata.GetString(r.UserData, userdata.TypeComment); !strings.HasPrefix(comment, "fluxvm egress=") {
			continue
		}
		bits, dst, verdict := -1, "", ""
		for _, e := range r.Exprs {
			switch e := e.(type) {
			case *expr.Bitwise:
				bits = onesOf(e.Mask)
			case *expr.Cmp:
				if bits >= 0 && len(e.Data) == 4 {
					a, _ := netip.AddrFromSlice(e.Data)
					dst = netip.PrefixFrom(a, bits).String()
				}
			case *expr.Verdict:
				verdict = map[expr.VerdictKind]string{expr.VerdictDrop: "drop", expr.VerdictAccept: "accept"}[e.Kind]
			}
		}
		out = append(out, strings.TrimSpace(verdict+" "+dst))
	}
	return out
}

func onesOf(mask []byte) int {
	n := 0
	for _, b := range mask {
		for ; b != 0; b <<= 1 {
			n++
		}
	}
	return n
}

// TestTenantVMOnAMemberIsCreatedWithTheEffectiveFloor: two centrals, each
// on its own embedded etcd, pair; the owner's allowlist floor reaches the
// member on its poll loop; the member's operator narrows it; a tenant VM
// launched through the member on its node (a real node agent, the sim
// driver and the real netns plugin in a namespace of its own) has its
// network's nftables rules made from the effective floor: the owner's
// blocks and the member's, and only the member's narrower allowlist let
// out. When the member leaves, the next VM's network has the member's own
// policy only.
func TestTenantVMOnAMemberIsCreatedWithTheEffectiveFloor(t *testing.T) {
	owner, member := newFxCentral(t, fxStore(t, nil)), newFxCentral(t, fxStore(t, nil))
	images, img := fxImages(t)
	node := startFxNetNode(t, "m-net", member.url, images)

	// Pair, both screens compared.
	var inv sdk.FleetInvite
	fxMust(t, "POST", owner.url+"/fleet/federation/invites", fxToken, map[string]any{"kind": "central"}, http.StatusCreated, &inv)
	var joining sdk.FleetMembership
	fxMust(t, "POST", member.url+"/fleet/federation/join", fxToken, sdk.FleetJoinRequest{OwnerURL: owner.url, Invite: inv.Invite, Name: "site-b"}, http.StatusCreated, &joining)
	var list sdk.FleetRequestList
	fxMust(t, "GET", owner.url+"/fleet/federation/requests", fxToken, nil, http.StatusOK, &list)
	if len(list.Requests) != 1 || list.Requests[0].Code != joining.Code {
		t.Fatalf("owner's requests %+v, member's code %s", list.Requests, joining.Code)
	}
	fxMust(t, "POST", owner.url+"/fleet/federation/requests/"+list.Requests[0].ID+"/approve", fxToken, sdk.FleetApproveRequest{Code: joining.Code}, http.StatusOK, nil)
	fxMust(t, "POST", member.url+"/fleet/federation/confirm", fxToken, sdk.FleetConfirmJoinRequest{Code: list.Requests[0].Code}, http.StatusOK, nil)

	floor := sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.0/24"}, Block: []string{"198.51.100.66"}}
	fxMust(t, "PUT", owner.url+"/fleet/policy", fxToken, map[string]any{"egress": floor}, http.StatusOK, nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go member.srv.FederationLoop(ctx, 200*time.Millisecond)
	fxWait(t, "the owner's floor on the member", 10*time.Second, func() bool {
		var p sdk.Policy
		fxMust(t, "GET", member.url+"/fleet/policy", fxToken, nil, http.StatusOK, &p)
		return p.FleetEgress != nil && p.FleetEgress.Floor != nil && slices.Equal(p.FleetEgress.Floor.Block, floor.Block)
	})
	fxMust(t, "PUT", member.url+"/fleet/policy", fxToken, map[string]any{"isolate_tenant_networks": true, "egress": sdk.EgressPolicy{Mode: "open"}},
		http.StatusConflict, nil)
	fxMust(t, "PUT", member.url+"/fleet/policy", fxToken, map[string]any{"isolate_tenant_networks": true,
		"egress": sdk.EgressPolicy{Mode: "allowlist", Allow: []string{"198.51.100.2"}, Block: []string{"198.51.100.9"}}}, http.StatusOK, nil)

	fxWaitUp(t, member.url, "m-net")
	fxWait(t, "node m-net reports its network plugin", 30*time.Second, func() bool {
		return slices.Equal(fxNodeState(t, member.url, "m-net").Networks, []string{"fxnet"})
	})
	fxMust(t, "PUT", member.url+"/fleet/images/tiny", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 64}, http.StatusCreated, nil)
	_, acme := fxTenant(t, member.url, "acme", nil)
	var out sdk.FleetCreateVMResponse
	fxMust(t, "POST", member.url+"/fleet/vms", acme, map[string]any{"name": "a1", "image": "tiny"}, http.StatusCreated, &out)
	var vm sdk.VM
	fxMust(t, "GET", node.url+"/v1/vms/"+out.VM.ID, node.admin, nil, http.StatusOK, &vm)
	if vm.Network != "tenant" {
		t.Fatalf("vm a1 has network %q, want its tenant's", vm.Network)
	}
	want := []string{"drop 198.51.100.66/32", "drop 198.51.100.9/32", "accept 198.51.100.2/32", "drop"}
	if got := pluginEgressRules(t, node); !slices.Equal(got, want) {
		t.Fatalf("the egress rules of a1's network: %q, want %q (the owner's floor tightened by the member's)", got, want)
	}
	t.Logf("a1's network on the member's node: %q", want)

	// The member leaves: the owner's floor is lifted, and the network takes
	// the member's own policy at its next VM.
	fxMust(t, "DELETE", member.url+"/fleet/federation/membership", fxToken, nil, http.StatusNoContent, nil)
	fxMust(t, "POST", member.url+"/fleet/vms", acme, map[string]any{"name": "a2", "image": "tiny"}, http.StatusCreated, nil)
	want = []string{"drop 198.51.100.9/32", "accept 198.51.100.2/32", "drop"}
	if got := pluginEgressRules(t, node); !slices.Equal(got, want) {
		t.Fatalf("the egress rules after leaving: %q, want %q (the member's own)", got, want)
	}
}
