// Package notify is how central says that something happened that a tenant
// or the operator should hear about (a budget nearly spent, a lease ending).
// Central emits events through a Sink; today the sink records them in etcd
// (store.Store.RecordEvent), and delivery by mail and webhooks will read
// them from there.
package notify

import (
	"context"
	"time"
)

// Kinds of events.
const (
	// BudgetNear: the month's spend reached 80 % of the tenant's budget.
	BudgetNear = "budget.near"
	// BudgetOver: the month's spend reached the budget.
	BudgetOver = "budget.over"
)

// Event is one thing that happened.
type Event struct {
	// ID is set by the sink that records it.
	ID   string    `json:"id"`
	Kind string    `json:"kind"`
	At   time.Time `json:"at"`
	// Tenant is the tenant's id the event is about ("" the operator).
	Tenant string `json:"tenant,omitempty"`
	// Summary is one line a person can read; Data the details, as text.
	Summary string            `json:"summary"`
	Data    map[string]string `json:"data,omitempty"`
}

// Sink takes events. Emit with a non-empty once records the event only if no
// event was recorded under the same once key before (e.g. "budget.over/t-1/2026-10")
// and reports whether it did.
type Sink interface {
	Emit(ctx context.Context, e Event, once string) (bool, error)
}
