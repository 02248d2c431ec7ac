package proxykit

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/servicemodel"
	"github.com/proxykit/proxykit/source"
	"github.com/proxykit/proxykit/source/informer"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestNewValidates(t *testing.T) {
	rec := dataplanetest.NewRecorder("r")
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no dataplanes", Config{}},
		{"nil dataplane", Config{Dataplanes: []DataplaneConfig{{}}}},
		{"bad family", Config{Dataplanes: []DataplaneConfig{{Family: "IPv5", Dataplane: rec}}}},
		{"nil source", Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}, Sources: []source.Source{nil}}},
		{"min above period", Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}, MinSyncPeriod: time.Hour, SyncPeriod: time.Minute}},
		{"negative period", Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}, SyncPeriod: -time.Second}},
		{"metrics without gatherer", Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}, MetricsBindAddress: "127.0.0.1:0", Registerer: prometheus.WrapRegistererWithPrefix("x_", prometheus.NewRegistry())}},
		{"injected bridge", Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}, Settings: dataplanetest.InvalidSettings()["injected bridge"]}},
		{"16-byte prefix", Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}, Settings: dataplanetest.InvalidSettings()["16-byte prefix"]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	cfg, err := Config{Dataplanes: []DataplaneConfig{{Dataplane: dataplanetest.NewRecorder("r")}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	got := []any{cfg.Dataplanes[0].Family, cfg.MinSyncPeriod, cfg.SyncPeriod, cfg.RetryPeriod, cfg.MaxRetryPeriod, cfg.HealthTimeout, cfg.MetricsNamespace}
	want := []any{v1.IPv4Protocol, time.Second, 30 * time.Second, time.Second, 30 * time.Second, time.Minute, "proxykit"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}

// TestProxyInformers runs the proxy against client-go's fake clientset: the
// initial objects reach the dataplane, a change costs one more sync, and
// removed UDP endpoints and services are handed to conntrack cleanup.
func TestProxyInformers(t *testing.T) {
	ctx := context.Background()
	svc := udpService("ns", "dns", "172.30.0.10", 53)
	slice := udpSlice("ns", "dns", "10.0.1.1", "10.0.1.2")
	claimed := udpService("ns", "other", "172.30.0.11", 53)
	claimed.Labels = map[string]string{servicemodel.LabelServiceProxyName: "someone-else"}
	client := fake.NewClientset(svc, slice, claimed, dataplanetest.TestNode(nil))
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		NodeName:   dataplanetest.NodeName,
		Dataplanes: []DataplaneConfig{{Dataplane: rec}},
		Sources:    []source.Source{informer.New(client, informer.Config{NodeName: dataplanetest.NodeName})},
	}).start()

	calls := syncsOf(t, rec, 1)
	st := calls[0].State
	want := []string{"ns/dns:dns/UDP 172.30.0.10:53/UDP -> 10.0.1.1:5353 10.0.1.2:5353"}
	if diff := cmp.Diff(want, stateSummary(st)); diff != "" {
		t.Errorf("first State (-want +got):\n%s", diff)
	}
	if st.Node.Name != dataplanetest.NodeName || len(st.Node.IPs) == 0 {
		t.Errorf("node = %+v, want %s with IPs", st.Node, dataplanetest.NodeName)
	}

	// Scale down: one sync, and the removed endpoint's flows are stale.
	h.settle()
	smaller := udpSlice("ns", "dns", "10.0.1.2")
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, smaller, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	calls = syncsOf(t, rec, 2)
	want = []string{"ns/dns:dns/UDP 172.30.0.10:53/UDP -> 10.0.1.2:5353"}
	if diff := cmp.Diff(want, stateSummary(calls[1].State)); diff != "" {
		t.Errorf("second State (-want +got):\n%s", diff)
	}
	if _, ok := calls[1].State.ChangedSince(st.Generation); !ok {
		t.Error("second State cannot tell what changed: a change must be a partial sync")
	}
	h.settle()
	wantClean := [][]string{
		// The first sync reconciles the port that got endpoints.
		{"IPv4 port ns/dns:dns/UDP"},
		{"IPv4 endpoint ns/dns:dns/UDP 10.0.1.1:5353", "IPv4 port ns/dns:dns/UDP"},
	}
	if diff := cmp.Diff(wantClean, h.cleaner.summaries()); diff != "" {
		t.Errorf("conntrack cleanup (-want +got):\n%s", diff)
	}

	// Delete the service: its frontend is stale.
	if err := client.CoreV1().Services("ns").Delete(ctx, "dns", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	calls = syncsOf(t, rec, 3)
	if got := stateSummary(calls[2].State); len(got) != 0 {
		t.Errorf("State after delete = %v, want empty", got)
	}
	h.settle()
	wantClean = append(wantClean, []string{"IPv4 frontend 172.30.0.10:53/UDP"})
	if diff := cmp.Diff(wantClean, h.cleaner.summaries()); diff != "" {
		t.Errorf("conntrack cleanup (-want +got):\n%s", diff)
	}
	if n := len(rec.Syncs()); n != 3 {
		t.Errorf("%d syncs, want 3", n)
	}
}

// TestProxyNamedInformers checks that a named proxy sees the services
// labelled with its name as well as the unlabelled ones, and follows a
// service relabelled away from it.
func TestProxyNamedInformers(t *testing.T) {
	ctx := context.Background()
	mine := udpService("ns", "mine", "172.30.0.12", 53)
	mine.Labels = map[string]string{servicemodel.LabelServiceProxyName: "pk"}
	theirs := udpService("ns", "theirs", "172.30.0.11", 53)
	theirs.Labels = map[string]string{servicemodel.LabelServiceProxyName: "someone-else"}
	client := fake.NewClientset(udpService("ns", "plain", "172.30.0.10", 53), mine, theirs)
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		ProxyName:  "pk",
		Dataplanes: []DataplaneConfig{{Dataplane: rec}},
		Sources:    []source.Source{informer.New(client, informer.Config{ProxyName: "pk"})},
	}).start()
	calls := syncsOf(t, rec, 1)
	want := []string{
		"ns/mine:dns/UDP 172.30.0.12:53/UDP ->",
		"ns/plain:dns/UDP 172.30.0.10:53/UDP ->",
	}
	if diff := cmp.Diff(want, stateSummary(calls[0].State)); diff != "" {
		t.Errorf("State (-want +got):\n%s", diff)
	}
	h.settle()
	if err := client.CoreV1().Services("ns").Delete(ctx, "mine", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	calls = syncsOf(t, rec, 2)
	want = []string{"ns/plain:dns/UDP 172.30.0.10:53/UDP ->"}
	if diff := cmp.Diff(want, stateSummary(calls[1].State)); diff != "" {
		t.Errorf("State after delete (-want +got):\n%s", diff)
	}
}

// TestProxyFailedSyncKeepsCleanup: a sync that fails cleans nothing, the
// failed dataplane programs the retry in full, and the cleanup owed is done
// after the retry succeeds; a failed cleanup is retried with newer work
// merged in.
func TestProxyFailedSyncKeepsCleanup(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}}).start()
	in := h.p.Handler()
	in.OnService(nil, udpService("ns", "a", "172.30.0.10", 53))
	in.OnService(nil, udpService("ns", "b", "172.30.0.11", 53))
	in.OnEndpointSlice(nil, udpSlice("ns", "b", "10.0.2.1", "10.0.2.2"))
	waitFor(t, "both services programmed", func() bool { return len(stateSummary(rec.Programmed())) == 2 })
	h.settle()
	good := rec.Programmed().Generation
	// The setup's events may come in one sync or two, each with its own
	// cleanup: only what follows is compared.
	setup := len(h.cleaner.summaries())
	since := func() [][]string { return h.cleaner.summaries()[setup:] }

	rec.FailNext(1, nil)
	in.OnService(udpService("ns", "a", "172.30.0.10", 53), nil)
	h.awaitSleep(time.Second) // first retry
	if got := since(); len(got) != 0 {
		t.Fatalf("cleanup after a failed sync: %v", got)
	}
	h.clock.Step(time.Second)
	h.settle()
	calls := rec.Syncs()
	last := calls[len(calls)-1]
	if last.Err != nil {
		t.Fatalf("retry failed: %v", last.Err)
	}
	if _, ok := last.State.ChangedSince(good); ok {
		t.Error("the retry's State tells changes since the last programmed one: the dataplane would not program in full")
	}
	want := [][]string{{"IPv4 frontend 172.30.0.10:53/UDP"}}
	if diff := cmp.Diff(want, since()); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}

	// The cleaner fails: the work stays owed and comes back merged.
	h.cleaner.failNext(1)
	in.OnEndpointSlice(udpSlice("ns", "b", "10.0.2.1", "10.0.2.2"), udpSlice("ns", "b", "10.0.2.2"))
	h.awaitSleep(time.Second)
	in.OnEndpointSlice(udpSlice("ns", "b", "10.0.2.2"), nil)
	h.settle()
	want = append(want,
		[]string{"IPv4 endpoint ns/b:dns/UDP 10.0.2.1:5353", "IPv4 port ns/b:dns/UDP"},
		[]string{"IPv4 endpoint ns/b:dns/UDP 10.0.2.1:5353", "IPv4 endpoint ns/b:dns/UDP 10.0.2.2:5353", "IPv4 port ns/b:dns/UDP"},
	)
	if diff := cmp.Diff(want, since()); diff != "" {
		t.Errorf("cleanup (-want +got):\n%s", diff)
	}
	if got := metricValue(h.p.metrics.conntrackFailures.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("conntrack failures = %v, want 1", got)
	}
}

// TestProxyDualStackAndSideBySide: one Builder feeds an IPv6 dataplane and
// two IPv4 ones; a failure of one IPv4 dataplane leaves the other's sync
// partial and the failed one's next sync full.
func TestProxyDualStackAndSideBySide(t *testing.T) {
	a, b, v6 := dataplanetest.NewRecorder("a"), dataplanetest.NewRecorder("b"), dataplanetest.NewRecorder("v6")
	h := newProxyHarness(t, Config{Dataplanes: []DataplaneConfig{
		{Family: v1.IPv4Protocol, Dataplane: a},
		{Family: v1.IPv6Protocol, Dataplane: v6},
		{Family: v1.IPv4Protocol, Dataplane: b},
	}}).start()
	svc := dataplanetest.MakeService("ns", "web", func(s *v1.Service) {
		s.Spec.ClusterIP = "172.30.0.1"
		s.Spec.ClusterIPs = []string{"172.30.0.1", "fd00::1"}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, 0, 8080)}
	})
	h.p.Handler().OnService(nil, svc)
	h.settle()
	for _, tc := range []struct {
		rec  *dataplanetest.Recorder
		want []string
	}{
		{a, []string{"ns/web:http/TCP 172.30.0.1:80/TCP ->"}},
		{b, []string{"ns/web:http/TCP 172.30.0.1:80/TCP ->"}},
		{v6, []string{"ns/web:http/TCP [fd00::1]:80/TCP ->"}},
	} {
		if diff := cmp.Diff(tc.want, stateSummary(tc.rec.Programmed())); diff != "" {
			t.Errorf("%s programs (-want +got):\n%s", tc.rec.Name(), diff)
		}
	}
	if a.Programmed() != b.Programmed() {
		t.Error("side-by-side dataplanes got different States")
	}
	gen := a.Programmed().Generation

	b.FailNext(1, nil)
	h.p.Handler().OnService(svc, nil)
	h.awaitSleep(time.Second)
	h.clock.Step(time.Second)
	h.settle()
	aCalls, bCalls := a.Syncs(), b.Syncs()
	// a: gen -> failed round (partial) -> retry (partial).
	if _, ok := aCalls[len(aCalls)-1].State.ChangedSince(aCalls[len(aCalls)-2].State.Generation); !ok {
		t.Error("dataplane a's retry is not partial")
	}
	if _, ok := bCalls[len(bCalls)-1].State.ChangedSince(gen); ok {
		t.Error("dataplane b's retry after its failure is not full")
	}
	if got := stateSummary(b.Programmed()); len(got) != 0 {
		t.Errorf("b programs %v after the retry, want nothing", got)
	}
	if got := metricValue(h.p.metrics.syncFailures.WithLabelValues("IPv4", "b")); got != 1 {
		t.Errorf("failures of b = %v, want 1", got)
	}
}

// TestProxyPeriodicFullResync: without changes the loop syncs every
// SyncPeriod, and each such sync is a full one.
func TestProxyPeriodicFullResync(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}}).start()
	h.settle()
	h.p.Handler().OnService(nil, udpService("ns", "a", "172.30.0.10", 53))
	h.settle()
	calls := rec.Syncs()
	if len(calls) != 2 {
		t.Fatalf("%d syncs, want 2", len(calls))
	}
	if _, ok := calls[1].State.ChangedSince(calls[0].State.Generation); !ok {
		t.Error("change sync is not partial")
	}
	for i := range 2 {
		h.clock.Step(30 * time.Second)
		h.settle()
		calls = rec.Syncs()
		if len(calls) != 3+i {
			t.Fatalf("%d syncs after %d periods, want %d", len(calls), i+1, 3+i)
		}
		prev, cur := calls[len(calls)-2].State, calls[len(calls)-1].State
		if _, ok := cur.ChangedSince(prev.Generation); ok {
			t.Errorf("periodic sync %d is partial", i)
		}
		if diff := cmp.Diff(stateSummary(prev), stateSummary(cur)); diff != "" {
			t.Errorf("periodic sync changed the State (-prev +cur):\n%s", diff)
		}
	}
}

// TestProxyWaitsForAllSources: no sync before the last source syncs.
func TestProxyWaitsForAllSources(t *testing.T) {
	release := make(chan struct{})
	slow := source.Func(func(ctx context.Context, h source.Handler) error {
		h.OnService(nil, udpService("ns", "slow", "172.30.0.20", 53))
		select {
		case <-release:
		case <-ctx.Done():
			return nil
		}
		h.Synced()
		<-ctx.Done()
		return nil
	})
	fast := source.Static{udpService("ns", "fast", "172.30.0.21", 53)}
	rec := dataplanetest.NewRecorder("rec")
	newProxyHarness(t, Config{
		Dataplanes: []DataplaneConfig{{Dataplane: rec}},
		Sources:    []source.Source{fast, slow},
	}).start()
	time.Sleep(50 * time.Millisecond)
	if n := len(rec.Syncs()); n != 0 {
		t.Fatalf("%d syncs before every source synced", n)
	}
	close(release)
	calls := syncsOf(t, rec, 1)
	want := []string{"ns/fast:dns/UDP 172.30.0.21:53/UDP ->", "ns/slow:dns/UDP 172.30.0.20:53/UDP ->"}
	if diff := cmp.Diff(want, stateSummary(calls[0].State)); diff != "" {
		t.Errorf("first State (-want +got):\n%s", diff)
	}
}

func TestProxySourceError(t *testing.T) {
	h := newProxyHarness(t, Config{
		Dataplanes: []DataplaneConfig{{Dataplane: dataplanetest.NewRecorder("rec")}},
		Sources:    []source.Source{source.Func(func(context.Context, source.Handler) error { return errBoom })},
	})
	if err := h.p.Run(context.Background()); !errors.Is(err, errBoom) {
		t.Errorf("Run = %v, want the source's error", err)
	}
	if err := h.p.Run(context.Background()); !errors.Is(err, ErrStarted) {
		t.Errorf("second Run = %v, want ErrStarted", err)
	}
}

func TestRunOnce(t *testing.T) {
	svc := udpService("ns", "a", "172.30.0.10", 53)
	for _, tc := range []struct {
		name    string
		fail    bool
		wantErr bool
	}{
		{"success", false, false},
		{"failure", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := dataplanetest.NewRecorder("rec")
			if tc.fail {
				rec.FailNext(1, nil)
			}
			h := newProxyHarness(t, Config{
				Dataplanes: []DataplaneConfig{{Dataplane: rec}},
				Sources:    []source.Source{source.Static{svc}},
			})
			err := h.p.RunOnce(context.Background())
			if (err != nil) != tc.wantErr {
				t.Fatalf("RunOnce = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && !errors.Is(err, dataplanetest.ErrInjected) {
				t.Errorf("RunOnce = %v, want the dataplane's error", err)
			}
			if n := len(rec.Syncs()); n != 1 {
				t.Errorf("%d syncs, want 1", n)
			}
		})
	}
}

func TestProxyCleanup(t *testing.T) {
	a, b := dataplanetest.NewRecorder("a"), dataplanetest.NewRecorder("b")
	p, err := New(Config{Dataplanes: []DataplaneConfig{{Dataplane: a}, {Family: v1.IPv6Protocol, Dataplane: b}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cleanup(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.Cleanups() != 1 || b.Cleanups() != 1 {
		t.Errorf("cleanups = %d, %d, want 1, 1", a.Cleanups(), b.Cleanups())
	}
}

// TestProxyServesHTTP runs the proxy with healthz and metrics bound on
// loopback and reads them.
func TestProxyServesHTTP(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	healthz := "127.0.0.1:" + itoa(freePort(t))
	metricsAddr := "127.0.0.1:" + itoa(freePort(t))
	h := newProxyHarness(t, Config{
		Dataplanes:         []DataplaneConfig{{Dataplane: rec}},
		HealthzBindAddress: healthz,
		MetricsBindAddress: metricsAddr,
	}).start()
	h.settle()
	h.p.Handler().OnService(nil, dataplanetest.MakeService("ns", "bad", func(s *v1.Service) {
		s.Spec.ClusterIP = "not-an-ip"
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p", v1.ProtocolTCP, 80, 0, 0)}
	}))
	for _, path := range []string{"/healthz", "/livez"} {
		code, body := get(t, "http://"+healthz+path)
		if code != http.StatusOK || !strings.Contains(body, `"healthy":true`) {
			t.Errorf("%s = %d %s", path, code, body)
		}
	}
	_, body := get(t, "http://"+metricsAddr+"/metrics")
	for _, want := range []string{
		`proxykit_sync_proxy_rules_duration_seconds_count{dataplane="rec",ip_family="IPv4",sync="full"} 1`,
		`proxykit_proxy_healthz_total{code="200"} 1`,
		`proxykit_proxy_livez_total{code="200"} 1`,
		`proxykit_objects_skipped_total{kind="Service"`,
		`proxykit_sync_proxy_rules_changes_total{kind="Service"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestProxyBindFailure(t *testing.T) {
	h := newProxyHarness(t, Config{
		Dataplanes:         []DataplaneConfig{{Dataplane: dataplanetest.NewRecorder("rec")}},
		HealthzBindAddress: "127.0.0.1:notaport",
	})
	if err := h.p.Run(context.Background()); err == nil {
		t.Error("Run with an unusable bind address succeeded")
	}
}

// TestProxyBindRetry: with a BindRetryPeriod, a healthz port another
// process holds at start does not stop Run, and is served once it is free.
func TestProxyBindRetry(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := busy.Addr().String()
	h := newProxyHarness(t, Config{
		Dataplanes:         []DataplaneConfig{{Dataplane: dataplanetest.NewRecorder("rec")}},
		HealthzBindAddress: addr,
		BindRetryPeriod:    time.Second,
	}).start()
	h.settle()
	if err := busy.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatalf("%s not served after %d retry periods", addr, i)
		}
		h.clock.Step(time.Second)
		if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestProxyNetworkProgrammingLatency: trigger times of endpoint changes are
// observed once the change is programmed.
func TestProxyNetworkProgrammingLatency(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{Dataplanes: []DataplaneConfig{{Dataplane: rec}}})
	h.clock.SetTime(time.Now()) // the tracker ignores trigger times before it started
	h.start()
	h.settle()
	slice := udpSlice("ns", "a", "10.0.0.1")
	slice.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: h.clock.Now().Add(time.Second).Format(time.RFC3339Nano)}
	h.clock.Step(3 * time.Second)
	h.p.Handler().OnService(nil, udpService("ns", "a", "172.30.0.10", 53))
	h.p.Handler().OnEndpointSlice(nil, slice)
	h.settle()
	body := gatherText(t, h.reg)
	if !strings.Contains(body, "proxykit_network_programming_duration_seconds_count{ip_family=\"IPv4\"} 1") ||
		!strings.Contains(body, "proxykit_network_programming_duration_seconds_sum{ip_family=\"IPv4\"} 2") {
		t.Errorf("latency metric:\n%s", body)
	}
}

// TestProxyStatesAreBuilderStates guards the assumption the full resync
// relies on: every Build yields a new generation.
func TestProxyStatesAreBuilderStates(t *testing.T) {
	b := dataplane.NewBuilder(dataplane.BuilderConfig{})
	first := b.Build().States[0]
	second := b.Build().States[0]
	third := b.Build().States[0]
	if _, ok := second.ChangedSince(first.Generation); !ok {
		t.Error("an empty Build cannot tell its changes")
	}
	if _, ok := third.ChangedSince(first.Generation); ok {
		t.Error("a State two Builds on tells changes since the first: skipping a generation would not force a full sync")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCanaryWait: a poll that read the dataplane's rules (someone else
// moved the generation) spaces the next, so that the canary takes at most
// a tenth of a core.
func TestCanaryWait(t *testing.T) {
	for _, tc := range []struct {
		period, took, want time.Duration
	}{
		{time.Second, 80 * time.Microsecond, time.Second},
		{time.Second, 100 * time.Millisecond, time.Second},
		{time.Second, 228 * time.Millisecond, 2052 * time.Millisecond},
		{5 * time.Second, time.Second, 9 * time.Second},
	} {
		if got := canaryWait(tc.period, tc.took); got != tc.want {
			t.Errorf("canaryWait(%v, %v) = %v, want %v", tc.period, tc.took, got, tc.want)
		}
	}
}
