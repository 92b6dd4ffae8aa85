// Package history carries a member central's finished VM ledger rows to
// its fleet's owner, once the member's operator consented, and keeps them
// on the owner for a retention window. The member side (Pusher) drains in
// acknowledged batches it records in etcd; the owner side (Ingest) stores
// pushes idempotently and lists them with filters and totals.
package history

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultRetention is how long the owner keeps a row after it arrived.
const DefaultRetention = 90 * 24 * time.Hour

// Conditions callers branch on.
var (
	// ErrRefused is a push the owner will not store (400): a batch with an
	// invalid row (the row is not named, the member bisects), or a row
	// naming a payload the owner does not hold (named).
	ErrRefused = errors.New("refused")
	// ErrInvalid is bad input to a query (400).
	ErrInvalid = errors.New("invalid")
	// ErrNoFleet is a member call on a central in no fleet (409).
	ErrNoFleet = errors.New("this central is in no fleet")
	// ErrConsent is a drain before the operator consented (409).
	ErrConsent = errors.New("history push is off")
)

// IngestOptions configure the owner's side.
type IngestOptions struct {
	Store *store.Store
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Retention is how long a row is kept after it arrived (0: DefaultRetention).
	Retention time.Duration
	Logger    hclog.Logger
}

// Ingest is the owner's store of what members pushed.
type Ingest struct {
	kv        clientv3.KV
	prefix    string
	now       func() time.Time
	retention time.Duration
	log       hclog.Logger
}

type storedRow struct {
	Row        sdk.HistoryRow `json:"row"`
	MemberName string         `json:"member_name"`
	ReceivedAt time.Time      `json:"received_at"`
	Pushes     int64          `json:"pushes"`
}

type storedPayload struct {
	Data     []byte    `json:"data"`
	StoredAt time.Time `json:"stored_at"`
}

// NewIngest makes the owner's side.
func NewIngest(opts IngestOptions) *Ingest {
	in := &Ingest{kv: opts.Store.Client(), prefix: opts.Store.Prefix() + "history/ingest/", now: opts.Now,
		retention: opts.Retention, log: opts.Logger}
	if in.now == nil {
		in.now = time.Now
	}
	if in.retention <= 0 {
		in.retention = DefaultRetention
	}
	if in.log == nil {
		in.log = hclog.NewNullLogger()
	}
	return in
}

func (in *Ingest) rowKey(member, id string) string  { return in.prefix + member + "/rows/" + id }
func (in *Ingest) payKey(member, sha string) string { return in.prefix + member + "/payloads/" + sha }
func sum(b []byte) string                           { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }
func isSHA(s string) bool                           { _, err := hex.DecodeString(s); return err == nil && len(s) == 64 }
func within(s string, n int) bool                   { return len(s) <= n && !strings.ContainsAny(s, "\x00\n\r/") }
func (in *Ingest) put(k string, v any) clientv3.Op  { return clientv3.OpPut(k, mustJSON(v)) }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // our own records always encode
	}
	return string(b)
}

// PutPayloads stores payloads a member uploaded, each under its SHA-256,
// which must match its data.
func (in *Ingest) PutPayloads(ctx context.Context, memberID string, ps []sdk.HistoryPayload) (int, error) {
	if len(ps) > sdk.HistoryMaxBatchRows {
		return 0, fmt.Errorf("%w: at most %d payloads a push, not %d", ErrRefused, sdk.HistoryMaxBatchRows, len(ps))
	}
	now := in.now().UTC()
	ops := make([]clientv3.Op, 0, len(ps))
	for i, p := range ps {
		if len(p.Data) > sdk.HistoryMaxPayloadBytes {
			return 0, fmt.Errorf("%w: payload %d is %d bytes, more than %d", ErrRefused, i, len(p.Data), sdk.HistoryMaxPayloadBytes)
		}
		if !isSHA(p.SHA256) || sum([]byte(p.Data)) != p.SHA256 {
			return 0, fmt.Errorf("%w: payload %d: its data does not hash to the SHA-256 it names", ErrRefused, i)
		}
		ops = append(ops, in.put(in.payKey(memberID, p.SHA256), storedPayload{Data: []byte(p.Data), StoredAt: now}))
	}
	if len(ops) > 0 {
		if _, err := in.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			return 0, fmt.Errorf("store payloads: %w", err)
		}
	}
	return len(ops), nil
}

// checkRow is the owner's rule for a row; its error does not name the row,
// so a member finds the bad one by bisection.
func checkRow(r sdk.HistoryRow) error {
	switch {
	case r.ID == "" || !within(r.ID, 128):
		return errors.New("a row's id is empty, longer than 128 characters or holds / or control characters")
	case r.VM == "" || !within(r.VM, 128) || !within(r.Node, 128) || !within(r.Tenant, 128) || !within(r.Image, 256) || !within(r.GuestOS, 32) || !within(r.EndReason, 512):
		return errors.New("a row's vm, node, tenant, image, guest_os or end_reason is empty or too long")
	case r.VCPUs < 0 || r.VCPUs > 1024 || r.MemoryMiB < 0 || r.MemoryMiB > 16<<20:
		return errors.New("a row's vcpus (0-1024) or memory_mib (0-16777216) is out of range")
	case r.StartedAt.IsZero() || r.EndedAt.IsZero() || r.EndedAt.Before(r.StartedAt):
		return errors.New("a row did not finish, or finished before it started: only finished VMs are pushed")
	case r.Activity != "" && !isSHA(r.Activity):
		return errors.New("a row's activity is not a SHA-256")
	}
	return nil
}

// PutRows stores a batch of rows, all or none: a row already held is
// replaced (its push counted), never duplicated. An invalid row refuses the
// batch without naming the row; a row naming a payload the owner does not
// hold refuses it by name.
func (in *Ingest) PutRows(ctx context.Context, memberID, memberName string, rows []sdk.HistoryRow) (int, error) {
	if len(rows) > sdk.HistoryMaxBatchRows {
		return 0, fmt.Errorf("%w: at most %d rows a push, not %d", ErrRefused, sdk.HistoryMaxBatchRows, len(rows))
	}
	for _, r := range rows {
		if err := checkRow(r); err != nil {
			return 0, fmt.Errorf("%w: %v", ErrRefused, err)
		}
	}
	now := in.now().UTC()
	ops := make([]clientv3.Op, 0, len(rows))
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.ID] {
			continue
		}
		seen[r.ID] = true
		if r.Activity != "" {
			g, err := in.kv.Get(ctx, in.payKey(memberID, r.Activity), clientv3.WithCountOnly())
			if err != nil {
				return 0, fmt.Errorf("read payload: %w", err)
			}
			if g.Count == 0 {
				return 0, fmt.Errorf("%w: row %s (vm %s) names payload %s, which this owner does not hold: upload payloads first", ErrRefused, r.ID, r.VM, r.Activity[:12])
			}
		}
		s := storedRow{Row: r, MemberName: memberName, ReceivedAt: now, Pushes: 1}
		g, err := in.kv.Get(ctx, in.rowKey(memberID, r.ID))
		if err != nil {
			return 0, fmt.Errorf("read row: %w", err)
		}
		if len(g.Kvs) > 0 {
			var old storedRow
			if json.Unmarshal(g.Kvs[0].Value, &old) == nil {
				s.ReceivedAt, s.Pushes = old.ReceivedAt, old.Pushes+1
			}
		}
		ops = append(ops, in.put(in.rowKey(memberID, r.ID), s))
	}
	if len(ops) > 0 {
		if _, err := in.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			return 0, fmt.Errorf("store rows: %w", err)
		}
	}
	return len(ops), nil
}

// List is the rows members pushed, newest end first, with totals over
// every row the filter leaves (the page is cut to Limit).
func (in *Ingest) List(ctx context.Context, f sdk.HistoryFilter) (*sdk.HistoryList, error) {
	if f.Limit < 0 || f.Limit > sdk.HistoryMaxListRows {
		return nil, fmt.Errorf("%w: limit is 1 to %d", ErrInvalid, sdk.HistoryMaxListRows)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	g, err := in.kv.Get(ctx, in.prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	out := &sdk.HistoryList{Rows: []sdk.HistoryEntry{}, Totals: sdk.HistoryTotals{ByMember: map[string]int64{}, ByTenant: map[string]int64{}}}
	for _, kv := range g.Kvs {
		member, rest, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), in.prefix), "/")
		if !strings.HasPrefix(rest, "rows/") {
			continue
		}
		var s storedRow
		if err := json.Unmarshal(kv.Value, &s); err != nil {
			continue
		}
		switch {
		case f.Member != "" && f.Member != s.MemberName && f.Member != member,
			f.Tenant != "" && f.Tenant != s.Row.Tenant,
			!f.From.IsZero() && s.Row.EndedAt.Before(f.From),
			!f.To.IsZero() && s.Row.EndedAt.After(f.To):
			continue
		}
		out.Rows = append(out.Rows, sdk.HistoryEntry{HistoryRow: s.Row, Member: s.MemberName, MemberID: member, ReceivedAt: s.ReceivedAt, Pushes: s.Pushes})
		out.Totals.Rows++
		out.Totals.VMSeconds += int64(s.Row.EndedAt.Sub(s.Row.StartedAt) / time.Second)
		out.Totals.ByMember[s.MemberName]++
		out.Totals.ByTenant[s.Row.Tenant]++
	}
	sort.Slice(out.Rows, func(i, j int) bool {
		a, b := out.Rows[i], out.Rows[j]
		if !a.EndedAt.Equal(b.EndedAt) {
			return a.EndedAt.After(b.EndedAt)
		}
		return a.MemberID+a.ID < b.MemberID+b.ID
	})
	if len(out.Rows) > f.Limit {
		out.Rows = out.Rows[:f.Limit]
	}
	return out, nil
}

// Payload reads a payload a member pushed.
func (in *Ingest) Payload(ctx context.Context, memberID, sha string) ([]byte, error) {
	g, err := in.kv.Get(ctx, in.payKey(memberID, sha))
	if err != nil {
		return nil, fmt.Errorf("read payload: %w", err)
	}
	if len(g.Kvs) == 0 {
		return nil, fmt.Errorf("%w: no payload %s", ErrInvalid, sha)
	}
	var p storedPayload
	if err := json.Unmarshal(g.Kvs[0].Value, &p); err != nil {
		return nil, fmt.Errorf("decode payload: %w", err)
	}
	return p.Data, nil
}

// Reclaim drops rows that arrived longer than the retention window ago,
// then every payload no remaining row names that is itself older than the
// window (a payload uploaded just before its row is never taken). It
// returns how many rows and payloads went.
func (in *Ingest) Reclaim(ctx context.Context) (rows, payloads int, err error) {
	cut := in.now().UTC().Add(-in.retention)
	g, err := in.kv.Get(ctx, in.prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, 0, fmt.Errorf("read history: %w", err)
	}
	named := map[string]bool{}
	var drop []string
	type pay struct {
		key string
		at  time.Time
	}
	var pays []pay
	for _, kv := range g.Kvs {
		k := string(kv.Key)
		member, rest, _ := strings.Cut(strings.TrimPrefix(k, in.prefix), "/")
		if sha, ok := strings.CutPrefix(rest, "payloads/"); ok {
			var p storedPayload
			_ = json.Unmarshal(kv.Value, &p)
			pays = append(pays, pay{k, p.StoredAt})
			_ = sha
			continue
		}
		var s storedRow
		if json.Unmarshal(kv.Value, &s) != nil {
			continue
		}
		if s.ReceivedAt.Before(cut) {
			drop = append(drop, k)
			rows++
			continue
		}
		if s.Row.Activity != "" {
			named[in.payKey(member, s.Row.Activity)] = true
		}
	}
	for _, p := range pays {
		if !named[p.key] && p.at.Before(cut) {
			drop = append(drop, p.key)
			payloads++
		}
	}
	for len(drop) > 0 {
		n := min(len(drop), 100)
		ops := make([]clientv3.Op, 0, n)
		for _, k := range drop[:n] {
			ops = append(ops, clientv3.OpDelete(k))
		}
		if _, err := in.kv.Txn(ctx).Then(ops...).Commit(); err != nil {
			return 0, 0, fmt.Errorf("drop old history: %w", err)
		}
		drop = drop[n:]
	}
	if rows+payloads > 0 {
		in.log.Info("dropped history past retention", "rows", rows, "payloads", payloads)
	}
	return rows, payloads, nil
}
