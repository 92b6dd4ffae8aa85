// Package store keeps central's state in etcd as typed JSON records under one key prefix.
// It owns every invariant that spans requests (quota, node capacity, macOS slots) and checks
// each in one etcd transaction that compares the revisions it read; see Reserve.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Sentinel errors callers branch on. Errors returned by the store wrap them with what was
// being done, so test with errors.Is.
var (
	// ErrNotFound: the record does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a record with that key (or that unique name or token) already exists.
	ErrExists = errors.New("already exists")
	// ErrConflict: the record changed under us more often than the bounded retries allow,
	// or a compare-and-swap update lost against a concurrent writer.
	ErrConflict = errors.New("conflict: concurrent update, try again")
	// ErrQuota: a tenant quota would be exceeded. The error is a *QuotaError.
	ErrQuota = errors.New("quota exceeded")
	// ErrNoCapacity: the node cannot take the request. The error is a *CapacityError.
	ErrNoCapacity = errors.New("no capacity")
	// ErrInvalid: a record failed validation (bad name, value out of range).
	ErrInvalid = errors.New("invalid")
)

// OpError is a store call that failed, with what its caller was doing in the
// words an answer to a person uses ("list pools"): the services return it so
// that the API can say what could not be done without guessing.
type OpError struct {
	Op  string
	Err error
}

func (e *OpError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// DefaultPrefix is the key prefix every record lives under.
const DefaultPrefix = "/fluxvm/"

// Options configure Open. The zero value starts an embedded etcd, which needs DataDir.
type Options struct {
	// Endpoints of an external etcd cluster. Empty: start an embedded etcd in DataDir.
	Endpoints []string
	// DataDir holds the embedded etcd's data (created 0700). Ignored with Endpoints.
	DataDir string
	// Prefix every key lives under; default DefaultPrefix. Must end in "/".
	Prefix string
	// Logger for the store and the embedded etcd (which logs only errors). Default: hclog.NewNullLogger.
	Logger hclog.Logger
	// ClientURL and PeerURL override the embedded etcd's listen URLs (default: 127.0.0.1 on
	// free ports). Tests set ClientURL to run a second Store against the same etcd.
	ClientURL, PeerURL string
	// ID names this central in leader elections (default hostname-pid).
	ID string
	// SessionTTL is the lifetime in seconds of this central's etcd lease, which holds its
	// reservations and leaderships (default 10). A central that dies frees them this long after.
	SessionTTL int
	// MaxTxnRetries bounds the optimistic retries of Reserve, Commit and EndEntry (default 20).
	MaxTxnRetries int
	// UnsafeNoFsync turns off fsync in the embedded etcd. For throw-away dev state only.
	UnsafeNoFsync bool
	// StartTimeout bounds how long the embedded etcd may take to become ready (default 30s).
	StartTimeout time.Duration
}

// Store is central's handle on etcd. It is safe for concurrent use; several Stores (several
// centrals) may share one etcd.
type Store struct {
	client *clientv3.Client
	// emitSeq orders the notifications this store records at one instant.
	emitSeq   atomic.Uint64
	etcd      *embed.Etcd // nil with external endpoints
	endpoints []string
	prefix    string
	log       hclog.Logger
	id        string
	ttl       int
	retries   int

	locks        keyedLocks // see locks.go
	etcdLogLevel zap.AtomicLevel
	// noRangeStream: etcd refused a RangeStream (a server before 3.7); scans read pages.
	noRangeStream atomic.Bool
	// ledgerIndexed: the ledger's month index is complete (its migration marker was seen).
	ledgerIndexed atomic.Bool
	// usageRevs: counter key -> this process's latest write of it, a wroteCounter
	// (fleetwatch.go).
	usageRevs sync.Map

	mu      sync.Mutex
	session *concurrency.Session
	leaders map[*Leader]struct{}
	closed  bool
}

// Open connects to etcd, starting an embedded one first when opts.Endpoints is empty.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		return nil, fmt.Errorf("open store: prefix %q must end in /", opts.Prefix)
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 10
	}
	if opts.MaxTxnRetries <= 0 {
		opts.MaxTxnRetries = 20
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	if opts.ID == "" {
		host, _ := os.Hostname()
		opts.ID = host + "-" + strconv.Itoa(os.Getpid())
	}
	s := &Store{
		prefix:  opts.Prefix,
		log:     opts.Logger,
		id:      opts.ID,
		ttl:     opts.SessionTTL,
		retries: opts.MaxTxnRetries,
	}
	zl, zlevel := zapToHclog(opts.Logger.Named("etcd"))
	s.etcdLogLevel = zlevel
	if len(opts.Endpoints) == 0 {
		e, err := startEmbedded(opts, zl)
		if err != nil {
			return nil, err
		}
		s.etcd = e
		for _, u := range e.Config().ListenClientUrls {
			s.endpoints = append(s.endpoints, u.String())
		}
	} else {
		s.endpoints = append([]string(nil), opts.Endpoints...)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   s.endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zl,
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		s.stopEmbedded()
		return nil, fmt.Errorf("open store: connect to etcd %v: %w", s.endpoints, err)
	}
	s.client = cli
	// A status round trip proves the endpoints answer before anyone relies on them.
	sctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if _, err := cli.Get(sctx, s.prefix+"probe"); err != nil {
		cli.Close()
		s.stopEmbedded()
		return nil, fmt.Errorf("open store: etcd %v does not answer: %w", s.endpoints, err)
	}
	if err := s.markEmptyLedgerIndexed(sctx); err != nil {
		cli.Close()
		s.stopEmbedded()
		return nil, fmt.Errorf("open store: %w", err)
	}
	return s, nil
}

// startEmbedded starts a single-member etcd in opts.DataDir on loopback. Free ports are found
// by binding port 0 and releasing it; another process can take one in between, so a bind
// failure is retried with new ports a few times.
func startEmbedded(opts Options, zl *zap.Logger) (*embed.Etcd, error) {
	if opts.DataDir == "" {
		return nil, errors.New("open store: embedded etcd needs a data dir (or give etcd endpoints)")
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("open store: create data dir: %w", err)
	}
	if err := os.Chmod(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("open store: chmod data dir: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		clientURL, peerURL := opts.ClientURL, opts.PeerURL
		var err error
		if clientURL == "" {
			if clientURL, err = freeLoopbackURL(); err != nil {
				return nil, err
			}
		}
		if peerURL == "" {
			if peerURL, err = freeLoopbackURL(); err != nil {
				return nil, err
			}
		}
		cu, err := url.Parse(clientURL)
		if err != nil {
			return nil, fmt.Errorf("open store: client url %q: %w", clientURL, err)
		}
		pu, err := url.Parse(peerURL)
		if err != nil {
			return nil, fmt.Errorf("open store: peer url %q: %w", peerURL, err)
		}
		cfg := embed.NewConfig()
		cfg.Name = "central"
		cfg.Dir = opts.DataDir
		cfg.ListenClientUrls = []url.URL{*cu}
		cfg.AdvertiseClientUrls = []url.URL{*cu}
		cfg.ListenPeerUrls = []url.URL{*pu}
		cfg.AdvertisePeerUrls = []url.URL{*pu}
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zl)
		cfg.UnsafeNoFsync = opts.UnsafeNoFsync
		// The counters and generation keys are rewritten on every reservation; without
		// compaction the history would grow without bound.
		cfg.AutoCompactionMode = "periodic"
		cfg.AutoCompactionRetention = "1h"
		cfg.EnableGRPCGateway = false
		// The embedded etcd is always a single member: nobody else votes, so the election
		// timeout only sets how long it waits to elect itself at start. 200 ms (instead of
		// 1 s) brings Open from ~0.9 s to ~0.1 s here, for ~1% of a core of idle ticking.
		cfg.TickMs, cfg.ElectionMs = 20, 200
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			if isAddrInUse(err) && (opts.ClientURL == "" || opts.PeerURL == "") {
				continue
			}
			return nil, fmt.Errorf("open store: start embedded etcd: %w", err)
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, nil
		case err := <-e.Err():
			e.Close()
			return nil, fmt.Errorf("open store: embedded etcd failed: %w", err)
		case <-time.After(opts.StartTimeout):
			e.Server.Stop()
			e.Close()
			return nil, fmt.Errorf("open store: embedded etcd not ready after %s", opts.StartTimeout)
		}
	}
	return nil, fmt.Errorf("open store: start embedded etcd: %w", lastErr)
}

func freeLoopbackURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("open store: find a free port: %w", err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr, nil
}

func isAddrInUse(err error) bool {
	return strings.Contains(err.Error(), "address already in use")
}

// zapToHclog gives etcd (server and client) a zap logger at error level that writes into
// our hclog logger, so etcd stays quiet and its errors land where ours do. The returned level
// is raised to silence before an orderly shutdown, when etcd reports its own closing
// listeners as errors.
func zapToHclog(l hclog.Logger) (*zap.Logger, zap.AtomicLevel) {
	w := l.StandardWriter(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error})
	enc := zap.NewProductionEncoderConfig()
	enc.TimeKey = ""
	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.AddSync(w), level)
	return zap.New(benignFilter{core}), level
}

// benignFilter drops etcd messages logged at error level that are not errors: on a fresh
// data dir the storage-version monitor fails until the first raft term is written and
// succeeds on a later tick (etcd 3.6/3.7 behaviour).
type benignFilter struct{ zapcore.Core }

func (f benignFilter) With(fields []zapcore.Field) zapcore.Core {
	return benignFilter{f.Core.With(fields)}
}

func (f benignFilter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == "failed to update storage version" {
		return ce
	}
	if f.Enabled(e.Level) {
		return ce.AddCore(e, f)
	}
	return ce
}

// Client is the underlying etcd client, for packages that need a primitive the store lacks.
func (s *Store) Client() *clientv3.Client { return s.client }

// Endpoints are the etcd client URLs this store talks to (the embedded etcd's, if any), which
// other centrals can be pointed at.
func (s *Store) Endpoints() []string { return append([]string(nil), s.endpoints...) }

// Prefix is the key prefix every record lives under.
func (s *Store) Prefix() string { return s.prefix }

// ID names this central in elections.
func (s *Store) ID() string { return s.id }

// Close resigns the leaderships this store holds, revokes its lease (releasing its
// reservations at once), closes the client and stops the embedded etcd, if any.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.session
	s.session = nil
	leaders := make([]*Leader, 0, len(s.leaders))
	for l := range s.leaders {
		leaders = append(leaders, l)
	}
	s.mu.Unlock()
	for _, l := range leaders {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		l.Resign(ctx) // best effort: otherwise the lease expires after SessionTTL
		cancel()
	}
	if sess != nil {
		sess.Close() // revokes the lease: our reservations go now, not in SessionTTL
	}
	err := s.client.Close()
	s.stopEmbedded()
	return err
}

func (s *Store) stopEmbedded() {
	if s.etcd != nil {
		s.etcdLogLevel.SetLevel(zapcore.FatalLevel) // closing listeners are logged as errors
		s.etcd.Close()
		s.etcd = nil
	}
}

// Session is this central's etcd session; its lease holds the reservations this central has
// in flight. When the lease is lost (etcd unreachable for longer than the TTL) a new session
// is made on next use; reservations made under the old one are gone by then.
func (s *Store) Session(ctx context.Context) (*concurrency.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("store is closed")
	}
	if s.session != nil {
		select {
		case <-s.session.Done():
			s.log.Warn("etcd session lost; reservations made under it are gone", "lease", fmt.Sprintf("%x", s.session.Lease()))
			s.session = nil
		default:
			return s.session, nil
		}
	}
	sess, err := concurrency.NewSession(s.client, concurrency.WithTTL(s.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("create etcd session: %w", err)
	}
	s.session = sess
	return sess, nil
}

// newID returns prefix + 16 random hex digits.
func newID(prefix string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return prefix + hex.EncodeToString(b[:])
}
