package backend

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// families makes the collectors of one Dataplane of family on reg, counts
// one event on each and returns the registration error.
func families(reg prometheus.Registerer, ns, family string) error {
	m := NewMetrics(reg, ns, "iptables")
	c := m.CounterVec("failures_total", "Failures.", "ip_family", "sync")
	g := m.GaugeVec("rules", "Rules.", "ip_family")
	h := m.HistogramVec("operations", "Operations.", []float64{1, 10}, "ip_family")
	c.WithLabelValues(family, "full").Inc()
	g.WithLabelValues(family).Set(3)
	h.WithLabelValues(family).Observe(4)
	return m.Err()
}

func TestMetrics(t *testing.T) {
	type result struct {
		Errs  []string
		Names []string
		Count int
	}
	for _, tc := range []struct {
		name string
		// ns is the namespace of each Dataplane's metrics.
		ns   []string
		want result
	}{
		{"default namespace", []string{""}, result{
			Errs:  []string{"<nil>"},
			Names: []string{"proxykit_iptables_failures_total", "proxykit_iptables_operations", "proxykit_iptables_rules"},
			Count: 3,
		}},
		{"both families share the collectors", []string{"", ""}, result{
			Errs:  []string{"<nil>", "<nil>"},
			Names: []string{"proxykit_iptables_failures_total", "proxykit_iptables_operations", "proxykit_iptables_rules"},
			Count: 6,
		}},
		{"own namespace", []string{"edge"}, result{
			Errs:  []string{"<nil>"},
			Names: []string{"edge_iptables_failures_total", "edge_iptables_operations", "edge_iptables_rules"},
			Count: 3,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			var got result
			for i, ns := range tc.ns {
				got.Errs = append(got.Errs, fmt.Sprint(families(reg, ns, []string{"IPv4", "IPv6"}[i])))
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				got.Names = append(got.Names, mf.GetName())
				got.Count += len(mf.GetMetric())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMetricsConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := NewMetrics(reg, "", "nftables")
	first.CounterVec("a_total", "A.", "ip_family")
	// The same name with other labels is not the other family's
	// collector: the first such error is kept and nothing more is
	// registered.
	m := NewMetrics(reg, "", "nftables")
	m.CounterVec("a_total", "A.", "ip_family", "sync")
	m.GaugeVec("b", "B.", "ip_family").WithLabelValues("IPv6").Set(1)
	// The registry's own text follows; the prefix names the backend.
	msg, _, _ := strings.Cut(fmt.Sprint(m.Err()), ": a previously registered descriptor")
	got := struct {
		Prefix string
		Count  int
	}{msg, testutil.CollectAndCount(reg)}
	want := struct {
		Prefix string
		Count  int
	}{Prefix: "nftables: register metrics"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestMetricsWithoutRegisterer(t *testing.T) {
	if err := families(nil, "", "IPv4"); err != nil {
		t.Errorf("without a Registerer: %v", err)
	}
}
