package proxykit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/health"
	"github.com/proxykit/proxykit/source"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

func serve(t *testing.T, h http.Handler) (int, health.Report, http.Header) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
	var body health.Report
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("body %q: %v", w.Body.String(), err)
	}
	return w.Code, body, w.Header()
}

type hcAnswer struct {
	Code   int
	Weight string
	Body   string
}

// probe asks the health-check node port; Code 0 means nothing listens.
func probe(t *testing.T, port uint16) hcAnswer {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return hcAnswer{}
		}
		t.Fatalf("probe: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hcAnswer{Code: resp.StatusCode, Weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), Body: string(b)}
}

func hcJSON(ns, name string, n int, healthy bool) string {
	return fmt.Sprintf("{\n\t\"service\": {\n\t\t\"namespace\": %q,\n\t\t\"name\": %q\n\t},\n\t\"localEndpoints\": %d,\n\t\"serviceProxyHealthy\": %v\n}", ns, name, n, healthy)
}

// TestProxyHealthzGoesStale runs a proxy whose dataplane keeps failing:
// the change it cannot program turns /healthz unhealthy after
// HealthTimeout, and the next successful sync heals it.
func TestProxyHealthzGoesStale(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		Dataplanes:     []DataplaneConfig{{Dataplane: rec}},
		SyncPeriod:     30 * time.Second,
		RetryPeriod:    2 * time.Minute,
		MaxRetryPeriod: 2 * time.Minute,
	}).start()
	h.settle()
	rec.FailNext(1, nil)
	h.p.Handler().OnService(nil, udpService("ns", "a", "172.30.0.10", 53))
	h.awaitSleep(2 * time.Minute)
	h.clock.Step(59 * time.Second)
	if code, _, _ := serve(t, h.p.HealthzHandler()); code != 200 {
		t.Errorf("/healthz = %d before the timeout", code)
	}
	h.clock.Step(time.Second)
	code, body, _ := serve(t, h.p.LivezHandler())
	if code != 503 || body.Status[v1.IPv4Protocol].Healthy {
		t.Errorf("/livez = %d %+v after the timeout, want 503", code, body)
	}
	if h.p.Health().Healthy {
		t.Error("Health() healthy after the timeout")
	}
	h.clock.Step(time.Minute)
	h.settle()
	if code, _, _ := serve(t, h.p.LivezHandler()); code != 200 {
		t.Errorf("/livez = %d after a successful sync", code)
	}
}

// TestProxyHealthCheckNodePort runs a proxy with an externalTrafficPolicy:
// Local LoadBalancer service and probes its health-check node port on
// loopback as its local endpoints come and go.
func TestProxyHealthCheckNodePort(t *testing.T) {
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		NodeName:             dataplanetest.NodeName,
		Dataplanes:           []DataplaneConfig{{Dataplane: rec}},
		HealthCheckAddresses: loopback,
	}).start()
	h.settle()
	port := freePort(t)
	svc := dataplanetest.MakeService("ns", "lb", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ClusterIP = "172.30.0.5"
		s.Spec.ClusterIPs = []string{"172.30.0.5"}
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = int32(port)
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, 30080, 8080)}
	})
	slice := dataplanetest.MakeSlice("ns", "lb", 1, func(es *discovery.EndpointSlice) {
		es.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("http", v1.ProtocolTCP, 8080)}
		es.Endpoints = []discovery.Endpoint{
			dataplanetest.ReadyEndpoint("10.0.0.5", dataplanetest.NodeName),
			dataplanetest.ReadyEndpoint("10.1.0.5", "elsewhere"),
		}
	})
	in := h.p.Handler()
	in.OnService(nil, svc)
	h.settle()
	if got := probe(t, port); got.Code != 503 || got.Weight != "0" {
		t.Errorf("without endpoints = %+v, want 503 weight 0", got)
	}
	in.OnEndpointSlice(nil, slice)
	h.settle()
	if diff := cmp.Diff(hcAnswer{200, "1", hcJSON("ns", "lb", 1, true)}, probe(t, port)); diff != "" {
		t.Errorf("with a local endpoint (-want +got):\n%s", diff)
	}
	in.OnService(svc, nil)
	h.settle()
	if got := probe(t, port); got.Code != 0 {
		t.Errorf("deleted service still answers: %+v", got)
	}
}

// TestProxyHealthMetrics counts /healthz and /livez answers by code, and
// the health-check node ports served and failed, on the proxy's metrics.
func TestProxyHealthMetrics(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free := freePort(t)
	// Both services reach the first sync together, so that the busy port
	// fails once.
	var objs source.Static
	for i, port := range []uint16{uint16(busy.Addr().(*net.TCPAddr).Port), free} {
		objs = append(objs, dataplanetest.MakeService("ns", fmt.Sprint("lb", i), func(s *v1.Service) {
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.ClusterIP = fmt.Sprint("172.30.0.", i+5)
			s.Spec.ClusterIPs = []string{s.Spec.ClusterIP}
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = int32(port)
			s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("http", v1.ProtocolTCP, 80, int32(30080+i), 8080)}
		}))
	}
	rec := dataplanetest.NewRecorder("rec")
	h := newProxyHarness(t, Config{
		NodeName:             dataplanetest.NodeName,
		Dataplanes:           []DataplaneConfig{{Dataplane: rec}},
		HealthCheckAddresses: loopback,
		Sources:              []source.Source{objs},
	}).start()
	h.settle()
	serve(t, h.p.HealthzHandler()) // no Node: 503
	serve(t, h.p.LivezHandler())
	serve(t, h.p.LivezHandler())
	got := map[string]float64{
		"healthz 503":  metricValue(h.p.metrics.healthz.WithLabelValues("503")),
		"livez 200":    metricValue(h.p.metrics.livez.WithLabelValues("200")),
		"ports served": metricValue(h.p.metrics.healthCheckPorts.WithLabelValues("IPv4")),
		"ports failed": metricValue(h.p.metrics.healthCheckErrors.WithLabelValues("IPv4")),
	}
	want := map[string]float64{"healthz 503": 1, "livez 200": 2, "ports served": 1, "ports failed": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// gatedPlane is a dataplane whose next Sync can be held until released,
// and whose syncs can be made to fail (from the next one that starts).
type gatedPlane struct {
	mu      sync.Mutex
	entered chan struct{} // closed when a held Sync has started
	release chan struct{} // a held Sync returns when it is closed
	fail    bool
}

func (g *gatedPlane) Name() string                  { return "gated" }
func (g *gatedPlane) Cleanup(context.Context) error { return nil }

func (g *gatedPlane) Sync(context.Context, *dataplane.State) error {
	g.mu.Lock()
	entered, release, fail := g.entered, g.release, g.fail
	g.entered, g.release = nil, nil
	g.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	if fail {
		return errBoom
	}
	return nil
}

// hold makes the next Sync wait until the returned release is called; the
// returned channel closes when that Sync has started.
func (g *gatedPlane) hold() (entered <-chan struct{}, release func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, r := make(chan struct{}), make(chan struct{})
	g.entered, g.release = e, r
	return e, func() { close(r) }
}

func (g *gatedPlane) failFromNow() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fail = true
}

// TestProxyHealthChangeDuringSync: a change that arrives while a sync runs
// is not programmed by it, so that sync's success must not clear it; when
// every later sync fails, /livez turns unhealthy after HealthTimeout.
func TestProxyHealthChangeDuringSync(t *testing.T) {
	plane := &gatedPlane{}
	h := newProxyHarness(t, Config{
		Dataplanes:     []DataplaneConfig{{Dataplane: plane}},
		SyncPeriod:     30 * time.Second,
		RetryPeriod:    2 * time.Minute,
		MaxRetryPeriod: 2 * time.Minute,
	}).start()
	h.settle()
	entered, release := plane.hold()
	in := h.p.Handler()
	in.OnService(nil, udpService("ns", "a", "172.30.0.10", 53))
	<-entered
	in.OnService(nil, udpService("ns", "b", "172.30.0.11", 53))
	plane.failFromNow()
	release()
	h.awaitSleep(2 * time.Minute) // the sync for b failed; retry pending
	h.clock.Step(59 * time.Second)
	if code, _, _ := serve(t, h.p.LivezHandler()); code != 200 {
		t.Errorf("/livez = %d before the timeout", code)
	}
	h.clock.Step(time.Second)
	if code, _, _ := serve(t, h.p.LivezHandler()); code != 503 {
		t.Errorf("/livez = %d with b unprogrammed for HealthTimeout, want 503", code)
	}
}
