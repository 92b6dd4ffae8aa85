package store

import (
	"context"
	"sync"
)

// keyedLocks queue this central's own writers of one usage counter, so that 200 concurrent
// creates for one tenant in one process wait their turn here instead of each sending a
// transaction that is bound to lose its compare (a lost compare still costs a raft round and
// an fsync). They are an optimisation only: correctness comes from the etcd transaction, and
// writers in other centrals still race through it.
//
// Lock order: a tenant's counter, then a node's. Every caller takes at most one of each, in
// that order, so no cycle can form.
type keyedLocks struct {
	mu       sync.Mutex
	m        map[string]*keyLock
	disabled bool // tests turn the queue off to race the transactions alone
}

type keyLock struct {
	ch   chan struct{} // holds one token while locked
	refs int
}

// lock waits for key (or ctx) and returns the unlock function.
func (k *keyedLocks) lock(ctx context.Context, key string) (func(), error) {
	if k.disabled {
		return func() {}, nil
	}
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyLock{}
	}
	l := k.m[key]
	if l == nil {
		l = &keyLock{ch: make(chan struct{}, 1)}
		k.m[key] = l
	}
	l.refs++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// lockCounters takes this process's locks for the tenant's (if any) and the node's counters.
func (s *Store) lockCounters(ctx context.Context, tenant, node string) (func(), error) {
	var unlockTenant func()
	if tenant != "" {
		u, err := s.locks.lock(ctx, "tenant/"+tenant)
		if err != nil {
			return nil, err
		}
		unlockTenant = u
	}
	unlockNode, err := s.locks.lock(ctx, "node/"+node)
	if err != nil {
		if unlockTenant != nil {
			unlockTenant()
		}
		return nil, err
	}
	return func() {
		unlockNode()
		if unlockTenant != nil {
			unlockTenant()
		}
	}, nil
}
