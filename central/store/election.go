package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// Leader is a won election. Run the leader-only loops until Done is closed, then stop them.
type Leader struct {
	store   *Store
	name    string
	session *concurrency.Session
	elect   *concurrency.Election
	once    sync.Once
}

// Campaign blocks until this central leads the election called name (e.g. "loops"), or ctx
// ends. Each campaign has its own session (lease of Options.SessionTTL): when this central
// dies or loses etcd for longer than that, the lease expires and the next candidate in line
// wins. Exactly one campaigner leads at a time (concurrency.Election).
func (s *Store) Campaign(ctx context.Context, name string) (*Leader, error) {
	if err := checkName("election", name); err != nil {
		return nil, err
	}
	sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(s.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("campaign %s: %w", name, err)
	}
	e := concurrency.NewElection(sess, s.electionPrefix(name))
	if err := e.Campaign(ctx, s.id); err != nil {
		sess.Close()
		return nil, fmt.Errorf("campaign %s: %w", name, err)
	}
	l := &Leader{store: s, name: name, session: sess, elect: e}
	s.mu.Lock()
	if s.leaders == nil {
		s.leaders = map[*Leader]struct{}{}
	}
	s.leaders[l] = struct{}{}
	s.mu.Unlock()
	return l, nil
}

func (s *Store) electionPrefix(name string) string { return s.prefix + "election/" + name + "/" }

// Done is closed when leadership is lost: the lease expired or was revoked, or Resign ran.
func (l *Leader) Done() <-chan struct{} { return l.session.Done() }

// Resign gives leadership up at once (the next candidate does not wait for a TTL). Store.Close
// resigns every leadership still held.
func (l *Leader) Resign(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.store.mu.Lock()
		delete(l.store.leaders, l)
		l.store.mu.Unlock()
		err = l.elect.Resign(ctx)
		if cerr := l.session.Close(); err == nil {
			err = cerr
		}
	})
	if err != nil {
		return fmt.Errorf("resign %s: %w", l.name, err)
	}
	return nil
}

// Leader names the central leading the election called name, or ErrNotFound. It reads the
// election's oldest key, as concurrency.Election.Leader does, without needing a session.
func (s *Store) Leader(ctx context.Context, name string) (string, error) {
	resp, err := s.client.Get(ctx, s.electionPrefix(name), clientv3.WithFirstCreate()...)
	if err != nil {
		return "", fmt.Errorf("leader of %s: %w", name, err)
	}
	if len(resp.Kvs) == 0 {
		return "", fmt.Errorf("leader of %s: %w", name, ErrNotFound)
	}
	return string(resp.Kvs[0].Value), nil
}

// A dedicated scheduler (`fluxvm-agent scheduler`) announces itself under schedulers/ with
// its session's lease, so the key goes when the process dies or its lease expires. Centrals
// keep their in-process loops out of the election while one is announced: the loops then run
// in the scheduler, apart from the API.

func (s *Store) schedulerPrefix() string { return s.prefix + "schedulers/" }

// AnnounceScheduler marks this process as a dedicated scheduler for as long as its session
// lives; Close (or the process's death, after the TTL) withdraws it.
func (s *Store) AnnounceScheduler(ctx context.Context) error {
	sess, err := s.Session(ctx)
	if err != nil {
		return fmt.Errorf("announce scheduler: %w", err)
	}
	if _, err := s.kv(ctx).Put(ctx, s.schedulerPrefix()+s.id, s.id, clientv3.WithLease(sess.Lease())); err != nil {
		return fmt.Errorf("announce scheduler: %w", err)
	}
	return nil
}

// Schedulers lists the dedicated schedulers announced now, by ID.
func (s *Store) Schedulers(ctx context.Context) ([]string, error) {
	resp, err := s.client.Get(ctx, s.schedulerPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("list schedulers: %w", err)
	}
	ids := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ids = append(ids, string(kv.Value))
	}
	return ids, nil
}

// WatchSchedulers sends the announced schedulers' IDs at once and after every change, until
// ctx ends. A watch that breaks (etcd unreachable) is taken up again with a fresh read.
func (s *Store) WatchSchedulers(ctx context.Context) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		defer close(out)
		for ctx.Err() == nil {
			resp, err := s.client.Get(ctx, s.schedulerPrefix(), clientv3.WithPrefix())
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
				continue
			}
			ids := make([]string, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				ids = append(ids, string(kv.Value))
			}
			select {
			case out <- ids:
			case <-ctx.Done():
				return
			}
			wch := s.client.Watch(ctx, s.schedulerPrefix(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
			for wr := range wch {
				if wr.Err() != nil {
					break
				}
				if len(wr.Events) == 0 {
					continue
				}
				ids, err := s.Schedulers(ctx)
				if err != nil {
					break
				}
				select {
				case out <- ids:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}
