package pools

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/nodecall"
	"github.com/fluxvm/fluxvm/central/placement"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/fluxvm/fluxvm/sdk/nodetest"
	"github.com/hashicorp/go-hclog"
)

// fleet is a real embedded etcd with one real node agent (sim driver)
// recorded in it as node n1, a catalog image "tiny" and the service over
// them.
type fleet struct {
	st   *store.Store
	svc  *Service
	node *sdk.NodeClient
}

func newFleet(t *testing.T) *fleet {
	t.Helper()
	ctx := context.Background()
	agent := nodetest.Start(t)
	st := storetest.Open(t)
	room := sdk.Resources{VCPUs: 16, MemoryMiB: 16384}
	if err := st.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "n1", URL: agent.URL, State: store.NodeUp, GuestOS: []string{store.GuestLinux},
		Drivers: []sdk.FleetNodeDriver{{Name: "sim", Health: "healthy"}}, Capacity: sdk.FleetNodeCapacity{Total: room, Free: room},
		LastHeartbeat: time.Now().UTC()}}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutImage(ctx, &sdk.Image{Name: "tiny", GuestOS: store.GuestLinux, Image: agent.Image, VCPUs: 1, MemoryMiB: 64}); err != nil {
		t.Fatal(err)
	}
	nc, err := sdk.NewNodeClient(agent.URL, sdk.WithToken(agent.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	svc := New(st, nodecall.New(agent.AdminToken), placement.New(st), time.Now, hclog.NewNullLogger())
	return &fleet{st: st, svc: svc, node: nc}
}

// loop runs the pool loop until the test ends.
func (f *fleet) loop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.svc.Loop(ctx, 50*time.Millisecond) }()
	t.Cleanup(func() { cancel(); <-done })
}

// members counts a pool's members by state.
func (f *fleet) members(t *testing.T, tenant, pool string) map[string]int {
	t.Helper()
	ms, err := f.st.ListMembers(context.Background(), tenant, pool)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range ms {
		out[m.State]++
	}
	return out
}

// vmsOf counts the node's VMs labelled with the pool.
func (f *fleet) vmsOf(t *testing.T, pool string) int {
	t.Helper()
	vms, err := f.node.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, vm := range vms {
		if vm.Labels[Label] == pool {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func size(n int) *int { return &n }

// TestLoopFillsPoolAndRetiresOnShrink: the loop boots a pool to its size
// (warm members, running VMs with ledger entries), retires the surplus
// (VM deleted, entry ended, member forgotten) when the size shrinks, and a
// delete removes the remaining VMs and the pool.
func TestLoopFillsPoolAndRetiresOnShrink(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	pool, err := f.svc.Create(ctx, store.Pool{Pool: sdk.Pool{Name: "ci", Image: "tiny", Size: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if pool.GuestOS != store.GuestLinux || pool.VCPUs != 1 || pool.MemoryMiB != 64 || pool.MaxSize != 3 {
		t.Fatalf("created pool %+v; want the image's kind and size, max_size 3", pool)
	}
	f.loop(t)

	waitFor(t, "3 warm members", func() bool { return f.members(t, "", "ci")[store.MemberWarm] == 3 })
	if n := f.vmsOf(t, "ci"); n != 3 {
		t.Fatalf("the node runs %d vms of the pool, want 3", n)
	}
	if u, err := f.st.NodeUsage(ctx, "n1"); err != nil || u.Running.VMs != 3 {
		t.Fatalf("n1's usage with 3 warm vms = %+v, %v; want 3 running", u, err)
	}

	pool, err = f.svc.Resize(ctx, pool, size(1), nil)
	if err != nil || pool.Size != 1 || pool.MaxSize != 1 {
		t.Fatalf("resize to 1 = %+v, %v; want size and max_size 1", pool, err)
	}
	waitFor(t, "the pool down to 1", func() bool {
		m := f.members(t, "", "ci")
		return m[store.MemberWarm] == 1 && len(m) == 1 && f.vmsOf(t, "ci") == 1
	})
	if u, err := f.st.NodeUsage(ctx, "n1"); err != nil || u.Running.VMs != 1 {
		t.Fatalf("n1's usage after the shrink = %+v, %v; want 1 running (the retired ones' entries ended)", u, err)
	}
	st, err := f.svc.Status(ctx, pool)
	if err != nil || st.Target != 1 || st.Warm != 1 || st.Booting != 0 || st.Retiring != 0 {
		t.Fatalf("status after the shrink = %+v, %v", st, err)
	}

	waitFor(t, "the delete to finish", func() bool {
		done, err := f.svc.Delete(ctx, pool)
		return err == nil && done
	})
	if _, err := f.st.GetPool(ctx, "", "ci"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the deleted pool reads %v; want not found", err)
	}
	if n := f.vmsOf(t, "ci"); n != 0 {
		t.Fatalf("%d vms of the deleted pool remain", n)
	}
}

// TestClaimHandsOutAWarmMember: a launch of the pool's kind takes its warm
// VM (running, ready, labelled, and counted for the tenant), once only; a
// launch of another kind boots instead; naming the pool with another size
// is a MismatchError, and another tenant naming it is not found.
func TestClaimHandsOutAWarmMember(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	acme := &store.Tenant{Tenant: sdk.Tenant{Name: "acme"}, TokenSHA256: store.HashToken("fvt_acme")}
	other := &store.Tenant{Tenant: sdk.Tenant{Name: "other"}, TokenSHA256: store.HashToken("fvt_other")}
	for _, tn := range []*store.Tenant{acme, other} {
		if err := f.st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	pool, err := f.svc.Create(ctx, store.Pool{Pool: sdk.Pool{Name: "ci", Tenant: acme.ID, Image: "tiny", Size: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// One pass starts the member; its boot runs on in the background.
	if err := f.svc.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a warm member", func() bool { return f.members(t, acme.ID, "ci")[store.MemberWarm] == 1 })

	launch := ClaimRequest{Tenant: acme.ID, Image: "tiny", GuestOS: store.GuestLinux, VCPUs: 1, MemoryMiB: 64}
	if c, err := f.svc.Claim(ctx, ClaimRequest{Tenant: acme.ID, Image: "tiny", GuestOS: store.GuestLinux, VCPUs: 2, MemoryMiB: 64}); c != nil || err != nil {
		t.Fatalf("a launch of 2 vCPUs from a pool of 1 = %+v, %v; want nil (boot instead)", c, err)
	}
	named := launch
	named.Pool, named.VCPUs = "ci", 2
	var mismatch *MismatchError
	if _, err := f.svc.Claim(ctx, named); !errors.As(err, &mismatch) {
		t.Fatalf("naming the pool with 2 vCPUs = %v; want a MismatchError", err)
	}
	named = launch
	named.Pool, named.Tenant = "ci", other.ID
	if _, err := f.svc.Claim(ctx, named); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant naming acme's pool = %v; want not found", err)
	}

	ms, err := f.st.ListMembers(ctx, acme.ID, "ci")
	if err != nil || len(ms) != 1 || !f.svc.InPool(ctx, acme.ID, "ci", ms[0].VMID) {
		t.Fatalf("members %+v, %v; want one, in the pool", ms, err)
	}
	c, err := f.svc.Claim(ctx, launch)
	if err != nil || c == nil {
		t.Fatalf("claim = %+v, %v; want the warm vm", c, err)
	}
	if f.svc.InPool(ctx, acme.ID, "ci", c.VM.ID) {
		t.Fatal("a claimed vm still counts as in its pool")
	}
	if c.Pool.Name != "ci" || c.Member.State != store.MemberClaimed || c.VM.ID != c.Member.VMID || !c.VM.AgentReady ||
		c.VM.State != sdk.StateRunning || c.VM.Labels[Label] != "ci" {
		t.Fatalf("claimed %+v with vm %+v; want acme's running, ready, labelled member", c.Member, c.VM)
	}
	if u, err := f.st.TenantUsage(ctx, acme.ID); err != nil || u.Running.VMs != 1 {
		t.Fatalf("acme's usage after the claim = %+v, %v; want the vm", u, err)
	}
	if again, err := f.svc.Claim(ctx, launch); again != nil || err != nil {
		t.Fatalf("a second claim with no warm vm left = %+v, %v; want nil (boot instead)", again, err)
	}
	st, err := f.svc.Status(ctx, pool)
	if err != nil || st.RecentClaims != 1 || st.Warm != 0 {
		t.Fatalf("status after the claim = %+v, %v; want 1 recent claim, none warm", st, err)
	}
}

// TestADeposedLeadersLoopWritesNothing runs the pool loop as the leader
// runs it (a context fenced by its election), lets it fill a pool, then
// takes the leadership away mid-loop and grows the pool: the old loop, still
// running, writes nothing (no member, no reservation, no VM). A loop of a
// new leader then fills the pool, so there was work to do.
func TestADeposedLeadersLoopWritesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	pool, err := f.svc.Create(ctx, store.Pool{Pool: sdk.Pool{Name: "ci", Image: "tiny", Size: 1}})
	if err != nil {
		t.Fatal(err)
	}
	lead := func() (*store.Leader, func()) {
		l, err := f.st.Campaign(ctx, "loops")
		if err != nil {
			t.Fatal(err)
		}
		lctx, cancel := context.WithCancel(store.Fenced(ctx, l))
		done := make(chan struct{})
		go func() { defer close(done); f.svc.Loop(lctx, 50*time.Millisecond) }()
		return l, func() { cancel(); <-done }
	}
	old, stopOld := lead()
	defer stopOld()
	waitFor(t, "1 warm member", func() bool { return f.members(t, "", "ci")[store.MemberWarm] == 1 })

	if err := old.Resign(ctx); err != nil { // the election is lost; the loop goes on
		t.Fatal(err)
	}
	if _, err := f.svc.Resize(ctx, pool, size(3), nil); err != nil {
		t.Fatal(err)
	}
	f.svc.Kick()
	time.Sleep(2 * time.Second) // the old loop has had 40 ticks to act
	if m := f.members(t, "", "ci"); len(m) != 1 || m[store.MemberWarm] != 1 {
		t.Fatalf("members after the leader was deposed: %v; want the one warm member only", m)
	}
	if n := f.vmsOf(t, "ci"); n != 1 {
		t.Fatalf("the node runs %d vms of the pool after the leader was deposed, want 1", n)
	}
	if rs, err := f.st.ListReservations(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("reservations after the leader was deposed: %+v, %v", rs, err)
	}

	stopOld()
	_, stopNew := lead()
	defer stopNew()
	waitFor(t, "3 warm members under the new leader", func() bool { return f.members(t, "", "ci")[store.MemberWarm] == 3 })
}
