package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scanPage bounds one range read of a scan on an etcd without RangeStream, so a large ledger
// never arrives as one response.
const scanPage = 500

// scan calls fn for every key under prefix, all read at one revision (rev 0: the current one),
// and returns that revision. It streams the range (etcd's RangeStream, from 3.7): a paged read
// costs the server a count of every key from the page to the range's end, so n keys read in
// pages of p cost n²/2p key visits, about five minutes for a million ledger rows here. An
// etcd without RangeStream is read in pages all the same. A stream broken by a member going
// away is taken up again from the last key it delivered, at the same revision.
func (s *Store) scan(ctx context.Context, prefix string, rev int64, fn func(kv *mvccpb.KeyValue) error) (int64, error) {
	if rev == 0 {
		r, err := s.client.Get(ctx, s.prefix+"probe")
		if err != nil {
			return 0, err
		}
		rev = r.Header.Revision
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	key := prefix
	for broken := 0; ; broken++ {
		if s.noRangeStream.Load() {
			return rev, s.scanPages(ctx, key, end, rev, fn)
		}
		next, fromStream, err := s.scanStream(ctx, key, end, rev, fn)
		switch {
		case err == nil:
			return rev, nil
		case !fromStream:
			return 0, err // fn's own error
		case status.Code(err) == codes.Unimplemented && next == key:
			s.noRangeStream.Store(true)
		case transient(err) && broken < 5:
			key = next
		default:
			return 0, err
		}
	}
}

// scanStream reads [key, end) at rev as one RangeStream, calling fn for each key. It returns
// the key to go on from should the stream break, and whether err is the stream's (true) or
// fn's (false).
func (s *Store) scanStream(ctx context.Context, key, end string, rev int64, fn func(kv *mvccpb.KeyValue) error) (string, bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := s.client.GetStream(ctx, key, clientv3.WithRange(end), clientv3.WithRev(rev))
	if err != nil {
		return key, true, err
	}
	defer func() {
		cancel()
		for range ch { // let the stream's goroutine finish
		}
	}()
	for r := range ch {
		if err := r.Err(); err != nil {
			return key, true, err
		}
		for _, kv := range r.Kvs {
			if err := fn(kv); err != nil {
				return key, false, err
			}
			key = string(kv.Key) + "\x00"
		}
	}
	return key, true, nil
}

// scanPages is scan on an etcd without RangeStream: range reads of scanPage keys.
func (s *Store) scanPages(ctx context.Context, key, end string, rev int64, fn func(kv *mvccpb.KeyValue) error) error {
	for {
		resp, err := s.client.Get(ctx, key, clientv3.WithRange(end), clientv3.WithLimit(scanPage), clientv3.WithRev(rev))
		if err != nil {
			return err
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return nil
		}
		key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// scanEntries decodes every ledger entry at one revision.
func (s *Store) scanEntries(ctx context.Context, rev int64, fn func(e *LedgerEntry, kv *mvccpb.KeyValue) error) (int64, error) {
	return s.scan(ctx, s.prefix+"ledger/", rev, func(kv *mvccpb.KeyValue) error {
		var e LedgerEntry
		if err := json.Unmarshal(kv.Value, &e); err != nil {
			return fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		return fn(&e, kv)
	})
}

// GetEntry reads one ledger entry.
func (s *Store) GetEntry(ctx context.Context, id string) (*LedgerEntry, error) {
	e, _, err := getJSON[LedgerEntry](ctx, s, s.ledgerKey(id))
	if err != nil {
		return nil, fmt.Errorf("get ledger entry %s: %w", id, err)
	}
	return e, nil
}

// RunningVM reads the running entry of the VM vmID on node by its key (the id every writer
// gives it, EntryID): one key, whatever else runs there. ErrNotFound when there is none
// under that id (an entry recorded under another id is found by RunningOnNode).
func (s *Store) RunningVM(ctx context.Context, node, vmID string) (*LedgerEntry, error) {
	if err := checkName("node", node); err != nil {
		return nil, err
	}
	e, _, err := getJSON[LedgerEntry](ctx, s, s.runningNodePrefix(node)+EntryID(node, vmID))
	if err != nil {
		return nil, fmt.Errorf("get the running entry of vm %s on node %s: %w", vmID, node, err)
	}
	return e, nil
}

// RunningOnNode reads the running entries on a node (through the running index: cost is
// what runs there, not the ledger's size).
func (s *Store) RunningOnNode(ctx context.Context, node string) ([]LedgerEntry, error) {
	es, err := listJSON[LedgerEntry](ctx, s, s.runningNodePrefix(node))
	if err != nil {
		return nil, fmt.Errorf("list running entries on node %s: %w", node, err)
	}
	return es, nil
}

// RunningForTenant reads a tenant's running entries (through the running index).
func (s *Store) RunningForTenant(ctx context.Context, tenant string) ([]LedgerEntry, error) {
	es, err := listJSON[LedgerEntry](ctx, s, s.runningTenantPrefix(tenant))
	if err != nil {
		return nil, fmt.Errorf("list running entries of tenant %s: %w", tenant, err)
	}
	return es, nil
}

// TenantHoldings reads, at one revision, a tenant's running entries and the nodes its live
// reservations hold room on (its creates under way), each node once, in name order. A
// create's commit turns its reservation into a running entry in one transaction, so at one
// revision each VM central made or is making for the tenant is in one or the other.
func (s *Store) TenantHoldings(ctx context.Context, tenant string) ([]LedgerEntry, []string, error) {
	what := "read the running entries and reservations of tenant " + tenant
	if err := checkName("tenant id", tenant); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	r, err := s.kv(ctx).Txn(ctx).Then(clientv3.OpGet(s.runningTenantPrefix(tenant), clientv3.WithPrefix()),
		clientv3.OpGet(s.resTenantPrefix(tenant), clientv3.WithPrefix())).Commit()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	es, err := decodeAll[LedgerEntry](r.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	rs, err := decodeAll[Reservation](r.Responses[1].GetResponseRange().Kvs)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	var nodes []string
	for _, res := range rs {
		nodes = append(nodes, res.Node)
	}
	slices.Sort(nodes)
	return es, slices.Compact(nodes), nil
}

// EntriesForTenant reads every entry of a tenant, running and ended, ordered by start. It
// scans the whole ledger (metering is rare; retention bounds the ledger).
func (s *Store) EntriesForTenant(ctx context.Context, tenant string) ([]LedgerEntry, error) {
	return s.ListEntries(ctx, func(e *LedgerEntry) bool { return e.Tenant == tenant })
}

// ListEntries reads the entries keep accepts (all with keep nil), ordered by start.
func (s *Store) ListEntries(ctx context.Context, keep func(*LedgerEntry) bool) ([]LedgerEntry, error) {
	var out []LedgerEntry
	_, err := s.scanEntries(ctx, 0, func(e *LedgerEntry, _ *mvccpb.KeyValue) error {
		if keep == nil || keep(e) {
			out = append(out, *e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list ledger entries: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt.Before(out[j].StartedAt) })
	return out, nil
}

// DropEndedBefore deletes entries that ended before t (retention: ledger_retention_days),
// with their month-index keys, and returns how many went. Running entries are never dropped.
func (s *Store) DropEndedBefore(ctx context.Context, t time.Time) (int, error) {
	var victims []guardedWrite
	_, err := s.scanEntries(ctx, 0, func(e *LedgerEntry, kv *mvccpb.KeyValue) error {
		if !e.Running() && e.EndedAt.Before(t) {
			// The entry goes last: the deletes of an entry with more month keys than one
			// transaction holds (a VM that ran for years) each compare the entry, which
			// must still be there; one interrupted between them is dropped by the next run.
			w := guardedWrite{key: string(kv.Key), rev: kv.ModRevision}
			for _, k := range s.monthKeys(e) {
				w.ops = append(w.ops, clientv3.OpDelete(k))
			}
			w.ops = append(w.ops, clientv3.OpDelete(string(kv.Key)))
			victims = append(victims, w)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("drop ledger entries ended before %s: %w", t.Format(time.RFC3339), err)
	}
	// Ended entries do not change, but compare anyway: deleting is for ever. A batch that
	// loses is done again entry by entry, and an entry that changed is left for the next
	// retention run.
	dropped, err := s.writeGuarded(ctx, victims)
	if err != nil {
		return dropped, fmt.Errorf("drop ended ledger entries: %w", err)
	}
	return dropped, nil
}

// CounterFix is one usage counter Recount found wrong and rewrote.
type CounterFix struct {
	Scope string // "tenant" or "node"
	Name  string
	Was   Usage
	Now   Usage
}

// RecountReport says what Recount saw and fixed.
type RecountReport struct {
	Revision int64 // the revision the ledger was read at
	Running  int   // running entries counted
	Fixed    []CounterFix
}

// Recount recomputes every usage counter from the ledger's running entries and rewrites the
// ones that differ. The ledger and the counters are read at one revision, and each rewrite
// compares the counter's ModRevision with what was read: every change to a tenant's or
// node's running entries rewrites its counter in the same transaction, so an unchanged
// counter proves the recomputed value is still right. A lost race recounts from scratch.
// With the store's own writes the counters are exact by construction; Recount is the
// reconciler's proof of that and the repair for hand edits or older versions.
func (s *Store) Recount(ctx context.Context) (*RecountReport, error) {
	var report *RecountReport
	err := s.casLoop(ctx, "recount usage", func(bool) (bool, error) { // reads afresh every time
		want := map[string]Usage{}
		running := 0
		rev, err := s.scanEntries(ctx, 0, func(e *LedgerEntry, _ *mvccpb.KeyValue) error {
			if !e.Running() {
				return nil
			}
			running++
			want[s.usageNodeKey(e.Node)] = want[s.usageNodeKey(e.Node)].Add(e.usage())
			if e.Tenant != "" {
				want[s.usageTenantKey(e.Tenant)] = want[s.usageTenantKey(e.Tenant)].Add(e.usage())
			}
			return nil
		})
		if err != nil {
			return false, fmt.Errorf("recount usage: %w", err)
		}
		have := map[string]counter{}
		haveRev := map[string]int64{}
		if _, err := s.scan(ctx, s.prefix+"usage/", rev, func(kv *mvccpb.KeyValue) error {
			var c counter
			if err := json.Unmarshal(kv.Value, &c); err != nil {
				return fmt.Errorf("decode %s: %w", kv.Key, err)
			}
			have[string(kv.Key)], haveRev[string(kv.Key)] = c, kv.ModRevision
			return nil
		}); err != nil {
			return false, fmt.Errorf("recount usage: %w", err)
		}
		keys := map[string]bool{}
		for k := range want {
			keys[k] = true
		}
		for k := range have {
			keys[k] = true
		}
		rep := &RecountReport{Revision: rev, Running: running}
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for k := range keys {
			if have[k].Usage == want[k] {
				continue
			}
			scope, name := "tenant", strings.TrimPrefix(k, s.prefix+"usage/tenant/")
			if strings.HasPrefix(k, s.prefix+"usage/node/") {
				scope, name = "node", strings.TrimPrefix(k, s.prefix+"usage/node/")
			}
			rep.Fixed = append(rep.Fixed, CounterFix{Scope: scope, Name: name, Was: have[k].Usage, Now: want[k]})
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", haveRev[k]))
			ops = append(ops, clientv3.OpPut(k, mustJSON(counter{Usage: want[k], Gen: have[k].Gen + 1})))
		}
		sort.Slice(rep.Fixed, func(i, j int) bool {
			return rep.Fixed[i].Scope+rep.Fixed[i].Name < rep.Fixed[j].Scope+rep.Fixed[j].Name
		})
		// etcd caps operations per transaction (128 by default); fix in chunks. A chunk that
		// loses its compare makes the whole recount go again; chunks already written are right.
		for len(ops) > 0 {
			n := min(len(ops), 100)
			r, err := s.kv(ctx).Txn(ctx).If(cmps[:n]...).Then(ops[:n]...).Commit()
			if err != nil {
				return false, fmt.Errorf("recount usage: %w", err)
			}
			if !r.Succeeded {
				return false, nil
			}
			cmps, ops = cmps[n:], ops[n:]
		}
		report = rep
		return true, nil
	})
	return report, err
}
