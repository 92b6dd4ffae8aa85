package central

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/api"
	"github.com/fluxvm/fluxvm/central/store"
	"github.com/hashicorp/go-hclog"
)

// SchedulerOptions configure RunScheduler.
type SchedulerOptions struct {
	// EtcdEndpoints of the etcd the centrals use (required: a scheduler has
	// no embedded etcd, it joins the centrals' one).
	EtcdEndpoints []string
	// FleetToken is the operator's token, which the loops call nodes with.
	FleetToken string
	// ReconcileEvery and HeartbeatInterval as in Options; HeartbeatInterval
	// must match the centrals' (nodes are marked down after three).
	ReconcileEvery    time.Duration
	HeartbeatInterval time.Duration
	// Listen, if set, serves GET /healthz (with "leader") and GET /metrics
	// (operator token) there.
	Listen  string
	ID      string
	Version string
	Logger  hclog.Logger
	// Leading, if set, is called with true when this scheduler takes the
	// loops and false when it loses them.
	Leading func(bool)
}

// RunScheduler runs the background loops (reconciler, node-down marking,
// warm pools) in a process of their own until ctx ends. It announces itself
// in etcd, which makes every central's in-process loops step aside, and then
// campaigns in the same election as the centrals; several schedulers may run,
// one leads. When the last scheduler goes (SIGTERM: at once; a crash: after
// the session's TTL), a central takes the loops back.
func RunScheduler(ctx context.Context, opts SchedulerOptions) error {
	log := opts.Logger
	if log == nil {
		log = hclog.New(&hclog.LoggerOptions{Name: "scheduler", Level: hclog.Info})
	}
	if len(opts.EtcdEndpoints) == 0 {
		return errors.New("scheduler: -etcd-endpoints is required: the scheduler joins the etcd the centrals use " +
			"(a central with an embedded etcd shares it with -etcd-listen)")
	}
	if opts.ReconcileEvery <= 0 {
		opts.ReconcileEvery = DefaultReconcileEvery
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = api.DefaultHeartbeatInterval
	}
	st, err := store.Open(ctx, store.Options{Endpoints: opts.EtcdEndpoints, Logger: log.Named("store"), ID: opts.ID})
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	defer st.Close() // resigns and revokes the announcement: a central takes over at once
	srv := api.New(api.Options{Store: st, FleetToken: opts.FleetToken, Logger: log.Named("loops"), Version: opts.Version,
		HeartbeatInterval: opts.HeartbeatInterval})
	if err := st.AnnounceScheduler(ctx); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	log.Info("scheduler announced; centrals hand their background loops over", "id", st.ID())

	if opts.Listen != "" {
		ln, err := net.Listen("tcp", opts.Listen)
		if err != nil {
			return fmt.Errorf("scheduler: health listener: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /healthz", srv)
		mux.Handle("GET /metrics", srv)
		hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = hs.Serve(ln) }()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		}()
		log.Info("scheduler health", "url", "http://"+ln.Addr().String()+"/healthz")
	}

	loopOpts := Options{ReconcileEvery: opts.ReconcileEvery, HeartbeatInterval: opts.HeartbeatInterval}
	for ctx.Err() == nil {
		// The announcement lives on the store's session: if etcd lost it
		// (the session expired), announce again before leading.
		if err := st.AnnounceScheduler(ctx); err != nil {
			log.Warn("announce scheduler; retrying", "error", err)
			sleep(ctx, time.Second)
			continue
		}
		l, err := st.Campaign(ctx, ElectionName)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("campaign for leadership failed; retrying", "error", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		log.Info("leading: running the reconciler, node checks and warm pools", "id", st.ID())
		srv.SetLeader(true)
		if opts.Leading != nil {
			opts.Leading(true)
		}
		runLoops(ctx, l, srv, loopOpts, log)
		srv.SetLeader(false)
		if opts.Leading != nil {
			opts.Leading(false)
		}
		rctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = l.Resign(rctx)
		cancel()
		if ctx.Err() == nil {
			log.Warn("lost leadership; campaigning again")
		}
	}
	log.Info("scheduler stopped")
	return nil
}
