package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Notification types (docs/notifications.md). Who hears of each: the
// tenant it is about, and the operator's webhooks hear of all.
const (
	NotifyVMCreated     = "vm.created"     // a VM was launched through central
	NotifyVMDeleted     = "vm.deleted"     // a VM was deleted through central
	NotifyLeaseCreated  = "lease.created"  // a Mac was leased
	NotifyLeaseReleased = "lease.released" // a lease was released by its tenant or the operator
	NotifyLeaseEnding   = "lease.ending"   // a lease with an end time has 24 hours left, then 1 hour
	NotifyLeaseEnded    = "lease.ended"    // the reconciler ended a lease at its end time
	NotifyBudgetNear    = "budget.near"    // the month's spend reached 80 % of the budget
	NotifyBudgetOver    = "budget.over"    // the month's spend reached the budget
	NotifyNodeDown      = "node.down"      // a node stopped heartbeating (operator)
	NotifyNodeScrub     = "node.scrub"     // a node waits for a scrub (operator)
	NotifyDrainDone     = "drain.done"     // a node finished draining (operator)
	NotifyVMSnapshot    = "vm.snapshot"    // a snapshot of a VM was taken through central
	NotifyVMRestored    = "vm.restored"    // a VM was restored to a snapshot through central
	NotifyVMCloned      = "vm.cloned"      // a VM was cloned through central (about the new VM)
	NotifyVolumeCreated = "volume.created" // a volume was created through central
	NotifyVolumeDeleted = "volume.deleted" // a volume was deleted through central
	// NotifyWebhookTest is what POST /fleet/webhooks/{id}/test sends; it is
	// not kept with the notifications and no filter excludes it.
	NotifyWebhookTest = "webhook.test"
)

// NotificationTypes lists every type a webhook may filter on.
var NotificationTypes = []string{NotifyVMCreated, NotifyVMDeleted, NotifyLeaseCreated, NotifyLeaseReleased, NotifyLeaseEnding,
	NotifyLeaseEnded, NotifyBudgetNear, NotifyBudgetOver, NotifyNodeDown, NotifyNodeScrub, NotifyDrainDone,
	NotifyVMSnapshot, NotifyVMRestored, NotifyVMCloned, NotifyVolumeCreated, NotifyVolumeDeleted}

// Notification is something that happened that a tenant or the operator
// should hear about; it is what GET /fleet/notifications lists and the body
// every webhook delivery carries.
type Notification struct {
	// ID is unique; ids sort in the order notifications were made.
	ID string `json:"id"`
	// Type is one of NotificationTypes (or NotifyWebhookTest).
	Type string    `json:"type"`
	Time time.Time `json:"time"`
	// Tenant is the id of the tenant it is about ("" for the operator's).
	Tenant string `json:"tenant,omitempty"`
	// Title is one line for people (at most 200 bytes); Detail says more
	// (at most 2000 bytes).
	Title  string `json:"title"`
	Detail string `json:"detail,omitempty"`
	// Link is the fleet API path of what it is about ("/fleet/leases/l-..."),
	// relative to central's URL; "" when there is none.
	Link string `json:"link,omitempty"`
}

// NotificationList is GET /fleet/notifications' answer, newest first.
type NotificationList struct {
	Notifications []Notification `json:"notifications"`
}

// Webhook is a URL central posts notifications to. Its secret is shown
// once, at creation (WebhookWithSecret), and never again.
type Webhook struct {
	// ID is whk_ and 12 hex digits.
	ID string `json:"id"`
	// Name is optional, for people (1-64 letters, digits, '.', '_', '-').
	Name string `json:"name,omitempty"`
	URL  string `json:"url"`
	// Events are the types it gets; empty is every type.
	Events []string `json:"events"`
	// Tenant owns it ("" the operator, whose webhooks get every tenant's
	// notifications and the operator's own).
	Tenant    string    `json:"tenant,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// Deliveries are the last 20 deliveries, newest first.
	Deliveries []WebhookDelivery `json:"deliveries"`
}

// WebhookDelivery is one notification sent to one webhook, with all its
// tries.
type WebhookDelivery struct {
	// ID is what X-FluxVM-Delivery carried: the same on every try, so a
	// receiver can tell a retry from a new delivery.
	ID           string    `json:"id"`
	Notification string    `json:"notification"`
	Event        string    `json:"event"`
	At           time.Time `json:"at"`
	// Attempts is how many tries were made (1-3).
	Attempts int `json:"attempts"`
	// Status is the HTTP status of the last try (0: no answer).
	Status int  `json:"status,omitempty"`
	OK     bool `json:"ok"`
	// Error says why the last try failed, without the receiver's body.
	Error string `json:"error,omitempty"`
}

// WebhookList is GET /fleet/webhooks' answer.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// CreateWebhookRequest is POST /fleet/webhooks' body.
type CreateWebhookRequest struct {
	// URL is https for a tenant (and must reach a public address); the
	// operator may use http. At most 2048 bytes.
	URL string `json:"url"`
	// Events filters what it gets (empty: every type); at most one of each.
	Events []string `json:"events,omitempty"`
	// Name is optional.
	Name string `json:"name,omitempty"`
}

// WebhookWithSecret is POST /fleet/webhooks' answer: the webhook and its
// signing secret, which is shown this once.
type WebhookWithSecret struct {
	Webhook Webhook `json:"webhook"`
	// Secret keys the HMAC-SHA256 in X-FluxVM-Signature.
	Secret string `json:"secret"`
	Note   string `json:"note"`
}

// ListNotifications returns the newest notifications, newest first: a
// tenant's own, or for the operator everyone's. limit 0 is central's default.
func (f *FleetClient) ListNotifications(ctx context.Context, limit int) ([]Notification, error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out NotificationList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/notifications", v, nil, &out); err != nil {
		return nil, err
	}
	if out.Notifications == nil {
		out.Notifications = []Notification{}
	}
	return out.Notifications, nil
}

// ListWebhooks returns the caller's webhooks with their last deliveries.
func (f *FleetClient) ListWebhooks(ctx context.Context) ([]Webhook, error) {
	var out WebhookList
	if err := f.c.call(ctx, http.MethodGet, "/fleet/webhooks", nil, nil, &out); err != nil {
		return nil, err
	}
	if out.Webhooks == nil {
		out.Webhooks = []Webhook{}
	}
	return out.Webhooks, nil
}

// CreateWebhook adds a webhook; the answer carries its secret, shown once.
// Over 10 webhooks is IsQuota.
func (f *FleetClient) CreateWebhook(ctx context.Context, req CreateWebhookRequest) (*WebhookWithSecret, error) {
	var out WebhookWithSecret
	if err := f.c.call(ctx, http.MethodPost, "/fleet/webhooks", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteWebhook removes one of the caller's webhooks.
func (f *FleetClient) DeleteWebhook(ctx context.Context, id string) error {
	return f.c.call(ctx, http.MethodDelete, "/fleet/webhooks/"+url.PathEscape(id), nil, nil, nil)
}

// TestWebhook sends a webhook.test notification to the webhook now, once,
// and returns how it went.
func (f *FleetClient) TestWebhook(ctx context.Context, id string) (*WebhookDelivery, error) {
	var out WebhookDelivery
	if err := f.c.call(ctx, http.MethodPost, "/fleet/webhooks/"+url.PathEscape(id)+"/test", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
