package endpoints

// The cases of upstream's endpointslicecache_test.go, rewritten against the
// Tracker. Upstream sorts endpoint lists as strings (10.0.1.10 before
// 10.0.1.1); every expectation here is in numeric order instead.

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

var (
	p80   = ptr.To[int32](80)
	p443  = ptr.To[int32](443)
	p8080 = ptr.To[int32](8080)
)

func TestEndpointsMapFromESC(t *testing.T) {
	svc1 := nsn("ns1", "svc1")
	port0 := portName("ns1", "svc1", "port-0", v1.ProtocolTCP)
	port1 := portName("ns1", "svc1", "port-1", v1.ProtocolTCP)
	tests := []struct {
		name     string
		slices   []*discovery.EndpointSlice
		hostname string
		want     map[servicemodel.PortName][]*Endpoint
	}{{
		name:     "1 slice, 2 hosts, ports 80,443",
		hostname: "host1",
		slices:   []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 999, 999, []string{"host1", "host2"}, p80, p443)},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {e("10.0.1.1:80", R|S, "host2"), e("10.0.1.2:80", R|S|L, "host1"), e("10.0.1.3:80", R|S, "host2")},
			port1: {e("10.0.1.1:443", R|S, "host2"), e("10.0.1.2:443", R|S|L, "host1"), e("10.0.1.3:443", R|S, "host2")},
		},
	}, {
		name: "2 slices, same port",
		slices: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 999, 999, nil, p80),
			gen("svc1", "ns1", 2, 3, 999, 999, nil, p80),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {
				e("10.0.1.1:80", R|S, ""), e("10.0.1.2:80", R|S, ""), e("10.0.1.3:80", R|S, ""),
				e("10.0.2.1:80", R|S, ""), e("10.0.2.2:80", R|S, ""), e("10.0.2.3:80", R|S, ""),
			},
		},
	}, {
		// Both objects are slice svc1-1, so the second replaces the first
		// (upstream's comment calls the result a union; it is not).
		name: "2 overlapping slices, same port",
		slices: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 999, 999, nil, p80),
			gen("svc1", "ns1", 1, 4, 999, 999, nil, p80),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {e("10.0.1.1:80", R|S, ""), e("10.0.1.2:80", R|S, ""), e("10.0.1.3:80", R|S, ""), e("10.0.1.4:80", R|S, "")},
		},
	}, {
		name: "2 slices, overlapping endpoints, some endpoints unready in 1 or both",
		slices: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 10, 3, 999, nil, p80),
			gen("svc1", "ns1", 1, 10, 6, 999, nil, p80),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {
				e("10.0.1.1:80", R|S, ""), e("10.0.1.2:80", R|S, ""), e("10.0.1.3:80", R|S, ""),
				e("10.0.1.4:80", R|S, ""), e("10.0.1.5:80", R|S, ""), e("10.0.1.6:80", 0, ""),
				e("10.0.1.7:80", R|S, ""), e("10.0.1.8:80", R|S, ""), e("10.0.1.9:80", R|S, ""),
				e("10.0.1.10:80", R|S, ""),
			},
		},
	}, {
		name: "2 slices, overlapping endpoints, some endpoints unready and some endpoints terminating",
		slices: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 10, 3, 5, nil, p80),
			gen("svc1", "ns1", 1, 10, 6, 5, nil, p80),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {
				e("10.0.1.1:80", R|S, ""), e("10.0.1.2:80", R|S, ""), e("10.0.1.3:80", R|S, ""),
				e("10.0.1.4:80", R|S, ""), e("10.0.1.5:80", S|T, ""), e("10.0.1.6:80", 0, ""),
				e("10.0.1.7:80", R|S, ""), e("10.0.1.8:80", R|S, ""), e("10.0.1.9:80", R|S, ""),
				e("10.0.1.10:80", S|T, ""),
			},
		},
	}, {
		name: "2 slices, overlapping endpoints, all unready",
		slices: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 10, 1, 999, nil, p80),
			gen("svc1", "ns1", 1, 10, 1, 999, nil, p80),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {
				e("10.0.1.1:80", 0, ""), e("10.0.1.2:80", 0, ""), e("10.0.1.3:80", 0, ""),
				e("10.0.1.4:80", 0, ""), e("10.0.1.5:80", 0, ""), e("10.0.1.6:80", 0, ""),
				e("10.0.1.7:80", 0, ""), e("10.0.1.8:80", 0, ""), e("10.0.1.9:80", 0, ""),
				e("10.0.1.10:80", 0, ""),
			},
		},
	}, {
		name: "3 slices with different services and namespaces",
		slices: []*discovery.EndpointSlice{
			gen("svc1", "ns1", 1, 3, 999, 999, nil, p80),
			gen("svc2", "ns1", 2, 3, 999, 999, nil, p80),
			gen("svc1", "ns2", 3, 3, 999, 999, nil, p80),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {e("10.0.1.1:80", R|S, ""), e("10.0.1.2:80", R|S, ""), e("10.0.1.3:80", R|S, "")},
		},
	}, {
		name:     "Nil port should not break anything",
		hostname: "host1",
		slices:   []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 999, 999, []string{"host1", "host2"}, nil)},
		want:     map[servicemodel.PortName][]*Endpoint{},
	}, {
		name:     "Different endpoints with duplicate IPs should not be filtered",
		hostname: "host1",
		slices: []*discovery.EndpointSlice{
			genSlice("svc1", "ns1", 1, 1, 2, 999, 999, []string{"host1", "host2"}, p80),
			genSlice("svc1", "ns1", 2, 1, 2, 999, 999, []string{"host1", "host2"}, p8080),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {
				e("10.0.1.1:80", R|S, "host2"), e("10.0.1.1:8080", R|S, "host2"),
				e("10.0.1.2:80", R|S|L, "host1"), e("10.0.1.2:8080", R|S|L, "host1"),
			},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, tc.slices...)
			tr := newTestTracker(t, Config{NodeName: tc.hostname})
			for _, s := range tc.slices {
				tr.Update(nil, s)
			}
			m, _ := checkout(t, tr)
			if diff := cmp.Diff(tc.want, serviceContents(m, svc1), cmpOpts); diff != "" {
				t.Errorf("endpoints of %v (-want +got):\n%s", svc1, diff)
			}
		})
	}
}

func TestEndpointInfoByServicePort(t *testing.T) {
	port0 := portName("ns1", "svc1", "port-0", v1.ProtocolTCP)
	dupes := genSlice("svc1", "ns1", 1, 1, 1, 999, 999, []string{"host1"}, p80)
	ep1, ep2, ep3 := dupes.Endpoints[0], dupes.Endpoints[0], dupes.Endpoints[0]
	ep1.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
	ep2.Conditions = discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)}
	ep3.Conditions = discovery.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(true)}
	dupes.Endpoints = []discovery.Endpoint{ep1, ep2, ep3}

	tests := []struct {
		name   string
		slices []*discovery.EndpointSlice
		want   map[servicemodel.PortName][]*Endpoint
	}{{
		name:   "simple use case with 3 endpoints",
		slices: []*discovery.EndpointSlice{gen("svc1", "ns1", 1, 3, 999, 999, []string{"host1", "host2"}, p80)},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {e("10.0.1.1:80", R|S, "host2"), e("10.0.1.2:80", R|S|L, "host1"), e("10.0.1.3:80", R|S, "host2")},
		},
	}, {
		name: "4 different slices with duplicate IPs",
		slices: []*discovery.EndpointSlice{
			genSlice("svc1", "ns1", 1, 1, 2, 999, 999, []string{"host1", "host2"}, p80),
			genSlice("svc1", "ns1", 2, 1, 2, 999, 999, []string{"host1", "host2"}, p8080),
		},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {
				e("10.0.1.1:80", R|S, "host2"), e("10.0.1.1:8080", R|S, "host2"),
				e("10.0.1.2:80", R|S|L, "host1"), e("10.0.1.2:8080", R|S|L, "host1"),
			},
		},
	}, {
		name:   "with duplicate Endpoints, prefer non-terminating",
		slices: []*discovery.EndpointSlice{dupes},
		want: map[servicemodel.PortName][]*Endpoint{
			port0: {e("10.0.1.1:80", R|S|L, "host1")},
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, tc.slices...)
			tr := newTestTracker(t, Config{NodeName: "host1"})
			for _, s := range tc.slices {
				tr.Update(nil, s)
			}
			m, _ := checkout(t, tr)
			if diff := cmp.Diff(tc.want, contents(m), cmpOpts); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEsDataChanged is upstream's table for esDataChanged, adapted: change
// is judged on merged content here, so reordered ports or endpoints are NOT
// a change (upstream: changed), and neither is a port added to or removed
// from a slice that has no endpoints (nothing is merged either way). The
// port cases therefore get an endpoint, so that the port change shows, and
// the endpoint-less variants are kept as no-change rows.
func TestEsDataChanged(t *testing.T) {
	port80 := discovery.EndpointPort{Port: p80, Name: ptr.To("http"), Protocol: ptr.To(v1.ProtocolTCP)}
	port443 := discovery.EndpointPort{Port: p443, Name: ptr.To("https"), Protocol: ptr.To(v1.ProtocolTCP)}
	endpoint1 := discovery.Endpoint{Addresses: []string{"10.0.1.0"}}
	endpoint2 := discovery.Endpoint{Addresses: []string{"10.0.1.1"}}
	objMeta := metav1.ObjectMeta{
		Name:      "foo",
		Namespace: "bar",
		Labels:    map[string]string{discovery.LabelServiceName: "svc1"},
	}
	slice := func(ports []discovery.EndpointPort, eps ...discovery.Endpoint) *discovery.EndpointSlice {
		return &discovery.EndpointSlice{ObjectMeta: *objMeta.DeepCopy(), AddressType: discovery.AddressTypeIPv4, Ports: ports, Endpoints: eps}
	}
	metadataOnly := slice([]discovery.EndpointPort{port80}, endpoint1)
	metadataOnly.ResourceVersion = "2"
	metadataOnly.Annotations = map[string]string{"example.com/touched": "yes"}
	metadataOnly.Labels["example.com/extra"] = "label"

	tests := []struct {
		name          string
		initial       *discovery.EndpointSlice
		updated       *discovery.EndpointSlice
		expectChanged bool
	}{
		{"identical slices, ports only", slice([]discovery.EndpointPort{port80}), slice([]discovery.EndpointPort{port80}), false},
		{"identical slices, ports out of order", slice([]discovery.EndpointPort{port443, port80}, endpoint1), slice([]discovery.EndpointPort{port80, port443}, endpoint1), false},
		{"port removed", slice([]discovery.EndpointPort{port443, port80}, endpoint1), slice([]discovery.EndpointPort{port443}, endpoint1), true},
		{"port added", slice([]discovery.EndpointPort{port443}, endpoint1), slice([]discovery.EndpointPort{port443, port80}, endpoint1), true},
		{"port removed, no endpoints", slice([]discovery.EndpointPort{port443, port80}), slice([]discovery.EndpointPort{port443}), false},
		{"port added, no endpoints", slice([]discovery.EndpointPort{port443}), slice([]discovery.EndpointPort{port443, port80}), false},
		{"identical with endpoints", slice([]discovery.EndpointPort{port443}, endpoint1, endpoint2), slice([]discovery.EndpointPort{port443}, endpoint1, endpoint2), false},
		{"identical with endpoints out of order", slice([]discovery.EndpointPort{port443}, endpoint1, endpoint2), slice([]discovery.EndpointPort{port443}, endpoint2, endpoint1), false},
		{"identical with endpoint added", slice([]discovery.EndpointPort{port443}, endpoint1), slice([]discovery.EndpointPort{port443}, endpoint2, endpoint1), true},
		{"metadata only", slice([]discovery.EndpointPort{port80}, endpoint1), metadataOnly, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, tc.initial, tc.updated)
			tr := newTestTracker(t, Config{})
			tr.Update(nil, tc.initial)
			checkout(t, tr)
			if got := tr.Update(tc.initial, tc.updated); got != tc.expectChanged {
				t.Errorf("Update() = %v, want %v", got, tc.expectChanged)
			}
			want := 0
			if tc.expectChanged {
				want = 1
			}
			if got := tr.Pending(); got != want {
				t.Errorf("Pending() = %d, want %d", got, want)
			}
			checkout(t, tr)
		})
	}
}

// clearedState is what of a tracker's internals must be empty once every
// slice is deleted and checked out.
type clearedState struct {
	Services, Owners, Pending, Triggers, Snapshot int
}

func stateOf(tr *Tracker) clearedState {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return clearedState{len(tr.services), len(tr.owners), tr.npending, len(tr.triggers), tr.snapshot.Len()}
}

func TestEndpointSliceCacheClearedCorrectly(t *testing.T) {
	fill := func(s *discovery.EndpointSlice) {
		s.Endpoints = []discovery.Endpoint{localAddr("1.1.1.1")}
		s.Ports = []discovery.EndpointPort{udpPort("n1", 11)}
	}
	tests := []struct {
		name   string
		slices []*discovery.EndpointSlice
	}{
		{"one endpoint slice", []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, fill)}},
		{"two endpoint slices, same namespace", []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, fill), makeSlice("ns1", "ep2", 2, fill)}},
		{"two endpoint slices, same service", []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, fill), makeSlice("ns1", "ep1", 2, fill)}},
		{"two endpoint slices, different namespace", []*discovery.EndpointSlice{makeSlice("ns1", "ep1", 1, fill), makeSlice("ns2", "ep1", 2, fill)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			guard(t, tc.slices...)
			tr := newTestTracker(t, Config{NodeName: testHostname})
			for _, s := range tc.slices {
				tr.Update(nil, s)
			}
			checkout(t, tr)
			for _, s := range tc.slices {
				tr.Update(s, nil)
			}
			checkout(t, tr)
			if diff := cmp.Diff(clearedState{}, stateOf(tr)); diff != "" {
				t.Errorf("tracker not cleared (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSameServiceEndpointSliceCacheClearedCorrectly(t *testing.T) {
	fill := func(s *discovery.EndpointSlice) {
		s.Endpoints = []discovery.Endpoint{localAddr("1.1.1.1")}
		s.Ports = []discovery.EndpointPort{udpPort("n1", 11)}
	}
	slices := []*discovery.EndpointSlice{makeSlice("ns1", "svc1", 1, fill), makeSlice("ns1", "svc1", 2, fill)}
	guard(t, slices...)
	tr := newTestTracker(t, Config{NodeName: testHostname})
	for _, s := range slices {
		tr.Update(nil, s)
	}
	checkout(t, tr)
	// Both slices carry the same endpoint, so deleting one changes nothing
	// merged; the service and its remaining slice stay cached.
	if tr.Update(slices[0], nil) {
		t.Errorf("deleting a slice whose endpoints another slice also has reported a change")
	}
	checkout(t, tr)
	want := clearedState{Services: 1, Owners: 1, Snapshot: 1}
	if diff := cmp.Diff(want, stateOf(tr)); diff != "" {
		t.Errorf("tracker state (-want +got):\n%s", diff)
	}
	if _, ok := tr.services[types.NamespacedName{Namespace: "ns1", Name: "svc1"}]; !ok {
		t.Errorf("service ns1/svc1 no longer cached")
	}
}

// A service flapping between Checkouts (its only slice added and deleted
// again and again) must neither grow the pending list without bound nor
// be checked out twice or when it ends as the snapshot has it.
func TestPendingFlapping(t *testing.T) {
	fill := func(s *discovery.EndpointSlice) {
		s.Endpoints = []discovery.Endpoint{localAddr("1.1.1.1")}
		s.Ports = []discovery.EndpointPort{udpPort("n1", 11)}
	}
	steady, flapping := makeSlice("ns1", "steady", 1, fill), makeSlice("ns1", "flapping", 1, fill)
	guard(t, steady, flapping)
	for _, tc := range []struct {
		name     string
		endAdded bool
		want     []string
	}{
		{"ends added", true, []string{"ns1/flapping", "ns1/steady"}},
		{"ends deleted", false, []string{"ns1/steady"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTestTracker(t, Config{NodeName: testHostname})
			tr.Update(nil, steady)
			for range 100 {
				tr.Update(nil, flapping)
				tr.Update(flapping, nil)
			}
			if tc.endAdded {
				tr.Update(nil, flapping)
			}
			tr.mu.Lock()
			listed, pending := len(tr.pending), tr.npending
			tr.mu.Unlock()
			if listed > 2*pending+smallMap+1 {
				t.Errorf("pending list holds %d entries for %d pending services", listed, pending)
			}
			if got := tr.Pending(); got != len(tc.want) {
				t.Errorf("Pending() = %d, want %d", got, len(tc.want))
			}
			_, ch := tr.Checkout()
			var got []string
			for nn := range ch.Services {
				got = append(got, nn.String())
			}
			slices.Sort(got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("checked out services (-want +got):\n%s", diff)
			}
			if got := tr.Pending(); got != 0 {
				t.Errorf("Pending() after Checkout = %d, want 0", got)
			}
		})
	}
}
