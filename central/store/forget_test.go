package store

import (
	"testing"

	"github.com/fluxvm/fluxvm/sdk"
)

// TestForgetVMFreesItsRoomAtOnce: a VM deleted through central leaves the
// node's record with its size back in the free capacity, so a launch right
// after the delete can use it; a VM or node the record does not hold is no
// error and changes nothing.
func TestForgetVMFreesItsRoomAtOnce(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	testNode(t, s, "n1", 2, 4096, 1)
	if _, err := s.UpdateNode(ctx, "n1", false, func(n *Node) error {
		n.VMs = []sdk.HeartbeatVM{
			{ID: "vm-a", Name: "a", VCPUs: 2, MemoryMiB: 2048, GuestOS: GuestLinux},
			{ID: "vm-m", Name: "m", VCPUs: 0, MemoryMiB: 1024, GuestOS: GuestMacOS},
		}
		n.Capacity.Free = sdk.Resources{VCPUs: 0, MemoryMiB: 1024, MacOSSlots: 0}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.ForgetVM(ctx, "n1", "vm-a"); err != nil {
		t.Fatal(err)
	}
	n, err := s.GetNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(n.VMs) != 1 || n.VMs[0].ID != "vm-m" {
		t.Fatalf("VMs after forgetting vm-a = %+v, want only vm-m", n.VMs)
	}
	if want := (sdk.Resources{VCPUs: 2, MemoryMiB: 3072}); n.Capacity.Free != want {
		t.Fatalf("free after forgetting vm-a = %+v, want %+v", n.Capacity.Free, want)
	}
	if err := s.ForgetVM(ctx, "n1", "vm-m"); err != nil {
		t.Fatal(err)
	}
	// Free never exceeds total, whatever the record said before.
	n, _ = s.GetNode(ctx, "n1")
	if want := (sdk.Resources{VCPUs: 2, MemoryMiB: 4096, MacOSSlots: 1}); n.Capacity.Free != want {
		t.Fatalf("free after forgetting both = %+v, want %+v", n.Capacity.Free, want)
	}
	_, rev, err := getJSON[Node](ctx, s, s.nodeKey("n1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ node, vm string }{{"n1", "vm-a"}, {"n1", "vm-zz"}, {"gone", "vm-a"}} {
		if err := s.ForgetVM(ctx, c.node, c.vm); err != nil {
			t.Fatalf("ForgetVM(%s, %s) = %v, want nil", c.node, c.vm, err)
		}
	}
	if _, now, _ := getJSON[Node](ctx, s, s.nodeKey("n1")); now != rev {
		t.Fatalf("forgetting what the record does not hold rewrote it (revision %d → %d)", rev, now)
	}
}

// TestTenantNameForLogs: a tenant's name, its id once it is gone, and
// "operator" for none.
func TestTenantNameForLogs(t *testing.T) {
	ctx := testCtx(t)
	s := openEmbedded(t, Options{})
	acme := testTenant(t, s, "acme", sdk.Quotas{})
	for id, want := range map[string]string{acme.ID: "acme", "t-gone": "t-gone", "": "operator"} {
		if got := s.TenantName(ctx, id); got != want {
			t.Errorf("TenantName(%q) = %q, want %q", id, got, want)
		}
	}
}
