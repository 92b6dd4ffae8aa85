// Package central runs FluxVM's control plane (`fluxvm-agent central`): it
// opens the etcd store, serves the fleet API, and, while this central leads
// the etcd election, runs the background loops (reconciler, node-down
// marking, warm pools). Several centrals may serve one etcd; one leads.
package central

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/audit"
	"github.com/fluxvm/fluxvm/central/console"
	"github.com/fluxvm/fluxvm/central/identity"
	"github.com/fluxvm/fluxvm/central/payments"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/hashicorp/go-hclog"
)

// Defaults of Options.
const (
	DefaultListen         = "127.0.0.1:7799"
	DefaultReconcileEvery = 60 * time.Second
	// ElectionName is the etcd election the background loops run under.
	ElectionName = "central"
)

// Options configure Run.
type Options struct {
	// Listen is the fleet API's host:port (DefaultListen when empty).
	Listen string
	// StateDir holds the embedded etcd (StateDir/etcd) and the activity log.
	StateDir string
	// EtcdEndpoints of an external etcd; empty starts an embedded one.
	EtcdEndpoints []string
	// EtcdListen is the client URL the embedded etcd listens on (default: a
	// free loopback port). Set it so that other centrals can use this one's
	// etcd through their EtcdEndpoints.
	EtcdListen string
	// FleetToken is the operator's token, which nodes heartbeat with and
	// central calls nodes with. Empty is lab mode.
	FleetToken string
	// ReconcileEvery is the reconciler's period (DefaultReconcileEvery).
	ReconcileEvery time.Duration
	// HeartbeatInterval is what nodes are told (api.DefaultHeartbeatInterval);
	// a node silent for three is marked down.
	HeartbeatInterval time.Duration
	// ID names this central in elections (default hostname-pid).
	ID      string
	Version string
	Logger  hclog.Logger
	// Listening, if set, receives the API's address once it listens.
	Listening func(addr string)
	// PublicURL, SessionTTL and OperatorEmails are the console's sign-in
	// (api.Options).
	PublicURL      string
	SessionTTL     time.Duration
	OperatorEmails []string
	// OIDC turns on sign-in with the company's identity provider when its
	// Issuer is set (it needs FleetToken and PublicURL).
	OIDC             identity.OIDCConfig
	OIDCProviderName string
	// Payments turns Stripe on when its SecretKey is set (docs/billing.md).
	Payments payments.Config
	// Signup opens self-service sign-up (docs/signup.md); it needs
	// FleetToken, PublicURL and the SMTP server.
	Signup api.SignupOptions
}

// checkSignup refuses a sign-up that could not work.
func checkSignup(opts Options) error {
	if !opts.Signup.Enabled {
		return nil
	}
	pub, err := url.Parse(opts.PublicURL)
	switch {
	case opts.FleetToken == "":
		return errors.New("-signup needs -token (there is no operator in lab mode, and central makes no tenants without one)")
	case err != nil || (pub.Scheme != "https" && pub.Scheme != "http") || pub.Host == "":
		return errors.New("-signup needs -public-url: the mailed links point there")
	case opts.Signup.SMTP.Host == "" || opts.Signup.SMTP.From == "":
		return errors.New("-signup needs -smtp-host and -smtp-from to mail the confirmation links")
	}
	return nil
}

// startSSO checks the sign-in's settings and reads the provider's
// discovery document.
func startSSO(ctx context.Context, opts Options) (*identity.OIDC, error) {
	pub, err := url.Parse(opts.PublicURL)
	switch {
	case opts.FleetToken == "":
		return nil, errors.New("sign-in with an identity provider needs -token (there is no operator in lab mode)")
	case err != nil || (pub.Scheme != "https" && pub.Scheme != "http") || pub.Host == "":
		return nil, errors.New("sign-in with an identity provider needs -public-url, central's URL as browsers reach it")
	case opts.OIDC.ClientID == "":
		return nil, errors.New("-oidc-issuer needs -oidc-client-id")
	}
	iss, err := url.Parse(opts.OIDC.Issuer)
	if err != nil || !(iss.Scheme == "https" || iss.Scheme == "http" && (iss.Hostname() == "localhost" || net.ParseIP(iss.Hostname()).IsLoopback())) {
		return nil, fmt.Errorf("-oidc-issuer %q: use https (http only for localhost)", opts.OIDC.Issuer)
	}
	opts.OIDC.RedirectURL = strings.TrimSuffix(opts.PublicURL, "/") + "/auth/callback"
	return identity.NewOIDC(ctx, opts.OIDC)
}

// Run serves central until ctx ends.
func Run(ctx context.Context, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = hclog.New(&hclog.LoggerOptions{Name: "central", Level: hclog.Info})
	}
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.ReconcileEvery <= 0 {
		opts.ReconcileEvery = DefaultReconcileEvery
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = api.DefaultHeartbeatInterval
	}
	if opts.StateDir == "" {
		return errors.New("central: a state directory is required (-state-dir)")
	}
	if err := os.MkdirAll(opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("central: state dir: %w", err)
	}
	st, err := store.Open(ctx, store.Options{Endpoints: opts.EtcdEndpoints, DataDir: filepath.Join(opts.StateDir, "etcd"), ClientURL: opts.EtcdListen,
		Logger: log.Named("store"), ID: opts.ID})
	if err != nil {
		return fmt.Errorf("central: %w", err)
	}
	defer st.Close()
	if len(opts.EtcdEndpoints) == 0 {
		log.Info("embedded etcd", "data", filepath.Join(opts.StateDir, "etcd"), "endpoints", st.Endpoints())
	}
	activity, err := audit.Open(audit.Options{Dir: opts.StateDir, Logger: log.Named("audit")})
	if err != nil {
		return fmt.Errorf("central: %w", err)
	}
	defer activity.Close()

	if err := checkSignup(opts); err != nil {
		return fmt.Errorf("central: %w", err)
	}
	if opts.Payments.SecretKey != "" {
		// Never the keys themselves.
		log.Info("Stripe invoices are on", "webhook", opts.Payments.WebhookSecret != "", "api", opts.Payments.APIBase)
	}
	var sso *identity.OIDC
	if opts.OIDC.Issuer != "" {
		if sso, err = startSSO(ctx, opts); err != nil {
			return fmt.Errorf("central: %w", err)
		}
		log.Info("sign-in with the identity provider", "issuer", opts.OIDC.Issuer, "callback", strings.TrimSuffix(opts.PublicURL, "/")+"/auth/callback")
	}
	srv := api.New(api.Options{Store: st, FleetToken: opts.FleetToken, Logger: log.Named("api"), Version: opts.Version, OIDC: sso, OIDCProviderName: opts.OIDCProviderName,
		Activity: activity, HeartbeatInterval: opts.HeartbeatInterval,
		PublicURL: opts.PublicURL, SessionTTL: opts.SessionTTL, OperatorEmails: opts.OperatorEmails,
		Payments: opts.Payments, Signup: opts.Signup})
	srv.Metrics().MustRegister(srv.NodeChannels())
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("central: fleet api: %w", err)
	}
	studio, err := console.New()
	if err != nil {
		return fmt.Errorf("central: %w", err)
	}
	// The web console is served beside the API, not in its access table:
	// its files are public, and every call it makes is an API call.
	hs := &http.Server{Handler: studio.Mount(srv), ReadHeaderTimeout: 10 * time.Second}
	if opts.FleetToken == "" {
		log.Warn("no -token: lab mode, anyone who reaches the API is the operator until the first tenant exists")
	}
	log.Info("central listening", "url", "http://"+ln.Addr().String(), "id", st.ID())
	if opts.Listening != nil {
		opts.Listening(ln.Addr().String())
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	migrated := make(chan struct{})
	go func() {
		defer close(migrated)
		indexLedger(ctx, st, log)
	}()
	loops := make(chan struct{})
	go func() {
		defer close(loops)
		lead(ctx, st, srv, opts, log.Named("leader"))
	}()
	// Every central relays its own tunnels: their loop is not the leader's.
	tunnelsDone := make(chan struct{})
	go func() {
		defer close(tunnelsDone)
		srv.TunnelLoop(ctx)
	}()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
		err = fmt.Errorf("central: fleet api: %w", err)
	}
	cancel()
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	// The node channels are hijacked connections, which Shutdown leaves
	// alone: close them, so the nodes notice and redial (another central,
	// or this one once it is back).
	srv.NodeChannels().Close()
	_ = hs.Shutdown(sctx)
	<-tunnelsDone // ended the tunnels, whose hijacked connections Shutdown leaves open
	<-loops
	<-migrated
	log.Info("central stopped")
	return err
}

// indexLedger gives a ledger an older central wrote its month index
// (store.MigrateLedgerIndex), trying again every minute until it is done.
// Meanwhile statements and usage reports read the whole ledger, as before.
func indexLedger(ctx context.Context, st *store.Store, log hclog.Logger) {
	for {
		began := time.Now()
		n, err := st.MigrateLedgerIndex(ctx)
		if err == nil {
			if n > 0 {
				log.Info("indexed the ledger by month", "entries", n, "took", time.Since(began).Round(time.Millisecond))
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("index the ledger by month; statements read the whole ledger until it is done; trying again in a minute", "error", err)
		sleep(ctx, time.Minute)
	}
}

// lead campaigns for leadership and runs the background loops while this
// central leads; when leadership is lost (etcd unreachable past the lease)
// it campaigns again. On ctx's end it resigns, so another central takes over
// at once rather than after the lease's TTL. While a dedicated scheduler
// (`fluxvm-agent scheduler`) is announced, this central stays out of the
// election and hands the loops over if it was leading.
func lead(ctx context.Context, st *store.Store, srv *api.Server, opts Options, log hclog.Logger) {
	scheds := watchSchedulers(ctx, st)
	for ctx.Err() == nil {
		if ids, changed := scheds.get(); len(ids) > 0 {
			log.Info("a dedicated scheduler runs the background loops; standing by", "schedulers", ids)
			select {
			case <-ctx.Done():
			case <-changed:
			}
			continue
		}
		cctx, cancel := context.WithCancel(ctx)
		handOver := scheds.appeared(cctx)
		go func() {
			select {
			case <-handOver:
				cancel()
			case <-cctx.Done():
			}
		}()
		l, err := st.Campaign(cctx, ElectionName)
		if err != nil {
			cancel()
			if ctx.Err() == nil && cctx.Err() == nil {
				log.Warn("campaign for leadership failed; retrying", "error", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		log.Info("leading: running the reconciler and node checks", "id", st.ID())
		srv.SetLeader(true)
		runLoops(cctx, l, srv, opts, log)
		srv.SetLeader(false)
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = l.Resign(rctx)
		rcancel()
		switch {
		case ctx.Err() != nil:
		case isClosed(handOver):
			log.Info("a dedicated scheduler appeared; handing the background loops over")
		default:
			log.Warn("lost leadership; campaigning again")
		}
	}
}

// schedulerSet is the dedicated schedulers announced in etcd, as a central
// last saw them.
type schedulerSet struct {
	mu      sync.Mutex
	ids     []string
	changed chan struct{} // closed at the next change
}

func watchSchedulers(ctx context.Context, st *store.Store) *schedulerSet {
	s := &schedulerSet{changed: make(chan struct{})}
	first := make(chan struct{})
	go func() {
		for ids := range st.WatchSchedulers(ctx) {
			s.mu.Lock()
			s.ids = ids
			close(s.changed)
			s.changed = make(chan struct{})
			s.mu.Unlock()
			if first != nil {
				close(first)
				first = nil
			}
		}
	}()
	// Wait for the first read, so a central starting next to a running
	// scheduler does not grab the loops for a moment.
	select {
	case <-first:
	case <-ctx.Done():
	case <-time.After(5 * time.Second): // etcd slow: the watch catches up
	}
	return s
}

// get returns the announced schedulers and a channel closed at the next change.
func (s *schedulerSet) get() ([]string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids, s.changed
}

// appeared returns a channel closed once a dedicated scheduler is announced;
// it stays open if ctx ends first.
func (s *schedulerSet) appeared(ctx context.Context) <-chan struct{} {
	out := make(chan struct{})
	go func() {
		for {
			ids, changed := s.get()
			if len(ids) > 0 {
				close(out)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	return out
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// runLoops runs the leader-only work until ctx ends or leadership is lost.
// Its store writes are fenced (store.Fenced): once l is lost, none of them
// lands, even one a loop sends before it notices.
func runLoops(ctx context.Context, l *store.Leader, srv *api.Server, opts Options, log hclog.Logger) {
	lost := l.Done()
	ctx = store.Fenced(ctx, l)
	// Node checks run several times per heartbeat interval so that a node is
	// marked down close to three intervals after its last heartbeat.
	check := time.NewTicker(max(opts.HeartbeatInterval/4, 100*time.Millisecond))
	defer check.Stop()
	reconcile := time.NewTicker(opts.ReconcileEvery)
	defer reconcile.Stop()
	// Warm pools (docs/warm-pools.md) are kept full by the leader, in their
	// own goroutine: a pool VM's boot must not hold up the node checks.
	pctx, stopPools := context.WithCancel(ctx)
	defer stopPools()
	go srv.PoolLoop(pctx, 0)
	// Webhooks are delivered in their own goroutine too: a receiver that
	// does not answer holds up only its own deliveries.
	go dispatchWebhooks(pctx, srv, time.Second, log)
	// A member central reports to its fleet's owner (docs/fleets.md).
	go srv.FederationLoop(pctx, 0)
	// A member's history push (docs/history.md), and the owner's retention.
	go srv.HistoryLoop(pctx, 0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-check.C:
			if _, err := srv.MarkDownNodes(ctx); err != nil && ctx.Err() == nil {
				log.Warn("check node heartbeats", "error", err)
			}
		case <-reconcile.C:
			rctx, cancel := context.WithTimeout(ctx, max(opts.ReconcileEvery, time.Minute))
			if _, err := srv.Reconcile(rctx); err != nil && ctx.Err() == nil {
				log.Warn("reconcile", "error", err)
			}
			cancel()
		}
	}
}

// dispatchWebhooks delivers the notifications webhooks are owed, every
// period, until ctx ends (leadership lost: the next leader goes on from
// what etcd says was delivered).
func dispatchWebhooks(ctx context.Context, srv *api.Server, period time.Duration, log hclog.Logger) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := srv.DispatchWebhooks(ctx); err != nil && ctx.Err() == nil {
			log.Warn("deliver webhooks; retrying", "error", err)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
