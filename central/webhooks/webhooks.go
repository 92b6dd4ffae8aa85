// Package webhooks keeps the webhooks of the operator and of tenants and
// delivers notifications to them: signed POSTs, tried three times, with the
// last 20 deliveries kept. A tenant's webhook goes only through netguard, so
// it cannot reach central's own network; the leader delivers, reading the
// notifications still owed from etcd.
package webhooks

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/notify"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/webhooks/netguard"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Bounds (docs/notifications.md; schemas/fleet-openapi.yaml says the same).
const (
	MaxPerOwner    = store.MaxWebhooksPerOwner
	MaxURLLen      = netguard.MaxURLLen
	MaxNameLen     = 64
	MaxBodyBytes   = 8 << 10 // a notification's JSON is far below (notify's bounds)
	IDPrefix       = "whk_"
	SecretPrefix   = "whsec_"
	DeliveryPrefix = "dlv_"
)

// Retries are the pauses before the second and third tries: a delivery is
// tried at once, after 2 s and after 10 s more.
var Retries = []time.Duration{2 * time.Second, 10 * time.Second}

// Errors callers branch on.
var (
	// ErrInvalid wraps a request that cannot be taken (400).
	ErrInvalid = errors.New("invalid webhook")
	// ErrNotFound is a webhook that is not the caller's or not there (404).
	ErrNotFound = store.ErrNotFound
)

// InvalidError says what is wrong with a request and what to do.
type InvalidError struct{ Msg, Hint string }

func (e *InvalidError) Error() string { return e.Msg }
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Store is what webhooks need of central's store.
type Store interface {
	CreateWebhook(ctx context.Context, w *store.Webhook) error
	ListWebhooks(ctx context.Context, tenant string) ([]store.Webhook, error)
	AllWebhooks(ctx context.Context) ([]store.Webhook, error)
	GetWebhook(ctx context.Context, tenant, id string) (*store.Webhook, error)
	DeleteWebhook(ctx context.Context, tenant, id string) error
	WebhookDone(ctx context.Context, id, notification string) (bool, error)
	RecordDelivery(ctx context.Context, tenant, id string, d sdk.WebhookDelivery, done bool) error
	// Outbox reads the oldest notifications webhooks may still be owed.
	Outbox(ctx context.Context, limit int) ([]notify.Event, error)
	// OutboxDone takes one out of the outbox.
	OutboxDone(ctx context.Context, id string) error
}

// Options configure a Service.
type Options struct {
	Store Store
	// Guard sends tenants' deliveries (nil: netguard with the system's
	// resolver).
	Guard *netguard.Guard
	// Operator sends the operator's deliveries, which may go anywhere
	// (nil: a client with Timeout that follows no redirect and uses no proxy).
	Operator *http.Client
	// Timeout bounds one try (netguard.DefaultTimeout when 0).
	Timeout time.Duration
	// Now is the clock and Sleep waits between tries (time.Now and a timer
	// by default): tests inject both.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	// Parallel is how many deliveries run at once in a pass (4 when 0).
	Parallel int
	Logger   hclog.Logger
}

// Service manages and delivers webhooks. It is safe for concurrent use.
type Service struct {
	o   Options
	log hclog.Logger
}

// New makes a Service.
func New(o Options) *Service {
	if o.Timeout <= 0 {
		o.Timeout = netguard.DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Sleep == nil {
		o.Sleep = func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		}
	}
	if o.Operator == nil {
		o.Operator = &http.Client{Timeout: o.Timeout, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.Guard == nil {
		o.Guard = &netguard.Guard{Resolver: net.DefaultResolver}
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return &Service{o: o, log: o.Logger}
}

// Sign is X-FluxVM-Signature's value for body: "sha256=" and the hex
// HMAC-SHA256 of the body keyed with the webhook's secret.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a signature as a receiver would (constant time).
func Verify(secret string, body []byte, signature string) bool {
	return hmac.Equal([]byte(Sign(secret, body)), []byte(signature))
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}

// Check judges a request to create a webhook for tenant ("" the operator):
// nil, or an *InvalidError saying what is wrong and what to do.
func Check(tenant string, req sdk.CreateWebhookRequest) error {
	bad := func(msg, hint string) error { return &InvalidError{Msg: msg, Hint: hint} }
	if req.Name != "" && (!store.ValidName(req.Name) || len(req.Name) > MaxNameLen) {
		return bad(fmt.Sprintf("webhook name %q: use 1-%d letters, digits, '.', '_' or '-', starting with a letter or digit", jsonapi.Echo(req.Name), MaxNameLen),
			"leave name out, or give a short label")
	}
	if len(req.URL) > MaxURLLen {
		return bad(fmt.Sprintf("url is longer than %d bytes", MaxURLLen), "give a shorter URL")
	}
	if tenant != "" {
		if _, err := netguard.CheckURL(req.URL); err != nil {
			return bad("url: "+err.Error(), "a tenant's webhook must be https and reach a public address (docs/notifications.md)")
		}
	} else {
		u, err := url.Parse(req.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return bad("url must be an http or https URL with a host and no user name", "for example https://hooks.example.com/fluxvm")
		}
	}
	seen := map[string]bool{}
	for _, e := range req.Events {
		if !slices.Contains(sdk.NotificationTypes, e) {
			return bad(fmt.Sprintf("unknown event %q", jsonapi.Echo(e)), "events are: "+strings.Join(sdk.NotificationTypes, ", "))
		}
		if seen[e] {
			return bad(fmt.Sprintf("event %q is given twice", e), "give each event once")
		}
		seen[e] = true
	}
	return nil
}

// Create adds a webhook for tenant ("" the operator). The answer carries the
// secret, which is never shown again. Errors: *InvalidError, the store's
// *store.QuotaError (over MaxPerOwner), store.ErrNotFound (no such tenant).
func (s *Service) Create(ctx context.Context, tenant string, req sdk.CreateWebhookRequest) (*sdk.WebhookWithSecret, error) {
	if err := Check(tenant, req); err != nil {
		return nil, err
	}
	events := append([]string{}, req.Events...)
	w := &store.Webhook{Webhook: sdk.Webhook{ID: IDPrefix + randomHex(6), Name: req.Name, URL: req.URL, Events: events, Tenant: tenant,
		CreatedAt: s.o.Now().UTC(), Deliveries: []sdk.WebhookDelivery{}}, Secret: SecretPrefix + randomHex(24)}
	if err := s.o.Store.CreateWebhook(ctx, w); err != nil {
		return nil, err
	}
	s.log.Info("webhook created", "webhook", w.ID, "tenant", tenant, "events", len(events))
	return &sdk.WebhookWithSecret{Webhook: w.Webhook, Secret: w.Secret,
		Note: "store the secret now: it is shown only this once; receivers check X-FluxVM-Signature with it"}, nil
}

// List returns tenant's webhooks ("" the operator's), without secrets.
func (s *Service) List(ctx context.Context, tenant string) ([]sdk.Webhook, error) {
	ws, err := s.o.Store.ListWebhooks(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]sdk.Webhook, len(ws))
	for i := range ws {
		out[i] = Wire(ws[i])
	}
	return out, nil
}

// Wire is a stored webhook as answers show it: without its secret.
func Wire(w store.Webhook) sdk.Webhook {
	out := w.Webhook
	if out.Events == nil {
		out.Events = []string{}
	}
	if out.Deliveries == nil {
		out.Deliveries = []sdk.WebhookDelivery{}
	}
	return out
}

// Delete removes one of tenant's webhooks; another owner's is ErrNotFound.
func (s *Service) Delete(ctx context.Context, tenant, id string) error {
	if err := s.o.Store.DeleteWebhook(ctx, tenant, id); err != nil {
		return err
	}
	s.log.Info("webhook deleted", "webhook", id, "tenant", tenant)
	return nil
}

// Test sends a webhook.test notification to one of tenant's webhooks now,
// once, records the delivery with the others and returns it.
func (s *Service) Test(ctx context.Context, tenant, id string) (*sdk.WebhookDelivery, error) {
	w, err := s.o.Store.GetWebhook(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	now := s.o.Now().UTC()
	n := notify.Event{ID: fmt.Sprintf("%020d-test-%s", now.UnixNano(), randomHex(4)), Type: sdk.NotifyWebhookTest, Time: now, Tenant: tenant,
		Title: "test delivery to webhook " + w.ID, Detail: "sent by POST /fleet/webhooks/" + w.ID + "/test", Link: "/fleet/webhooks"}
	d := s.deliver(ctx, w, n, 1)
	if err := s.o.Store.RecordDelivery(ctx, tenant, id, d, false); err != nil {
		return nil, err
	}
	return &d, nil
}

// wants says whether w gets n: its owner's (the operator's get all) and of
// a type it filters for.
func wants(w *store.Webhook, n *notify.Event) bool {
	if w.Tenant != "" && w.Tenant != n.Tenant {
		return false
	}
	return len(w.Events) == 0 || slices.Contains(w.Events, n.Type)
}

// DeliveryID is the id of n's delivery to webhook id: derived from both, so
// that a leader repeating a delivery after a failover sends the same id.
func DeliveryID(webhook, notification string) string {
	h := sha256.Sum256([]byte(webhook + "/" + notification))
	return DeliveryPrefix + hex.EncodeToString(h[:8])
}

// Dispatch is one pass of the leader's delivery: each notification still in
// the outbox (oldest first, up to limit) goes to every webhook that wants it
// and has not had it, with up to three tries. Webhooks are served side by
// side (Parallel at once), each its notifications in order, so a receiver
// that fails or hangs delays only its own. A notification leaves the outbox
// once every webhook that wants it is done with it. What was delivered is
// marked in etcd with the delivery's record, so a leader that takes over
// sends only what is left. It returns how many deliveries it made.
func (s *Service) Dispatch(ctx context.Context, limit int) (int, error) {
	ns, err := s.o.Store.Outbox(ctx, limit)
	if err != nil || len(ns) == 0 {
		return 0, err
	}
	ws, err := s.o.Store.AllWebhooks(ctx)
	if err != nil {
		return 0, err
	}
	type job struct {
		w  *store.Webhook
		ns []*notify.Event
	}
	var jobs []job
	for j := range ws {
		w := &ws[j]
		jb := job{w: w}
		for i := range ns {
			if !wants(w, &ns[i]) {
				continue
			}
			done, err := s.o.Store.WebhookDone(ctx, w.ID, ns[i].ID)
			if err != nil {
				return 0, err
			}
			if !done {
				jb.ns = append(jb.ns, &ns[i])
			}
		}
		if len(jb.ns) > 0 {
			jobs = append(jobs, jb)
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		made   int
		errs   []error
		failed = map[string]bool{} // notifications some webhook is not done with
		sem    = make(chan struct{}, s.o.Parallel)
	)
	for _, jb := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, n := range jb.ns {
				d := s.deliver(ctx, jb.w, *n, 1+len(Retries))
				if ctx.Err() != nil {
					mu.Lock()
					failed[n.ID] = true // leadership lost or stopping: the next leader delivers it
					mu.Unlock()
					continue
				}
				err := s.o.Store.RecordDelivery(ctx, jb.w.Tenant, jb.w.ID, d, true)
				mu.Lock()
				made++
				if err != nil && !errors.Is(err, store.ErrNotFound) { // not found: deleted meanwhile
					errs = append(errs, err)
					failed[n.ID] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return made, ctx.Err()
	}
	for i := range ns {
		if failed[ns[i].ID] {
			continue
		}
		if err := s.o.Store.OutboxDone(ctx, ns[i].ID); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return made, errors.Join(errs...)
}

// deliver sends n to w, up to tries times (at once, then after each of
// Retries), until an answer is 2xx, and says how it went.
func (s *Service) deliver(ctx context.Context, w *store.Webhook, n notify.Event, tries int) sdk.WebhookDelivery {
	body, _ := json.Marshal(n) // our own plain struct
	d := sdk.WebhookDelivery{ID: DeliveryID(w.ID, n.ID), Notification: n.ID, Event: n.Type, At: s.o.Now().UTC()}
	if len(body) > MaxBodyBytes {
		d.Error = fmt.Sprintf("the notification is %d bytes, over %d", len(body), MaxBodyBytes)
		return d
	}
	sig := Sign(w.Secret, body)
	for try := 0; try < tries; try++ {
		if try > 0 {
			if err := s.o.Sleep(ctx, Retries[min(try-1, len(Retries)-1)]); err != nil {
				d.Error = "stopped before the next try"
				return d
			}
		}
		d.Attempts = try + 1
		var refused bool
		d.Status, d.Error, refused = s.try(ctx, w, n.Type, d.ID, body, sig)
		if d.Error == "" {
			d.OK = true
			return d
		}
		if refused {
			break // nothing was sent: the address is not one a tenant's webhook may reach
		}
	}
	s.log.Warn("webhook delivery failed", "webhook", w.ID, "tenant", w.Tenant, "notification", n.ID, "attempts", d.Attempts,
		"status", d.Status, "error", d.Error)
	return d
}

// try makes one POST and returns its status and, unless it was 2xx, why it
// failed (never the receiver's body, nor the secret); refused says netguard
// refused the address, so nothing was sent.
func (s *Service) try(ctx context.Context, w *store.Webhook, event, delivery string, body []byte, sig string) (status int, msg string, refused bool) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return 0, "the URL does not make a request", false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "FluxVM-Webhook/1")
	req.Header.Set("X-FluxVM-Event", event)
	req.Header.Set("X-FluxVM-Delivery", delivery)
	req.Header.Set("X-FluxVM-Signature", sig)
	var resp *http.Response
	if w.Tenant == "" {
		resp, err = s.o.Operator.Do(req)
	} else {
		resp, err = s.o.Guard.Do(req)
	}
	if err != nil {
		var re *netguard.RefusedError
		if errors.As(err, &re) {
			return 0, "refused: " + re.Error(), true
		}
		return 0, jsonapi.Clip(errText(err), 300), false
	}
	netguard.Drain(resp)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, fmt.Sprintf("the receiver answered %d", resp.StatusCode), false
	}
	return resp.StatusCode, "", false
}

// errText is a transport error without the URL's query (which might hold a
// token of the receiver's).
func errText(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}
