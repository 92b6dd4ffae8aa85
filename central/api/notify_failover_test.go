package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central"
	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/webhooks"
	"github.com/fluxvm/fluxvm/sdk"
)

// hookReceiver is an operator's webhook on loopback that checks the HMAC of
// every delivery with the secret it was given and keeps what it got.
type hookReceiver struct {
	t      *testing.T
	mu     sync.Mutex
	secret string
	got    []sdk.Notification
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !webhooks.Verify(h.secret, body, r.Header.Get("X-FluxVM-Signature")) {
		h.t.Errorf("a delivery's signature does not verify: %s", r.Header.Get("X-FluxVM-Signature"))
	}
	var n sdk.Notification
	if err := json.Unmarshal(body, &n); err != nil {
		h.t.Errorf("not a notification: %s", body)
	}
	h.got = append(h.got, n)
}

func (h *hookReceiver) types() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, n := range h.got {
		out = append(out, n.Type+": "+n.Title)
	}
	return out
}

// TestLeaseEndingFiresOnceAt24hAndOnceAt1hAcrossALeaderFailover: two
// centrals on one etcd and one injected clock. A leads and sends the 24-hour
// warning; A loses the lead to B, which runs the same pass at the same time
// and sends nothing again, then sends the 1-hour warning once; A, fenced out,
// sends nothing. A webhook gets each warning once, signed.
func TestLeaseEndingFiresOnceAt24hAndOnceAt1hAcrossALeaderFailover(t *testing.T) {
	ctx := context.Background()
	clock := newLxClock(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	stE := fxStore(t, nil)
	stA := fxStore(t, stE.Endpoints())
	stB := fxStore(t, stE.Endpoints())
	noWait := func(context.Context, time.Duration) error { return nil }
	aSrv := api.New(api.Options{Store: stA, FleetToken: fxToken, Logger: fxLogger("api-a"), Now: clock.now, WebhookSleep: noWait})
	bSrv := api.New(api.Options{Store: stB, FleetToken: fxToken, Logger: fxLogger("api-b"), Now: clock.now, WebhookSleep: noWait})
	aHS, bHS := httptest.NewServer(aSrv), httptest.NewServer(bSrv)
	t.Cleanup(aHS.Close)
	t.Cleanup(bHS.Close)

	recv := &hookReceiver{t: t}
	hook := httptest.NewServer(recv)
	t.Cleanup(hook.Close)
	var created sdk.WebhookWithSecret
	fxMust(t, "POST", aHS.URL+"/fleet/webhooks", fxToken, map[string]any{"url": hook.URL + "/fluxvm", "events": []string{"lease.ending"}},
		http.StatusCreated, &created)
	recv.secret = created.Secret

	acmeID, acme := fxTenant(t, aHS.URL, "acme", nil)
	if err := stA.PutNode(ctx, &store.Node{FleetNode: sdk.FleetNode{Name: "mac-1", URL: "http://127.0.0.1:1", State: store.NodeUp,
		LastHeartbeat: clock.now(), GuestOS: []string{"macos"}}}); err != nil {
		t.Fatal(err)
	}
	l, err := stA.CreateLease(ctx, store.CreateLeaseRequest{Tenant: acmeID, Node: "mac-1", Start: clock.now(), MinHours: 24, Hours: 48, AllowBusy: true})
	if err != nil {
		t.Fatal(err)
	}

	// A leads.
	leadA, err := stA.Campaign(ctx, central.ElectionName)
	if err != nil {
		t.Fatal(err)
	}
	ctxA := store.Fenced(ctx, leadA)
	pass := func(srv *api.Server, ctx context.Context) {
		t.Helper()
		if _, err := srv.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := srv.DispatchWebhooks(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pass(aSrv, ctxA) // 48 hours left: nothing yet
	if got := recv.types(); len(got) != 0 {
		t.Fatalf("before 24 hours left: %v", got)
	}
	clock.advance(24*time.Hour + time.Minute) // 23 h 59 m left
	pass(aSrv, ctxA)
	pass(aSrv, ctxA)
	if got := recv.types(); len(got) != 1 || !strings.Contains(got[0], "ends in 24 hours") {
		t.Fatalf("at 24 hours left: %v", got)
	}

	// A loses the lead; B takes it and runs the same pass at the same time.
	if err := leadA.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	leadB, err := stB.Campaign(ctx, central.ElectionName)
	if err != nil {
		t.Fatal(err)
	}
	defer leadB.Resign(ctx)
	ctxB := store.Fenced(ctx, leadB)
	pass(bSrv, ctxB)
	if got := recv.types(); len(got) != 1 {
		t.Fatalf("after the failover, at the same time: %v", got)
	}

	clock.advance(23 * time.Hour) // 59 m left
	_, _ = aSrv.Reconcile(ctxA)   // the old leader, fenced out: none of its writes lands
	pass(bSrv, ctxB)
	pass(bSrv, ctxB)
	got := recv.types()
	if len(got) != 2 || !strings.Contains(got[1], "ends in 1 hour") {
		t.Fatalf("at 1 hour left: %v", got)
	}

	// The tenant sees the two warnings, and the lease's link.
	var list sdk.NotificationList
	fxMust(t, "GET", bHS.URL+"/fleet/notifications", acme, nil, http.StatusOK, &list)
	var ending []sdk.Notification
	for _, n := range list.Notifications {
		if n.Type == sdk.NotifyLeaseEnding {
			ending = append(ending, n)
		}
	}
	if len(ending) != 2 || ending[0].Link != "/fleet/leases/"+l.ID || ending[0].Tenant != acmeID || !ending[0].Time.After(ending[1].Time) {
		t.Fatalf("the tenant's lease.ending notifications: %+v", ending)
	}

	// At the end time the lease ends: lease.ended for the tenant, node.scrub for the operator.
	clock.advance(time.Hour)
	pass(bSrv, ctxB)
	fxMust(t, "GET", bHS.URL+"/fleet/notifications?limit=5", fxToken, nil, http.StatusOK, &list)
	var types []string
	for _, n := range list.Notifications {
		types = append(types, n.Type)
	}
	if strings.Join(types[:2], " ") != "node.scrub lease.ended" && strings.Join(types[:2], " ") != "lease.ended node.scrub" {
		t.Fatalf("after the end: %v", types)
	}
	if len(recv.types()) != 2 {
		t.Fatalf("the webhook filters lease.ending only, got %v", recv.types())
	}
}
