package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/fluxvm/fluxvm/agent/vmm"
	"github.com/fluxvm/fluxvm/sdk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is the API's Prometheus registry: request counts and durations,
// plus the node's VMs, capacity and drivers read from the manager at each
// scrape. Each API has its own registry (no global state).
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newMetrics(m *vmm.Manager) *metrics {
	mt := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fluxvm_api_requests_total",
			Help: "Node API requests by route (method and path template) and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fluxvm_api_request_duration_seconds",
			Help:    "Node API request durations by route (method and path template).",
			Buckets: prometheus.DefBuckets,
		}, []string{"route"}),
	}
	mt.reg.MustRegister(mt.requests, mt.duration, &nodeCollector{m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return mt
}

func (mt *metrics) observe(route string, status int, d time.Duration) {
	mt.requests.WithLabelValues(route, strconv.Itoa(status)).Inc()
	mt.duration.WithLabelValues(route).Observe(d.Seconds())
}

func (mt *metrics) handler() http.Handler {
	return promhttp.HandlerFor(mt.reg, promhttp.HandlerOpts{})
}

var (
	descVMs = prometheus.NewDesc("fluxvm_node_vms",
		"VMs on this node by state.", []string{"state"}, nil)
	descVCPUs = prometheus.NewDesc("fluxvm_node_capacity_vcpus",
		"vCPUs the node offers VMs: total, reserved for the host, free.", []string{"kind"}, nil)
	descMemory = prometheus.NewDesc("fluxvm_node_capacity_memory_mib",
		"Memory (MiB) the node offers VMs: total, reserved for the host, free.", []string{"kind"}, nil)
	descMacOS = prometheus.NewDesc("fluxvm_node_capacity_macos_slots",
		"macOS guest slots: total, reserved, free.", []string{"kind"}, nil)
	descDriverUp = prometheus.NewDesc("fluxvm_driver_up",
		"1 when the driver plugin process is up and reports health, else 0.", []string{"driver"}, nil)
	descDriverRestarts = prometheus.NewDesc("fluxvm_driver_restarts_total",
		"Times the driver plugin process was restarted.", []string{"driver"}, nil)
)

// nodeCollector reads the node's state from the manager at scrape time.
type nodeCollector struct{ m *vmm.Manager }

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descVMs, descVCPUs, descMemory, descMacOS, descDriverUp, descDriverRestarts} {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Every known state is reported, 0 included, so series do not vanish.
	counts := map[string]int{sdk.StateCreating: 0, sdk.StateCreated: 0, sdk.StateRunning: 0, sdk.StatePaused: 0, sdk.StateStopped: 0, sdk.StateLost: 0}
	if vms, err := c.m.List(ctx); err == nil {
		for _, v := range vms {
			counts[v.State]++
		}
	}
	for state, n := range counts {
		ch <- prometheus.MustNewConstMetric(descVMs, prometheus.GaugeValue, float64(n), state)
	}
	h := c.m.Health()
	for _, r := range []struct {
		kind string
		res  sdk.Resources
	}{{"total", h.Capacity.Total}, {"reserved", h.Capacity.Reserved}, {"free", h.Capacity.Free}} {
		ch <- prometheus.MustNewConstMetric(descVCPUs, prometheus.GaugeValue, float64(r.res.VCPUs), r.kind)
		ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(r.res.MemoryMiB), r.kind)
		ch <- prometheus.MustNewConstMetric(descMacOS, prometheus.GaugeValue, float64(r.res.MacOSSlots), r.kind)
	}
	for _, d := range h.Drivers {
		up := 0.0
		if d.Health != "down" {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descDriverUp, prometheus.GaugeValue, up, d.Name)
		ch <- prometheus.MustNewConstMetric(descDriverRestarts, prometheus.CounterValue, float64(d.Restarts), d.Name)
	}
}
