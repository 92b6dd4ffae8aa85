package sdk

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// History push (docs/history.md): a member central sends its finished VM
// ledger rows, and each row's activity records as a payload named by its
// SHA-256, to its fleet's owner once its operator consented.

// History push states (HistorySyncStatus.State).
const (
	HistoryConsentRequired = "consent_required"
	HistoryIdle            = "idle"
	HistorySynced          = "synced"
	HistoryBackoff         = "backoff"
	HistoryUnauthorized    = "unauthorized"
	HistoryRemoved         = "removed"
	HistoryError           = "error"
)

const (
	// HistoryMaxBatchRows bounds the rows of one push.
	HistoryMaxBatchRows = 100
	// HistoryMaxBatchBytes bounds the body of one push (rows or payloads).
	HistoryMaxBatchBytes = 1 << 20
	// HistoryMaxPayloadBytes bounds one payload; a row's activity beyond it
	// is cut to its newest records.
	HistoryMaxPayloadBytes = 128 << 10
	// HistoryMaxRefusals is how many drains may refuse a row before it is
	// retired (left out until the row changes).
	HistoryMaxRefusals = 3
	// HistoryMaxListRows bounds one page of GET /fleet/history.
	HistoryMaxListRows = 1000
)

// HistoryRow is one finished VM as a member sends it: its ledger row, by
// names, and the SHA-256 of its activity payload.
type HistoryRow struct {
	// ID is the ledger row's id on the member.
	ID        string    `json:"id"`
	Tenant    string    `json:"tenant,omitempty"`
	Node      string    `json:"node"`
	VM        string    `json:"vm"`
	VCPUs     int64     `json:"vcpus"`
	MemoryMiB int64     `json:"memory_mib"`
	GuestOS   string    `json:"guest_os"`
	Image     string    `json:"image,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at"`
	EndReason string    `json:"end_reason,omitempty"`
	// Activity is the SHA-256 (hex) of the row's activity payload ("": none).
	Activity string `json:"activity,omitempty"`
}

// HistoryPayload is a payload a member uploads before the rows naming it:
// text (activity records, one JSON object a line) named by the SHA-256 of
// its UTF-8 bytes.
type HistoryPayload struct {
	SHA256 string `json:"sha256"`
	Data   string `json:"data"`
}

// HistoryPayloadBatch is POST /fleet/history/payloads (a member's fleet token).
type HistoryPayloadBatch struct {
	Payloads []HistoryPayload `json:"payloads"`
}

// HistoryRowBatch is POST /fleet/history/rows (a member's fleet token).
type HistoryRowBatch struct {
	Rows []HistoryRow `json:"rows"`
}

// HistoryAck is the owner's answer to a push: how many it stored.
type HistoryAck struct {
	Stored int `json:"stored"`
}

// HistoryPreview is what a member would send, shown before consent.
type HistoryPreview struct {
	// Rows is every finished VM ledger row; Payloads the activity payloads.
	Rows     int64 `json:"rows"`
	Payloads int64 `json:"payloads"`
	Bytes    int64 `json:"bytes"`
	// Unsent* is what the owner has not acknowledged yet.
	UnsentRows  int64 `json:"unsent_rows"`
	UnsentBytes int64 `json:"unsent_bytes"`
	// Retired is rows the owner refused three times.
	Retired int64 `json:"retired"`
	// NeverSent says what never leaves this central.
	NeverSent []string `json:"never_sent"`
}

// HistoryRetired is a row left out after the owner refused it three times.
type HistoryRetired struct {
	Row    string `json:"row"`
	VM     string `json:"vm"`
	Reason string `json:"reason"`
}

// HistorySyncStatus is where a member's history push stands.
type HistorySyncStatus struct {
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Consent bool   `json:"consent"`
	// Owner is the owner central's URL ("": in no fleet).
	Owner     string           `json:"owner,omitempty"`
	LastDrain *time.Time       `json:"last_drain,omitempty"`
	Acked     int64            `json:"acked"`
	Retired   []HistoryRetired `json:"retired"`
	Preview   *HistoryPreview  `json:"preview,omitempty"`
}

// HistoryConsentRequest is POST /fleet/history/sync/consent.
type HistoryConsentRequest struct {
	Enabled bool `json:"enabled"`
}

// HistoryEntry is a row as the owner keeps it.
type HistoryEntry struct {
	HistoryRow
	// Member is the member central's name; MemberID its id.
	Member   string `json:"member"`
	MemberID string `json:"member_id"`
	// ReceivedAt is when the row first arrived; Pushes how many times it did
	// (a resent row replaces the one stored).
	ReceivedAt time.Time `json:"received_at"`
	Pushes     int64     `json:"pushes"`
}

// HistoryTotals are counted over what the filters leave.
type HistoryTotals struct {
	Rows      int64            `json:"rows"`
	VMSeconds int64            `json:"vm_seconds"`
	ByMember  map[string]int64 `json:"by_member"`
	ByTenant  map[string]int64 `json:"by_tenant"`
}

// HistoryList is GET /fleet/history (the owner's operator).
type HistoryList struct {
	Rows   []HistoryEntry `json:"rows"`
	Totals HistoryTotals  `json:"totals"`
}

// HistoryFilter narrows GET /fleet/history.
type HistoryFilter struct {
	Member string
	Tenant string
	// From and To bound the rows' end (zero: open).
	From, To time.Time
	Limit    int
}

// PushHistoryPayloads uploads payloads to the owner (fleet token).
func (f *FleetClient) PushHistoryPayloads(ctx context.Context, b HistoryPayloadBatch) (*HistoryAck, error) {
	var out HistoryAck
	return &out, f.c.call(ctx, http.MethodPost, "/fleet/history/payloads", nil, b, &out)
}

// PushHistoryRows sends rows to the owner (fleet token).
func (f *FleetClient) PushHistoryRows(ctx context.Context, b HistoryRowBatch) (*HistoryAck, error) {
	var out HistoryAck
	return &out, f.c.call(ctx, http.MethodPost, "/fleet/history/rows", nil, b, &out)
}

// HistorySync reads where this central's history push stands.
func (f *FleetClient) HistorySync(ctx context.Context) (*HistorySyncStatus, error) {
	var out HistorySyncStatus
	return &out, f.c.call(ctx, http.MethodGet, "/fleet/history/sync", nil, nil, &out)
}

// HistoryPreview shows what the push would send.
func (f *FleetClient) HistoryPreview(ctx context.Context) (*HistoryPreview, error) {
	var out HistoryPreview
	return &out, f.c.call(ctx, http.MethodGet, "/fleet/history/sync/preview", nil, nil, &out)
}

// SetHistoryConsent turns the push on or off.
func (f *FleetClient) SetHistoryConsent(ctx context.Context, enabled bool) (*HistorySyncStatus, error) {
	var out HistorySyncStatus
	return &out, f.c.call(ctx, http.MethodPost, "/fleet/history/sync/consent", nil, HistoryConsentRequest{Enabled: enabled}, &out)
}

// DrainHistory pushes now (409 without consent).
func (f *FleetClient) DrainHistory(ctx context.Context) (*HistorySyncStatus, error) {
	var out HistorySyncStatus
	return &out, f.c.call(ctx, http.MethodPost, "/fleet/history/sync", nil, nil, &out)
}

// History lists the rows members pushed to this owner.
func (f *FleetClient) History(ctx context.Context, q HistoryFilter) (*HistoryList, error) {
	v := url.Values{}
	if q.Member != "" {
		v.Set("member", q.Member)
	}
	if q.Tenant != "" {
		v.Set("tenant", q.Tenant)
	}
	if !q.From.IsZero() {
		v.Set("from", q.From.UTC().Format(time.RFC3339))
	}
	if !q.To.IsZero() {
		v.Set("to", q.To.UTC().Format(time.RFC3339))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var out HistoryList
	return &out, f.c.call(ctx, http.MethodGet, "/fleet/history", v, nil, &out)
}
