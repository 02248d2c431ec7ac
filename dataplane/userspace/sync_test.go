package userspace

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

func TestSyncThousandServicesTouchesOnlyChanges(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	bk.serve("10.0.0.2:8080")
	c := newCluster()
	const n = 1000
	for i := range n {
		name := fmt.Sprintf("svc%d", i)
		c.service(name, fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), nil, "http/TCP/80")
		c.endpoints(name, []string{"10.0.0.1"}, "http/TCP/8080")
	}
	d := newDataplane(t, bk, Config{})
	mustSync(t, d, c.build())
	if got, want := d.LastSync(), (dataplane.SyncReport{Full: true, Services: n}); got != want {
		t.Errorf("first Sync %+v, want %+v", got, want)
	}
	before := d.Listeners()
	if len(before) != n {
		t.Fatalf("%d listeners, want %d", len(before), n)
	}
	d.mu.Lock()
	fwdsBefore := maps.Clone(d.fwds)
	d.mu.Unlock()

	c.endpoints("svc7", []string{"10.0.0.2"}, "http/TCP/8080")
	mustSync(t, d, c.build())
	if got, want := d.LastSync(), (dataplane.SyncReport{Services: 1}); got != want {
		t.Errorf("Sync of one endpoint change %+v, want %+v", got, want)
	}
	if diff := cmp.Diff(before, d.Listeners(), cmpopts.EquateComparable(netip.AddrPort{})); diff != "" {
		t.Errorf("an endpoint change moved listeners (-before +after):\n%s", diff)
	}
	d.mu.Lock()
	for k, f := range d.fwds {
		if fwdsBefore[k] != f {
			t.Errorf("forwarder of %s replaced", f.fe)
		}
	}
	d.mu.Unlock()
	if ep := endpointOf(t, listener(t, d, "10.96.0.8:80", v1.ProtocolTCP)); ep != "10.0.0.2:8080" {
		t.Errorf("svc7 reached %s after its change", ep)
	}

	c.b.UpdateService(c.service("svc9", "10.96.0.10", nil, "http/TCP/80"), nil)
	mustSync(t, d, c.build())
	after := d.Listeners()
	if len(after) != n-1 {
		t.Errorf("%d listeners after removing a service, want %d", len(after), n-1)
	}
	if _, ok := after[Destination{Kind: ClusterIP, Addr: netip.MustParseAddrPort("10.96.0.10:80"), Protocol: v1.ProtocolTCP}]; ok {
		t.Error("the removed service still listens")
	}
}

func TestRemovedServiceClosesAfterGrace(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	c := newCluster()
	svc := c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	d := newDataplane(t, bk, Config{DrainTimeout: 100 * time.Millisecond})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)
	_, open := greet(t, a)
	defer open.Close()

	c.b.UpdateService(svc, nil)
	mustSync(t, d, c.build())
	if _, err := net.DialTimeout("tcp", a.String(), 5*time.Second); err == nil {
		t.Error("the removed service's listener still accepts")
	}
	_ = open.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(open); err != nil {
		t.Errorf("the removed service's connection ended with %v, want EOF", err)
	}
}

func TestBindFailureReportedCountedRetried(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	takenAddr := taken.Addr().(*net.TCPAddr).AddrPort()
	listen := func(fe Destination) (netip.AddrPort, bool) {
		if fe.Addr.Addr() == netip.MustParseAddr("10.96.0.10") {
			return takenAddr, true
		}
		return netip.MustParseAddrPort("127.0.0.1:0"), true
	}
	c := newCluster()
	c.service("blocked", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("blocked", []string{"10.0.0.1"}, "http/TCP/8080")
	c.service("fine", "10.96.0.11", nil, "http/TCP/80")
	c.endpoints("fine", []string{"10.0.0.1"}, "http/TCP/8080")
	reg := prometheus.NewPedanticRegistry()
	d := newDataplane(t, bk, Config{Listen: listen, BindRetryPeriod: 20 * time.Millisecond, Registerer: reg})

	err = d.Sync(t.Context(), c.build())
	var be *BindError
	if !errors.As(err, &be) {
		t.Fatalf("Sync: %v, want a *BindError", err)
	}
	blocked := Destination{Kind: ClusterIP, Addr: netip.MustParseAddrPort("10.96.0.10:80"), Protocol: v1.ProtocolTCP}
	if _, ok := be.Failed[blocked]; !ok || len(be.Failed) != 1 || !strings.Contains(err.Error(), "10.96.0.10:80/TCP") {
		t.Errorf("BindError %v, want one failure for %s", err, blocked)
	}
	if ep := endpointOf(t, listener(t, d, "10.96.0.11:80", v1.ProtocolTCP)); ep != "10.0.0.1:8080" {
		t.Errorf("the other service reached %s", ep)
	}
	if n := testutil.ToFloat64(d.metrics.bindFailures); n < 1 {
		t.Errorf("bind failures counted %v", n)
	}

	taken.Close()
	eventually(t, "the retry binds the freed port", func() bool {
		_, ok := d.Listeners()[blocked]
		return ok
	})
	if ep := endpointOf(t, takenAddr); ep != "10.0.0.1:8080" {
		t.Errorf("the retried forwarder reached %s", ep)
	}
	if n := testutil.ToFloat64(d.metrics.unbound); n != 0 {
		t.Errorf("unbound frontends %v after the retry", n)
	}
}

func TestCleanupLeavesNoGoroutine(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	bk.serve("10.0.0.1:53")
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80", "dns/UDP/53")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080", "dns/UDP/53")
	d := newDataplane(t, bk, Config{})
	before := runtime.NumGoroutine()

	for round := range 2 {
		mustSync(t, d, c.build())
		var open []net.Conn
		for range 3 {
			_, conn := greet(t, listener(t, d, "10.96.0.10:80", v1.ProtocolTCP))
			open = append(open, conn)
		}
		u, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(listener(t, d, "10.96.0.10:53", v1.ProtocolUDP)))
		if err != nil {
			t.Fatal(err)
		}
		ask(t, u, "q")
		if err := d.Cleanup(t.Context()); err != nil {
			t.Fatalf("Cleanup (round %d): %v", round, err)
		}
		// Every connection was cut by Cleanup.
		for _, conn := range open {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(conn); err != nil {
				t.Errorf("a connection after Cleanup: %v, want EOF", err)
			}
			conn.Close()
		}
		u.Close()
	}
	// The backends' own goroutines end when the client side closes.
	eventually(t, "goroutines are back to their number before", func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func TestMetrics(t *testing.T) {
	bk := newBackends(t)
	bk.serve("10.0.0.1:8080")
	c := newCluster()
	c.service("web", "10.96.0.10", nil, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	reg := prometheus.NewPedanticRegistry()
	d := newDataplane(t, bk, Config{Registerer: reg})
	mustSync(t, d, c.build())
	a := listener(t, d, "10.96.0.10:80", v1.ProtocolTCP)
	_, conn := greet(t, a)
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	_ = conn.(*net.TCPConn).CloseWrite()
	_, _ = io.ReadAll(conn)
	conn.Close()
	eventually(t, "the connection is closed", func() bool {
		return testutil.ToFloat64(d.metrics.active.WithLabelValues("IPv4", "ns/web:http", "TCP")) == 0
	})

	const want = `
# HELP proxykit_userspace_accepted_total TCP connections and UDP sessions forwarded to an endpoint, by service port.
# TYPE proxykit_userspace_accepted_total counter
proxykit_userspace_accepted_total{ip_family="IPv4",protocol="TCP",service="ns/web:http"} 1
# HELP proxykit_userspace_bytes_total Payload bytes forwarded, by service port and direction (to_endpoint, to_client).
# TYPE proxykit_userspace_bytes_total counter
proxykit_userspace_bytes_total{direction="to_client",ip_family="IPv4",protocol="TCP",service="ns/web:http"} 18
proxykit_userspace_bytes_total{direction="to_endpoint",ip_family="IPv4",protocol="TCP",service="ns/web:http"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"proxykit_userspace_accepted_total", "proxykit_userspace_bytes_total"); err != nil {
		t.Error(err)
	}
}

func TestInvalidPortsSkipped(t *testing.T) {
	name := dataplanetest.PortName("ns", "bad", "http", v1.ProtocolTCP)
	state := &dataplane.State{
		Family: v1.IPv4Protocol,
		Services: servicemodel.NewMap(
			&servicemodel.ServicePort{Name: name, ClusterIP: netip.MustParseAddr("fd00::1"), Port: 80, Protocol: v1.ProtocolTCP},
		),
	}
	var skipped []string
	d := newDataplane(t, newBackends(t), Config{OnSkip: func(r string) { skipped = append(skipped, r) }})
	mustSync(t, d, state)
	want := []string{"ns/bad:http: cluster IP fd00::1 is not IPv4"}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if n := len(d.Listeners()); n != 0 {
		t.Errorf("%d listeners for an invalid port", n)
	}
}
