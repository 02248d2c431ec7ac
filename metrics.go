package proxykit

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are kube-proxy's core metrics (subsystem kubeproxy there) under
// the configured namespace, plus what proxykit does that kube-proxy does
// not. They are created even without a Registerer, so that recording never
// needs a nil check; they are then simply never collected.
type metrics struct {
	syncDuration       *prometheus.HistogramVec
	syncFailures       *prometheus.CounterVec
	lastSync           *prometheus.GaugeVec
	lastQueued         prometheus.Gauge
	changesTotal       *prometheus.CounterVec
	changesPending     prometheus.Gauge
	servicePorts       *prometheus.GaugeVec
	serviceEndpoints   *prometheus.GaugeVec
	skippedTotal       *prometheus.CounterVec
	networkProgramming *prometheus.HistogramVec
	conntrackDeleted   *prometheus.CounterVec
	conntrackFailures  *prometheus.CounterVec
	conntrackPending   *prometheus.GaugeVec
	healthz            *prometheus.CounterVec
	livez              *prometheus.CounterVec
	healthCheckPorts   *prometheus.GaugeVec
	healthCheckErrors  *prometheus.CounterVec
	driftRepairs       *prometheus.CounterVec
	kernelChanges      *prometheus.CounterVec
}

// networkProgrammingBuckets are kube-proxy's: 0.25s steps to 1s, 1s steps to
// a minute, then coarser up to 5 minutes.
func networkProgrammingBuckets() []float64 {
	b := []float64{0.25, 0.5}
	b = append(b, prometheus.LinearBuckets(1, 1, 59)...)
	b = append(b, prometheus.LinearBuckets(60, 5, 12)...)
	b = append(b, prometheus.LinearBuckets(120, 30, 7)...)
	slices.Sort(b)
	return slices.Compact(b)
}

func newMetrics(ns string, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	m.syncMetrics(ns)
	m.programmedMetrics(ns)
	m.healthMetrics(ns)
	if reg == nil {
		return m, nil
	}
	all := []prometheus.Collector{
		m.syncDuration, m.syncFailures, m.lastSync, m.lastQueued, m.changesTotal,
		m.changesPending, m.servicePorts, m.serviceEndpoints, m.skippedTotal,
		m.networkProgramming, m.conntrackDeleted, m.conntrackFailures,
		m.conntrackPending, m.healthz, m.livez, m.healthCheckPorts, m.healthCheckErrors,
		m.driftRepairs, m.kernelChanges,
	}
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			// Leave the registerer as it was, so that the caller can
			// retry with another namespace.
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
	}
	return m, nil
}

// syncMetrics creates the metrics of syncs and of the changes that ask for
// them.
func (m *metrics) syncMetrics(ns string) {
	m.syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "sync_proxy_rules_duration_seconds",
		Help:    "Time one dataplane took to program a State (sync full or partial), or to read back and repair what it programmed (sync reconcile).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"ip_family", "dataplane", "sync"})
	m.syncFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "sync_proxy_rules_failures_total",
		Help: "Dataplane syncs that failed.",
	}, []string{"ip_family", "dataplane"})
	m.lastSync = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "sync_proxy_rules_last_timestamp_seconds",
		Help: "Time of the last successful sync of a dataplane, in Unix seconds.",
	}, []string{"ip_family", "dataplane"})
	m.lastQueued = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "sync_proxy_rules_last_queued_timestamp_seconds",
		Help: "Time a change last asked for a sync, in Unix seconds.",
	})
	m.changesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "sync_proxy_rules_changes_total",
		Help: "Object updates received from the sources, by kind.",
	}, []string{"kind"})
	m.changesPending = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "sync_proxy_rules_changes_pending",
		Help: "Object updates received since the last sync that change what is programmed.",
	})
}

// programmedMetrics creates the metrics of what is programmed and of the
// conntrack cleanup it owes.
func (m *metrics) programmedMetrics(ns string) {
	family := []string{"ip_family"}
	m.servicePorts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "programmed_service_ports",
		Help: "Service ports in the State last programmed by every dataplane of a family.",
	}, family)
	m.serviceEndpoints = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "programmed_services_with_endpoints",
		Help: "Services with endpoints in the State last programmed by every dataplane of a family.",
	}, family)
	m.skippedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "objects_skipped_total",
		Help: "Objects or parts of objects skipped as invalid, by kind and reason.",
	}, []string{"kind", "reason"})
	m.networkProgramming = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "network_programming_duration_seconds",
		Help:    "Time from an endpoints change (its last-change-trigger-time) to its programming.",
		Buckets: networkProgrammingBuckets(),
	}, family)
	m.conntrackDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "conntrack_deleted_entries_total",
		Help: "Stale conntrack entries deleted.",
	}, family)
	m.conntrackFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "conntrack_cleanup_failures_total",
		Help: "Conntrack cleanups that failed (and are retried).",
	}, family)
	m.conntrackPending = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "conntrack_cleanup_pending",
		Help: "Stale frontends, endpoints and ports whose conntrack cleanup is owed.",
	}, family)
}

// healthMetrics creates the metrics of the health endpoints and of the
// dataplanes' repairs.
func (m *metrics) healthMetrics(ns string) {
	family := []string{"ip_family"}
	m.healthz = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "proxy_healthz_total",
		Help: "/healthz answers, by HTTP code.",
	}, []string{"code"})
	m.livez = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "proxy_livez_total",
		Help: "/livez answers, by HTTP code.",
	}, []string{"code"})
	m.healthCheckPorts = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "health_check_node_ports",
		Help: "Health-check node ports being served.",
	}, family)
	m.healthCheckErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "health_check_node_port_listen_failures_total",
		Help: "Health-check node ports that could not be opened (retried next sync).",
	}, family)
	m.driftRepairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "dataplane_drift_repairs_total",
		Help: "Objects (chains, jumps, elements) a dataplane found changed by someone else and repaired.",
	}, []string{"ip_family", "dataplane"})
	m.kernelChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "dataplane_kernel_changes_detected_total",
		Help: "Times a dataplane's canary showed that someone else flushed or replaced its rules.",
	}, []string{"ip_family", "dataplane"})
}

// skipped is the Builder's OnSkip hook.
func (m *metrics) skipped(kind, reason string) {
	m.skippedTotal.WithLabelValues(kind, reason).Inc()
}

func (m *metrics) change(kind string, due bool) {
	m.changesTotal.WithLabelValues(kind).Inc()
	if due {
		m.changesPending.Inc()
	}
}

// countCodes counts h's answers in c by HTTP status code.
func countCodes(h http.Handler, c *prometheus.CounterVec) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h.ServeHTTP(sw, r)
		c.WithLabelValues(strconv.Itoa(sw.code)).Inc()
	})
}

// statusWriter remembers the status code written through it.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}
