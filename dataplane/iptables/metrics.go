package iptables

import (
	"bytes"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	v1 "k8s.io/api/core/v1"
)

// The two tables the dataplane writes, as indices of rule counts.
const (
	tableNAT = iota
	tableFilter
	numTables
)

var tableNames = [numTables]string{tableNAT: "nat", tableFilter: "filter"}

// metrics are the dataplane's Prometheus metrics: those of upstream's
// iptables proxier that are about iptables (sync durations are the
// proxykit package's, for every dataplane). Both families'
// Dataplanes share the collectors (labelled ip_family) when they are given
// one Registerer.
type metrics struct {
	fullRestoreFailures    prometheus.Counter
	partialRestoreFailures prometheus.Counter
	repairRestoreFailures  prometheus.Counter
	restoreTimeouts        prometheus.Counter
	rules                  [numTables]prometheus.Gauge
	rulesLastSync          [numTables]prometheus.Gauge
	nfacctAvailable        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer, ns string, family v1.IPFamily) (*metrics, error) {
	r := backend.NewMetrics(reg, ns, "iptables")
	failures := r.CounterVec("restore_failures_total", "iptables-restore runs that failed, by kind of sync (full, partial, or repair after a reconcile found drift).", "ip_family", "sync")
	timeouts := r.CounterVec("restore_timeouts_total", "iptables-restore runs killed at the deadline their input's size allows (also counted as failures).", "ip_family")
	rules := r.GaugeVec("rules", "Rules in the dataplane's own chains, by table; kube-proxy's sync_proxy_rules_iptables_total.", "ip_family", "table")
	last := r.GaugeVec("rules_last_sync", "Rules the last Sync wrote (appended or inserted), by table; kube-proxy's sync_proxy_rules_iptables_last.", "ip_family", "table")
	nfacct := r.GaugeVec("nfacct_available", "1 when the nfacct counters exist and the packet-accounting rules count into them; 0 when the kernel has no nfacct or they could not be made, and the rules are written without the nfacct match (set at each full sync).", "ip_family")
	if err := r.Err(); err != nil {
		return nil, err
	}
	fam := string(family)
	m := &metrics{
		fullRestoreFailures:    failures.WithLabelValues(fam, "full"),
		partialRestoreFailures: failures.WithLabelValues(fam, "partial"),
		repairRestoreFailures:  failures.WithLabelValues(fam, "repair"),
		restoreTimeouts:        timeouts.WithLabelValues(fam),
		nfacctAvailable:        nfacct.WithLabelValues(fam),
	}
	for t, name := range tableNames {
		m.rules[t] = rules.WithLabelValues(fam, name)
		m.rulesLastSync[t] = last.WithLabelValues(fam, name)
	}
	return m, nil
}

// countWritten counts, per table, the rules a restore input appends or
// inserts into the dataplane's own chains: neither the jumps from built-in
// chains nor the canary's rule are service rules.
func countWritten(data []byte, names chainNames) [numTables]int {
	var n [numTables]int
	table := -1
	for line := range bytes.Lines(data) {
		switch {
		case bytes.HasPrefix(line, []byte("*nat")):
			table = tableNAT
		case bytes.HasPrefix(line, []byte("*filter")):
			table = tableFilter
		case table >= 0 && (bytes.HasPrefix(line, []byte("-A ")) || bytes.HasPrefix(line, []byte("-I "))):
			chain, _, _ := bytes.Cut(line[3:], []byte(" "))
			if bytes.HasPrefix(chain, []byte(names.prefix)) && string(chain) != names.canary {
				n[table]++
			}
		}
	}
	return n
}

// ruleCount is the number of rules in a service's own chains, all in nat.
func ruleCount(st *svcState) int {
	n := 0
	if st != nil {
		for _, k := range st.ports {
			n += k.r.own.ruleCount()
		}
	}
	return n
}
