package nftables

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
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
	r := backend.NewMetrics(reg, ns, "nftables")
	failures := r.CounterVec("sync_failures_total", "Transactions nftables rejected, by kind of sync (full or partial); kube-proxy's sync_proxy_rules_nftables_sync_failures_total.", "ip_family", "sync")
	cleanup := r.CounterVec("cleanup_failures_total", "Failed deletions of stale chains; kube-proxy's sync_proxy_rules_nftables_cleanup_failures_total.", "ip_family")
	skipped := r.CounterVec("skipped_total", "Service ports, endpoints, addresses and settings left out as invalid.", "ip_family")
	objects := r.GaugeVec("objects", "Objects in the dataplane's table after the last successful Sync, by kind (element, chain, rule).", "ip_family", "kind")
	ops := r.HistogramVec("sync_operations", "Operations each successful Sync sent to nftables (0 when nothing changed).", []float64{0, 1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}, "ip_family")
	if err := r.Err(); err != nil {
		return nil, err
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
