package iptables

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
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
}

func newMetrics(reg prometheus.Registerer, ns string, family v1.IPFamily) (*metrics, error) {
	const sub = "iptables"
	failures := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "restore_failures_total",
		Help: "iptables-restore runs that failed, by kind of sync (full, partial, or repair after a reconcile found drift).",
	}, []string{"ip_family", "sync"})
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Subsystem: sub, Name: "restore_timeouts_total",
		Help: "iptables-restore runs killed at the deadline their input's size allows (also counted as failures).",
	}, []string{"ip_family"})
	rules := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "rules",
		Help: "Rules in the dataplane's own chains, by table; kube-proxy's sync_proxy_rules_iptables_total.",
	}, []string{"ip_family", "table"})
	last := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Subsystem: sub, Name: "rules_last_sync",
		Help: "Rules the last Sync wrote (appended or inserted), by table; kube-proxy's sync_proxy_rules_iptables_last.",
	}, []string{"ip_family", "table"})
	if reg != nil {
		var err error
		if failures, err = register(reg, failures); err != nil {
			return nil, err
		}
		if timeouts, err = register(reg, timeouts); err != nil {
			return nil, err
		}
		if rules, err = register(reg, rules); err != nil {
			return nil, err
		}
		if last, err = register(reg, last); err != nil {
			return nil, err
		}
	}
	fam := string(family)
	m := &metrics{
		fullRestoreFailures:    failures.WithLabelValues(fam, "full"),
		partialRestoreFailures: failures.WithLabelValues(fam, "partial"),
		repairRestoreFailures:  failures.WithLabelValues(fam, "repair"),
		restoreTimeouts:        timeouts.WithLabelValues(fam),
	}
	for t, name := range tableNames {
		m.rules[t] = rules.WithLabelValues(fam, name)
		m.rulesLastSync[t] = last.WithLabelValues(fam, name)
	}
	return m, nil
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
	return c, fmt.Errorf("iptables: register metrics: %w", err)
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
