package endpoints

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// TestTrackerWarnsPortNumbers checks that a slice giving one port name
// several port numbers is warned about once when that appears, not on every
// update that repeats it, and again when it reappears after a fix.
func TestTrackerWarnsPortNumbers(t *testing.T) {
	slice := func(name string, ports ...discovery.EndpointPort) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
				Labels: map[string]string{discovery.LabelServiceName: "web"}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       ports,
			Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.1.0.1"}}},
		}
	}
	port := func(name string, proto v1.Protocol, n int32) discovery.EndpointPort {
		return discovery.EndpointPort{Name: ptr.To(name), Protocol: ptr.To(proto), Port: ptr.To(n)}
	}
	const (
		warnHTTP  = `"level"=0 "msg"="EndpointSlice gives one port name several port numbers; each endpoint is used at every one" "endpointSlice"={"name"="web-1" "namespace"="ns"} "port"="http" "protocol"="TCP" "portNumbers"=[8080 9090]`
		warnHTTP3 = `"level"=0 "msg"="EndpointSlice gives one port name several port numbers; each endpoint is used at every one" "endpointSlice"={"name"="web-1" "namespace"="ns"} "port"="http" "protocol"="TCP" "portNumbers"=[8080 9090 9091]`
		warnDNS   = `"level"=0 "msg"="EndpointSlice gives one port name several port numbers; each endpoint is used at every one" "endpointSlice"={"name"="web-1" "namespace"="ns"} "port"="dns" "protocol"="UDP" "portNumbers"=[53 5353]`
		warnOther = `"level"=0 "msg"="EndpointSlice gives one port name several port numbers; each endpoint is used at every one" "endpointSlice"={"name"="web-2" "namespace"="ns"} "port"="http" "protocol"="TCP" "portNumbers"=[8080 9090]`
	)
	conflicting := slice("web-1", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolTCP, 9090))
	fixed := slice("web-1", port("http", v1.ProtocolTCP, 8080))
	type step struct {
		old, new *discovery.EndpointSlice
		want     []string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{{
		name: "warned once, again after a fix",
		steps: []step{
			{nil, conflicting, []string{warnHTTP}},
			{conflicting, conflicting, nil},
			{conflicting, conflicting, nil},
			{conflicting, fixed, nil},
			{fixed, conflicting, []string{warnHTTP}},
			{conflicting, conflicting, nil},
		},
	}, {
		name: "warned again after a delete",
		steps: []step{
			{nil, conflicting, []string{warnHTTP}},
			{conflicting, nil, nil},
			{nil, conflicting, []string{warnHTTP}},
		},
	}, {
		name: "another number is another conflict",
		steps: []step{
			{nil, conflicting, []string{warnHTTP}},
			{conflicting, slice("web-1", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolTCP, 9090), port("http", v1.ProtocolTCP, 9091)), []string{warnHTTP3}},
		},
	}, {
		name: "one line per port name, only the new one later",
		steps: []step{
			{nil, slice("web-1", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolTCP, 9090), port("http", v1.ProtocolTCP, 8080)), []string{warnHTTP}},
			{conflicting, slice("web-1", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolTCP, 9090),
				port("dns", v1.ProtocolUDP, 5353), port("dns", v1.ProtocolUDP, 53)), []string{warnDNS}},
		},
	}, {
		name: "each slice warns for itself",
		steps: []step{
			{nil, conflicting, []string{warnHTTP}},
			{nil, slice("web-2", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolTCP, 9090)), []string{warnOther}},
		},
	}, {
		name: "no conflict",
		steps: []step{
			// Protocols tell ports apart; a repeated entry is no second number.
			{nil, slice("web-1", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolUDP, 9090)), nil},
			{nil, slice("web-2", port("http", v1.ProtocolTCP, 8080), port("http", v1.ProtocolTCP, 8080)), nil},
			// Slices of one service may differ, as pods of a rollout do.
			{nil, slice("web-3", port("http", v1.ProtocolTCP, 9090)), nil},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			tr := NewTracker(Config{Logger: funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{})})
			for i, s := range tc.steps {
				tr.Update(s.old, s.new)
				tr.Checkout()
				if diff := cmp.Diff(s.want, lines); diff != "" {
					t.Errorf("step %d: log lines (-want +got):\n%s", i, diff)
				}
				lines = nil
			}
		})
	}
}

// TestTrackerPortNumbersStillMerged checks that the warning changes nothing
// about the merge: the endpoint serves the port at both numbers, as
// upstream.
func TestTrackerPortNumbersStillMerged(t *testing.T) {
	tr := NewTracker(Config{})
	tr.Update(nil, &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns", Name: "web-1", Labels: map[string]string{discovery.LabelServiceName: "web"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports: []discovery.EndpointPort{
			{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](8080)},
			{Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP), Port: ptr.To[int32](9090)},
		},
		Endpoints: []discovery.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	})
	m, _ := tr.Checkout()
	var got []string
	for _, ep := range m.Get(portName("ns", "web", "http", v1.ProtocolTCP)) {
		got = append(got, ep.Addr.String())
	}
	if want := []string{"10.1.0.1:8080", "10.1.0.1:9090"}; !cmp.Equal(want, got) {
		t.Errorf("endpoints = %s, want %s", strings.Join(got, " "), strings.Join(want, " "))
	}
}
