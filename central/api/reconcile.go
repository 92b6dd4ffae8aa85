package api

import (
	"context"
	"net/http"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/fluxvm/fluxvm/sdk"
)

// reconcile is POST /fleet/reconcile: one pass now, on whichever central
// is asked (passes are safe to run side by side).
func (s *Server) reconcile(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	rep, err := s.recon.Reconcile(ctx)
	if err != nil {
		s.storeError(w, "reconcile", err)
		return
	}
	jsonapi.Write(w, http.StatusOK, rep)
}

// Reconcile runs one reconcile pass (reconciler.Reconciler.Reconcile); the
// leader runs it every -reconcile-secs with its fenced context. At most
// once an hour it also drops the notifications older than
// store.NotificationRetention.
func (s *Server) Reconcile(ctx context.Context) (*sdk.ReconcileReport, error) {
	rep, err := s.recon.Reconcile(ctx)
	if err != nil {
		return rep, err
	}
	now := s.opts.Now()
	if last := s.pruned.Load(); last == 0 || now.Sub(time.Unix(0, last)) >= time.Hour {
		n, err := s.opts.Store.PruneNotifications(ctx, now.Add(-store.NotificationRetention))
		if err != nil {
			s.log.Warn("drop old notifications; retrying next pass", "error", err)
		} else {
			s.pruned.Store(now.UnixNano())
			if n > 0 {
				s.log.Info("dropped old notifications", "count", n)
			}
		}
	}
	return rep, nil
}

// MarkDownNodes marks down the nodes silent for DownAfterIntervals
// heartbeat intervals (reconciler.Reconciler.MarkDown); the leader runs it.
func (s *Server) MarkDownNodes(ctx context.Context) ([]string, error) { return s.recon.MarkDown(ctx) }
