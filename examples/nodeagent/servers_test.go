package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get fetches url, retrying while the agent starts, for at most 20s.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, string(body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServersOfARunningAgent scrapes what a running agent (a dry run
// following manifests, needing no privileges) serves, as kube-proxy's
// probes, dashboards and curl would.
func TestServersOfARunningAgent(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	for _, f := range []string{"dns.yaml", "node.yaml"} {
		data, err := demoFS.ReadFile("demo/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// An object no API server stores: the source refuses it and /metrics
	// counts it.
	refused := "apiVersion: v1\nkind: Service\nmetadata:\n  name: " + strings.Repeat("s", 64) + "\nspec:\n  clusterIP: 10.96.9.9\n  ports:\n  - port: 80\n"
	if err := os.WriteFile(filepath.Join(dir, "refused.yaml"), []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	metrics, healthz := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"--manifests", dir, "--hostname-override", "demo-node", "--dry-run",
			"--metrics-bind-address", metrics, "--healthz-bind-address", healthz, "--cluster-cidr", "10.244.0.0/16"}, &out, &errOut)
	}()
	defer func() {
		cancel()
		if code := <-done; code != exitOK {
			t.Errorf("exit %d, stderr:\n%s", code, errOut.String())
		}
	}()

	// Wait for the first sync, which the kube-proxy names report.
	var scrape string
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(scrape, "kubeproxy_sync_proxy_rules_last_timestamp_seconds{"); {
		if time.Now().After(deadline) {
			t.Fatalf("no sync in the metrics:\n%s\nstderr:\n%s", scrape, errOut.String())
		}
		_, scrape = get(t, "http://"+metrics+"/metrics")
		time.Sleep(50 * time.Millisecond)
	}

	type answer struct {
		Code int
		Body string
	}
	got := map[string]answer{}
	for _, u := range []string{metrics + "/proxyMode", metrics + "/healthz", metrics + "/healthz?verbose", metrics + "/livez", healthz + "/healthz", healthz + "/livez"} {
		code, body := get(t, "http://"+u)
		if strings.HasPrefix(body, "{") {
			// kube-proxy's JSON health: its times vary.
			var v map[string]any
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("%s: %v", u, err)
			}
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range v {
					if !yield(k) {
						return
					}
				}
			})
			body = strings.Join(keys, ",")
		}
		got[strings.Replace(strings.Replace(u, metrics, "metrics", 1), healthz, "healthz", 1)] = answer{code, body}
	}
	want := map[string]answer{
		"metrics/proxyMode":       {200, "iptables"},
		"metrics/healthz":         {200, "ok"},
		"metrics/healthz?verbose": {200, "[+]ping ok\nhealthz check passed\n"},
		"metrics/livez":           {200, "currentTime,healthy,lastUpdated,status"},
		"healthz/healthz":         {200, "currentTime,healthy,lastUpdated,nodeEligible,status"},
		"healthz/livez":           {200, "currentTime,healthy,lastUpdated,status"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	_, configz := get(t, "http://"+metrics+"/configz")
	var cz map[string]map[string]any
	if err := json.Unmarshal([]byte(configz), &cz); err != nil || cz["kubeproxy.config.k8s.io"]["clusterCIDR"] != "10.244.0.0/16" {
		t.Errorf("/configz: %v\n%s", err, configz)
	}

	// kube-proxy's series beside proxykit's, with kube-proxy's labels and
	// buckets.
	_, scrape = get(t, "http://"+metrics+"/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(scrape))
	if err != nil {
		t.Fatal(err)
	}
	refusedBy := map[string]float64{}
	for _, m := range mfs["proxykit_source_objects_refused_total"].GetMetric() {
		var ls []string
		for _, l := range m.Label {
			ls = append(ls, l.GetName()+"="+l.GetValue())
		}
		refusedBy[strings.Join(ls, ",")] = m.GetCounter().GetValue()
	}
	wantRefused := map[string]float64{
		"kind=EndpointSlice,source=manifests": 0, "kind=Node,source=manifests": 0,
		"kind=Service,source=manifests": 1, "kind=ServiceCIDR,source=manifests": 0,
	}
	if diff := cmp.Diff(wantRefused, refusedBy); diff != "" {
		t.Errorf("proxykit_source_objects_refused_total (-want +got):\n%s", diff)
	}
	labels := map[string][]string{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "kubeproxy_") {
			continue
		}
		for _, m := range mf.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			labels[name] = append(labels[name], strings.Join(ls, ","))
		}
		slices.Sort(labels[name])
	}
	wantLabels := map[string][]string{
		// The dry run's nfacct counters are a fake's, made at its sync.
		"kubeproxy_iptables_localhost_nodeports_accepted_packets_total":      {""},
		"kubeproxy_iptables_ct_state_invalid_dropped_packets_total":          {""},
		"kubeproxy_network_programming_duration_seconds":                     {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_sync_proxy_rules_duration_seconds":                        {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_sync_full_proxy_rules_duration_seconds":                   {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_sync_proxy_rules_last_timestamp_seconds":                  {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds":           {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_sync_proxy_rules_endpoint_changes_total":                  {""},
		"kubeproxy_sync_proxy_rules_service_changes_total":                   {""},
		"kubeproxy_sync_proxy_rules_iptables_total":                          {"ip_family=IPv4,table=filter", "ip_family=IPv4,table=nat", "ip_family=IPv6,table=filter", "ip_family=IPv6,table=nat"},
		"kubeproxy_sync_proxy_rules_iptables_last":                           {"ip_family=IPv4,table=filter", "ip_family=IPv4,table=nat", "ip_family=IPv6,table=filter", "ip_family=IPv6,table=nat"},
		"kubeproxy_sync_proxy_rules_iptables_restore_failures_total":         {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total": {"ip_family=IPv4", "ip_family=IPv6"},
		"kubeproxy_proxy_healthz_total":                                      {"code=200"},
		"kubeproxy_proxy_livez_total":                                        {"code=200"},
	}
	if diff := cmp.Diff(wantLabels, labels); diff != "" {
		t.Errorf("kubeproxy_* series (-want +got):\n%s", diff)
	}
	if _, ok := mfs["proxykit_sync_proxy_rules_duration_seconds"]; !ok {
		t.Error("proxykit_* series missing")
	}
	var bounds []float64
	for _, b := range mfs["kubeproxy_sync_proxy_rules_duration_seconds"].Metric[0].GetHistogram().GetBucket() {
		if !math.IsInf(b.GetUpperBound(), 1) {
			bounds = append(bounds, b.GetUpperBound())
		}
	}
	if diff := cmp.Diff(prometheus.ExponentialBuckets(0.001, 2, 15), bounds); diff != "" {
		t.Errorf("sync duration buckets (-kube-proxy +agent):\n%s", diff)
	}
}

// TestKubeProxyView: series of several dataplanes and sync kinds merge into
// kube-proxy's, buckets kept, by the rule of each metric.
func TestKubeProxyView(t *testing.T) {
	reg := prometheus.NewRegistry()
	dur := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "proxykit_sync_proxy_rules_duration_seconds", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)},
		[]string{"ip_family", "dataplane", "sync"})
	last := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "proxykit_sync_proxy_rules_last_timestamp_seconds"}, []string{"ip_family", "dataplane"})
	queued := prometheus.NewGauge(prometheus.GaugeOpts{Name: "proxykit_sync_proxy_rules_last_queued_timestamp_seconds"})
	changes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "proxykit_sync_proxy_rules_changes_total"}, []string{"kind"})
	npl := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "proxykit_network_programming_duration_seconds", Buckets: []float64{0.25, 0.5, 1}}, []string{"ip_family"})
	reg.MustRegister(dur, last, queued, changes, npl)
	dur.WithLabelValues("IPv4", "a", "full").Observe(0.003)
	dur.WithLabelValues("IPv4", "b", "partial").Observe(0.0005)
	dur.WithLabelValues("IPv4", "a", "reconcile").Observe(1)
	last.WithLabelValues("IPv4", "a").Set(200)
	last.WithLabelValues("IPv4", "b").Set(100)
	queued.Set(300)
	changes.WithLabelValues("Service").Add(2)
	changes.WithLabelValues("EndpointSlice").Add(5)
	changes.WithLabelValues("Node").Add(1)
	npl.WithLabelValues("IPv6").Observe(0.3)

	mfs, err := (&kubeProxyView{from: reg, ns: "proxykit", families: []string{"IPv4", "IPv6"}}).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		mf.Help = nil
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	want := `# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.001"} 1
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.002"} 1
kubeproxy_sync_proxy_rules_duration_seconds_bucket{ip_family="IPv4",le="0.004"} 2
`
	got := text.String()
	if !strings.HasPrefix(got, want) {
		t.Errorf("got:\n%s\nwant it to start with:\n%s", got, want)
	}
	for _, line := range []string{
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 2`,
		`kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1`,
		`kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1`,
		`kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"} 100`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv4"} 300`,
		`kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family="IPv6"} 300`,
		"kubeproxy_sync_proxy_rules_endpoint_changes_total 5",
		"kubeproxy_sync_proxy_rules_service_changes_total 2",
		`kubeproxy_network_programming_duration_seconds_bucket{ip_family="IPv6",le="0.5"} 1`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("no %q in:\n%s", line, got)
		}
	}
	// What the view serves is valid beside the registry it reads.
	if _, err := (prometheus.Gatherers{reg, &kubeProxyView{from: reg, ns: "proxykit"}}).Gather(); err != nil {
		t.Errorf("gathered together: %v", err)
	}
}

// TestServeTakenPort: a port another process holds is an error at once
// with --bind-address-hard-fail, and otherwise no error (the server is
// retried) that stop ends at once.
func TestServeTakenPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, hardFail := range []bool{true, false} {
		stop, err := serve(busy.Addr().String(), http.NotFoundHandler(), hardFail, logr.Discard())
		if hardFail != (err != nil) {
			t.Errorf("hardFail %v: serve = %v", hardFail, err)
		}
		if stop != nil {
			stop()
		}
	}
}
