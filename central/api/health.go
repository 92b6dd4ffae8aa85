package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/central/store"
	"github.com/fluxvm/fluxvm/jsonapi"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is a server's Prometheus registry with the request metrics. Each
// server has its own registry (no global state), so two centrals in one test
// process do not mix their figures.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(st *store.Store) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fluxvm_central_requests_total",
			Help: "Fleet API requests by route (method and path template, or unmatched) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fluxvm_central_request_duration_seconds",
			Help:    "Fleet API request durations by route (method and path template, or unmatched).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
	}
	m.reg.MustRegister(m.requests, m.duration, tenantCollector{st},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Metrics is the server's Prometheus registry, served by GET /metrics. Other
// parts of central (placement, reservations, leadership) register their
// collectors here.
func (s *Server) Metrics() *prometheus.Registry { return s.prom.reg }

var descTenants = prometheus.NewDesc("fluxvm_central_tenants",
	"Tenants in the store, by state (enabled or disabled).", []string{"state"}, nil)

// tenantCollector counts tenants at scrape time, from etcd: every central
// reports the fleet's figure, whoever created the tenants.
type tenantCollector struct{ st *store.Store }

func (c tenantCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descTenants }

func (c tenantCollector) Collect(ch chan<- prometheus.Metric) {
	if c.st == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ts, err := c.st.ListTenants(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descTenants, err)
		return
	}
	var disabled int
	for _, t := range ts {
		if t.Disabled {
			disabled++
		}
	}
	ch <- prometheus.MustNewConstMetric(descTenants, prometheus.GaugeValue, float64(len(ts)-disabled), "enabled")
	ch <- prometheus.MustNewConstMetric(descTenants, prometheus.GaugeValue, float64(disabled), "disabled")
}

// instrument counts and times every request under its route's name, and
// turns a handler's panic into a 500 (the server keeps serving).
func (s *Server) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &codeWriter{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic in handler", "route", route, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if rw.code == 0 {
					jsonapi.WriteError(rw, http.StatusInternalServerError, "internal error", "central's log has the details")
				}
			}
			code := rw.code
			if code == 0 {
				code = http.StatusOK
			}
			s.prom.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
			s.prom.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		next.ServeHTTP(rw, r)
	})
}

// codeWriter remembers the status written. It passes Flush on and unwraps
// (http.ResponseController), so streaming handlers work behind it.
type codeWriter struct {
	http.ResponseWriter
	code int
}

func (w *codeWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *codeWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *codeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		f.Flush()
	}
}

func (w *codeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection to a WebSocket upgrade (tunnels, screens),
// which answers 101 itself.
func (w *codeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("the response writer cannot be hijacked")
	}
	if w.code == 0 {
		w.code = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}

// Health is the body of GET /healthz.
type Health struct {
	// Status is "ok", or "degraded" when etcd does not answer (with 503).
	Status  string `json:"status"`
	Version string `json:"version"`
	// Etcd is "ok" or "unavailable" (the reason is in central's log: this
	// route is public and must not show endpoints or errors).
	Etcd string `json:"etcd"`
	// Leader says whether this central runs the background loops now.
	Leader bool `json:"leader"`
}

// healthz answers whether this central can serve: it reads one key from etcd
// (a linearizable read, so it needs the etcd cluster's quorum).
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	h := Health{Status: "ok", Version: s.opts.Version, Etcd: "ok", Leader: s.leading.Load()}
	if _, err := s.opts.Store.Client().Get(ctx, s.opts.Store.Prefix()+"healthz"); err != nil {
		s.log.Warn("health check: etcd does not answer", "error", err)
		h.Status, h.Etcd = "degraded", "unavailable"
		jsonapi.Write(w, http.StatusServiceUnavailable, h)
		return
	}
	jsonapi.Write(w, http.StatusOK, h)
}

// metrics serves the registry (GET /metrics, operator only).
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(s.prom.reg, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}
