package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/fluxvm/fluxvm/sdk"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Stripe invoices and billing accounts (docs/billing.md, "Stripe invoices"). Keys:
//
//	P billing-accounts/<tenant>        sdk.BillingAccount (the tenant's Stripe customer)
//	P invoices/<tenant>/<month>        sdk.Invoice (at most one per tenant and month)
//	P invoice-stripe/<stripe id>       "<tenant>/<month>" (a webhook finds its invoice)
//	P stripe-events/<event id>         when it was applied (leased: StripeEventKeep)
//
// An invoice's record is claimed before central calls Stripe, in a transaction that
// fails when one exists, so two centrals (or two operators) never both invoice a
// tenant's month. A Stripe event is applied in the transaction that records its id,
// so a replayed event changes nothing.

// StripeEventKeep is how long an applied Stripe event's id is remembered.
// Stripe retries an event for up to three days; a month covers that with room.
const StripeEventKeep = 30 * 24 * time.Hour

func (s *Store) billingAccountKey(tenant string) string {
	return s.prefix + "billing-accounts/" + tenant
}
func (s *Store) invoicesPrefix() string { return s.prefix + "invoices/" }
func (s *Store) invoiceKey(tenant, month string) string {
	return s.invoicesPrefix() + tenant + "/" + month
}
func (s *Store) invoiceStripeKey(id string) string { return s.prefix + "invoice-stripe/" + id }
func (s *Store) stripeEventKey(id string) string   { return s.prefix + "stripe-events/" + id }

// PutBillingAccount stores a tenant's link to its Stripe customer, keeping
// PaymentMethodSaved when the customer stays the same. An unknown tenant is
// ErrNotFound.
func (s *Store) PutBillingAccount(ctx context.Context, a *sdk.BillingAccount) error {
	if !ValidName(a.Tenant) || a.StripeCustomer == "" {
		return fmt.Errorf("%w: billing account of %q needs a tenant and a customer", ErrInvalid, a.Tenant)
	}
	key, tkey := s.billingAccountKey(a.Tenant), s.tenantKey(a.Tenant)
	what := "set the billing account of " + a.Tenant
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(tkey, clientv3.WithKeysOnly())).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		tk := r.Responses[1].GetResponseRange().Kvs
		if len(tk) == 0 {
			return false, fmt.Errorf("%s: tenant: %w", what, ErrNotFound)
		}
		var rev int64
		if kvs := r.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
			rev = kvs[0].ModRevision
			var old sdk.BillingAccount
			if json.Unmarshal(kvs[0].Value, &old) == nil && old.StripeCustomer == a.StripeCustomer {
				a.PaymentMethodSaved = a.PaymentMethodSaved || old.PaymentMethodSaved
			}
		}
		c, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev),
			clientv3.Compare(clientv3.ModRevision(tkey), "=", tk[0].ModRevision)).
			Then(clientv3.OpPut(key, mustJSON(a))).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		return c.Succeeded, nil
	})
}

// GetBillingAccount reads a tenant's billing account (ErrNotFound: none).
func (s *Store) GetBillingAccount(ctx context.Context, tenant string) (*sdk.BillingAccount, error) {
	if !ValidName(tenant) {
		return nil, fmt.Errorf("get billing account: %w", ErrNotFound)
	}
	a, _, err := getJSON[sdk.BillingAccount](ctx, s, s.billingAccountKey(tenant))
	if err != nil {
		return nil, fmt.Errorf("get billing account of %s: %w", tenant, err)
	}
	return a, nil
}

// ClaimInvoice stores inv if its tenant has no invoice for its month yet and
// returns (inv, true); otherwise it returns the invoice already there and
// false, and stores nothing.
func (s *Store) ClaimInvoice(ctx context.Context, inv *sdk.Invoice) (*sdk.Invoice, bool, error) {
	if !ValidName(inv.Tenant) || len(inv.Month) != 7 {
		return nil, false, fmt.Errorf("%w: invoice of %q for %q", ErrInvalid, inv.Tenant, inv.Month)
	}
	key := s.invoiceKey(inv.Tenant, inv.Month)
	r, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, mustJSON(inv))).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return nil, false, fmt.Errorf("claim the invoice of %s for %s: %w", inv.Tenant, inv.Month, err)
	}
	if r.Succeeded {
		return inv, true, nil
	}
	var old sdk.Invoice
	if err := json.Unmarshal(r.Responses[0].GetResponseRange().Kvs[0].Value, &old); err != nil {
		return nil, false, fmt.Errorf("decode the invoice of %s for %s: %w", inv.Tenant, inv.Month, err)
	}
	return &old, false, nil
}

// UpdateInvoice rewrites the invoice of tenant for month with fn, and keeps
// the index from its Stripe invoice id.
func (s *Store) UpdateInvoice(ctx context.Context, tenant, month string, fn func(*sdk.Invoice)) (*sdk.Invoice, error) {
	key := s.invoiceKey(tenant, month)
	what := "update the invoice of " + tenant + " for " + month
	var out *sdk.Invoice
	err := s.casLoop(ctx, what, func(bool) (bool, error) {
		inv, rev, err := getJSON[sdk.Invoice](ctx, s, key)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		fn(inv)
		ops := []clientv3.Op{clientv3.OpPut(key, mustJSON(inv))}
		if inv.StripeInvoiceID != "" {
			ops = append(ops, clientv3.OpPut(s.invoiceStripeKey(inv.StripeInvoiceID), tenant+"/"+month))
		}
		c, err := s.kv(ctx).Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		out = inv
		return c.Succeeded, nil
	})
	return out, err
}

// ListInvoices reads tenant's invoices ("" every tenant's), newest month first.
func (s *Store) ListInvoices(ctx context.Context, tenant string) ([]sdk.Invoice, error) {
	prefix := s.invoicesPrefix()
	if tenant != "" {
		if !ValidName(tenant) {
			return nil, nil
		}
		prefix += tenant + "/"
	}
	out, err := listJSON[sdk.Invoice](ctx, s, prefix)
	if err != nil {
		return nil, fmt.Errorf("list invoices: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Month != out[j].Month {
			return out[i].Month > out[j].Month
		}
		return out[i].Tenant < out[j].Tenant
	})
	return out, nil
}

// ErrEventSeen is ApplyStripeEvent's answer for an event applied before.
var ErrEventSeen = errors.New("stripe event already applied")

// ApplyStripeEvent records Stripe event id and, in the same transaction,
// applies fn to the invoice whose Stripe id is stripeInvoice (none when
// "" or unknown) and to the billing account of customerTenant (none when
// "" or fn's account is nil). A replayed event is ErrEventSeen and
// changes nothing.
func (s *Store) ApplyStripeEvent(ctx context.Context, id, stripeInvoice string, inv func(*sdk.Invoice), accountTenant string, acct func(*sdk.BillingAccount)) error {
	if id == "" || len(id) > 255 {
		return fmt.Errorf("%w: stripe event id", ErrInvalid)
	}
	evKey := s.stripeEventKey(id)
	what := "apply stripe event " + id
	return s.casLoop(ctx, what, func(bool) (bool, error) {
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(evKey), "=", 0)}
		var ops []clientv3.Op
		if stripeInvoice != "" && inv != nil {
			r, err := s.client.Get(ctx, s.invoiceStripeKey(stripeInvoice))
			if err != nil {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			if len(r.Kvs) > 0 {
				key := s.invoicesPrefix() + string(r.Kvs[0].Value)
				x, rev, err := getJSON[sdk.Invoice](ctx, s, key)
				if err != nil && !errors.Is(err, ErrNotFound) {
					return false, fmt.Errorf("%s: %w", what, err)
				}
				if x != nil {
					inv(x)
					cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
					ops = append(ops, clientv3.OpPut(key, mustJSON(x)))
				}
			}
		}
		if accountTenant != "" && acct != nil && ValidName(accountTenant) {
			key := s.billingAccountKey(accountTenant)
			a, rev, err := getJSON[sdk.BillingAccount](ctx, s, key)
			if err != nil && !errors.Is(err, ErrNotFound) {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			if a != nil {
				acct(a)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", rev))
				ops = append(ops, clientv3.OpPut(key, mustJSON(a)))
			}
		}
		grant, err := s.client.Grant(ctx, int64(StripeEventKeep/time.Second))
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		ops = append(ops, clientv3.OpPut(evKey, time.Now().UTC().Format(time.RFC3339), clientv3.WithLease(grant.ID)))
		c, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(evKey, clientv3.WithCountOnly())).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if !c.Succeeded {
			_, _ = s.client.Revoke(ctx, grant.ID)
			if c.Responses[0].GetResponseRange().Count > 0 {
				return false, ErrEventSeen
			}
		}
		return c.Succeeded, nil
	})
}
