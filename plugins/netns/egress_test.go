//go:build linux

package netns

import (
	"testing"
	"time"

	pb "github.com/fluxvm/fluxvm/plugins/network/proto"
)

// TestEgressPolicyLetsOutOnlyWhatItAllows: under an allowlist a guest
// reaches the allowed server (in a namespace of its own) and not the other;
// with the policy opened the other answers too (so the check can fail); a
// block list stops one server and not the other; the rules go with the
// network.
func TestEgressPolicyLetsOutOnlyWhatItAllows(t *testing.T) {
	requireRoot(t)
	node := newNetns(t)
	servers := outside(t, node)
	allowed, blocked := servers[0], servers[1] // 198.51.100.2 and .3
	p := launch(t, harness(t, node))
	n := &pb.TenantNetwork{Tenant: "tenant-f", Subnet: "10.230.6.0/24",
		Egress: &pb.Egress{Mode: "allowlist", Allow: []string{"198.51.100.2"}}}
	v := createVM(t, node, p, n, "f1")
	if reaches(t, node, v, n.Tenant, allowed, "allowed", 5*time.Second) == nil {
		t.Fatal("under the allowlist the guest did not reach the allowed server 198.51.100.2")
	}
	if reaches(t, node, v, n.Tenant, blocked, "not allowed", time.Second) != nil {
		t.Fatal("under the allowlist the guest reached 198.51.100.3, which the list does not name")
	}
	// The control: opened, the same packet arrives.
	n.Egress = &pb.Egress{Mode: "open"}
	if _, err := p.EnsureNetwork(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if reaches(t, node, v, n.Tenant, blocked, "opened", 5*time.Second) == nil {
		t.Fatal("with the policy open the guest still does not reach 198.51.100.3: the allowlist check proves nothing")
	}
	n.Egress = &pb.Egress{Mode: "open", Block: []string{"198.51.100.3/32"}}
	if _, err := p.EnsureNetwork(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if reaches(t, node, v, n.Tenant, blocked, "blocked", time.Second) != nil {
		t.Fatal("the guest reached 198.51.100.3, which the policy blocks")
	}
	if reaches(t, node, v, n.Tenant, allowed, "still open", 5*time.Second) == nil {
		t.Fatal("blocking .3 also stopped .2")
	}
	// A network asked for without a policy keeps the one it has.
	n.Egress = nil
	if _, err := p.EnsureNetwork(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	if reaches(t, node, v, n.Tenant, blocked, "kept", time.Second) != nil {
		t.Fatal("an EnsureNetwork without a policy dropped the block")
	}
	for _, bad := range []*pb.Egress{{Mode: "closed"}, {Mode: "allowlist", Allow: []string{"example.com"}}, {Mode: "open", Block: []string{"10.0.0.1/8"}}} {
		if _, err := p.EnsureNetwork(t.Context(), &pb.TenantNetwork{Tenant: n.Tenant, Subnet: n.Subnet, Egress: bad}); err == nil {
			t.Errorf("egress %v was accepted", bad)
		}
	}
	deleteAll(t, node, p, []string{n.Tenant}, v.iface.Ref)
}
