package store

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Webhooks (docs/notifications.md). Keys:
//
//	P webhooks/<owner>/<id>             Webhook (owner: a tenant id, or "_operator")
//	P webhook-ids/<id>                  owner (lookup by id)
//	P webhook-done/<id>/<notification>  the delivery's id, once the notification was
//	                                    delivered to the webhook or given up on
//
// The limit per owner is checked in the creating transaction, and a delivery's
// record and its done mark are written together, so the leader that takes over
// after a failover does not send again what the last one delivered.

// Bounds of webhooks; schemas/fleet-openapi.yaml gives the same.
const (
	MaxWebhooksPerOwner = 10
	KeepDeliveries      = 20
)

// operatorOwner is the owner segment of the operator's webhooks (no tenant id
// may be it: tenant ids are valid names).
const operatorOwner = "_operator"

// Webhook is a webhook as the store keeps it: what the API shows and the
// signing secret, which no answer carries after the creating one.
type Webhook struct {
	sdk.Webhook
	Secret string `json:"secret"`
}

func owner(tenant string) string {
	if tenant == "" {
		return operatorOwner
	}
	return tenant
}

func (s *Store) webhookPrefix(tenant string) string {
	return s.prefix + "webhooks/" + owner(tenant) + "/"
}
func (s *Store) webhooksPrefix() string              { return s.prefix + "webhooks/" }
func (s *Store) webhookKey(tenant, id string) string { return s.webhookPrefix(tenant) + id }
func (s *Store) webhookIDKey(id string) string       { return s.prefix + "webhook-ids/" + id }
func (s *Store) webhookDoneKey(id, notification string) string {
	return s.prefix + "webhook-done/" + id + "/" + notification
}

// CreateWebhook stores w, in one transaction that checks its tenant exists
// (for a tenant's), its id is free and its owner has fewer than
// MaxWebhooksPerOwner. Errors: ErrNotFound, ErrExists, *QuotaError with
// Field "webhooks".
func (s *Store) CreateWebhook(ctx context.Context, w *Webhook) error {
	if !ValidName(w.ID) || w.Secret == "" {
		return fmt.Errorf("%w: webhook id %q or secret", ErrInvalid, w.ID)
	}
	what := "create webhook " + w.ID
	prefix, key, idKey := s.webhookPrefix(w.Tenant), s.webhookKey(w.Tenant, w.ID), s.webhookIDKey(w.ID)
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		ops := []clientv3.Op{clientv3.OpGet(prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()), clientv3.OpGet(idKey, clientv3.WithCountOnly())}
		if w.Tenant != "" {
			ops = append(ops, clientv3.OpGet(s.tenantKey(w.Tenant), clientv3.WithKeysOnly()))
		}
		r, err := s.kv(ctx).Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		n := r.Responses[0].GetResponseRange().Count
		switch {
		case r.Responses[1].GetResponseRange().Count > 0:
			return false, fmt.Errorf("%s: %w", what, ErrExists)
		case n >= MaxWebhooksPerOwner:
			return false, fmt.Errorf("%s: %w", what, &QuotaError{Field: "webhooks", Limit: MaxWebhooksPerOwner, Used: n, Asked: 1})
		}
		keys := []readKey{{idKey, 0}, {key, 0}}
		if w.Tenant != "" {
			tkvs := r.Responses[2].GetResponseRange().Kvs
			if len(tkvs) == 0 {
				return false, fmt.Errorf("%s: tenant %s: %w", what, w.Tenant, ErrNotFound)
			}
			keys = append(keys, readKey{s.tenantKey(w.Tenant), tkvs[0].ModRevision})
		}
		c, err := s.kv(ctx).Txn(ctx).If(unchanged(r.Header.Revision, keys, prefix)...).
			Then(clientv3.OpPut(key, mustJSON(w)), clientv3.OpPut(idKey, owner(w.Tenant))).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return c.Succeeded, nil
	})
}

// ListWebhooks reads the webhooks of tenant ("" the operator's), oldest first.
func (s *Store) ListWebhooks(ctx context.Context, tenant string) ([]Webhook, error) {
	ws, err := listJSON[Webhook](ctx, s, s.webhookPrefix(tenant))
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	sort.SliceStable(ws, func(i, j int) bool { return ws[i].CreatedAt.Before(ws[j].CreatedAt) })
	return ws, nil
}

// AllWebhooks reads every owner's webhooks (the dispatcher's view).
func (s *Store) AllWebhooks(ctx context.Context) ([]Webhook, error) {
	ws, err := listJSON[Webhook](ctx, s, s.webhooksPrefix())
	if err != nil {
		return nil, fmt.Errorf("list webhooks: %w", err)
	}
	return ws, nil
}

// GetWebhook reads webhook id of tenant ("" the operator): another owner's
// is ErrNotFound.
func (s *Store) GetWebhook(ctx context.Context, tenant, id string) (*Webhook, error) {
	if !ValidName(id) {
		return nil, fmt.Errorf("get webhook: %w", ErrNotFound)
	}
	w, _, err := getJSON[Webhook](ctx, s, s.webhookKey(tenant, id))
	if err != nil {
		return nil, fmt.Errorf("get webhook %s: %w", id, err)
	}
	return w, nil
}

// DeleteWebhook removes webhook id of tenant ("" the operator), with its
// index and its done marks.
func (s *Store) DeleteWebhook(ctx context.Context, tenant, id string) error {
	if !ValidName(id) {
		return fmt.Errorf("delete webhook: %w", ErrNotFound)
	}
	key := s.webhookKey(tenant, id)
	r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), ">", 0)).Then(
		clientv3.OpDelete(key), clientv3.OpDelete(s.webhookIDKey(id)), clientv3.OpDelete(s.webhookDoneKey(id, ""), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return fmt.Errorf("delete webhook %s: %w", id, err)
	}
	if !r.Succeeded {
		return fmt.Errorf("delete webhook %s: %w", id, ErrNotFound)
	}
	return nil
}

// WebhookDone reports whether notification was delivered to webhook id (or
// given up on) already.
func (s *Store) WebhookDone(ctx context.Context, id, notification string) (bool, error) {
	r, err := s.client.Get(ctx, s.webhookDoneKey(id, notification), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("read delivery of %s to webhook %s: %w", notification, id, err)
	}
	return r.Count > 0, nil
}

// RecordDelivery puts d first in the webhook's deliveries (keeping the last
// KeepDeliveries) and, when done, marks its notification delivered to the
// webhook, in one transaction. A webhook deleted meanwhile is ErrNotFound.
func (s *Store) RecordDelivery(ctx context.Context, tenant, id string, d sdk.WebhookDelivery, done bool) error {
	key := s.webhookKey(tenant, id)
	what := "record a delivery to webhook " + id
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		w, rev, err := getJSON[Webhook](ctx, s, key)
		if errors.Is(err, ErrNotFound) {
			return false, fmt.Errorf("%s: %w", what, ErrNotFound)
		}
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		ds := append([]sdk.WebhookDelivery{d}, w.Deliveries...)
		w.Deliveries = ds[:min(len(ds), KeepDeliveries)]
		ops := []clientv3.Op{clientv3.OpPut(key, mustJSON(w))}
		if done && d.Notification != "" {
			ops = append(ops, clientv3.OpPut(s.webhookDoneKey(id, d.Notification), d.ID))
		}
		r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return r.Succeeded, nil
	})
}
