package health

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

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
)

var loopback = []netip.Addr{netip.MustParseAddr("127.0.0.1")}

// local is LocalEndpoints from a map.
type local map[types.NamespacedName]int

func (l local) LocalReadyEndpoints(nn types.NamespacedName) int { return l[nn] }

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

func TestNodePorts(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	rec := record.NewFakeRecorder(10)
	s := NewNodePorts(NodePortsConfig{
		Family: v1.IPv4Protocol, NodeName: "n1", Addresses: loopback,
		Healthy: healthy.Load, Recorder: rec, Logger: testr.New(t),
	})
	t.Cleanup(s.Close)
	nn := types.NamespacedName{Namespace: "ns", Name: "lb"}
	port := freePort(t)

	s.Sync(map[types.NamespacedName]uint16{nn: port}, local{nn: 0})
	if diff := cmp.Diff(hcAnswer{503, "0", hcJSON("ns", "lb", 0, true)}, probe(t, port)); diff != "" {
		t.Errorf("no local endpoints (-want +got):\n%s", diff)
	}
	s.Sync(map[types.NamespacedName]uint16{nn: port}, local{nn: 2})
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
	if serving, failed := s.Sync(map[types.NamespacedName]uint16{nn: port2}, local{nn: 1}); serving != 1 || failed != 0 {
		t.Errorf("Sync = %d serving, %d failed; want 1, 0", serving, failed)
	}
	if got := probe(t, port); got.Code != 0 {
		t.Errorf("old port still answers: %+v", got)
	}
	if got := probe(t, port2); got.Code != 200 || got.Weight != "1" {
		t.Errorf("new port = %+v, want 200 weight 1", got)
	}

	// The service goes away.
	s.Sync(nil, local{nn: 1})
	if got := probe(t, port2); got.Code != 0 {
		t.Errorf("removed service still answers: %+v", got)
	}
}

func TestNodePortsListenFailure(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	s := NewNodePorts(NodePortsConfig{
		Family: v1.IPv4Protocol, NodeName: "n1", Addresses: loopback,
		Recorder: rec, Logger: testr.New(t),
	})
	t.Cleanup(s.Close)
	nn := types.NamespacedName{Namespace: "ns", Name: "lb"}
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(busy.Addr().(*net.TCPAddr).Port)
	if serving, failed := s.Sync(map[types.NamespacedName]uint16{nn: port}, local{nn: 1}); serving != 0 || failed != 1 {
		t.Errorf("Sync = %d serving, %d failed; want 0, 1", serving, failed)
	}
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning FailedToStartServiceHealthcheck node n1 failed to start healthcheck \"ns/lb\"") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event for the failed listen")
	}
	busy.Close()
	// The next sync retries.
	s.Sync(map[types.NamespacedName]uint16{nn: port}, local{nn: 1})
	if got := probe(t, port); got.Code != 200 {
		t.Errorf("after the retry = %+v, want 200", got)
	}
}

func TestNodePortsListenAddresses(t *testing.T) {
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
			s := NewNodePorts(NodePortsConfig{Family: tc.family, NodePortAddresses: tc.nodePorts, Addresses: tc.override, interfaceAddrs: ifAddrs})
			got := s.listenAddresses()
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
				t.Errorf("addresses (-want +got):\n%s", diff)
			}
		})
	}
}
