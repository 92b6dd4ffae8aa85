package webhooks

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/store/storetest"
	"github.com/fluxvm/fluxvm/central/webhooks/netguard"
	"github.com/fluxvm/fluxvm/sdk"
)

// fakeClock is the injected clock; its Sleep moves it on at once.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

// receiver records what it gets, verifies every signature with the
// webhook's secret and answers from script (200 once it is spent).
type receiver struct {
	t      *testing.T
	clk    *fakeClock
	mu     sync.Mutex
	secret string
	script []int
	got    []delivery
}

type delivery struct {
	at           time.Time
	event, id    string
	notification sdk.Notification
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !Verify(r.secret, body, req.Header.Get("X-FluxVM-Signature")) {
		r.t.Errorf("delivery %s: the signature %q does not verify", req.Header.Get("X-FluxVM-Delivery"), req.Header.Get("X-FluxVM-Signature"))
	}
	var n sdk.Notification
	if err := json.Unmarshal(body, &n); err != nil {
		r.t.Errorf("body is not a notification: %v", err)
	}
	if req.Header.Get("X-FluxVM-Event") != n.Type || !strings.HasPrefix(req.Header.Get("X-FluxVM-Delivery"), DeliveryPrefix) ||
		req.Header.Get("Content-Type") != "application/json" {
		r.t.Errorf("headers %v for a %s", req.Header, n.Type)
	}
	r.got = append(r.got, delivery{at: r.clk.now(), event: req.Header.Get("X-FluxVM-Event"), id: req.Header.Get("X-FluxVM-Delivery"), notification: n})
	status := 200
	if len(r.script) > 0 {
		status, r.script = r.script[0], r.script[1:]
	}
	w.WriteHeader(status)
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

type fixture struct {
	st  *store.Store
	clk *fakeClock
	svc *Service
}

func newFixture(t *testing.T) *fixture {
	st := storetest.Open(t)
	clk := &fakeClock{t: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	return &fixture{st: st, clk: clk, svc: New(Options{Store: st, Now: clk.now, Sleep: clk.sleep,
		Guard: &netguard.Guard{Resolver: net.DefaultResolver}})}
}

// operatorHook makes an operator's webhook to a receiver on loopback.
func (f *fixture) operatorHook(t *testing.T, events ...string) (*receiver, sdk.Webhook) {
	t.Helper()
	r := &receiver{t: t, clk: f.clk}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	created, err := f.svc.Create(context.Background(), "", sdk.CreateWebhookRequest{URL: srv.URL + "/hook?x=1", Events: events})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(created.Secret, SecretPrefix) || len(created.Secret) < 40 {
		t.Fatalf("secret %q", created.Secret)
	}
	r.secret = created.Secret
	return r, created.Webhook
}

func (f *fixture) emit(t *testing.T, typ, tenant, once string) {
	t.Helper()
	if _, err := f.st.Emit(context.Background(), notify.Event{Type: typ, Tenant: tenant, Time: f.clk.now(), Title: typ + " happened"}, once); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) dispatch(t *testing.T) int {
	t.Helper()
	n, err := f.svc.Dispatch(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEveryDeliveryIsSignedWithTheWebhooksSecret: the receiver verifies the
// HMAC of every delivery, and the headers name the event and the delivery.
func TestEveryDeliveryIsSignedWithTheWebhooksSecret(t *testing.T) {
	f := newFixture(t)
	r, _ := f.operatorHook(t)
	for _, typ := range []string{sdk.NotifyLeaseCreated, sdk.NotifyNodeDown, sdk.NotifyBudgetOver} {
		f.emit(t, typ, "t-1", "")
	}
	if n := f.dispatch(t); n != 3 {
		t.Fatalf("%d deliveries, want 3", n)
	}
	got := r.deliveries()
	if len(got) != 3 || got[0].event != sdk.NotifyLeaseCreated || got[2].event != sdk.NotifyBudgetOver || got[1].notification.Title != "node.down happened" {
		t.Fatalf("deliveries %+v", got)
	}
	// A signature with another secret does not verify.
	if Verify("whsec_other", []byte(`{}`), Sign("whsec_mine", []byte(`{}`))) {
		t.Fatal("Verify took another secret's signature")
	}
}

// TestFailingReceiverGetsThreeTriesAtZeroTwoAndTwelveSeconds: 500 twice then
// 200 makes three tries, at 0, 2 and 12 s on the injected clock, all with
// the same delivery id; the delivery is then recorded as a success.
func TestFailingReceiverGetsThreeTriesAtZeroTwoAndTwelveSeconds(t *testing.T) {
	f := newFixture(t)
	r, w := f.operatorHook(t)
	r.script = []int{500, 500, 200}
	start := f.clk.now()
	f.emit(t, sdk.NotifyLeaseEnding, "t-1", "")
	f.dispatch(t)
	got := r.deliveries()
	if len(got) != 3 {
		t.Fatalf("%d tries, want 3", len(got))
	}
	for i, want := range []time.Duration{0, 2 * time.Second, 12 * time.Second} {
		if at := got[i].at.Sub(start); at != want {
			t.Errorf("try %d at %s, want %s", i+1, at, want)
		}
		if got[i].id != got[0].id {
			t.Errorf("try %d has delivery id %s, the first %s", i+1, got[i].id, got[0].id)
		}
	}
	ws, err := f.svc.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	d := ws[0].Deliveries
	if ws[0].ID != w.ID || len(d) != 1 || !d[0].OK || d[0].Attempts != 3 || d[0].Status != 200 {
		t.Fatalf("deliveries %+v", d)
	}

	// Three failures: given up after the third try, and recorded as failed.
	r.script = []int{503, 502, 500}
	f.emit(t, sdk.NotifyLeaseEnded, "t-1", "")
	f.dispatch(t)
	ws, _ = f.svc.List(context.Background(), "")
	d = ws[0].Deliveries
	if len(r.deliveries()) != 6 || d[0].OK || d[0].Attempts != 3 || d[0].Status != 500 || !strings.Contains(d[0].Error, "500") {
		t.Fatalf("after three failures: %d tries, %+v", len(r.deliveries()), d[0])
	}
	if f.dispatch(t) != 0 {
		t.Fatal("a given-up delivery was tried again")
	}
}

// TestThe21stDeliveryPushesOutTheFirst: the webhook keeps its last 20
// deliveries, newest first.
func TestThe21stDeliveryPushesOutTheFirst(t *testing.T) {
	f := newFixture(t)
	_, _ = f.operatorHook(t)
	var ids []string
	for i := 0; i < 21; i++ {
		f.clk.sleep(context.Background(), time.Second)
		f.emit(t, sdk.NotifyVMCreated, "t-1", "")
		f.dispatch(t)
		ns, _ := f.st.Notifications(context.Background(), "", 1)
		ids = append(ids, ns[0].ID)
	}
	ws, err := f.svc.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	d := ws[0].Deliveries
	if len(d) != 20 || d[0].Notification != ids[20] || d[19].Notification != ids[1] {
		t.Fatalf("%d deliveries, newest %s (want %s), oldest %s (want %s)", len(d), d[0].Notification, ids[20], d[19].Notification, ids[1])
	}
}

// TestTenantsWebhooksGetTheirOwnOperatorsGetAll, with event filters.
func TestTenantsWebhooksGetTheirOwnOperatorsGetAll(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acme := storetest.Tenant(t, f.st, "acme")
	other := storetest.Tenant(t, f.st, "other")
	all, _ := f.operatorHook(t)
	onlyDown, _ := f.operatorHook(t, sdk.NotifyNodeDown)
	// acme's webhook: https to a stand-in on loopback for a public address.
	acmeRecv := &receiver{t: t, clk: f.clk}
	srv := httptest.NewTLSServer(acmeRecv)
	t.Cleanup(srv.Close)
	loop := netip.MustParseAddrPort(srv.Listener.Addr().String())
	f.svc.o.Guard = &netguard.Guard{Resolver: staticResolver{"example.com": {"93.184.215.14"}},
		TLSConfig:       &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
		RewriteForTests: func(netip.AddrPort) netip.AddrPort { return loop }}
	created, err := f.svc.Create(ctx, acme.ID, sdk.CreateWebhookRequest{URL: "https://example.com/hook", Events: []string{sdk.NotifyLeaseEnding, sdk.NotifyVMCreated}})
	if err != nil {
		t.Fatal(err)
	}
	acmeRecv.secret = created.Secret

	f.emit(t, sdk.NotifyLeaseEnding, acme.ID, "")
	f.emit(t, sdk.NotifyLeaseEnding, other.ID, "")
	f.emit(t, sdk.NotifyVMDeleted, acme.ID, "")
	f.emit(t, sdk.NotifyNodeDown, "", "")
	f.dispatch(t)
	if n := len(all.deliveries()); n != 4 {
		t.Errorf("the operator's webhook got %d, want all 4", n)
	}
	if got := onlyDown.deliveries(); len(got) != 1 || got[0].event != sdk.NotifyNodeDown {
		t.Errorf("the node.down webhook got %+v", got)
	}
	if got := acmeRecv.deliveries(); len(got) != 1 || got[0].event != sdk.NotifyLeaseEnding || got[0].notification.Tenant != acme.ID {
		t.Errorf("acme's webhook got %+v", got)
	}
	// Another tenant's webhook is not found, to list, test or delete.
	if ws, _ := f.svc.List(ctx, other.ID); len(ws) != 0 {
		t.Errorf("other sees %d webhooks", len(ws))
	}
	if _, err := f.svc.Test(ctx, other.ID, created.Webhook.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other tests acme's webhook: %v", err)
	}
	if err := f.svc.Delete(ctx, other.ID, created.Webhook.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("other deletes acme's webhook: %v", err)
	}
	// Test delivers once, now, and is recorded.
	d, err := f.svc.Test(ctx, acme.ID, created.Webhook.ID)
	if err != nil || !d.OK || d.Event != sdk.NotifyWebhookTest || d.Attempts != 1 {
		t.Fatalf("test: %+v %v", d, err)
	}
	if err := f.svc.Delete(ctx, acme.ID, created.Webhook.ID); err != nil {
		t.Fatal(err)
	}
}

// staticResolver answers from a map.
type staticResolver map[string][]string

func (r staticResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	var out []net.IPAddr
	for _, a := range r[host] {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	if len(out) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// TestRefusedAddressIsRecordedWithItsReasonAndNotRetried: a tenant's webhook
// whose name resolves to a private address is refused at delivery, once,
// and the delivery says why.
func TestRefusedAddressIsRecordedWithItsReasonAndNotRetried(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acme := storetest.Tenant(t, f.st, "acme")
	f.svc.o.Guard = &netguard.Guard{Resolver: staticResolver{"hooks.example.com": {"10.1.2.3"}}}
	created, err := f.svc.Create(ctx, acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/x"})
	if err != nil {
		t.Fatal(err)
	}
	start := f.clk.now()
	f.emit(t, sdk.NotifyVMCreated, acme.ID, "")
	f.dispatch(t)
	w, _ := f.svc.List(ctx, acme.ID)
	d := w[0].Deliveries
	if len(d) != 1 || d[0].OK || d[0].Attempts != 1 || !strings.Contains(d[0].Error, "private (10.0.0.0/8)") || !f.clk.now().Equal(start) {
		t.Fatalf("deliveries %+v", d)
	}
	if strings.Contains(d[0].Error, created.Secret) {
		t.Fatal("the secret is in the delivery's error")
	}
}

// TestAFailoverDoesNotResendWhatWasDelivered: a second service on the same
// etcd (the next leader) finds the deliveries done and sends nothing again;
// a notification made later goes out once.
func TestAFailoverDoesNotResendWhatWasDelivered(t *testing.T) {
	f := newFixture(t)
	r, _ := f.operatorHook(t)
	f.emit(t, sdk.NotifyDrainDone, "", "")
	f.dispatch(t)
	next := New(Options{Store: f.st, Now: f.clk.now, Sleep: f.clk.sleep})
	if n, err := next.Dispatch(context.Background(), 100); err != nil || n != 0 {
		t.Fatalf("the next leader made %d deliveries (%v), want 0", n, err)
	}
	f.emit(t, sdk.NotifyNodeScrub, "", "")
	if n, err := next.Dispatch(context.Background(), 100); err != nil || n != 1 {
		t.Fatalf("the next leader: %d, %v", n, err)
	}
	if got := r.deliveries(); len(got) != 2 || got[0].event != sdk.NotifyDrainDone || got[1].event != sdk.NotifyNodeScrub {
		t.Fatalf("the receiver got %+v", got)
	}
	// Even with the outbox entry back (a leader that died between its
	// delivery and the outbox's update), the done mark holds.
	if _, err := f.st.Client().Put(context.Background(), f.st.Prefix()+"notify-outbox/"+r.deliveries()[0].notification.ID, ""); err != nil {
		t.Fatal(err)
	}
	if n, _ := next.Dispatch(context.Background(), 100); n != 0 {
		t.Fatalf("resent %d", n)
	}
}

// TestCreateRefusesBadInputAndAnEleventhWebhook: what a tenant may not ask
// for, each with a message and a hint, and the limit of 10 per owner.
func TestCreateRefusesBadInputAndAnEleventhWebhook(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	acme := storetest.Tenant(t, f.st, "acme")
	for _, c := range []struct {
		tenant string
		req    sdk.CreateWebhookRequest
		says   string
	}{
		{acme.ID, sdk.CreateWebhookRequest{URL: "http://hooks.example.com/"}, "https"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://127.0.0.1/"}, "loopback"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://[::ffff:192.168.0.1]/"}, "private"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://169.254.169.254/latest"}, "link-local"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/", Events: []string{"vm.exploded"}}, "unknown event"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/", Events: []string{"vm.created", "vm.created"}}, "twice"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/", Name: strings.Repeat("n", 65)}, "name"},
		{acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/" + strings.Repeat("p", MaxURLLen)}, "longer"},
		{"", sdk.CreateWebhookRequest{URL: "ftp://files.example.com/"}, "http or https"},
		{"", sdk.CreateWebhookRequest{URL: ""}, "http or https"},
	} {
		_, err := f.svc.Create(ctx, c.tenant, c.req)
		var ie *InvalidError
		if !errors.As(err, &ie) || !strings.Contains(ie.Msg, c.says) || ie.Hint == "" {
			t.Errorf("create %+v: %v, want refused for %q", c.req, err, c.says)
		}
	}
	// The operator may point anywhere, http included.
	if _, err := f.svc.Create(ctx, "", sdk.CreateWebhookRequest{URL: "http://10.0.0.5:8080/hook"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < MaxPerOwner; i++ {
		if _, err := f.svc.Create(ctx, acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := f.svc.Create(ctx, acme.ID, sdk.CreateWebhookRequest{URL: "https://hooks.example.com/"})
	var qe *store.QuotaError
	if !errors.As(err, &qe) || qe.Field != "webhooks" || qe.Limit != MaxPerOwner {
		t.Fatalf("the 11th webhook: %v", err)
	}
	// No secret in the listing.
	ws, _ := f.svc.List(ctx, acme.ID)
	b, _ := json.Marshal(ws)
	if strings.Contains(string(b), SecretPrefix) || strings.Contains(string(b), "secret") {
		t.Fatalf("a listing carries a secret: %s", b)
	}
}

// FuzzCheck: any create request is judged without panicking, and one that
// passes for a tenant has an https URL within bounds and known events.
func FuzzCheck(f *testing.F) {
	f.Add("https://hooks.example.com/x", "vm.created", "name")
	f.Add("https://[fe80::1]/", "", "")
	f.Add("http://x", "lease.ending", "a b")
	f.Fuzz(func(t *testing.T, u, event, name string) {
		req := sdk.CreateWebhookRequest{URL: u, Name: name}
		if event != "" {
			req.Events = []string{event}
		}
		if Check("t-1", req) != nil {
			return
		}
		if !strings.HasPrefix(u, "https://") || len(u) > MaxURLLen || len(name) > MaxNameLen {
			t.Fatalf("accepted %q %q %q", u, event, name)
		}
	})
}

// TestAHangingReceiverDelaysOnlyItsOwnDeliveries: a receiver that never
// answers uses up its tries (each bounded by the timeout) while another
// webhook gets the same notifications at once.
func TestAHangingReceiverDelaysOnlyItsOwnDeliveries(t *testing.T) {
	f := newFixture(t)
	f.svc.o.Timeout = 200 * time.Millisecond
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer hang.Close()
	defer close(release)
	if _, err := f.svc.Create(context.Background(), "", sdk.CreateWebhookRequest{URL: hang.URL}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var arrived []time.Duration
	start := time.Now()
	fast := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived = append(arrived, time.Since(start))
		mu.Unlock()
	}))
	defer fast.Close()
	if _, err := f.svc.Create(context.Background(), "", sdk.CreateWebhookRequest{URL: fast.URL}); err != nil {
		t.Fatal(err)
	}
	f.emit(t, sdk.NotifyNodeDown, "", "")
	f.emit(t, sdk.NotifyDrainDone, "", "")
	start = time.Now()
	f.dispatch(t)
	took := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if len(arrived) != 2 || arrived[1] > 150*time.Millisecond {
		t.Fatalf("the answering receiver got %v, the pass took %s", arrived, took)
	}
	if took < 2*3*200*time.Millisecond {
		t.Fatalf("the pass took %s: the hanging receiver was not tried 3 times for each", took)
	}
	ws, _ := f.svc.List(context.Background(), "")
	for _, w := range ws {
		if w.URL == hang.URL && (len(w.Deliveries) != 2 || w.Deliveries[0].OK || w.Deliveries[0].Attempts != 3 || w.Deliveries[0].Error == "") {
			t.Fatalf("the hanging receiver's deliveries: %+v", w.Deliveries)
		}
	}
}
