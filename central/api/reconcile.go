package api

import (
	"context"
	"net/http"
	"time"

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
// leader runs it every -reconcile-secs with its fenced context.
func (s *Server) Reconcile(ctx context.Context) (*sdk.ReconcileReport, error) {
	return s.recon.Reconcile(ctx)
}

// MarkDownNodes marks down the nodes silent for DownAfterIntervals
// heartbeat intervals (reconciler.Reconciler.MarkDown); the leader runs it.
func (s *Server) MarkDownNodes(ctx context.Context) ([]string, error) { return s.recon.MarkDown(ctx) }
