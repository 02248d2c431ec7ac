package nftables

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
)

// metrics are the dataplane's Prometheus metrics: those of upstream's
// nftables proxier that are about nftables (sync durations are the
// proxykit package's, for every dataplane). Both families' Dataplanes
// share the collectors (labelled ip_family) when they are given one
// Registerer.
type metrics struct {
	fullFailures    prometheus.Counter
	partialFailures prometheus.Counter
	cleanupFailures prometheus.Counter
	skipped         prometheus.Counter
	elements        prometheus.Gauge
	chains          prometheus.Gauge
	rules           prometheus.Gauge
	operations      prometheus.Observer
}

func newMetrics(reg prometheus.Registerer, ns string, family v1.IPFamily) (*metrics, error) {
	const sub = "nftables"
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "sync_failures_total",
		Help: "Transactions nftables rejected, by kind of sync (full or partial); kube-proxy's sync_proxy_rules_nftables_sync_failures_total.",
	}, []string{"ip_family", "sync"})
	cleanup := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "cleanup_failures_total",
		Help: "Failed deletions of stale chains; kube-proxy's sync_proxy_rules_nftables_cleanup_failures_total.",
	}, []string{"ip_family"})
	skipped := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "skipped_total",
		Help: "Service ports, endpoints, addresses and settings left out as invalid.",
	}, []string{"ip_family"})
	objects := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "objects",
		Help: "Objects in the dataplane's table after the last successful Sync, by kind (element, chain, rule).",
	}, []string{"ip_family", "kind"})
	ops := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Subsystem: sub, Name: "sync_operations",
		Help:    "Operations each successful Sync sent to nftables (0 when nothing changed).",
		Buckets: []float64{0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576},
	}, []string{"ip_family"})
	if reg != nil {
		var err error
		if failures, err = register(reg, failures); err != nil {
			return nil, err
		}
		if cleanup, err = register(reg, cleanup); err != nil {
			return nil, err
		}
		if skipped, err = register(reg, skipped); err != nil {
			return nil, err
		}
		if objects, err = register(reg, objects); err != nil {
			return nil, err
		}
		if ops, err = register(reg, ops); err != nil {
			return nil, err
		}
	}
	fam := string(family)
	return &metrics{
		fullFailures:    failures.WithLabelValues(fam, "full"),
		partialFailures: failures.WithLabelValues(fam, "partial"),
		cleanupFailures: cleanup.WithLabelValues(fam),
		skipped:         skipped.WithLabelValues(fam),
		elements:        objects.WithLabelValues(fam, "element"),
		chains:          objects.WithLabelValues(fam, "chain"),
		rules:           objects.WithLabelValues(fam, "rule"),
		operations:      ops.WithLabelValues(fam),
	}, nil
}

// register registers c, or returns the collector of the same description
// registered before (by the other family's Dataplane).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return c, nil
	case errors.As(err, &are):
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("nftables: register metrics: %w", err)
}
