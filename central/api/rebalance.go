package api

import (
	"net/http"

	"github.com/fluxvm/fluxvm/jsonapi"
)

// Rebalance plan defaults and bounds.
const (
	defaultHighWater = 0.85
	defaultMaxMoves  = 10
	maxRebalanceMove = 1000
)

// rebalancePlan is GET /fleet/rebalance/plan?high_water=0.85&max_moves=10, a
// dry run: which reschedulable VMs (a kept spec) or ephemeral VMs (a TTL or
// label fluxvm.dev/ephemeral=true, as a drain decides) could leave the nodes
// above high_water, and where each fits (central/drainer). Nothing is
// changed.
func (s *Server) rebalancePlan(w http.ResponseWriter, r *http.Request) {
	hw, ok := jsonapi.FloatParam(w, r, "high_water", defaultHighWater, 0.01, 1)
	if !ok {
		return
	}
	maxMoves, ok := jsonapi.IntParam(w, r, "max_moves", defaultMaxMoves, 1, maxRebalanceMove)
	if !ok {
		return
	}
	plan, err := s.drainer.Plan(r.Context(), hw, maxMoves)
	if err != nil {
		s.drainerError(w, r, err)
		return
	}
	jsonapi.Write(w, http.StatusOK, plan)
}
