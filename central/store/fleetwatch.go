package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// What placement watches (docs/design/015-watched-placement.md)
//
// Central decides placements on a view it keeps in memory (central/placement) instead of
// reading the fleet for every create. The view is built from LoadFleet and kept current by
// WatchFleet: node records, node and tenant usage counters, node and tenant reservations,
// and tenant records. Every key of those lies in one key range (nodes/ up to usage/, see the
// layout in crud.go), so ONE etcd watch delivers them all in revision order, and the view is
// always the state of the store at one revision: a counter and the reservations written in
// the same transaction appear together or not at all. Reserve then commits on what the view
// saw (ReserveRequest.Seen) with one transaction comparing only the revisions of the keys the
// decision rests on; see reserve.go for why that is enough.

// FleetKind says which record a FleetChange is about.
type FleetKind int

// The records placement watches.
const (
	FleetNode              FleetKind = iota + 1 // nodes/<name>
	FleetNodeUsage                              // usage/node/<name>
	FleetNodeReservation                        // reservations/node/<name>/<id>
	FleetTenant                                 // tenants/<id>
	FleetTenantUsage                            // usage/tenant/<id>
	FleetTenantReservation                      // reservations/tenant/<id>/<id>
)

// FleetChange is one watched key as of ModRev: written (with its decoded value) or deleted.
type FleetChange struct {
	Kind FleetKind
	// Name is the node's name or the tenant's id; ID a reservation's id.
	Name, ID string
	Deleted  bool
	ModRev   int64
	// Node or Tenant: the record (FleetNode, FleetTenant).
	Node   *Node
	Tenant *Tenant
	// Usage is a counter's running usage (and Gen its generation), or a
	// reservation's size.
	Usage Usage
	Gen   int64
}

// fleetRange is the key range holding every watched key: from nodes/ to just past usage/.
func (s *Store) fleetRange() (from, end string) {
	return s.prefix + "nodes/", s.prefix + "usage0" // '0' sorts right after '/'
}

// fleetChange decodes a key of the fleet range; ok is false for a key placement does not
// watch (the range holds others, such as running/ and tenant-names/).
func (s *Store) fleetChange(kv *mvccpb.KeyValue, deleted bool) (c FleetChange, ok bool, err error) {
	rest, found := strings.CutPrefix(string(kv.Key), s.prefix)
	if !found {
		return c, false, nil
	}
	c.Deleted, c.ModRev = deleted, kv.ModRevision
	split := func(p string) (string, string, bool) {
		r, ok := strings.CutPrefix(rest, p)
		if !ok {
			return "", "", false
		}
		a, b, two := strings.Cut(r, "/")
		return a, b, two == (p == "reservations/node/" || p == "reservations/tenant/")
	}
	for _, w := range []struct {
		prefix string
		kind   FleetKind
	}{{"nodes/", FleetNode}, {"usage/node/", FleetNodeUsage}, {"reservations/node/", FleetNodeReservation},
		{"tenants/", FleetTenant}, {"usage/tenant/", FleetTenantUsage}, {"reservations/tenant/", FleetTenantReservation}} {
		name, id, match := split(w.prefix)
		if !match || name == "" {
			continue
		}
		c.Kind, c.Name, c.ID = w.kind, name, id
		if deleted {
			return c, true, nil
		}
		switch w.kind {
		case FleetNode:
			c.Node = new(Node)
			_, err = decodeOne([]*mvccpb.KeyValue{kv}, c.Node)
		case FleetTenant:
			c.Tenant = new(Tenant)
			_, err = decodeOne([]*mvccpb.KeyValue{kv}, c.Tenant)
		case FleetNodeUsage, FleetTenantUsage:
			var ct counter
			_, err = decodeOne([]*mvccpb.KeyValue{kv}, &ct)
			c.Usage, c.Gen = ct.Usage, ct.Gen
		default:
			var r Reservation
			if err = json.Unmarshal(kv.Value, &r); err == nil {
				c.Usage = r.usage()
			}
		}
		if err != nil {
			return c, false, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		return c, true, nil
	}
	return c, false, nil
}

// LoadFleet reads every key placement watches, at one revision, which it returns.
func (s *Store) LoadFleet(ctx context.Context) ([]FleetChange, int64, error) {
	from, end := s.fleetRange()
	var out []FleetChange
	var rev int64
	err := s.retryTransient(ctx, "load the fleet", func() error {
		out, rev = out[:0], 0
		// Pages, each at the first page's revision, so the whole is one state.
		key := from
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(2000)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			r, err := s.client.Get(ctx, key, opts...)
			if err != nil {
				return err
			}
			if rev == 0 {
				rev = r.Header.Revision
			}
			for _, kv := range r.Kvs {
				c, ok, err := s.fleetChange(kv, false)
				if err != nil {
					return err
				}
				if ok {
					out = append(out, c)
				}
			}
			if !r.More || len(r.Kvs) == 0 {
				return nil
			}
			key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
		}
	})
	if err != nil {
		return nil, 0, fmt.Errorf("load the fleet: %w", err)
	}
	return out, rev, nil
}

// Context ends when the store closes: the lifetime of what watches it.
func (s *Store) Context() context.Context { return s.client.Ctx() }

// ErrWatchLost is a fleet watch that etcd ended (its revision was compacted, or the
// connection was lost past what the client retries): the watcher loads the fleet again.
var ErrWatchLost = errors.New("the fleet watch was lost")

// WatchFleet calls apply with the changes after revision rev, in revision order, each call
// holding whole transactions, and with the revision the view is then current to (at least the
// last change's). It returns when ctx ends (ctx's error) or the watch is lost (ErrWatchLost).
// Progress notifications advance the revision without changes, so a waiter on the view's
// revision is not kept waiting by a quiet fleet. skip, when set, names the revisions whose
// changes the caller already holds (transactions it committed and applied itself): their
// events are neither decoded nor passed on.
func (s *Store) WatchFleet(ctx context.Context, rev int64, apply func(rev int64, changes []FleetChange),
	skip func(rev int64) bool) error {
	from, end := s.fleetRange()
	ctx, cancel := context.WithCancel(fleetStream(ctx))
	defer cancel()
	wch := s.client.Watch(ctx, from, clientv3.WithRange(end), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for resp := range wch {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrWatchLost, err)
		}
		// Only a progress notification vouches for its header's revision (every event up
		// to it was sent); any other answer is current to its last event.
		var at int64
		switch {
		case len(resp.Events) > 0:
			at = resp.Events[len(resp.Events)-1].Kv.ModRevision
		case resp.IsProgressNotify():
			at = resp.Header.Revision
		default:
			continue
		}
		var cs []FleetChange
		for _, ev := range resp.Events {
			if skip != nil && skip(ev.Kv.ModRevision) {
				continue
			}
			c, ok, err := s.fleetChange(ev.Kv, ev.Type == clientv3.EventTypeDelete)
			if err != nil {
				// A record that does not decode is not placed on; the view
				// drops it as if deleted rather than stop watching.
				s.log.Warn("fleet watch: undecodable record", "key", string(ev.Kv.Key), "error", err)
				c.Deleted, ok = true, true
			}
			if ok {
				cs = append(cs, c)
			}
		}
		apply(at, cs)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ErrWatchLost
}

// fleetStream puts the fleet watch on a gRPC stream of its own (the client groups watches
// by their context's metadata), so that asking for progress (FleetProgress) reaches it and
// only it, and requires the watch to be served by a member with a leader.
func fleetStream(ctx context.Context) context.Context {
	return clientv3.WithRequireLeader(metadata.AppendToOutgoingContext(ctx, "fluxvm-watch", "fleet"))
}

// FleetNow is the store's current revision (a linearizable read of one key): a view that
// has applied changes up to it holds every write that had committed when FleetNow was asked.
func (s *Store) FleetNow(ctx context.Context) (int64, error) {
	var rev int64
	err := s.retryTransient(ctx, "read the revision", func() error {
		r, err := s.client.Get(ctx, s.prefix+"probe", clientv3.WithCountOnly())
		if err == nil {
			rev = r.Header.Revision
		}
		return err
	})
	return rev, err
}

// FleetProgress asks etcd to tell the fleet watch the revision it is current to, so a view
// waiting for a revision on a quiet fleet gets there without a change.
func (s *Store) FleetProgress(ctx context.Context) error {
	return s.client.RequestProgress(fleetStream(ctx))
}

// Wrote holds the etcd revisions of this process's latest writes of a node's and a tenant's
// usage counters (0: none). A watched view that has not reached them would decide on a
// counter this process already changed and lose the compare, so it waits for them first
// (ReserveRequest.Seen).
type Wrote struct{ Node, Tenant int64 }

// wroteCounter is a usage counter as this process last wrote it: the value and the
// revision of the write.
type wroteCounter struct {
	rev int64
	c   counter
}

// usageWrote is what this process last wrote of the node's and tenant's counters.
func (s *Store) usageWrote(node, tenant string) Wrote {
	var w Wrote
	if v, ok := s.usageRevs.Load(s.usageNodeKey(node)); ok {
		w.Node = v.(wroteCounter).rev
	}
	if tenant != "" {
		if v, ok := s.usageRevs.Load(s.usageTenantKey(tenant)); ok {
			w.Tenant = v.(wroteCounter).rev
		}
	}
	return w
}

// lastWritten is the value this process last wrote to the counter at key, and the
// revision of that write (ok false: none). It is the counter's value now only if the
// counter's ModRevision is still rev: a write that relies on it compares that.
func (s *Store) lastWritten(key string) (c counter, rev int64, ok bool) {
	v, ok := s.usageRevs.Load(key)
	if !ok {
		return counter{}, 0, false
	}
	w := v.(wroteCounter)
	return w.c, w.rev, true
}

// noteUsageWrite records a successful write, at rev, of the node's counter as nc and the
// tenant's as tc (none without a tenant). Callers hold both counters' locks (locks.go), so
// no other writer of this process races it.
func (s *Store) noteUsageWrite(rev int64, node string, nc counter, tenant string, tc counter) {
	s.usageRevs.Store(s.usageNodeKey(node), wroteCounter{rev, nc})
	if tenant != "" {
		s.usageRevs.Store(s.usageTenantKey(tenant), wroteCounter{rev, tc})
	}
}
