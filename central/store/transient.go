package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// When an etcd member goes away
//
// On a cluster, a request in flight on a member that dies, or sent while the members elect
// a new raft leader, fails with codes.Unavailable ("connection reset", "leader changed",
// "request timed out"). etcd's client repeats reads (Range) by itself but not transactions,
// and a write that failed so may or may not have been applied. The writes a create and a
// delete make (Reserve, Commit, RecordEntry, Release, EndEntry, MarkDeleted) are therefore
// written to be repeated after such an error, and are, for up to TransientBudget:
//
//   - Reserve keeps its reservation's id across tries, and a try that finds its own
//     reservation already there is done: an applied write is never applied twice, and none
//     is left behind holding room.
//   - Commit and RecordEntry write an entry whose id is the VM's own (EntryID) on condition
//     that it is absent, so a repeat of one that was applied finds it there: recorded.
//   - Release and MarkDeleted's mark are deletes and puts of fixed keys; EndEntry reads the
//     entry afresh every try and finds it ended.
//
// So a member killed in the middle of a burst of creates costs them a pause, never a VM
// without its entry (which would escape its tenant's quota) or room held for nothing.

// TransientBudget is how long the create and delete path's writes keep trying through
// errors of an etcd member going away: longer than a raft election (1 s by default) and
// the client's move to another member.
const TransientBudget = 15 * time.Second

// transient reports whether err is etcd (or the connection to it) being unavailable for a
// moment: a member gone, no raft leader, a leader change, a request that timed out.
func transient(err error) bool {
	if err == nil {
		return false
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable
	}
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable
}

// transientPause waits before the next try through transient errors: 50 ms, doubling to
// 1 s, jittered. It reports false once the budget from began is spent or ctx ends.
func transientPause(ctx context.Context, began time.Time, tries int) bool {
	if time.Since(began) > TransientBudget {
		return false
	}
	d := min(50*time.Millisecond<<min(tries, 5), time.Second)
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)))
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// retryTransient runs op until it succeeds, fails otherwise, or transient errors have gone
// on for TransientBudget. op must be safe to repeat after a failure that may have been
// applied.
func (s *Store) retryTransient(ctx context.Context, what string, op func() error) error {
	began := time.Now()
	for tries := 0; ; tries++ {
		err := op()
		if !transient(err) {
			return err
		}
		if !transientPause(ctx, began, tries) {
			return err
		}
		s.log.Debug("etcd unavailable; trying again", "op", what, "error", err)
	}
}

// repeatLoop is casLoop for the writes described above: an attempt that fails with a
// transient error is tried again after a pause (told afterPause, so it reads afresh), for
// up to TransientBudget, without counting against the compare retries.
func (s *Store) repeatLoop(ctx context.Context, what string, attempt func(afterPause bool) (bool, error)) error {
	began := time.Now()
	transients := 0
	return s.casLoop(ctx, what, func(afterPause bool) (bool, error) {
		for {
			done, err := attempt(afterPause)
			if !transient(err) {
				return done, err
			}
			if !transientPause(ctx, began, transients) {
				return false, fmt.Errorf("%s: %w", what, err)
			}
			transients++
			afterPause = true
			s.log.Debug("etcd unavailable; trying again", "op", what, "error", err)
		}
	})
}
