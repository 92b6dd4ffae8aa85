// Package audit keeps central's activity log: every change made through the
// fleet API, appended as JSON lines to <state_dir>/fleet-audit.jsonl (mode
// 0600, rotated to .1 at 16 MiB) with the newest events kept in memory for
// GET /fleet/events.
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
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// FileName is the log's file in the state directory; the rotated one has ".1" appended.
const FileName = "fleet-audit.jsonl"

// Defaults of Options.
const (
	DefaultMaxBytes = 16 << 20
	DefaultKeep     = 5000
)

// Event is one change made through central. It never holds a body, a spec, a
// command or a token: only who did what to which name, and how it ended.
type Event struct {
	Time   time.Time `json:"time"`
	Who    string    `json:"who"`              // "operator" or "tenant:<id>"
	Tenant string    `json:"tenant,omitempty"` // the tenant's id, for filtering
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Target string    `json:"target,omitempty"` // a name or id from the request
	Status int       `json:"status"`
}

// Options configure Open.
type Options struct {
	// Dir is central's state directory; the log is Dir/FileName.
	Dir string
	// MaxBytes is the size at which the file rotates to FileName.1 (default 16 MiB).
	MaxBytes int64
	// Keep is how many of the newest events Recent can serve (default 5000).
	Keep int
	// Logger reports write failures (the request that caused the event has
	// already been answered, so a failed append cannot fail it).
	Logger hclog.Logger
}

// Log is the activity log. It is safe for concurrent use.
//
// Append writes one line with one write(2) to a file opened O_APPEND, under a
// mutex, without fsync: a request waits for a copy into the page cache, not
// for the disk. Events of one central are totally ordered, in the file and in
// memory alike.
type Log struct {
	path     string
	maxBytes int64
	log      hclog.Logger

	mu     sync.Mutex
	f      *os.File
	size   int64
	ring   []Event // the newest len(ring) <= keep events, oldest first from head
	head   int     // index of the oldest event once the ring is full
	keep   int
	closed bool
}

// Open opens (creating it 0600) the log in opts.Dir and loads its newest
// events from FileName.1 and FileName. Lines that do not decode (a line torn
// by a crash) are skipped.
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
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	l := &Log{path: filepath.Join(opts.Dir, FileName), maxBytes: opts.MaxBytes, keep: opts.Keep, log: opts.Logger,
		ring: make([]Event, 0, min(opts.Keep, 1024))}
	for _, p := range []string{l.path + ".1", l.path} {
		if err := l.load(p); err != nil {
			return nil, err
		}
	}
	if err := l.openFile(); err != nil {
		return nil, err
	}
	return l, nil
}

// load reads the events of one file into the ring.
func (l *Log) load(path string) error {
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
				l.push(e)
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

// openFile opens the current file for appending, makes sure it is 0600 (it
// may have been created by hand) and ends in a newline, so that a line torn
// by a crash does not swallow the next event.
func (l *Log) openFile() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
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
	l.f, l.size = f, st.Size()
	if l.size > 0 {
		last := make([]byte, 1)
		if r, err := os.Open(l.path); err == nil {
			_, rerr := r.ReadAt(last, l.size-1)
			r.Close()
			if rerr == nil && last[0] != '\n' {
				n, _ := l.f.Write([]byte{'\n'})
				l.size += int64(n)
			}
		}
	}
	return nil
}

func (l *Log) push(e Event) {
	if len(l.ring) < l.keep {
		l.ring = append(l.ring, e)
		return
	}
	l.ring[l.head] = e
	l.head = (l.head + 1) % l.keep
}

// Append records an event: in memory at once, and on disk as one line. A
// failure to write is logged, never returned: the change it records has
// happened.
func (l *Log) Append(e Event) {
	line, err := json.Marshal(e)
	if err != nil {
		l.log.Error("encode activity event", "error", err) // cannot happen: plain fields
		return
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	l.push(e)
	if l.closed {
		return
	}
	if l.size > 0 && l.size+int64(len(line)) > l.maxBytes {
		if err := l.rotate(); err != nil {
			l.log.Error("rotate activity log; appending to the current file", "path", l.path, "error", err)
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.log.Error("append to activity log", "path", l.path, "error", err)
	}
}

// rotate moves the current file to .1 (replacing the previous .1) and starts
// a new one. Called with mu held.
func (l *Log) rotate() error {
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	old := l.f
	if err := l.openFile(); err != nil {
		// Keep writing to the renamed file rather than losing events.
		return err
	}
	old.Close()
	return nil
}

// Recent returns up to limit of the newest events, newest first; with tenant
// set, only that tenant's (by id). limit <= 0 or above the kept count means
// all that are kept.
func (l *Log) Recent(limit int, tenant string) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.ring)
	if limit <= 0 || limit > n {
		limit = n
	}
	out := make([]Event, 0, min(limit, 256))
	for i := 0; i < n && len(out) < limit; i++ {
		// The newest is just before head (head is 0 until the ring fills).
		e := l.ring[((l.head-1-i)%n+n)%n]
		if tenant == "" || e.Tenant == tenant {
			out = append(out, e)
		}
	}
	return out
}

// Path is the log file's path.
func (l *Log) Path() string { return l.path }

// Close closes the file. Events appended afterwards are kept in memory only.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}
