package store

import (
	"context"
	"fmt"
	"sync"

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
