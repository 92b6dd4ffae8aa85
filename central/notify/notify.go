// Package notify is how central says that something happened that a tenant
// or the operator should hear about (a lease ending, a node down). The
// mechanisms emit notifications through a Sink; central's sink is the store,
// which keeps them in etcd, where GET /fleet/notifications reads them and the
// leader's webhook dispatcher (central/webhooks) delivers them.
package notify

import (
	"context"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// Types of notifications (sdk.NotificationTypes lists them all).
const (
	// BudgetNear: the month's spend reached 80 % of the tenant's budget.
	BudgetNear = sdk.NotifyBudgetNear
	// BudgetOver: the month's spend reached the budget.
	BudgetOver = sdk.NotifyBudgetOver
)

// Bounds of a notification's text; a sink clips longer ones (Clip), so a
// webhook's body stays small.
const (
	MaxTitleLen  = 200
	MaxDetailLen = 2000
	MaxLinkLen   = 512
)

// Event is one notification, the wire type itself (decision 12).
type Event = sdk.Notification

// Sink takes events. Emit with a non-empty once records the event only if no
// event was recorded under the same once key before (e.g. "budget.over/t-1/2026-10")
// and reports whether it did. A once key is kept in etcd, so it holds across
// centrals and a leader's failover.
type Sink interface {
	Emit(ctx context.Context, e Event, once string) (bool, error)
}

// Clip holds e's text to the bounds above.
func Clip(e *Event) {
	e.Title = clip(e.Title, MaxTitleLen)
	e.Detail = clip(e.Detail, MaxDetailLen)
	e.Link = clip(e.Link, MaxLinkLen)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return s[:n]
}

// Send emits e through sink (nothing when sink is nil) at now if e has no
// time. A failure is logged, not returned: what happened has happened, and
// a notification lost is not a reason to undo it.
func Send(ctx context.Context, sink Sink, log hclog.Logger, e Event, once string, now time.Time) {
	if sink == nil {
		return
	}
	if e.Time.IsZero() {
		e.Time = now
	}
	if _, err := sink.Emit(ctx, e, once); err != nil && log != nil {
		log.Warn("record a notification", "type", e.Type, "tenant", e.Tenant, "error", err)
	}
}
