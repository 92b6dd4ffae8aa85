package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fluxvm/fluxvm/central/notify"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Notifications (docs/notifications.md). Keys:
//
//	P notify-events/<id>                    sdk.Notification (ids sort by time)
//	P notify-by-tenant/<tenant>/<id>        the same, for a tenant's listing
//	P notify-once/<once key>                the id recorded under that once key
//	P notify-outbox/<id>                    "" while webhooks may still be owed it
//
// A notification, its tenant's copy, its once key and its outbox entry are
// written in one transaction: a once key marks exactly the notification that
// was recorded, on whichever central recorded it.

func (s *Store) eventsPrefix() string               { return s.prefix + "notify-events/" }
func (s *Store) eventOnceKey(k string) string       { return s.prefix + "notify-once/" + k }
func (s *Store) tenantEventsPrefix(t string) string { return s.prefix + "notify-by-tenant/" + t + "/" }
func (s *Store) outboxPrefix() string               { return s.prefix + "notify-outbox/" }
func (s *Store) outboxKey(id string) string         { return s.outboxPrefix() + id }
func (s *Store) eventKey(id string) string          { return s.eventsPrefix() + id }
func (s *Store) tenantEventKey(t, id string) string { return s.tenantEventsPrefix(t) + id }

// Emit records e (notify.Sink), clipped to notify's bounds, and queues it for
// the webhooks. With once set it records it only if nothing was recorded
// under once before, in the same transaction that marks once.
func (s *Store) Emit(ctx context.Context, e notify.Event, once string) (bool, error) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	e.Time = e.Time.UTC()
	// Ids sort by time; of one central's notifications at the same instant
	// (an injected clock), by the order they were made.
	e.ID = fmt.Sprintf("%020d-%08x-%s", e.Time.UnixNano(), uint32(s.emitSeq.Add(1)), newID("ev-"))
	notify.Clip(&e)
	data := mustJSON(&e)
	ops := []clientv3.Op{clientv3.OpPut(s.eventKey(e.ID), data), clientv3.OpPut(s.outboxKey(e.ID), "")}
	if e.Tenant != "" {
		ops = append(ops, clientv3.OpPut(s.tenantEventKey(e.Tenant, e.ID), data))
	}
	txn := s.kv(ctx).Txn(ctx)
	if once != "" {
		ok := s.eventOnceKey(once)
		txn = txn.If(clientv3.Compare(clientv3.CreateRevision(ok), "=", 0)).Then(append(ops, clientv3.OpPut(ok, mustJSON(e.ID)))...)
	} else {
		txn = txn.Then(ops...)
	}
	r, err := txn.Commit()
	if err != nil {
		return false, fmt.Errorf("record notification %s: %w", e.Type, err)
	}
	return r.Succeeded, nil
}

// decodeNotification reads a stored notification; one an older central
// wrote (kind, at, summary) is read into today's fields.
func decodeNotification(kv *mvccpb.KeyValue) (notify.Event, error) {
	var e struct {
		notify.Event
		Kind    string    `json:"kind"`
		At      time.Time `json:"at"`
		Summary string    `json:"summary"`
	}
	if err := json.Unmarshal(kv.Value, &e); err != nil {
		return notify.Event{}, fmt.Errorf("decode %s: %w", kv.Key, err)
	}
	if e.Type == "" {
		e.Type, e.Time, e.Title = e.Kind, e.At, e.Summary
	}
	return e.Event, nil
}

// Events reads every recorded notification in the order they were recorded;
// with tenant set, only that tenant's.
func (s *Store) Events(ctx context.Context, tenant string) ([]notify.Event, error) {
	type recorded struct {
		e   notify.Event
		rev int64
	}
	var rs []recorded
	_, err := s.scan(ctx, s.eventsPrefix(), 0, func(kv *mvccpb.KeyValue) error {
		e, err := decodeNotification(kv)
		if err != nil {
			return err
		}
		if tenant == "" || e.Tenant == tenant {
			rs = append(rs, recorded{e, kv.CreateRevision})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read notifications: %w", err)
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i].rev < rs[j].rev })
	out := make([]notify.Event, len(rs))
	for i := range rs {
		out[i] = rs[i].e
	}
	return out, nil
}

// Notifications reads the newest limit notifications, newest first: every
// one for tenant "", else that tenant's. One read of at most limit keys.
func (s *Store) Notifications(ctx context.Context, tenant string, limit int) ([]notify.Event, error) {
	prefix := s.eventsPrefix()
	if tenant != "" {
		prefix = s.tenantEventsPrefix(tenant)
	}
	r, err := s.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend),
		clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read notifications: %w", err)
	}
	out := make([]notify.Event, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		e, err := decodeNotification(kv)
		if err != nil {
			return nil, fmt.Errorf("read notifications: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Outbox reads up to limit of the oldest notifications that webhooks may
// still be owed.
func (s *Store) Outbox(ctx context.Context, limit int) ([]notify.Event, error) {
	r, err := s.client.Get(ctx, s.outboxPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, fmt.Errorf("read the notification outbox: %w", err)
	}
	out := make([]notify.Event, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		id := strings.TrimPrefix(string(kv.Key), s.outboxPrefix())
		g, err := s.client.Get(ctx, s.eventKey(id))
		if err != nil {
			return nil, fmt.Errorf("read notification %s: %w", id, err)
		}
		if len(g.Kvs) == 0 { // pruned: nothing left to deliver
			if err := s.OutboxDone(ctx, id); err != nil {
				return nil, err
			}
			continue
		}
		e, err := decodeNotification(g.Kvs[0])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// OutboxDone takes a notification out of the outbox: every webhook owed it
// has had it (or has given up on it).
func (s *Store) OutboxDone(ctx context.Context, id string) error {
	if _, err := s.kv(ctx).Delete(ctx, s.outboxKey(id)); err != nil {
		return fmt.Errorf("finish notification %s: %w", id, err)
	}
	return nil
}

// NotificationRetention is how long notifications are kept (docs/notifications.md).
const NotificationRetention = 90 * 24 * time.Hour

// PruneNotifications deletes the notifications made before cut, with their
// tenants' copies, once keys, outbox entries and the webhooks' done marks of
// them, and returns how many notifications it deleted. Ids begin with their
// time, so each kind of key is a range below the cut's id; once keys are
// judged by the id they hold. The leader runs it now and then.
func (s *Store) PruneNotifications(ctx context.Context, cut time.Time) (int, error) {
	below := fmt.Sprintf("%020d", cut.UTC().UnixNano())
	r, err := s.kv(ctx).Delete(ctx, s.eventsPrefix(), clientv3.WithRange(s.eventsPrefix()+below))
	if err != nil {
		return 0, fmt.Errorf("prune notifications: %w", err)
	}
	if _, err := s.kv(ctx).Delete(ctx, s.outboxPrefix(), clientv3.WithRange(s.outboxPrefix()+below)); err != nil {
		return 0, fmt.Errorf("prune the notification outbox: %w", err)
	}
	// Per tenant and per webhook: the keys are <prefix><owner>/<id>.
	old := func(prefix string, id func(kv *mvccpb.KeyValue) string) ([]string, error) {
		var keys []string
		_, err := s.scan(ctx, prefix, 0, func(kv *mvccpb.KeyValue) error {
			if v := id(kv); v != "" && v < below {
				keys = append(keys, string(kv.Key))
			}
			return nil
		})
		return keys, err
	}
	afterSlash := func(prefix string) func(kv *mvccpb.KeyValue) string {
		return func(kv *mvccpb.KeyValue) string {
			_, id, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), prefix), "/")
			return id
		}
	}
	var doomed []string
	for _, q := range []struct {
		prefix string
		id     func(kv *mvccpb.KeyValue) string
	}{
		{s.prefix + "notify-by-tenant/", afterSlash(s.prefix + "notify-by-tenant/")},
		{s.prefix + "webhook-done/", afterSlash(s.prefix + "webhook-done/")},
		{s.prefix + "notify-once/", func(kv *mvccpb.KeyValue) string {
			var id string
			if json.Unmarshal(kv.Value, &id) != nil {
				return string(kv.Value) // an older central's bare id
			}
			return id
		}},
	} {
		keys, err := old(q.prefix, q.id)
		if err != nil {
			return 0, fmt.Errorf("prune notifications: %w", err)
		}
		doomed = append(doomed, keys...)
	}
	for len(doomed) > 0 {
		n := min(len(doomed), 100)
		ops := make([]clientv3.Op, n)
		for i, k := range doomed[:n] {
			ops[i] = clientv3.OpDelete(k)
		}
		if _, err := s.kv(ctx).Txn(ctx).Then(ops...).Commit(); err != nil {
			return 0, fmt.Errorf("prune notifications: %w", err)
		}
		doomed = doomed[n:]
	}
	return int(r.Deleted), nil
}
