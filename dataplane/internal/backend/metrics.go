package backend

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMetricsNamespace is the metric name prefix a Config's ""
// MetricsNamespace means.
const DefaultMetricsNamespace = "proxykit"

// Metrics makes a backend's collectors, named namespace_subsystem_name,
// and registers them. Both families' Dataplanes may be given one
// Registerer: a collector registered before (by the other family's
// Dataplane) is then shared, its series told apart by their ip_family
// label. After the first error Metrics registers nothing more, and Err
// returns that error.
type Metrics struct {
	reg       prometheus.Registerer
	namespace string
	subsystem string
	err       error
}

// NewMetrics returns a Metrics registering on reg (nil registers none)
// collectors of subsystem, the backend's name, under namespace ("" means
// DefaultMetricsNamespace).
func NewMetrics(reg prometheus.Registerer, namespace, subsystem string) *Metrics {
	if namespace == "" {
		namespace = DefaultMetricsNamespace
	}
	return &Metrics{reg: reg, namespace: namespace, subsystem: subsystem}
}

// Err returns the first error of a registration, naming the backend.
func (m *Metrics) Err() error {
	if m.err != nil {
		return fmt.Errorf("%s: register metrics: %w", m.subsystem, m.err)
	}
	return nil
}

// CounterVec returns the registered counter vector name with labels.
func (m *Metrics) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return register(m, prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: m.namespace, Subsystem: m.subsystem, Name: name, Help: help,
	}, labels))
}

// GaugeVec returns the registered gauge vector name with labels.
func (m *Metrics) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return register(m, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: m.namespace, Subsystem: m.subsystem, Name: name, Help: help,
	}, labels))
}

// HistogramVec returns the registered histogram vector name with buckets
// and labels.
func (m *Metrics) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return register(m, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: m.namespace, Subsystem: m.subsystem, Name: name, Help: help, Buckets: buckets,
	}, labels))
}

// register registers c, or returns the collector of the same description
// registered before.
func register[C prometheus.Collector](m *Metrics, c C) C {
	if m.reg == nil || m.err != nil {
		return c
	}
	err := m.reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	m.err = err
	return c
}
