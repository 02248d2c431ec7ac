package userspace

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// metrics are the dataplane's Prometheus collectors. Per-port series are
// labelled ip_family, service ("ns/name:port") and protocol, and deleted
// when the port goes.
type metrics struct {
	family       string
	active       *prometheus.GaugeVec
	accepted     *prometheus.CounterVec
	dialFailures *prometheus.CounterVec
	bytes        *prometheus.CounterVec
	refused      *prometheus.CounterVec
	bindFailures prometheus.Counter
	unbound      prometheus.Gauge
}

// portMetrics are one port's series.
type portMetrics struct {
	active       prometheus.Gauge
	accepted     prometheus.Counter
	dialFailures prometheus.Counter
	// toEndpoint and toClient count payload bytes each way.
	toEndpoint, toClient prometheus.Counter
	// reset counts connections reset without endpoints or past the
	// bound; dropped those dropped by policy.
	reset, dropped, overLimit prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, ns string, family v1.IPFamily) (*metrics, error) {
	r := backend.NewMetrics(reg, ns, "userspace")
	port := []string{"ip_family", "service", "protocol"}
	m := &metrics{
		family:       string(family),
		active:       r.GaugeVec("active_connections", "Open TCP connections and UDP sessions, by service port.", port...),
		accepted:     r.CounterVec("accepted_total", "TCP connections and UDP sessions forwarded to an endpoint, by service port.", port...),
		dialFailures: r.CounterVec("dial_failures_total", "Failed attempts to connect to an endpoint, by service port.", port...),
		bytes:        r.CounterVec("bytes_total", "Payload bytes forwarded, by service port and direction (to_endpoint, to_client).", append(port, "direction")...),
		refused:      r.CounterVec("refused_total", "Connections not forwarded, by service port and reason (no_endpoints, dropped, limit).", append(port, "reason")...),
	}
	bind := r.CounterVec("bind_failures_total", "Attempts to listen for a frontend that failed (each is retried).", "ip_family")
	unbound := r.GaugeVec("unbound_frontends", "Frontends with endpoints that could not listen, waiting for a retry.", "ip_family")
	if err := r.Err(); err != nil {
		return nil, err
	}
	m.bindFailures = bind.WithLabelValues(m.family)
	m.unbound = unbound.WithLabelValues(m.family)
	return m, nil
}

func (m *metrics) labels(n servicemodel.PortName) []string {
	return []string{m.family, n.String(), string(n.Protocol)}
}

func (m *metrics) port(n servicemodel.PortName) portMetrics {
	l := m.labels(n)
	with := func(v *prometheus.CounterVec, extra string) prometheus.Counter {
		return v.WithLabelValues(append(l[:3:3], extra)...)
	}
	return portMetrics{
		active:       m.active.WithLabelValues(l...),
		accepted:     m.accepted.WithLabelValues(l...),
		dialFailures: m.dialFailures.WithLabelValues(l...),
		toEndpoint:   with(m.bytes, "to_endpoint"),
		toClient:     with(m.bytes, "to_client"),
		reset:        with(m.refused, "no_endpoints"),
		dropped:      with(m.refused, "dropped"),
		overLimit:    with(m.refused, "limit"),
	}
}

// forget deletes a removed port's series.
func (m *metrics) forget(n servicemodel.PortName) {
	l := m.labels(n)
	m.active.DeleteLabelValues(l...)
	m.accepted.DeleteLabelValues(l...)
	m.dialFailures.DeleteLabelValues(l...)
	for _, d := range []string{"to_endpoint", "to_client"} {
		m.bytes.DeleteLabelValues(append(l[:3:3], d)...)
	}
	for _, r := range []string{"no_endpoints", "dropped", "limit"} {
		m.refused.DeleteLabelValues(append(l[:3:3], r)...)
	}
}
