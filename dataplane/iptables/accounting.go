package iptables

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane/internal/backend"
	"github.com/proxykit/proxykit/dataplane/nfacct"
)

// The nfacct counters the dataplane's rules count into, named as
// kube-proxy names them, so that either proxy's counts continue the
// other's and tools written for kube-proxy find them.
const (
	// LocalhostNodePortsCounter counts the packets to a node port on
	// 127.0.0.0/8 that were sent on to the service: kube-proxy's
	// kubeproxy_iptables_localhost_nodeports_accepted_packets_total.
	LocalhostNodePortsCounter = "localhost_nps_accepted_pkts"
	// InvalidDroppedCounter counts the forwarded packets conntrack
	// marked INVALID that were dropped: kube-proxy's
	// kubeproxy_iptables_ct_state_invalid_dropped_packets_total.
	InvalidDroppedCounter = "ct_state_invalid_dropped_pkts"
)

var counterNames = []string{LocalhostNodePortsCounter, InvalidDroppedCounter}

// accounting is the dataplane's side of the nfacct counters: the client
// (dialled at the first full sync unless Config.Accounting gave one),
// and whether the counters could be made, which decides whether the
// counting rules are written.
type accounting struct {
	mu     sync.Mutex
	client nfacct.Interface
	// problem is the last reason the counters were unavailable, logged
	// when it changes; "" while they work.
	problem string
	// down is set after a full sync found the counters unavailable.
	down bool
	// log receives the scrapes' read errors.
	log logr.Logger
}

// clientOrNil returns the client, nil before one was dialled.
func (a *accounting) clientOrNil() nfacct.Interface {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.client
}

// available says whether the counting rules should be written by a
// rendering that syncs nothing: yes, unless a full sync found the
// counters unavailable.
func (a *accounting) available() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.down
}

// ensureCounters makes the counters the rules count into (kube-proxy too
// does it at every full sync, in case someone deleted an unused one),
// dialling the kernel first if need be, on the calling thread: its
// namespace is the one programmed. It reports whether the counting rules
// can be written, logging once each time that changes, and sets the
// nfacct_available gauge.
func (d *Dataplane) ensureCounters(ctx context.Context) bool {
	a := &d.acct
	client := a.clientOrNil()
	var err error
	if client == nil {
		var c *nfacct.Client
		if c, err = nfacct.Dial(); err == nil {
			client = c
			a.mu.Lock()
			a.client = c
			a.mu.Unlock()
		}
	}
	for _, name := range counterNames {
		if err != nil {
			break
		}
		err = client.Ensure(ctx, name)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.down = err != nil
	if a.down {
		d.metrics.nfacctAvailable.Set(0)
	} else {
		d.metrics.nfacctAvailable.Set(1)
	}
	problem := ""
	if err != nil {
		problem = err.Error()
	}
	if problem != a.problem {
		switch {
		case errors.Is(err, nfacct.ErrNotSupported):
			d.log.Info("The kernel has no nfacct (nfnetlink_acct): the packet-accounting rules and their metrics are left out", "err", err)
		case err != nil:
			d.log.Error(err, "Cannot make the nfacct counters: the packet-accounting rules and their metrics are left out until a full sync can")
		default:
			d.log.Info("The nfacct counters are made: the packet-accounting rules are written")
		}
		a.problem = problem
	}
	return err == nil
}

// countersCollector exposes the nfacct counters at scrape time. Both
// families' Dataplanes on one Registerer share it: the counters belong to
// the network namespace, not to a family, and it reads them through the
// first Dataplane that has dialled the kernel.
type countersCollector struct {
	localhost, invalid *prometheus.Desc

	mu      sync.Mutex
	sources []*accounting
}

func newCountersCollector(ns string) *countersCollector {
	if ns == "" {
		ns = backend.DefaultMetricsNamespace
	}
	return &countersCollector{
		localhost: prometheus.NewDesc(ns+"_iptables_localhost_nodeports_accepted_packets_total",
			"Packets to a node port on a loopback address (127.0.0.0/8) that were sent on to the service: the nfacct counter "+LocalhostNodePortsCounter+"; kube-proxy's kubeproxy_iptables_localhost_nodeports_accepted_packets_total.", nil, nil),
		invalid: prometheus.NewDesc(ns+"_iptables_ct_state_invalid_dropped_packets_total",
			"Forwarded packets dropped because conntrack found them INVALID (a workaround for conntrack problems): the nfacct counter "+InvalidDroppedCounter+"; kube-proxy's kubeproxy_iptables_ct_state_invalid_dropped_packets_total.", nil, nil),
	}
}

// registerCounters registers the collector on reg, or joins the one
// another Dataplane registered there.
func registerCounters(reg prometheus.Registerer, ns string, a *accounting) error {
	if reg == nil {
		return nil
	}
	c := newCountersCollector(ns)
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(*countersCollector); ok {
			c, err = existing, nil
		}
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.sources = append(c.sources, a)
	c.mu.Unlock()
	return nil
}

// Describe implements prometheus.Collector.
func (c *countersCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.localhost
	ch <- c.invalid
}

// Collect implements prometheus.Collector: a counter that does not exist
// (nfacct missing, or no full sync yet) has no sample, as in kube-proxy.
func (c *countersCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	sources := slices.Clone(c.sources)
	c.mu.Unlock()
	for _, a := range sources {
		if client := a.clientOrNil(); client != nil {
			c.collectFrom(ch, a, client)
			return
		}
	}
}

// collectFrom sends the counters client reads.
func (c *countersCollector) collectFrom(ch chan<- prometheus.Metric, a *accounting, client nfacct.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), nfacct.DefaultTimeout)
	defer cancel()
	for _, m := range []struct {
		desc *prometheus.Desc
		name string
	}{{c.localhost, LocalhostNodePortsCounter}, {c.invalid, InvalidDroppedCounter}} {
		counter, err := client.Get(ctx, m.name)
		switch {
		case err == nil:
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(counter.Packets))
		case !errors.Is(err, nfacct.ErrNotExist) && !errors.Is(err, nfacct.ErrNotSupported):
			a.log.V(2).Info("Cannot read an nfacct counter for the metrics", "counter", m.name, "err", err)
		}
	}
}
