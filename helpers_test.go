package proxykit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

var errBoom = errors.New("boom")

// fakeCleaner records what it is asked to clean and can be told to fail.
type fakeCleaner struct {
	mu    sync.Mutex
	calls []dataplane.StaleFlows
	fail  int
}

func (c *fakeCleaner) CleanStale(_ context.Context, s dataplane.StaleFlows) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
	if c.fail > 0 {
		c.fail--
		return 0, errBoom
	}
	return len(s.Frontends) + len(s.Endpoints), nil
}

func (c *fakeCleaner) failNext(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fail = n
}

// summaries returns every call rendered by flowSummary.
func (c *fakeCleaner) summaries() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]string
	for _, s := range c.calls {
		out = append(out, flowSummary(s))
	}
	return out
}

// flowSummary renders dataplane.StaleFlows as comparable strings.
func flowSummary(s dataplane.StaleFlows) []string {
	var out []string
	for _, f := range s.Frontends {
		ip := "nodeport"
		if f.IP.IsValid() {
			ip = f.IP.String()
		}
		out = append(out, fmt.Sprintf("%s frontend %s:%d/%s", s.Family, ip, f.Port, f.Protocol))
	}
	for _, e := range s.Endpoints {
		out = append(out, fmt.Sprintf("%s endpoint %s/%s %s", s.Family, e.Port, e.Port.Protocol, e.Addr))
	}
	for _, p := range s.Ports {
		out = append(out, fmt.Sprintf("%s port %s/%s", s.Family, p, p.Protocol))
	}
	return out
}

// stateSummary renders what a State programs: each service port with its
// endpoints, sorted.
func stateSummary(st *dataplane.State) []string {
	if st == nil {
		return nil
	}
	var out []string
	for p := range st.Services.All() {
		line := fmt.Sprintf("%s/%s %s ->", p.Name, p.Protocol, p.String())
		for _, e := range st.Endpoints.Get(p.Name) {
			line += " " + e.String()
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// proxyHarness runs a Proxy on a fake clock, reporting every wait of its
// loop so that a test steps the clock only while the loop is parked.
type proxyHarness struct {
	t       *testing.T
	p       *Proxy
	clock   *clocktesting.FakeClock
	cleaner *fakeCleaner
	reg     *prometheus.Registry
	sleeps  chan sleepCall
	done    chan error
	cancel  context.CancelFunc
}

// newProxyHarness builds a Proxy from cfg, filling in a fake clock, a fake
// cleaner and a registry where cfg has none, and no min sync period unless
// cfg sets one.
func newProxyHarness(t *testing.T, cfg Config) *proxyHarness {
	t.Helper()
	h := &proxyHarness{
		t:       t,
		clock:   clocktesting.NewFakeClock(t0),
		cleaner: &fakeCleaner{},
		reg:     prometheus.NewRegistry(),
		sleeps:  make(chan sleepCall, 1000),
		done:    make(chan error, 1),
	}
	if cfg.Clock == nil {
		cfg.Clock = h.clock
	}
	if cfg.Conntrack == nil {
		cfg.Conntrack = h.cleaner
	}
	if cfg.Registerer == nil {
		cfg.Registerer = h.reg
	}
	if cfg.HealthCheckAddresses == nil {
		cfg.HealthCheckAddresses = loopback
	}
	if cfg.MinSyncPeriod == 0 {
		cfg.MinSyncPeriod = -1
	}
	if cfg.Logger.GetSink() == nil {
		cfg.Logger = testr.New(t)
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p.runner.onSleep = func(d time.Duration, w bool) { h.sleeps <- sleepCall{d, w} }
	h.p = p
	return h
}

// start runs the proxy until the test ends.
func (h *proxyHarness) start() *proxyHarness {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.p.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				h.t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			h.t.Error("Run did not return")
		}
	})
	return h
}

// awaitSleep waits until the loop parks in a wait of length d, skipping
// other waits.
func (h *proxyHarness) awaitSleep(d time.Duration) {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-h.sleeps:
			if s.D == d {
				return
			}
		case <-deadline:
			h.t.Fatalf("loop never parked for %v", d)
		}
	}
}

// settle waits until the loop is parked with no sync requested, stable
// over a few polls, and drops the waits reported meanwhile.
func (h *proxyHarness) settle() {
	h.t.Helper()
	stable := 0
	for range 1000 {
		for len(h.sleeps) > 0 {
			<-h.sleeps
		}
		if len(h.p.runner.requests) == 0 && h.clock.HasWaiters() {
			stable++
		} else {
			stable = 0
		}
		if stable == 3 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Fatal("loop never settled")
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// syncsOf waits until rec has had n Sync calls and returns them.
func syncsOf(t *testing.T, rec *dataplanetest.Recorder, n int) []dataplanetest.SyncCall {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d syncs of %s", n, rec.Name()), func() bool { return len(rec.Syncs()) >= n })
	return rec.Syncs()
}

// metricValue returns the value of a single-series counter or gauge.
func metricValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		return -1
	}
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return -1
}

func testLogger(t *testing.T) logr.Logger { return testr.New(t) }

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

// gatherText renders reg's metrics in the text exposition format.
func gatherText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	return w.Body.String()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func udpService(ns, name, clusterIP string, port int32) *v1.Service {
	return dataplanetest.MakeService(ns, name, func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = clusterIP
		s.Spec.ClusterIPs = []string{clusterIP}
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("dns", v1.ProtocolUDP, port, 0, 5353)}
	})
}

func udpSlice(ns, svc string, ips ...string) *discovery.EndpointSlice {
	return dataplanetest.MakeSlice(ns, svc, 1, func(es *discovery.EndpointSlice) {
		es.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("dns", v1.ProtocolUDP, 5353)}
		for _, ip := range ips {
			es.Endpoints = append(es.Endpoints, dataplanetest.ReadyEndpoint(ip, dataplanetest.NodeName))
		}
	})
}
