package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Tenant subnet indexes (docs/networks.md). A tenant's network on every node is
// <tenant_subnet_prefix>.<n>.0/24; n is assigned here once per tenant, in etcd, and kept.
// Keys, next to those in crud.go:
//
//	P tenant-subnets/<tenant>                n: the tenant's subnet index (JSON number)
//	P subnet-indexes/<n>                     the tenant id holding n (JSON string)
//
// Deleting a tenant does not touch these keys: an index whose tenant record is gone is
// free, and the next assignment that takes it removes the dead tenant's keys in the same
// transaction. So a tenant never holds two indexes, and an index never two tenants.

// MaxTenantSubnets is how many tenants can hold a subnet index: n is one octet.
const MaxTenantSubnets = 256

// ErrNoSubnet: every tenant subnet index is held by a live tenant.
var ErrNoSubnet = errors.New("no free tenant subnet index")

func (s *Store) tenantSubnetKey(tenant string) string { return s.prefix + "tenant-subnets/" + tenant }
func (s *Store) subnetIndexPrefix() string            { return s.prefix + "subnet-indexes/" }
func (s *Store) subnetIndexKey(n int) string          { return s.subnetIndexPrefix() + strconv.Itoa(n) }

// TenantSubnetIndex returns the tenant's subnet index, assigning the lowest free one
// (0 to 255) on the first call. The assignment is one transaction that compares what it
// read: the tenant exists, has no index yet, and the index is still free (or still held by
// the same deleted tenant), so concurrent calls, on any central, never hand one index to
// two tenants, nor two indexes to one. ErrNotFound for an unknown tenant, ErrNoSubnet when
// all are held.
func (s *Store) TenantSubnetIndex(ctx context.Context, tenant string) (int, error) {
	what := "tenant subnet index of " + tenant
	tk, sk, ip := s.tenantKey(tenant), s.tenantSubnetKey(tenant), s.subnetIndexPrefix()
	n := -1
	err := s.casLoop(ctx, what, func(bool) (bool, error) {
		r, err := s.kv(ctx).Txn(ctx).Then(clientv3.OpGet(tk, clientv3.WithKeysOnly()), clientv3.OpGet(sk),
			clientv3.OpGet(ip, clientv3.WithPrefix()), clientv3.OpGet(s.prefix+"tenants/", clientv3.WithPrefix(), clientv3.WithKeysOnly())).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		tkvs := r.Responses[0].GetResponseRange().Kvs
		if len(tkvs) == 0 {
			return false, fmt.Errorf("%s: tenant %w", what, ErrNotFound)
		}
		if kvs := r.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			if n, err = strconv.Atoi(string(kvs[0].Value)); err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kvs[0].Key, err)
			}
			return true, nil
		}
		live := map[string]bool{}
		for _, kv := range r.Responses[3].GetResponseRange().Kvs {
			live[strings.TrimPrefix(string(kv.Key), s.prefix+"tenants/")] = true
		}
		type holder struct {
			tenant string
			rev    int64
		}
		held := map[int]holder{}
		for _, kv := range r.Responses[2].GetResponseRange().Kvs {
			i, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), ip))
			if err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kv.Key, err)
			}
			var t string
			if err := json.Unmarshal(kv.Value, &t); err != nil {
				return false, fmt.Errorf("%s: decode %s: %w", what, kv.Key, err)
			}
			held[i] = holder{t, kv.ModRevision}
		}
		pick := -1
		for i := range MaxTenantSubnets {
			if h, ok := held[i]; !ok || !live[h.tenant] {
				pick = i
				break
			}
		}
		if pick < 0 {
			return false, fmt.Errorf("%s: %w: all %d are held by tenants", what, ErrNoSubnet, MaxTenantSubnets)
		}
		ik := s.subnetIndexKey(pick)
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(tk), "=", tkvs[0].CreateRevision),
			clientv3.Compare(clientv3.CreateRevision(sk), "=", 0),
		}
		ops := []clientv3.Op{clientv3.OpPut(sk, strconv.Itoa(pick)), clientv3.OpPut(ik, mustJSON(tenant))}
		if h, ok := held[pick]; ok {
			// Reclaimed from a deleted tenant: still held by it, still deleted.
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(ik), "=", h.rev),
				clientv3.Compare(clientv3.CreateRevision(s.tenantKey(h.tenant)), "=", 0))
			ops = append(ops, clientv3.OpDelete(s.tenantSubnetKey(h.tenant)))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ik), "=", 0))
		}
		resp, err := s.kv(ctx).Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if resp.Succeeded {
			n = pick
		}
		return resp.Succeeded, nil
	})
	return n, err
}
