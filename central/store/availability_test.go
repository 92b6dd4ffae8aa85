package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestOneRuleForAnUnavailableNode: a node that is down, cordoned, draining
// or waiting for a scrub is refused by Reserve and by CreateLease for the
// reason Node.Unavailable gives, word for word.
func TestOneRuleForAnUnavailableNode(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 16, 65536, 2)
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	for _, c := range []struct {
		set  func(*Node)
		want string
	}{
		{func(n *Node) { n.State = NodeDown }, "not reporting"},
		{func(n *Node) { n.Cordoned = true }, "cordoned"},
		{func(n *Node) { n.Draining = true }, "draining"},
		{func(n *Node) { n.ScrubPending = true }, "waiting for a scrub"},
	} {
		n, err := s.UpdateNode(ctx, "n1", false, func(n *Node) error {
			*n = Node{FleetNode: sdk.FleetNode{Name: n.Name, URL: n.URL, State: NodeUp, Capacity: n.Capacity}}
			c.set(n)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Unavailable(); got != c.want {
			t.Fatalf("Unavailable() = %q, want %q", got, c.want)
		}
		var ce *CapacityError
		if _, err := s.Reserve(ctx, ReserveRequest{Node: "n1", VCPUs: 1, MemoryMiB: 1}); !errors.As(err, &ce) || !strings.Contains(ce.Reason, c.want) {
			t.Errorf("%s: Reserve = %v; want a refusal saying %q", c.want, err, c.want)
		}
		var lr *LeaseRefusal
		if _, err := s.CreateLease(ctx, CreateLeaseRequest{Tenant: acme.ID, Node: "n1"}); !errors.As(err, &lr) || lr.Reason != c.want {
			t.Errorf("%s: CreateLease = %v; want a refusal saying %q", c.want, err, c.want)
		}
	}
	if _, err := s.UpdateNode(ctx, "n1", false, func(n *Node) error { n.ScrubPending = false; return nil }); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.GetNode(ctx, "n1"); n.Unavailable() != "" {
		t.Fatalf("an up, idle node: Unavailable() = %q", n.Unavailable())
	}
}
