package api

import (
	"context"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/central/vms"
	"github.com/prometheus/client_golang/prometheus"
)

// fleetMetrics are the placement, reservation, leadership and node metrics,
// registered on the server's registry next to the request metrics.
type fleetMetrics struct {
	placements   *prometheus.CounterVec
	reservations *prometheus.CounterVec
	// held is how long a reservation lived: from Reserve's return to its
	// commit or release, which is mostly the node's create.
	held   prometheus.Histogram
	leader prometheus.Gauge
}

func newFleetMetrics(reg prometheus.Registerer, st *store.Store) *fleetMetrics {
	m := &fleetMetrics{
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fluxvm_central_placements_total",
			Help: "VM placements by this central: placed (a node chosen and room reserved), no_placement, quota.",
		}, []string{"result"}),
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fluxvm_central_reservations_total",
			Help: "Reservations made by this central that ended: committed (a ledger entry) or released.",
		}, []string{"result"}),
		held: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fluxvm_central_reservation_seconds",
			Help:    "How long reservations were held, from reserve to commit or release (mostly the node's create).",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fluxvm_central_leader",
			Help: "1 while this central leads the election and runs the reconciler and node checks, else 0.",
		}),
	}
	// Every label value exists from the start, so a rate over a fresh
	// central is 0 rather than absent.
	for _, r := range []string{vms.PlacementPlaced, vms.PlacementNoPlacement, vms.PlacementQuota} {
		m.placements.WithLabelValues(r)
	}
	for _, r := range []string{vms.ReservationCommitted, vms.ReservationReleased} {
		m.reservations.WithLabelValues(r)
	}
	reg.MustRegister(m.placements, m.reservations, m.held, m.leader, nodeCollector{st})
	return m
}

// Placed counts a placement's outcome (vms.Metrics).
func (m *fleetMetrics) Placed(result string) { m.placements.WithLabelValues(result).Inc() }

// ReservationEnded counts a reservation's end and how long it was held (vms.Metrics).
func (m *fleetMetrics) ReservationEnded(result string, reserved time.Time) {
	m.reservations.WithLabelValues(result).Inc()
	m.held.Observe(time.Since(reserved).Seconds())
}

// SetLeader says whether this central leads (fluxvm_central_leader); central
// sets it as it wins and loses the election.
func (s *Server) SetLeader(leading bool) {
	v := 0.0
	if leading {
		v = 1
	}
	s.fleetProm.leader.Set(v)
	s.leading.Store(leading)
}

var descNodes = prometheus.NewDesc("fluxvm_central_nodes",
	"Nodes in the store, by state (up or down).", []string{"state"}, nil)

// nodeCollector counts nodes at scrape time, from etcd, as tenantCollector
// counts tenants: every central reports the fleet's figure.
type nodeCollector struct{ st *store.Store }

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descNodes }

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ns, err := c.st.ListNodes(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descNodes, err)
		return
	}
	var up int
	for _, n := range ns {
		if n.State == store.NodeUp {
			up++
		}
	}
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(up), store.NodeUp)
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(len(ns)-up), store.NodeDown)
}
