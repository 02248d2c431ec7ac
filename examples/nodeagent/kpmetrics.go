package main

import (
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// kubeProxyView is a prometheus.Gatherer that shows the proxykit metrics
// of another Gatherer under kube-proxy's names, labels and buckets, so that
// kube-proxy's dashboards and alerts read the agent unchanged. It keeps no
// state: each scrape translates what the proxy's registry holds then.
//
// Where proxykit labels by dataplane and sync kind and kube-proxy does
// not, series are merged: histograms summed bucket by bucket (proxykit's
// sync and network-programming buckets are kube-proxy's), counters summed,
// and a family's last-sync time is that of its dataplane that synced
// longest ago (the family is synced when all of them are).
type kubeProxyView struct {
	from prometheus.Gatherer
	// ns is the proxykit metrics' namespace.
	ns string
	// families are the proxied IP families, for the one metric proxykit
	// does not label by family.
	families []string
}

// translation turns the series of one proxykit metric into one
// kube-proxy metric.
type translation struct {
	from, to, help string
	// keep are the labels kube-proxy has; others are merged away.
	keep []string
	// only, if set, selects the series merged: label name and its
	// values, separated by "|".
	only [2]string
	// minimum merges gauges by their least value instead of their sum.
	minimum bool
	// perFamily copies an unlabelled gauge to each proxied family.
	perFamily bool
}

func (v *kubeProxyView) translations() []translation {
	fam := []string{"ip_family"}
	return []translation{
		{from: "sync_proxy_rules_duration_seconds", to: "sync_proxy_rules_duration_seconds", keep: fam, only: [2]string{"sync", "full|partial"}, help: "SyncProxyRules latency in seconds"},
		{from: "sync_proxy_rules_duration_seconds", to: "sync_full_proxy_rules_duration_seconds", keep: fam, only: [2]string{"sync", "full"}, help: "SyncProxyRules latency in seconds for full resyncs"},
		{from: "sync_proxy_rules_duration_seconds", to: "sync_partial_proxy_rules_duration_seconds", keep: fam, only: [2]string{"sync", "partial"}, help: "SyncProxyRules latency in seconds for partial resyncs"},
		{from: "sync_proxy_rules_last_timestamp_seconds", to: "sync_proxy_rules_last_timestamp_seconds", keep: fam, minimum: true, help: "The last time proxy rules were successfully synced"},
		{from: "sync_proxy_rules_last_queued_timestamp_seconds", to: "sync_proxy_rules_last_queued_timestamp_seconds", keep: fam, perFamily: true, help: "The last time a sync of proxy rules was queued"},
		{from: "sync_proxy_rules_changes_total", to: "sync_proxy_rules_endpoint_changes_total", only: [2]string{"kind", "EndpointSlice"}, help: "Cumulative proxy rules Endpoint changes"},
		{from: "sync_proxy_rules_changes_total", to: "sync_proxy_rules_service_changes_total", only: [2]string{"kind", "Service"}, help: "Cumulative proxy rules Service changes"},
		{from: "network_programming_duration_seconds", to: "network_programming_duration_seconds", keep: fam, help: "In Cluster Network Programming Latency in seconds"},
		{from: "proxy_healthz_total", to: "proxy_healthz_total", keep: []string{"code"}, help: "Cumulative proxy healthz HTTP status"},
		{from: "proxy_livez_total", to: "proxy_livez_total", keep: []string{"code"}, help: "Cumulative proxy livez HTTP status"},
		{from: "iptables_rules", to: "sync_proxy_rules_iptables_total", keep: []string{"ip_family", "table"}, help: "Total number of iptables rules owned by kube-proxy"},
		{from: "iptables_rules_last_sync", to: "sync_proxy_rules_iptables_last", keep: []string{"ip_family", "table"}, help: "Number of iptables rules written by kube-proxy in last sync"},
		{from: "iptables_restore_failures_total", to: "sync_proxy_rules_iptables_restore_failures_total", keep: fam, help: "Cumulative proxy iptables restore failures"},
		{from: "iptables_restore_failures_total", to: "sync_proxy_rules_iptables_partial_restore_failures_total", keep: fam, only: [2]string{"sync", "partial"}, help: "Cumulative proxy iptables partial restore failures"},
		// The iptables dataplane reads these nfacct counters at scrape
		// time; they have no sample while the counter does not exist.
		{from: "iptables_localhost_nodeports_accepted_packets_total", to: "iptables_localhost_nodeports_accepted_packets_total", help: "Packets to node ports on loopback addresses that iptables let through to the service"},
		{from: "iptables_ct_state_invalid_dropped_packets_total", to: "iptables_ct_state_invalid_dropped_packets_total", help: "Packets iptables dropped because conntrack marked them INVALID, a workaround for conntrack problems"},
	}
}

// Gather implements prometheus.Gatherer.
func (v *kubeProxyView) Gather() ([]*dto.MetricFamily, error) {
	src, err := v.from.Gather()
	if err != nil {
		return nil, err
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range src {
		byName[mf.GetName()] = mf
	}
	var out []*dto.MetricFamily
	for _, t := range v.translations() {
		mf, ok := byName[v.ns+"_"+t.from]
		if !ok {
			continue
		}
		if got := v.translate(t, mf); len(got.Metric) > 0 {
			out = append(out, got)
		}
	}
	return out, nil
}

func (v *kubeProxyView) translate(t translation, mf *dto.MetricFamily) *dto.MetricFamily {
	out := &dto.MetricFamily{Name: proto.String("kubeproxy_" + t.to), Help: proto.String(t.help), Type: mf.Type}
	groups := map[string]*dto.Metric{}
	for _, m := range mf.Metric {
		if t.only[0] != "" && !slices.Contains(strings.Split(t.only[1], "|"), label(m, t.only[0])) {
			continue
		}
		if t.perFamily {
			for _, f := range v.families {
				out.Metric = append(out.Metric, withLabels(m, map[string]string{"ip_family": f}))
			}
			continue
		}
		kept := map[string]string{}
		var key []string
		for _, l := range t.keep {
			kept[l] = label(m, l)
			key = append(key, kept[l])
		}
		g, ok := groups[strings.Join(key, "\x00")]
		if !ok {
			groups[strings.Join(key, "\x00")] = withLabels(m, kept)
			continue
		}
		merge(g, m, t.minimum)
	}
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		out.Metric = append(out.Metric, groups[k])
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// withLabels copies m's value under the given labels, sorted by name.
func withLabels(m *dto.Metric, labels map[string]string) *dto.Metric {
	c := proto.Clone(m).(*dto.Metric)
	c.Label = nil
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		c.Label = append(c.Label, &dto.LabelPair{Name: proto.String(k), Value: proto.String(labels[k])})
	}
	return c
}

// merge adds m's value into into: sums for counters and histograms (whose
// buckets are the same), the sum or least value for gauges.
func merge(into, m *dto.Metric, minimum bool) {
	switch {
	case into.Counter != nil:
		into.Counter.Value = proto.Float64(into.Counter.GetValue() + m.Counter.GetValue())
	case into.Gauge != nil && minimum:
		into.Gauge.Value = proto.Float64(min(into.Gauge.GetValue(), m.Gauge.GetValue()))
	case into.Gauge != nil:
		into.Gauge.Value = proto.Float64(into.Gauge.GetValue() + m.Gauge.GetValue())
	case into.Histogram != nil:
		h, o := into.Histogram, m.Histogram
		h.SampleCount = proto.Uint64(h.GetSampleCount() + o.GetSampleCount())
		h.SampleSum = proto.Float64(h.GetSampleSum() + o.GetSampleSum())
		for i, b := range h.Bucket {
			if i < len(o.Bucket) && o.Bucket[i].GetUpperBound() == b.GetUpperBound() {
				b.CumulativeCount = proto.Uint64(b.GetCumulativeCount() + o.Bucket[i].GetCumulativeCount())
			}
		}
	}
}
