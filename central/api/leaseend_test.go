package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestLeaseEndLeaderDies: the leader central dies while ending an expired
// lease (it ended the lease, then hung deleting the lessee's VMs on a node
// that does not answer), and the next leader finishes the end: the lease is
// ended exactly once, the lessee's VMs go, the node is scrub pending.
func TestLeaseEndLeaderDies(t *testing.T) {
	clock := newLxClock(time.Now().UTC())
	stE := fxStore(t, nil) // owns the etcd
	stA := fxStore(t, stE.Endpoints())
	stB := fxStore(t, stE.Endpoints())
	aSrv := api.New(api.Options{Store: stA, FleetToken: fxToken, Logger: fxLogger("api"), HeartbeatInterval: time.Second, Now: clock.now})
	aHS := httptest.NewServer(aSrv)
	t.Cleanup(func() { _ = aHS.Config.Close() })
	b := newLxCentral(t, stB, clock)
	images, img := fxImages(t)
	host := startLxNode(t, "host", b.url, images, 8, 8192, "linux")
	fxWaitUp(t, b.url, "host")
	fxMust(t, "PUT", b.url+"/fleet/images/linux", fxToken, map[string]any{"guest_os": "linux", "image": img, "vcpus": 1, "memory_mib": 256}, http.StatusCreated, nil)
	acmeID, acme := fxTenant(t, b.url, "acme", nil)
	for _, name := range []string{"one", "two"} {
		fxMust(t, "POST", b.url+"/fleet/vms", acme, map[string]any{"name": name, "image": "linux", "node": "host"}, http.StatusCreated, nil)
	}
	// The operator's own VM there is not the lessee's: it stays.
	fxMust(t, "POST", b.url+"/fleet/vms", fxToken, map[string]any{"name": "ops", "image": "linux", "node": "host"}, http.StatusCreated, nil)
	ctx := context.Background()
	l, err := stB.CreateLease(ctx, store.CreateLeaseRequest{Tenant: acmeID, Node: "host", Start: clock.now(), MinHours: 24, Hours: 24, AllowBusy: true})
	if err != nil {
		t.Fatal(err)
	}

	// Every write of the lease's record from here on, in order.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rev, err := stB.Client().Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	watch := stB.Client().Watch(wctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev.Header.Revision+1))
	writes := make(chan store.Lease, 100)
	go func() {
		for wr := range watch {
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut && strings.HasSuffix(string(ev.Kv.Key), "leases/"+l.ID) {
					var x store.Lease
					if json.Unmarshal(ev.Kv.Value, &x) == nil {
						writes <- x
					}
				}
			}
		}
	}()

	// The lease's end time passes; host stops answering; A ends the lease
	// and hangs asking host for its VMs.
	clock.advance(lxHours(25))
	if err := host.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan []string, 1)
	go func() {
		ended, _ := aSrv.EndExpiredLeases(context.Background())
		aDone <- ended
	}()
	fxWait(t, "A ends the lease", 20*time.Second, func() bool {
		x, err := stB.GetLease(ctx, l.ID)
		return err == nil && !x.Active()
	})
	// A dies: its etcd client goes without resigning or revoking anything.
	_ = stA.Client().Close()
	// Its hung call comes back (host's listing times out) having deleted
	// nothing: the ledger still runs both VMs of acme. The end is in etcd
	// (seen above); whether A's call reports it depends on whether etcd's
	// answer reached A before its client closed, which a dying central
	// cannot promise: it reports the lease or nothing, never another.
	select {
	case ended := <-aDone:
		if len(ended) > 0 && !slices.Equal(ended, []string{l.ID}) {
			t.Fatalf("A ended %v, want [%s] or nothing", ended, l.ID)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("A's EndExpiredLeases did not come back")
	}
	mid, err := stB.GetLease(ctx, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if mid.VMsRemoved || mid.EndReason != "expired" {
		t.Fatalf("lease after A died: %+v", mid)
	}
	if n := fxNodeState(t, b.url, "host"); !n.ScrubPending || n.LeasedBy != "" {
		t.Fatalf("host after A died: scrub_pending %v, leased_by %q", n.ScrubPending, n.LeasedBy)
	}
	if err := host.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	// B, the next leader, reconciles: it does not end the lease again, and
	// deletes the lessee's VMs.
	rep, err := b.srv.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.LeasesEnded) != 0 {
		t.Fatalf("B ended leases %v again", rep.LeasesEnded)
	}
	if got := dxNames(nodeVMs(t, host)); !slices.Equal(got, []string{"ops"}) {
		t.Fatalf("host runs %v, want only the operator's vm", got)
	}
	final, err := stB.GetLease(ctx, l.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !final.VMsRemoved || final.EndReason != "expired" || !final.ReleasedAt.Equal(mid.ReleasedAt) {
		t.Fatalf("lease after B's pass: %+v", final)
	}
	running, err := stB.RunningOnNode(ctx, "host")
	if err != nil {
		t.Fatal(err)
	}
	if len(running) != 1 || running[0].Name != "ops" {
		t.Fatalf("running entries on host: %+v", running)
	}
	es, err := stB.EntriesForTenant(ctx, acmeID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Running() || e.EndReason != "lease-ended" {
			t.Fatalf("acme's entry %s: ended %v, reason %q", e.Name, e.EndedAt, e.EndReason)
		}
	}
	if n := fxNodeState(t, b.url, "host"); !n.ScrubPending || n.LeasedBy != "" {
		t.Fatalf("host after B's pass: scrub_pending %v, leased_by %q", n.ScrubPending, n.LeasedBy)
	}

	// Another pass changes nothing.
	rep, err = b.srv.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.LeasesEnded)+len(rep.Ended)+len(rep.Adopted) != 0 {
		t.Fatalf("second pass: %+v", rep)
	}

	// The record went from active to ended once (A's end), then was only
	// marked cleaned (B).
	time.Sleep(200 * time.Millisecond)
	stopWatch()
	var ends, cleaned int
	prevActive := true
	for {
		select {
		case x := <-writes:
			if prevActive && !x.Active() {
				ends++
			}
			if !prevActive && x.Active() {
				t.Fatalf("the lease became active again: %+v", x)
			}
			if !x.Active() && x.EndReason != "expired" {
				t.Fatalf("end reason rewritten: %+v", x)
			}
			if x.VMsRemoved {
				cleaned++
			}
			prevActive = x.Active()
			continue
		default:
		}
		break
	}
	if ends != 1 || cleaned != 1 {
		t.Fatalf("lease writes: ended %d times, marked cleaned %d times; want 1 and 1", ends, cleaned)
	}
}
