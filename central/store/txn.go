package store

import clientv3 "go.etcd.io/etcd/client/v3"

// readKey is one key a decision was read from, with the ModRevision it had (0: absent).
type readKey struct {
	key string
	rev int64
}

// unchanged returns the compares under which a write still stands on what it was decided
// from, as etcd's STM builds them for the keys it read: every key read has the ModRevision
// it had (0 compares as "still absent"), and no key under a prefix read at revision rev was
// written since. A key deleted under such a prefix leaves nothing to compare; the decisions
// that read prefixes (reservations, active leases) only count what is there, so a deletion
// they miss makes them over-count, never admit too much.
func unchanged(rev int64, keys []readKey, prefixes ...string) []clientv3.Cmp {
	cmps := make([]clientv3.Cmp, 0, len(keys)+len(prefixes))
	for _, k := range keys {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k.key), "=", k.rev))
	}
	for _, p := range prefixes {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(p), "<", rev+1).WithPrefix())
	}
	return cmps
}
