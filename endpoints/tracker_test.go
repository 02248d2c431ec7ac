package endpoints

// The cases of upstream's endpointschangetracker_test.go, rewritten against
// the Tracker. Where upstream checks ConntrackCleanupRequired (any change
// to a UDP service) these check Changes.Stale, the exact endpoints that
// stopped serving; lists are in numeric, not string, order.

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

func TestGetLocalEndpointIPs(t *testing.T) {
	tcp := v1.ProtocolTCP
	tests := []struct {
		name string
		eps  map[servicemodel.PortName][]*Endpoint
		want map[types.NamespacedName]int
	}{{
		name: "nothing",
		eps:  map[servicemodel.PortName][]*Endpoint{},
		want: map[types.NamespacedName]int{},
	}, {
		name: "unnamed port",
		eps: map[servicemodel.PortName][]*Endpoint{
			portName("ns1", "ep1", "", tcp): {e("1.1.1.1:11", R|S, "")},
		},
		want: map[types.NamespacedName]int{},
	}, {
		name: "unnamed port local",
		eps: map[servicemodel.PortName][]*Endpoint{
			portName("ns1", "ep1", "", tcp): {e("1.1.1.1:11", R|S|L, "")},
		},
		want: map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
	}, {
		name: "named local and non-local ports for the same IP",
		eps: map[servicemodel.PortName][]*Endpoint{
			portName("ns1", "ep1", "p11", tcp): {e("1.1.1.1:11", R|S, ""), e("1.1.1.2:11", R|S|L, "")},
			portName("ns1", "ep1", "p12", tcp): {e("1.1.1.1:12", R|S, ""), e("1.1.1.2:12", R|S|L, "")},
		},
		want: map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
	}, {
		name: "named local and non-local ports for different IPs",
		eps: map[servicemodel.PortName][]*Endpoint{
			portName("ns1", "ep1", "p11", tcp): {e("1.1.1.1:11", R|S, "")},
			portName("ns2", "ep2", "p22", tcp): {e("2.2.2.2:22", R|S|L, ""), e("2.2.2.22:22", R|S|L, "")},
			portName("ns2", "ep2", "p23", tcp): {e("2.2.2.3:23", R|S|L, "")},
			portName("ns4", "ep4", "p44", tcp): {e("4.4.4.4:44", R|S|L, ""), e("4.4.4.5:44", R|S, "")},
			portName("ns4", "ep4", "p45", tcp): {e("4.4.4.6:45", R|S|L, "")},
		},
		want: map[types.NamespacedName]int{nsn("ns2", "ep2"): 3, nsn("ns4", "ep4"): 2},
	}, {
		name: "named local and non-local ports for different IPs, some not ready",
		eps: map[servicemodel.PortName][]*Endpoint{
			portName("ns1", "ep1", "p11", tcp): {e("1.1.1.1:11", R|S, "")},
			portName("ns2", "ep2", "p22", tcp): {e("2.2.2.2:22", R|S|L, ""), e("2.2.2.22:22", R|S|L, "")},
			portName("ns2", "ep2", "p23", tcp): {e("2.2.2.3:23", S|T|L, "")},
			portName("ns4", "ep4", "p44", tcp): {e("4.4.4.4:44", R|S|L, ""), e("4.4.4.5:44", R|S, "")},
			portName("ns4", "ep4", "p45", tcp): {e("4.4.4.6:45", R|S|L, "")},
		},
		want: map[types.NamespacedName]int{nsn("ns2", "ep2"): 2, nsn("ns4", "ep4"): 2},
	}, {
		name: "all endpoints terminating",
		eps: map[servicemodel.PortName][]*Endpoint{
			portName("ns1", "ep1", "p11", tcp): {e("1.1.1.1:11", S|T, "")},
			portName("ns2", "ep2", "p22", tcp): {e("2.2.2.2:22", S|T|L, ""), e("2.2.2.22:22", S|T|L, "")},
			portName("ns2", "ep2", "p23", tcp): {e("2.2.2.3:23", S|T|L, "")},
			portName("ns4", "ep4", "p44", tcp): {e("4.4.4.4:44", S|T|L, ""), e("4.4.4.5:44", S|T, "")},
			portName("ns4", "ep4", "p45", tcp): {e("4.4.4.6:45", S|T|L, "")},
		},
		want: map[types.NamespacedName]int{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := NewMap(tc.eps)
			if diff := cmp.Diff(tc.want, localReady(m)); diff != "" {
				t.Errorf("local ready endpoints (-want +got):\n%s", diff)
			}
			for nn, n := range tc.want {
				if got := m.LocalReadyEndpoints(nn); got != n {
					t.Errorf("LocalReadyEndpoints(%v) = %d, want %d", nn, got, n)
				}
			}
		})
	}
}

func TestUpdateEndpointsMap(t *testing.T) {
	withPorts := func(ports []discovery.EndpointPort, eps ...discovery.Endpoint) func(*discovery.EndpointSlice) {
		return func(s *discovery.EndpointSlice) {
			s.Endpoints = eps
			s.Ports = ports
		}
	}
	ports := func(p ...discovery.EndpointPort) []discovery.EndpointPort { return p }
	conditioned := func(ip string, ready, serving, terminating bool) discovery.Endpoint {
		return discovery.Endpoint{
			Addresses:  []string{ip},
			Conditions: discovery.EndpointConditions{Ready: ptr.To(ready), Serving: ptr.To(serving), Terminating: ptr.To(terminating)},
		}
	}
	emptyEndpoint := func(s *discovery.EndpointSlice) { s.Endpoints = []discovery.Endpoint{} }
	unnamedPort := withPorts(ports(udpPort("", 11)), addr("1.1.1.1"))
	unnamedPortReady := withPorts(ports(udpPort("", 11)), conditioned("1.1.1.1", true, true, false))
	unnamedPortTerminating := withPorts(ports(udpPort("", 11)), conditioned("1.1.1.1", false, true, true))
	unnamedPortLocal := withPorts(ports(udpPort("", 11)), localAddr("1.1.1.1"))
	namedPortLocal := withPorts(ports(udpPort("p11", 11)), localAddr("1.1.1.1"))
	namedPort := withPorts(ports(udpPort("p11", 11)), addr("1.1.1.1"))
	namedPortRenamed := withPorts(ports(udpPort("p11-2", 11)), addr("1.1.1.1"))
	namedPortRenumbered := withPorts(ports(udpPort("p11", 22)), addr("1.1.1.1"))
	namedPortsLocalNoLocal := withPorts(ports(udpPort("p11", 11), udpPort("p12", 12)), addr("1.1.1.1"), localAddr("1.1.1.2"))
	multipleSubsetsS1 := withPorts(ports(udpPort("p11", 11)), addr("1.1.1.1"))
	multipleSubsetsS2 := withPorts(ports(udpPort("p12", 12)), addr("1.1.1.2"))
	multipleSubsetsWithLocalS1 := withPorts(ports(udpPort("p11", 11)), addr("1.1.1.1"))
	multipleSubsetsWithLocalS2 := withPorts(ports(udpPort("p12", 12)), localAddr("1.1.1.2"))
	multipleSubsetsMultiplePortsLocalS1 := withPorts(ports(udpPort("p11", 11), udpPort("p12", 12)), localAddr("1.1.1.1"))
	multipleSubsetsMultiplePortsLocalS2 := withPorts(ports(udpPort("p13", 13)), addr("1.1.1.3"))
	multipleSubsetsIPsPorts1S1 := withPorts(ports(udpPort("p11", 11), udpPort("p12", 12)), addr("1.1.1.1"), localAddr("1.1.1.2"))
	multipleSubsetsIPsPorts1S2 := withPorts(ports(udpPort("p13", 13), udpPort("p14", 14)), addr("1.1.1.3"), localAddr("1.1.1.4"))
	multipleSubsetsIPsPorts2 := withPorts(ports(udpPort("p21", 21), udpPort("p22", 22)), addr("2.2.2.1"), localAddr("2.2.2.2"))
	complexBefore1 := withPorts(ports(udpPort("p11", 11)), addr("1.1.1.1"))
	complexBefore2S1 := withPorts(ports(udpPort("p22", 22)), localAddr("2.2.2.2"), localAddr("2.2.2.22"))
	complexBefore2S2 := withPorts(ports(udpPort("p23", 23)), localAddr("2.2.2.3"))
	complexBefore4S1 := withPorts(ports(udpPort("p44", 44)), localAddr("4.4.4.4"), localAddr("4.4.4.5"))
	complexBefore4S2 := withPorts(ports(udpPort("p45", 45)), localAddr("4.4.4.6"))
	complexAfter1S1 := withPorts(ports(udpPort("p11", 11)), addr("1.1.1.1"), addr("1.1.1.11"))
	complexAfter1S2 := withPorts(ports(udpPort("p12", 12), udpPort("p122", 122)), addr("1.1.1.2"))
	complexAfter3 := withPorts(ports(udpPort("p33", 33)), addr("3.3.3.3"))
	complexAfter4 := withPorts(ports(udpPort("p44", 44)), localAddr("4.4.4.4"))

	udp := v1.ProtocolUDP
	h := testHostname
	type epMap = map[servicemodel.PortName][]*Endpoint
	stale := func(pn servicemodel.PortName, addrs ...string) []StaleEndpoint {
		var out []StaleEndpoint
		for _, a := range addrs {
			out = append(out, StaleEndpoint{Port: pn, Addr: e(a, 0, "").Addr})
		}
		return out
	}
	cat := func(lists ...[]StaleEndpoint) []StaleEndpoint {
		var out []StaleEndpoint
		for _, l := range lists {
			out = append(out, l...)
		}
		return out
	}

	tests := []struct {
		name string
		// previous and current are paired: nil previous adds, nil
		// current deletes, both set updates.
		previous, current []*discovery.EndpointSlice
		wantPrevious      epMap
		want              epMap
		wantStale         []StaleEndpoint
		wantLocal         map[types.NamespacedName]int
		wantChanged       sets.Set[types.NamespacedName]
	}{{
		name:         "empty",
		wantPrevious: epMap{},
		want:         epMap{},
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New[types.NamespacedName](),
	}, {
		name:         "no change, unnamed port",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPort)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPort)},
		wantPrevious: epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", R|S, "")}},
		want:         epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", R|S, "")}},
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New[types.NamespacedName](),
	}, {
		name:         "no change, named port, local",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPortLocal)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPortLocal)},
		wantPrevious: epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S|L, h)}},
		want:         epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S|L, h)}},
		wantLocal:    map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
		wantChanged:  sets.New[types.NamespacedName](),
	}, {
		name:     "no change, multiple slices",
		previous: []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, multipleSubsetsS1), makeSlice("ns1", "ep1", 2, multipleSubsetsS2)},
		current:  []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, multipleSubsetsS1), makeSlice("ns1", "ep1", 2, multipleSubsetsS2)},
		wantPrevious: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.2:12", R|S, "")},
		},
		want: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.2:12", R|S, "")},
		},
		wantLocal:   map[types.NamespacedName]int{},
		wantChanged: sets.New[types.NamespacedName](),
	}, {
		name:     "no change, multiple slices, multiple ports, local",
		previous: []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, multipleSubsetsMultiplePortsLocalS1), makeSlice("ns1", "ep1", 2, multipleSubsetsMultiplePortsLocalS2)},
		current:  []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, multipleSubsetsMultiplePortsLocalS1), makeSlice("ns1", "ep1", 2, multipleSubsetsMultiplePortsLocalS2)},
		wantPrevious: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S|L, h)},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.1:12", R|S|L, h)},
			portName("ns1", "ep1", "p13", udp): {e("1.1.1.3:13", R|S, "")},
		},
		want: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S|L, h)},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.1:12", R|S|L, h)},
			portName("ns1", "ep1", "p13", udp): {e("1.1.1.3:13", R|S, "")},
		},
		wantLocal:   map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
		wantChanged: sets.New[types.NamespacedName](),
	}, {
		name: "no change, multiple services, slices, IPs, and ports",
		previous: []*discovery.EndpointSlice{
			makeSlice("ns1", "ep1", 1, multipleSubsetsIPsPorts1S1),
			makeSlice("ns1", "ep1", 2, multipleSubsetsIPsPorts1S2),
			makeSlice("ns2", "ep2", 1, multipleSubsetsIPsPorts2),
		},
		current: []*discovery.EndpointSlice{
			makeSlice("ns1", "ep1", 1, multipleSubsetsIPsPorts1S1),
			makeSlice("ns1", "ep1", 2, multipleSubsetsIPsPorts1S2),
			makeSlice("ns2", "ep2", 1, multipleSubsetsIPsPorts2),
		},
		wantPrevious: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, ""), e("1.1.1.2:11", R|S|L, h)},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.1:12", R|S, ""), e("1.1.1.2:12", R|S|L, h)},
			portName("ns1", "ep1", "p13", udp): {e("1.1.1.3:13", R|S, ""), e("1.1.1.4:13", R|S|L, h)},
			portName("ns1", "ep1", "p14", udp): {e("1.1.1.3:14", R|S, ""), e("1.1.1.4:14", R|S|L, h)},
			portName("ns2", "ep2", "p21", udp): {e("2.2.2.1:21", R|S, ""), e("2.2.2.2:21", R|S|L, h)},
			portName("ns2", "ep2", "p22", udp): {e("2.2.2.1:22", R|S, ""), e("2.2.2.2:22", R|S|L, h)},
		},
		want: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, ""), e("1.1.1.2:11", R|S|L, h)},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.1:12", R|S, ""), e("1.1.1.2:12", R|S|L, h)},
			portName("ns1", "ep1", "p13", udp): {e("1.1.1.3:13", R|S, ""), e("1.1.1.4:13", R|S|L, h)},
			portName("ns1", "ep1", "p14", udp): {e("1.1.1.3:14", R|S, ""), e("1.1.1.4:14", R|S|L, h)},
			portName("ns2", "ep2", "p21", udp): {e("2.2.2.1:21", R|S, ""), e("2.2.2.2:21", R|S|L, h)},
			portName("ns2", "ep2", "p22", udp): {e("2.2.2.1:22", R|S, ""), e("2.2.2.2:22", R|S|L, h)},
		},
		wantLocal:   map[types.NamespacedName]int{nsn("ns1", "ep1"): 2, nsn("ns2", "ep2"): 1},
		wantChanged: sets.New[types.NamespacedName](),
	}, {
		name:         "add an EndpointSlice",
		previous:     []*discovery.EndpointSlice{nil},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPortLocal)},
		wantPrevious: epMap{},
		want:         epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", R|S|L, h)}},
		wantLocal:    map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}, {
		name:         "remove an EndpointSlice",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPortLocal)},
		current:      []*discovery.EndpointSlice{nil},
		wantPrevious: epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", R|S|L, h)}},
		want:         epMap{},
		wantStale:    stale(portName("ns1", "ep1", "", udp), "1.1.1.1:11"),
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}, {
		name:         "add an IP and port",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPort)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPortsLocalNoLocal)},
		wantPrevious: epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")}},
		want: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, ""), e("1.1.1.2:11", R|S|L, h)},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.1:12", R|S, ""), e("1.1.1.2:12", R|S|L, h)},
		},
		wantLocal:   map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
		wantChanged: sets.New(nsn("ns1", "ep1")),
	}, {
		name:     "remove an IP and port",
		previous: []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPortsLocalNoLocal)},
		current:  []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPort)},
		wantPrevious: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, ""), e("1.1.1.2:11", R|S|L, h)},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.1:12", R|S, ""), e("1.1.1.2:12", R|S|L, h)},
		},
		want: epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")}},
		wantStale: cat(
			stale(portName("ns1", "ep1", "p11", udp), "1.1.1.2:11"),
			stale(portName("ns1", "ep1", "p12", udp), "1.1.1.1:12", "1.1.1.2:12"),
		),
		wantLocal:   map[types.NamespacedName]int{},
		wantChanged: sets.New(nsn("ns1", "ep1")),
	}, {
		name:         "add a slice to an endpoint",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPort), nil},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, multipleSubsetsWithLocalS1), makeSlice("ns1", "ep1", 2, multipleSubsetsWithLocalS2)},
		wantPrevious: epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")}},
		want: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.2:12", R|S|L, h)},
		},
		wantLocal:   map[types.NamespacedName]int{nsn("ns1", "ep1"): 1},
		wantChanged: sets.New(nsn("ns1", "ep1")),
	}, {
		name:     "remove a slice from an endpoint",
		previous: []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, multipleSubsetsS1), makeSlice("ns1", "ep1", 2, multipleSubsetsS2)},
		current:  []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPort), nil},
		wantPrevious: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")},
			portName("ns1", "ep1", "p12", udp): {e("1.1.1.2:12", R|S, "")},
		},
		want:        epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")}},
		wantStale:   stale(portName("ns1", "ep1", "p12", udp), "1.1.1.2:12"),
		wantLocal:   map[types.NamespacedName]int{},
		wantChanged: sets.New(nsn("ns1", "ep1")),
	}, {
		name:         "rename a port",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPort)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPortRenamed)},
		wantPrevious: epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")}},
		want:         epMap{portName("ns1", "ep1", "p11-2", udp): {e("1.1.1.1:11", R|S, "")}},
		wantStale:    stale(portName("ns1", "ep1", "p11", udp), "1.1.1.1:11"),
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}, {
		name:         "renumber a port",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPort)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, namedPortRenumbered)},
		wantPrevious: epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")}},
		want:         epMap{portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:22", R|S, "")}},
		wantStale:    stale(portName("ns1", "ep1", "p11", udp), "1.1.1.1:11"),
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}, {
		name: "complex add and remove",
		previous: []*discovery.EndpointSlice{
			makeSlice("ns1", "ep1", 1, complexBefore1), nil,
			makeSlice("ns2", "ep2", 1, complexBefore2S1), makeSlice("ns2", "ep2", 2, complexBefore2S2),
			nil, nil,
			makeSlice("ns4", "ep4", 1, complexBefore4S1), makeSlice("ns4", "ep4", 2, complexBefore4S2),
		},
		current: []*discovery.EndpointSlice{
			makeSlice("ns1", "ep1", 1, complexAfter1S1), makeSlice("ns1", "ep1", 2, complexAfter1S2),
			nil, nil,
			makeSlice("ns3", "ep3", 1, complexAfter3), nil,
			makeSlice("ns4", "ep4", 1, complexAfter4), nil,
		},
		wantPrevious: epMap{
			portName("ns1", "ep1", "p11", udp): {e("1.1.1.1:11", R|S, "")},
			portName("ns2", "ep2", "p22", udp): {e("2.2.2.2:22", R|S|L, h), e("2.2.2.22:22", R|S|L, h)},
			portName("ns2", "ep2", "p23", udp): {e("2.2.2.3:23", R|S|L, h)},
			portName("ns4", "ep4", "p44", udp): {e("4.4.4.4:44", R|S|L, h), e("4.4.4.5:44", R|S|L, h)},
			portName("ns4", "ep4", "p45", udp): {e("4.4.4.6:45", R|S|L, h)},
		},
		want: epMap{
			// Upstream's string order puts 1.1.1.11:11 first.
			portName("ns1", "ep1", "p11", udp):  {e("1.1.1.1:11", R|S, ""), e("1.1.1.11:11", R|S, "")},
			portName("ns1", "ep1", "p12", udp):  {e("1.1.1.2:12", R|S, "")},
			portName("ns1", "ep1", "p122", udp): {e("1.1.1.2:122", R|S, "")},
			portName("ns3", "ep3", "p33", udp):  {e("3.3.3.3:33", R|S, "")},
			portName("ns4", "ep4", "p44", udp):  {e("4.4.4.4:44", R|S|L, h)},
		},
		wantStale: cat(
			stale(portName("ns2", "ep2", "p22", udp), "2.2.2.2:22", "2.2.2.22:22"),
			stale(portName("ns2", "ep2", "p23", udp), "2.2.2.3:23"),
			stale(portName("ns4", "ep4", "p44", udp), "4.4.4.5:44"),
			stale(portName("ns4", "ep4", "p45", udp), "4.4.4.6:45"),
		),
		wantLocal:   map[types.NamespacedName]int{nsn("ns4", "ep4"): 1},
		wantChanged: sets.New(nsn("ns1", "ep1"), nsn("ns2", "ep2"), nsn("ns3", "ep3"), nsn("ns4", "ep4")),
	}, {
		name:         "change from 0 endpoint address to 1 unnamed port",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, emptyEndpoint)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPort)},
		wantPrevious: epMap{},
		want:         epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", R|S, "")}},
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}, {
		// Still serving, so not stale: conntrack entries through it stay.
		name:         "change from ready to terminating pod",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPortReady)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPortTerminating)},
		wantPrevious: epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", R|S, "")}},
		want:         epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", S|T, "")}},
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}, {
		name:         "change from terminating to empty pod",
		previous:     []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, unnamedPortTerminating)},
		current:      []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, emptyEndpoint)},
		wantPrevious: epMap{portName("ns1", "ep1", "", udp): {e("1.1.1.1:11", S|T, "")}},
		want:         epMap{},
		wantStale:    stale(portName("ns1", "ep1", "", udp), "1.1.1.1:11"),
		wantLocal:    map[types.NamespacedName]int{},
		wantChanged:  sets.New(nsn("ns1", "ep1")),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.previous) != len(tc.current) {
				t.Fatalf("previous and current differ in length")
			}
			for _, s := range append(append([]*discovery.EndpointSlice{}, tc.previous...), tc.current...) {
				if s != nil {
					guard(t, s)
				}
			}
			tr := newTestTracker(t, Config{NodeName: testHostname})
			for _, s := range tc.previous {
				if s != nil {
					tr.Update(nil, s)
				}
			}
			m, _ := checkout(t, tr)
			if diff := cmp.Diff(tc.wantPrevious, contents(m), cmpOpts); diff != "" {
				t.Fatalf("previous endpoints (-want +got):\n%s", diff)
			}
			for i := range tc.previous {
				prev, cur := tc.previous[i], tc.current[i]
				if prev != nil || cur != nil {
					tr.Update(prev, cur)
				}
			}
			m, ch := checkout(t, tr)
			if diff := cmp.Diff(tc.want, contents(m), cmpOpts); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantChanged, ch.Services); diff != "" {
				t.Errorf("changed services (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStale, ch.Stale, cmpOpts); diff != "" {
				t.Errorf("stale endpoints (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLocal, localReady(m)); diff != "" {
				t.Errorf("local ready endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLastChangeTriggerTime(t *testing.T) {
	startTime := time.Date(2018, 1, 1, 0, 0, 0, 0, time.UTC)
	tMinus1 := startTime.Add(-time.Second)
	t0 := startTime.Add(time.Second)
	t1 := t0.Add(time.Second)
	t2 := t1.Add(time.Second)
	t3 := t2.Add(time.Second)

	create := func(ns, name string, trigger time.Time) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Namespace:   ns,
				Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)},
				Labels:      map[string]string{discovery.LabelServiceName: name},
			},
			AddressType: discovery.AddressTypeIPv4,
			Endpoints:   []discovery.Endpoint{addr("1.1.1.1")},
			Ports:       []discovery.EndpointPort{{Name: ptr.To("p11"), Port: ptr.To[int32](11), Protocol: ptr.To(v1.ProtocolTCP)}},
		}
	}
	modify := func(s *discovery.EndpointSlice, trigger time.Time) *discovery.EndpointSlice {
		c := s.DeepCopy()
		*c.Ports[0].Port++
		c.Annotations[v1.EndpointsLastChangeTriggerTime] = trigger.Format(time.RFC3339Nano)
		return c
	}
	tests := []struct {
		name     string
		scenario func(tr *Tracker)
		want     map[types.NamespacedName][]time.Time
	}{{
		name:     "Single addEndpoints",
		scenario: func(tr *Tracker) { tr.Update(nil, create("ns", "ep1", t0)) },
		want:     map[types.NamespacedName][]time.Time{nsn("ns", "ep1"): {t0}},
	}, {
		name: "addEndpoints then updatedEndpoints",
		scenario: func(tr *Tracker) {
			s := create("ns", "ep1", t0)
			tr.Update(nil, s)
			tr.Update(s, modify(s, t1))
		},
		want: map[types.NamespacedName][]time.Time{nsn("ns", "ep1"): {t0, t1}},
	}, {
		name: "Add two endpoints then modify one",
		scenario: func(tr *Tracker) {
			s1 := create("ns", "ep1", t1)
			tr.Update(nil, s1)
			tr.Update(nil, create("ns", "ep2", t2))
			tr.Update(s1, modify(s1, t3))
		},
		want: map[types.NamespacedName][]time.Time{nsn("ns", "ep1"): {t1, t3}, nsn("ns", "ep2"): {t2}},
	}, {
		name: "Endpoints without annotation set",
		scenario: func(tr *Tracker) {
			s := create("ns", "ep1", t1)
			delete(s.Annotations, v1.EndpointsLastChangeTriggerTime)
			tr.Update(nil, s)
		},
		want: map[types.NamespacedName][]time.Time{},
	}, {
		name:     "Endpoints create before tracker started",
		scenario: func(tr *Tracker) { tr.Update(nil, create("ns", "ep1", tMinus1)) },
		want:     map[types.NamespacedName][]time.Time{},
	}, {
		name: "addEndpoints then deleteEndpoints",
		scenario: func(tr *Tracker) {
			s := create("ns", "ep1", t1)
			tr.Update(nil, s)
			tr.Update(s, nil)
		},
		want: map[types.NamespacedName][]time.Time{},
	}, {
		name: "add then delete then add again",
		scenario: func(tr *Tracker) {
			s := create("ns", "ep1", t1)
			tr.Update(nil, s)
			tr.Update(s, nil)
			tr.Update(nil, modify(s, t2))
		},
		want: map[types.NamespacedName][]time.Time{nsn("ns", "ep1"): {t2}},
	}, {
		name:     "delete",
		scenario: func(tr *Tracker) { tr.Update(create("ns", "ep1", t1), nil) },
		want:     map[types.NamespacedName][]time.Time{},
	}, {
		// Not upstream: an update that changes nothing merged records no
		// trigger time, since nothing is programmed for it.
		name: "metadata-only update",
		scenario: func(tr *Tracker) {
			s := create("ns", "ep1", t1)
			tr.Update(nil, s)
			c := s.DeepCopy()
			c.Annotations[v1.EndpointsLastChangeTriggerTime] = t2.Format(time.RFC3339Nano)
			tr.Update(s, c)
		},
		want: map[types.NamespacedName][]time.Time{nsn("ns", "ep1"): {t1}},
	}, {
		name: "unparsable annotation",
		scenario: func(tr *Tracker) {
			s := create("ns", "ep1", t1)
			s.Annotations[v1.EndpointsLastChangeTriggerTime] = "yesterday"
			tr.Update(nil, s)
		},
		want: map[types.NamespacedName][]time.Time{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestTracker(t, Config{Clock: testingclock.NewFakePassiveClock(startTime)})
			tc.scenario(tr)
			_, ch := checkout(t, tr)
			if diff := cmp.Diff(tc.want, ch.TriggerTimes); diff != "" {
				t.Errorf("trigger times (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEndpointSliceUpdate(t *testing.T) {
	fqdnSlice := gen("svc1", "ns1", 2, 5, 999, 999, []string{"host1"}, p80, p443)
	fqdnSlice.AddressType = discovery.AddressTypeFQDN
	port0 := portName("ns1", "svc1", "port-0", v1.ProtocolTCP)
	port1 := portName("ns1", "svc1", "port-1", v1.ProtocolTCP)
	h1, h2 := "host1", "host2"
	both := []string{h1, h2}
	only1 := []string{h1}
	type epMap = map[servicemodel.PortName][]*Endpoint

	tests := []struct {
		name     string
		starting []*discovery.EndpointSlice
		param    *discovery.EndpointSlice
		remove   bool
		want     bool
		// wantCurrent is the service's endpoints after the update; nil
		// means no change is expected at all.
		wantCurrent epMap
	}{{
		name:  "add a simple slice that doesn't already exist",
		param: gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443),
		want:  true,
		wantCurrent: epMap{
			port0: {e("10.0.1.1:80", R|S, h2), e("10.0.1.2:80", R|S|L, h1), e("10.0.1.3:80", R|S, h2)},
			port1: {e("10.0.1.1:443", R|S, h2), e("10.0.1.2:443", R|S|L, h1), e("10.0.1.3:443", R|S, h2)},
		},
	}, {
		name:     "add the same slice that already exists",
		starting: []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443)},
		param:    gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443),
		want:     false,
	}, {
		name:     "add an FQDN slice (invalid address type)",
		starting: []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443)},
		param:    fqdnSlice,
		want:     false,
	}, {
		name: "add a slice that overlaps with existing state",
		starting: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443),
			gen("svc1", "ns1", 2, 2, 999, 999, both, p80, p443),
		},
		param: gen("svc1", "ns1", 1, 5, 999, 999, only1, p80, p443),
		want:  true,
		wantCurrent: epMap{
			port0: {
				e("10.0.1.1:80", R|S|L, h1), e("10.0.1.2:80", R|S|L, h1), e("10.0.1.3:80", R|S|L, h1),
				e("10.0.1.4:80", R|S|L, h1), e("10.0.1.5:80", R|S|L, h1),
				e("10.0.2.1:80", R|S, h2), e("10.0.2.2:80", R|S|L, h1),
			},
			port1: {
				e("10.0.1.1:443", R|S|L, h1), e("10.0.1.2:443", R|S|L, h1), e("10.0.1.3:443", R|S|L, h1),
				e("10.0.1.4:443", R|S|L, h1), e("10.0.1.5:443", R|S|L, h1),
				e("10.0.2.1:443", R|S, h2), e("10.0.2.2:443", R|S|L, h1),
			},
		},
	}, {
		name: "add a slice that overlaps with existing state and partial ports",
		starting: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 999, 999, only1, p80, p443),
			gen("svc1", "ns1", 2, 2, 999, 999, only1, p80, p443),
		},
		param: genSlice("svc1", "ns1", 3, 1, 5, 999, 999, only1, p80),
		want:  true,
		wantCurrent: epMap{
			port0: {
				e("10.0.1.1:80", R|S|L, h1), e("10.0.1.2:80", R|S|L, h1), e("10.0.1.3:80", R|S|L, h1),
				e("10.0.1.4:80", R|S|L, h1), e("10.0.1.5:80", R|S|L, h1),
				e("10.0.2.1:80", R|S|L, h1), e("10.0.2.2:80", R|S|L, h1),
			},
			port1: {
				e("10.0.1.1:443", R|S|L, h1), e("10.0.1.2:443", R|S|L, h1), e("10.0.1.3:443", R|S|L, h1),
				e("10.0.2.1:443", R|S|L, h1), e("10.0.2.2:443", R|S|L, h1),
			},
		},
	}, {
		// Removal goes by name: the removed object's content is irrelevant.
		name: "remove a slice that overlaps with existing state",
		starting: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443),
			gen("svc1", "ns1", 2, 2, 999, 999, both, p80, p443),
		},
		param:  gen("svc1", "ns1", 1, 5, 999, 999, only1, p80, p443),
		remove: true,
		want:   true,
		wantCurrent: epMap{
			port0: {e("10.0.2.1:80", R|S, h2), e("10.0.2.2:80", R|S|L, h1)},
			port1: {e("10.0.2.1:443", R|S, h2), e("10.0.2.2:443", R|S|L, h1)},
		},
	}, {
		name: "remove a slice that doesn't even exist in current state",
		starting: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 5, 999, 999, only1, p80, p443),
			gen("svc1", "ns1", 2, 2, 999, 999, only1, p80, p443),
		},
		param:  gen("svc1", "ns1", 3, 5, 999, 999, only1, p80, p443),
		remove: true,
		want:   false,
	}, {
		name:     "transition all endpoints to unready state",
		starting: []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 999, 999, both, p80, p443)},
		param:    gen("svc1", "ns1", 1, 3, 1, 999, only1, p80, p443),
		want:     true,
		wantCurrent: epMap{
			port0: {e("10.0.1.1:80", L, h1), e("10.0.1.2:80", L, h1), e("10.0.1.3:80", L, h1)},
			port1: {e("10.0.1.1:443", L, h1), e("10.0.1.2:443", L, h1), e("10.0.1.3:443", L, h1)},
		},
	}, {
		name:     "transition all endpoints to ready state",
		starting: []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 2, 1, 999, both, p80, p443)},
		param:    gen("svc1", "ns1", 1, 2, 999, 999, only1, p80, p443),
		want:     true,
		wantCurrent: epMap{
			port0: {e("10.0.1.1:80", R|S|L, h1), e("10.0.1.2:80", R|S|L, h1)},
			port1: {e("10.0.1.1:443", R|S|L, h1), e("10.0.1.2:443", R|S|L, h1)},
		},
	}, {
		name: "transition some endpoints to ready state",
		starting: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 2, 999, only1, p80, p443),
			gen("svc1", "ns1", 2, 2, 2, 999, only1, p80, p443),
		},
		param: gen("svc1", "ns1", 1, 3, 3, 999, only1, p80, p443),
		want:  true,
		wantCurrent: epMap{
			port0: {
				e("10.0.1.1:80", R|S|L, h1), e("10.0.1.2:80", R|S|L, h1), e("10.0.1.3:80", L, h1),
				e("10.0.2.1:80", R|S|L, h1), e("10.0.2.2:80", L, h1),
			},
			port1: {
				e("10.0.1.1:443", R|S|L, h1), e("10.0.1.2:443", R|S|L, h1), e("10.0.1.3:443", L, h1),
				e("10.0.2.1:443", R|S|L, h1), e("10.0.2.2:443", L, h1),
			},
		},
	}, {
		name: "transition some endpoints to terminating state",
		starting: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 2, 2, only1, p80, p443),
			gen("svc1", "ns1", 2, 2, 2, 2, only1, p80, p443),
		},
		param: gen("svc1", "ns1", 1, 3, 3, 2, only1, p80, p443),
		want:  true,
		wantCurrent: epMap{
			port0: {
				e("10.0.1.1:80", R|S|L, h1), e("10.0.1.2:80", S|T|L, h1), e("10.0.1.3:80", L, h1),
				e("10.0.2.1:80", R|S|L, h1), e("10.0.2.2:80", T|L, h1),
			},
			port1: {
				e("10.0.1.1:443", R|S|L, h1), e("10.0.1.2:443", S|T|L, h1), e("10.0.1.3:443", L, h1),
				e("10.0.2.1:443", R|S|L, h1), e("10.0.2.2:443", T|L, h1),
			},
		},
	}}
	svc1 := nsn("ns1", "svc1")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, append([]*discovery.EndpointSlice{tc.param}, tc.starting...)...)
			tr := newTestTracker(t, Config{NodeName: h1})
			for _, s := range tc.starting {
				tr.Update(nil, s)
			}
			before, _ := checkout(t, tr)
			var got bool
			if tc.remove {
				got = tr.Update(tc.param, nil)
			} else {
				got = tr.Update(nil, tc.param)
			}
			if got != tc.want {
				t.Errorf("Update() = %v, want %v", got, tc.want)
			}
			m, ch := checkout(t, tr)
			if tc.wantCurrent == nil {
				if ch.Services.Len() != 0 {
					t.Errorf("changed services = %v, want none", ch.Services.UnsortedList())
				}
				if diff := cmp.Diff(contents(before), contents(m), cmpOpts); diff != "" {
					t.Errorf("endpoints changed (-before +after):\n%s", diff)
				}
				return
			}
			if !ch.Services.Has(svc1) {
				t.Errorf("changed services = %v, want %v", ch.Services.UnsortedList(), svc1)
			}
			if diff := cmp.Diff(tc.wantCurrent, serviceContents(m, svc1), cmpOpts); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckoutChanges(t *testing.T) {
	port0 := portName("ns1", "svc1", "port-0", v1.ProtocolTCP)
	port1 := portName("ns1", "svc1", "port-1", v1.ProtocolTCP)
	type epMap = map[servicemodel.PortName][]*Endpoint
	tests := []struct {
		name                      string
		applied, pending          []*discovery.EndpointSlice
		wantChanges               int
		wantPrevious, wantCurrent epMap
		wantPorts                 sets.Set[servicemodel.PortName]
	}{{
		name:         "empty slices",
		wantPrevious: epMap{},
		wantCurrent:  epMap{},
		wantPorts:    sets.New[servicemodel.PortName](),
	}, {
		name:         "adding initial slice",
		pending:      []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 3, 2, []string{"host1"}, p80)},
		wantChanges:  1,
		wantPrevious: epMap{},
		wantCurrent: epMap{
			port0: {e("10.0.1.1:80", R|S, "host1"), e("10.0.1.2:80", S|T, "host1"), e("10.0.1.3:80", 0, "host1")},
		},
		wantPorts: sets.New(port0),
	}, {
		name:        "removing port in update",
		applied:     []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 3, 999, []string{"host1"}, p80, p443)},
		pending:     []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 3, 999, []string{"host1"}, p80)},
		wantChanges: 1,
		wantPrevious: epMap{
			port0: {e("10.0.1.1:80", R|S, "host1"), e("10.0.1.2:80", R|S, "host1"), e("10.0.1.3:80", 0, "host1")},
			port1: {e("10.0.1.1:443", R|S, "host1"), e("10.0.1.2:443", R|S, "host1"), e("10.0.1.3:443", 0, "host1")},
		},
		wantCurrent: epMap{
			port0: {e("10.0.1.1:80", R|S, "host1"), e("10.0.1.2:80", R|S, "host1"), e("10.0.1.3:80", 0, "host1")},
		},
		wantPorts: sets.New(port1),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, append(append([]*discovery.EndpointSlice{}, tc.applied...), tc.pending...)...)
			tr := newTestTracker(t, Config{})
			for _, s := range tc.applied {
				tr.Update(nil, s)
			}
			previous, _ := checkout(t, tr)
			for _, s := range tc.pending {
				tr.Update(nil, s)
			}
			current, ch := checkout(t, tr)
			if got := ch.Services.Len(); got != tc.wantChanges {
				t.Errorf("%d services changed, want %d", got, tc.wantChanges)
			}
			// The earlier snapshot is unaffected by the later Checkout.
			if diff := cmp.Diff(tc.wantPrevious, contents(previous), cmpOpts); diff != "" {
				t.Errorf("previous (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCurrent, contents(current), cmpOpts); diff != "" {
				t.Errorf("current (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPorts, ch.Ports); diff != "" {
				t.Errorf("changed ports (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCheckoutManyServices: a Checkout of a whole cluster's changes
// reports exactly what changed (checkout compares the Changes with the
// snapshots' difference), stale UDP endpoints included, and so does a
// small one after it.
func TestCheckoutManyServices(t *testing.T) {
	const n = 1500
	slices := make([]*discovery.EndpointSlice, n)
	tr := newTestTracker(t, Config{})
	for i := range n {
		slices[i] = makeSlice("ns", fmt.Sprintf("svc%d", i), 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{udpPort("dns", 53), {Name: ptr.To("web"), Port: ptr.To[int32](80), Protocol: ptr.To(v1.ProtocolTCP)}}
			for k := range 3 {
				s.Endpoints = append(s.Endpoints, addr(fmt.Sprintf("10.%d.%d.%d", k+1, i/250, i%250+1)))
			}
		})
		tr.Update(nil, slices[i])
	}
	_, ch := checkout(t, tr)
	if ch.Ports.Len() != 2*n {
		t.Fatalf("%d ports changed, want %d", ch.Ports.Len(), 2*n)
	}
	update := func(i int, edit func(*discovery.EndpointSlice)) {
		next := slices[i].DeepCopy()
		edit(next)
		tr.Update(slices[i], next)
		slices[i] = next
	}
	for i := range n {
		update(i, func(s *discovery.EndpointSlice) {
			s.Endpoints = s.Endpoints[i%3:]
			if i%5 == 0 && len(s.Endpoints) > 0 {
				s.Endpoints[0].Conditions.Serving = ptr.To(false)
				s.Endpoints[0].Conditions.Ready = ptr.To(false)
			}
		})
	}
	if _, ch = checkout(t, tr); len(ch.Stale) == 0 {
		t.Fatal("no stale endpoints; the test needs some")
	}
	update(7, func(s *discovery.EndpointSlice) { s.Endpoints = nil })
	if _, ch = checkout(t, tr); ch.Services.Len() != 1 {
		t.Errorf("%d services changed, want 1", ch.Services.Len())
	}
}
