// Package audit keeps central's activity log: every change made through the
// fleet API and every refused attempt by a known caller, each kind in its own
// bounded file and memory, with a budget per caller so that no one caller can
// push anyone else's records out.
//
// # What must survive, and how
//
// An auditor asks of the log: who changed what, and who tried what they may
// not. A tenant must not be able to erase either answer by flooding central
// with requests, refused or cheap. So:
//
//   - Every field of an event is bounded (Who, Tenant and Method at
//     MaxFieldBytes, Target, Actor and Key at MaxTargetBytes, User at
//     MaxUserBytes, Action at MaxActionBytes, Path at MaxPathBytes, and nothing in them that JSON
//     must escape), so a line is at most
//     MaxLineBytes however large the request was. The caller records a target
//     only when it is a valid name or id.
//   - Changes (every status but 4xx: what central did or tried to do) and
//     refusals (4xx: what it would not do) are kept apart: changes in
//     FileName, refusals in RefusedFileName, each rotating to ".1" at
//     Options.MaxBytes, and each with its own memory. No number of refusals
//     can rotate a single change out, and no number of changes can rotate out
//     a refusal, such as a tenant's own earlier 403s.
//   - Within each kind, every principal (the operator, each tenant) has a
//     budget: Burst events at once, then PerHour. Past it, its events are
//     counted, not written one by one: the next line it may write is first a
//     summary ("suppressed": how many, from "time" to "until", with the last
//     one's method, path and status). The first events of a flood and the
//     size of the rest survive. A record stays in its file until at least
//     MaxBytes of newer lines follow it, and one principal alone writes at
//     most 2*PerHour lines an hour: with the defaults, more than five days
//     of a tenant's refusals (120 lines of at most 1024 bytes an hour) or
//     about a week of cheap changes (480 lines of some 200 bytes; two days
//     with the longest lines) before it can push anyone's record out.
//   - In memory each kind keeps Options.Keep events and Options.KeepBytes
//     bytes; when full, the principal holding the most bytes gives up its
//     oldest event. A flooding principal therefore evicts its own records,
//     never those of a principal holding less than it: GET /fleet/events
//     keeps everyone else's.
//
// Bodies, specs, commands and tokens never reach an event. A summary that is
// still counting when central crashes is lost (its count, not the events
// before it); Close writes it.
package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/hashicorp/go-hclog"
)

// FileName is the changes file in the state directory; RefusedFileName the
// refusals file. A rotated file has ".1" appended.
const (
	FileName        = "fleet-audit.jsonl"
	RefusedFileName = "fleet-refused.jsonl"
)

// Defaults of Options.
const (
	DefaultMaxBytes  = 16 << 20
	DefaultKeep      = 5000
	DefaultKeepBytes = 4 << 20
)

// Default budgets of one principal. A tenant's honest changes rarely come in
// more than a thousand at once; its honest refusals, a hundred.
var (
	DefaultChangeBudget  = Budget{Burst: 1000, PerHour: 240}
	DefaultRefusalBudget = Budget{Burst: 100, PerHour: 60}
)

// Bounds of an event's fields (bytes; longer values are cut, with "…").
const (
	MaxFieldBytes  = 80  // Who, Tenant, Method
	MaxTargetBytes = 64  // Target, Actor and Key: the longest valid name
	MaxUserBytes   = 254 // User: the longest email a member may have (store.MaxEmailLen)
	MaxActionBytes = 112 // Action: a route's words and a target
	MaxPathBytes   = 256 // Path
	// MaxLineBytes bounds one line of a file, summaries included.
	MaxLineBytes = 1280
)

// Event is one change made, or refused, through central (sdk.Event, the
// wire type, is its one definition: the log's files hold the same JSON). It
// never holds a body, a spec, a command or a token: only who did what to
// which name, and how it ended.
type Event = sdk.Event

// refused reports whether an event is a refusal (a 4xx), kept apart from
// changes.
func refused(e Event) bool { return e.Status >= 400 && e.Status < 500 }

// Budget bounds how many events of one kind one principal may record: Burst
// at once, then PerHour (a token bucket, refilled by the events' own times).
type Budget struct {
	Burst   int
	PerHour int
}

// Options configure Open.
type Options struct {
	// Dir is central's state directory; the files are Dir/FileName and
	// Dir/RefusedFileName.
	Dir string
	// MaxBytes is the size at which each file rotates to .1 (default 16 MiB).
	MaxBytes int64
	// Keep is how many events of each kind memory keeps for Recent (default
	// 5000), and KeepBytes how many bytes (default 4 MiB).
	Keep      int
	KeepBytes int64
	// ChangeBudget and RefusalBudget bound each principal (defaults
	// DefaultChangeBudget and DefaultRefusalBudget).
	ChangeBudget, RefusalBudget Budget
	// Logger reports write failures (the request that caused the event has
	// already been answered, so a failed append cannot fail it).
	Logger hclog.Logger
}

// Log is the activity log. It is safe for concurrent use.
//
// Append writes one line with one write(2) to a file opened O_APPEND, under a
// mutex, without fsync: a request waits for a copy into the page cache, not
// for the disk. Events of one central are totally ordered, in the files and
// in memory alike.
type Log struct {
	log hclog.Logger

	mu       sync.Mutex
	changes  *stream
	refusals *stream
	seq      uint64 // order of events across both kinds
	closed   bool
}

// stream is one kind of event: its file, its memory and its budgets.
type stream struct {
	path      string
	maxBytes  int64
	f         *os.File
	size      int64
	budget    Budget
	buckets   map[string]*bucket // by principal (Event.Who)
	keep      int
	keepBytes int64
	held      map[string]*queue // memory, by principal
	n         int
	bytes     int64
}

// bucket is one principal's budget in one stream.
type bucket struct {
	tokens float64
	last   time.Time
	// summary counts the events over budget (nil when none); seq orders it
	// among the others in Recent.
	summary *Event
	seq     uint64
}

// queue is one principal's events in memory, oldest first.
type queue struct {
	items []entry
	bytes int64
}

type entry struct {
	seq uint64
	e   Event
}

// Open opens (creating them 0600) the log's files in opts.Dir and loads their
// newest events. Lines that do not decode (a line torn by a crash) are
// skipped.
func Open(opts Options) (*Log, error) {
	if opts.Dir == "" {
		return nil, errors.New("open activity log: no state directory")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.KeepBytes <= 0 {
		opts.KeepBytes = DefaultKeepBytes
	}
	if opts.ChangeBudget.Burst <= 0 {
		opts.ChangeBudget = DefaultChangeBudget
	}
	if opts.RefusalBudget.Burst <= 0 {
		opts.RefusalBudget = DefaultRefusalBudget
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	mk := func(name string, b Budget) *stream {
		return &stream{path: filepath.Join(opts.Dir, name), maxBytes: opts.MaxBytes, budget: b, buckets: map[string]*bucket{},
			keep: opts.Keep, keepBytes: opts.KeepBytes, held: map[string]*queue{}}
	}
	l := &Log{log: opts.Logger, changes: mk(FileName, opts.ChangeBudget), refusals: mk(RefusedFileName, opts.RefusalBudget)}
	for _, s := range []*stream{l.changes, l.refusals} {
		for _, p := range []string{s.path + ".1", s.path} {
			if err := l.load(s, p); err != nil {
				return nil, err
			}
		}
	}
	l.resequence()
	for _, s := range []*stream{l.changes, l.refusals} {
		if err := s.openFile(); err != nil {
			if s == l.refusals {
				l.changes.f.Close()
			}
			return nil, err
		}
	}
	return l, nil
}

// load reads the events of one file into its stream's memory, in file order.
func (l *Log) load(s *stream, path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open activity log: %w", err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e Event
			if json.Unmarshal(line, &e) == nil {
				l.seq++
				s.push(l.seq, bound(e))
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read activity log %s: %w", path, err)
		}
	}
}

// resequence orders the loaded events of both kinds by time, keeping each
// file's own order, as they were appended.
func (l *Log) resequence() {
	a, b := l.changes.entries(), l.refusals.entries()
	merged := make([]*entry, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || (len(a) > 0 && !b[0].e.Time.Before(a[0].e.Time)) {
			merged, a = append(merged, a[0]), a[1:]
		} else {
			merged, b = append(merged, b[0]), b[1:]
		}
	}
	for i, p := range merged {
		p.seq = uint64(i + 1)
	}
	l.seq = uint64(len(merged))
}

// entries points at a stream's events in their order.
func (s *stream) entries() []*entry {
	var out []*entry
	for _, q := range s.held {
		for i := range q.items {
			out = append(out, &q.items[i])
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].seq < out[j].seq })
	return out
}

// openFile opens the stream's file for appending, makes sure it is 0600 (it
// may have been created by hand) and ends in a newline, so that a line torn
// by a crash does not swallow the next event.
func (s *stream) openFile() error {
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open activity log: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("open activity log: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open activity log: %w", err)
	}
	s.f, s.size = f, st.Size()
	if s.size > 0 {
		last := make([]byte, 1)
		if r, err := os.Open(s.path); err == nil {
			_, rerr := r.ReadAt(last, s.size-1)
			r.Close()
			if rerr == nil && last[0] != '\n' {
				n, _ := s.f.Write([]byte{'\n'})
				s.size += int64(n)
			}
		}
	}
	return nil
}

// size is what an event costs in memory: its strings and a fixed overhead
// for the struct and its slot.
func size(e Event) int64 {
	n := int64(160 + len(e.Who) + len(e.Tenant) + len(e.Actor) + len(e.Key) + len(e.User) + len(e.Method) + len(e.Path) + len(e.Target) + len(e.Action))
	if e.Tunnel != nil {
		n += int64(120 + len(e.Tunnel.ID) + len(e.Tunnel.Reason))
	}
	return n
}

// push keeps an event in memory; when that is over Keep or KeepBytes, the
// principal holding the most bytes gives up its oldest event.
func (s *stream) push(seq uint64, e Event) {
	q := s.held[e.Who]
	if q == nil {
		q = &queue{}
		s.held[e.Who] = q
	}
	n := size(e)
	q.items = append(q.items, entry{seq, e})
	q.bytes += n
	s.n++
	s.bytes += n
	for s.n > s.keep || s.bytes > s.keepBytes {
		var who string
		var most *queue
		for w, c := range s.held {
			// The largest gives way; of two as large, the one with the older event.
			if most == nil || c.bytes > most.bytes || (c.bytes == most.bytes && c.items[0].seq < most.items[0].seq) {
				who, most = w, c
			}
		}
		n := size(most.items[0].e)
		most.items[0] = entry{}
		most.items = most.items[1:]
		most.bytes -= n
		s.n--
		s.bytes -= n
		if len(most.items) == 0 {
			delete(s.held, who)
		}
	}
}

// Append records an event: in memory at once, and on disk as one line,
// within its principal's budget (else it is counted in a summary). A failure
// to write is logged, never returned: the change it records has happened.
func (l *Log) Append(e Event) {
	e = bound(e)
	e.Suppressed, e.Until = 0, time.Time{}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.changes
	if refused(e) {
		s = l.refusals
	}
	b := s.bucket(e.Who, e.Time)
	if b.tokens < 1 {
		if b.summary == nil {
			b.summary = &Event{Time: e.Time, Who: e.Who, Tenant: e.Tenant, Actor: e.Actor}
		}
		b.summary.Suppressed++
		b.summary.Until, b.summary.Method, b.summary.Path, b.summary.Status, b.summary.Action, b.summary.Key, b.summary.User = e.Time, e.Method, e.Path, e.Status, e.Action, e.Key, e.User
		l.seq++
		b.seq = l.seq
		return
	}
	b.tokens--
	if b.summary != nil {
		l.write(s, *b.summary)
		b.summary = nil
	}
	l.write(s, e)
}

// bucket refills and returns a principal's budget at time now.
func (s *stream) bucket(who string, now time.Time) *bucket {
	b := s.buckets[who]
	if b == nil {
		if len(s.buckets) >= 4096 {
			s.forgetFull(now)
		}
		b = &bucket{tokens: float64(s.budget.Burst), last: now}
		s.buckets[who] = b
		return b
	}
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(s.budget.Burst), b.tokens+d.Hours()*float64(s.budget.PerHour))
		b.last = now
	}
	return b
}

// forgetFull drops the budgets that are full again and count nothing: they
// are what a new bucket would be. It bounds the map by the principals that
// were active lately.
func (s *stream) forgetFull(now time.Time) {
	for who, b := range s.buckets {
		refill := now.Sub(b.last).Hours() * float64(s.budget.PerHour)
		if b.summary == nil && b.tokens+refill >= float64(s.budget.Burst) {
			delete(s.buckets, who)
		}
	}
}

// write keeps an event in memory and appends it to the stream's file.
// Called with mu held.
func (l *Log) write(s *stream, e Event) {
	l.seq++
	s.push(l.seq, e)
	if l.closed {
		return
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(e); err != nil {
		l.log.Error("encode activity event", "error", err) // cannot happen: plain fields
		return
	}
	line := buf.Bytes()
	if s.size > 0 && s.size+int64(len(line)) > s.maxBytes {
		if err := s.rotate(); err != nil {
			l.log.Error("rotate activity log; appending to the current file", "path", s.path, "error", err)
		}
	}
	n, err := s.f.Write(line)
	s.size += int64(n)
	if err != nil {
		l.log.Error("append to activity log", "path", s.path, "error", err)
	}
}

// rotate moves the current file to .1 (replacing the previous .1) and starts
// a new one. Called with mu held.
func (s *stream) rotate() error {
	if err := os.Rename(s.path, s.path+".1"); err != nil {
		return err
	}
	old := s.f
	if err := s.openFile(); err != nil {
		// Keep writing to the renamed file rather than losing events.
		return err
	}
	old.Close()
	return nil
}

// bound cuts every field of an event to its bound (with "…"), after
// replacing what JSON would have to escape (control characters, quotes,
// backslashes, invalid UTF-8) with '?', so that a field's bytes are its bytes
// in the file and a line has a fixed maximum length.
func bound(e Event) Event {
	e.Who = clean(e.Who, MaxFieldBytes)
	e.Tenant = clean(e.Tenant, MaxFieldBytes)
	e.Method = clean(e.Method, MaxFieldBytes)
	e.Path = clean(e.Path, MaxPathBytes)
	e.Target = clean(e.Target, MaxTargetBytes)
	e.Actor = clean(e.Actor, MaxTargetBytes)
	e.Key = clean(e.Key, MaxTargetBytes)
	e.User = clean(e.User, MaxUserBytes)
	e.Action = clean(e.Action, MaxActionBytes)
	if e.Tunnel != nil {
		t := *e.Tunnel
		t.ID = clean(t.ID, 16)         // tun_ and 12 hex digits
		t.Reason = clean(t.Reason, 64) // one of central/tunnels' reasons
		e.Tunnel = &t
	}
	return e
}

func clean(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == '"' || r == '\\' || r == 0x2028 || r == 0x2029 || r == utf8.RuneError {
			return '?'
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	return jsonapi.Clip(s, n-len("…"))
}

// Recent returns up to limit of the newest events of both kinds, newest
// first; with tenant set, only that tenant's (by id). limit <= 0 or above
// what is kept means all that are kept. A principal's summary that is still
// counting is included, as its newest event.
func (l *Log) Recent(limit int, tenant string) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var all []entry
	for _, s := range []*stream{l.changes, l.refusals} {
		for _, q := range s.held {
			for _, it := range q.items {
				if tenant == "" || it.e.Tenant == tenant {
					all = append(all, it)
				}
			}
		}
		for _, b := range s.buckets {
			if b.summary != nil && (tenant == "" || b.summary.Tenant == tenant) {
				all = append(all, entry{b.seq, *b.summary})
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seq > all[j].seq })
	if limit <= 0 || limit > len(all) {
		limit = len(all)
	}
	out := make([]Event, limit)
	for i := range out {
		out[i] = all[i].e
	}
	return out
}

// Path is the changes file's path; RefusedPath the refusals file's.
func (l *Log) Path() string { return l.changes.path }

// RefusedPath is the refusals file's path.
func (l *Log) RefusedPath() string { return l.refusals.path }

// Close writes the summaries still counting and closes the files. Events
// appended afterwards are kept in memory only.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	var errs []error
	for _, s := range []*stream{l.changes, l.refusals} {
		whos := make([]string, 0, len(s.buckets))
		for who, b := range s.buckets {
			if b.summary != nil {
				whos = append(whos, who)
			}
		}
		sort.Slice(whos, func(i, j int) bool { return s.buckets[whos[i]].seq < s.buckets[whos[j]].seq })
		for _, who := range whos {
			l.write(s, *s.buckets[who].summary)
			s.buckets[who].summary = nil
		}
		errs = append(errs, s.f.Close())
	}
	l.closed = true
	return errors.Join(errs...)
}
