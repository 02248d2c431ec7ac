package proxykit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// stateWithLocal returns a State in which service nn has n local ready
// endpoints.
func stateWithLocal(nn types.NamespacedName, n int) *dataplane.State {
	pn := servicemodel.PortName{NamespacedName: nn, Port: "p", Protocol: v1.ProtocolTCP}
	var eps []*endpoints.Endpoint
	for i := range n {
		eps = append(eps, &endpoints.Endpoint{
			Addr:         netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 80),
			EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true, Local: true},
		})
	}
	return &dataplane.State{Family: v1.IPv4Protocol, Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{pn: eps})}
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

func TestServiceHealthServer(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	m, _ := newMetrics("proxykit", nil)
	rec := record.NewFakeRecorder(10)
	s := newServiceHealthServer(serviceHealthConfig{
		family: v1.IPv4Protocol, nodeName: "n1", addresses: loopback,
		healthy: healthy.Load, recorder: rec, logger: testLogger(t), metrics: m,
	})
	t.Cleanup(s.close)
	nn := types.NamespacedName{Namespace: "ns", Name: "lb"}
	port := freePort(t)

	s.sync(map[types.NamespacedName]uint16{nn: port}, stateWithLocal(nn, 0))
	if diff := cmp.Diff(hcAnswer{503, "0", hcJSON("ns", "lb", 0, true)}, probe(t, port)); diff != "" {
		t.Errorf("no local endpoints (-want +got):\n%s", diff)
	}
	s.sync(map[types.NamespacedName]uint16{nn: port}, stateWithLocal(nn, 2))
	if diff := cmp.Diff(hcAnswer{200, "2", hcJSON("ns", "lb", 2, true)}, probe(t, port)); diff != "" {
		t.Errorf("two local endpoints (-want +got):\n%s", diff)
	}
	healthy.Store(false)
	if diff := cmp.Diff(hcAnswer{503, "2", hcJSON("ns", "lb", 2, false)}, probe(t, port)); diff != "" {
		t.Errorf("proxy unhealthy (-want +got):\n%s", diff)
	}
	healthy.Store(true)

	// A new port closes the old one.
	port2 := freePort(t)
	s.sync(map[types.NamespacedName]uint16{nn: port2}, stateWithLocal(nn, 1))
	if got := probe(t, port); got.Code != 0 {
		t.Errorf("old port still answers: %+v", got)
	}
	if got := probe(t, port2); got.Code != 200 || got.Weight != "1" {
		t.Errorf("new port = %+v, want 200 weight 1", got)
	}
	if got := metricValue(m.healthCheckPorts.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("open ports gauge = %v, want 1", got)
	}

	// The service goes away.
	s.sync(nil, stateWithLocal(nn, 1))
	if got := probe(t, port2); got.Code != 0 {
		t.Errorf("removed service still answers: %+v", got)
	}
}

func TestServiceHealthServerListenFailure(t *testing.T) {
	m, _ := newMetrics("proxykit", nil)
	rec := record.NewFakeRecorder(10)
	s := newServiceHealthServer(serviceHealthConfig{
		family: v1.IPv4Protocol, nodeName: "n1", addresses: loopback,
		healthy: func() bool { return true }, recorder: rec, logger: testLogger(t), metrics: m,
	})
	t.Cleanup(s.close)
	nn := types.NamespacedName{Namespace: "ns", Name: "lb"}
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(busy.Addr().(*net.TCPAddr).Port)
	s.sync(map[types.NamespacedName]uint16{nn: port}, stateWithLocal(nn, 1))
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning FailedToStartServiceHealthcheck node n1 failed to start healthcheck \"ns/lb\"") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event for the failed listen")
	}
	if got := metricValue(m.healthCheckErrors.WithLabelValues("IPv4")); got != 1 {
		t.Errorf("listen failures = %v, want 1", got)
	}
	busy.Close()
	// The next sync retries.
	s.sync(map[types.NamespacedName]uint16{nn: port}, stateWithLocal(nn, 1))
	if got := probe(t, port); got.Code != 200 {
		t.Errorf("after the retry = %+v, want 200", got)
	}
}

func TestServiceHealthListenAddresses(t *testing.T) {
	ifAddrs := func() ([]net.Addr, error) {
		return []net.Addr{
			&net.IPNet{IP: net.ParseIP("127.0.0.1"), Mask: net.CIDRMask(8, 32)},
			&net.IPNet{IP: net.ParseIP("192.168.0.2"), Mask: net.CIDRMask(24, 32)},
			&net.IPAddr{IP: net.ParseIP("192.168.0.3")},
			&net.IPNet{IP: net.ParseIP("2001:db8::1"), Mask: net.CIDRMask(64, 128)},
		}, nil
	}
	prefixes := func(s ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, p := range s {
			out = append(out, netip.MustParsePrefix(p))
		}
		return out
	}
	addrs := func(s ...string) []netip.Addr {
		out := []netip.Addr{}
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		family    v1.IPFamily
		nodePorts []netip.Prefix
		override  []netip.Addr
		want      []netip.Addr
	}{
		{"all by default", v1.IPv4Protocol, nil, nil, addrs("0.0.0.0")},
		{"all for v6", v1.IPv6Protocol, nil, nil, addrs("::")},
		{"matching addresses", v1.IPv4Protocol, prefixes("192.168.0.0/24"), nil, addrs("192.168.0.2", "192.168.0.3")},
		{"catch-all wins", v1.IPv4Protocol, prefixes("192.168.0.0/24", "0.0.0.0/0"), nil, addrs("0.0.0.0")},
		{"other family only", v1.IPv6Protocol, prefixes("192.168.0.0/24"), nil, addrs("::")},
		{"none match", v1.IPv4Protocol, prefixes("10.9.0.0/16"), nil, addrs()},
		{"override", v1.IPv4Protocol, prefixes("192.168.0.0/24"), addrs("127.0.0.1", "::1"), addrs("127.0.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServiceHealthServer(serviceHealthConfig{family: tc.family, nodePorts: tc.nodePorts, addresses: tc.override, interfaceAddrs: ifAddrs})
			got := s.listenAddresses()
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
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
