package fuzzobj

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestLabelServiceProxyName(t *testing.T) {
	if LabelServiceProxyName != servicemodel.LabelServiceProxyName {
		t.Errorf("LabelServiceProxyName = %q, servicemodel's is %q", LabelServiceProxyName, servicemodel.LabelServiceProxyName)
	}
}

func TestPorts(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
		want []v1.ServicePort
	}{
		{name: "empty"},
		{name: "short rest ignored", in: []byte{1, 2, 0, 69, 0, 0}},
		{
			name: "one valid",
			in:   []byte{1, 2, 0, 69, 0x75, 0x30, 0x02},
			want: []v1.ServicePort{{Name: "a", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 29998}},
		},
		{
			name: "every table wraps, negative port, big port",
			in:   []byte{7, 11, 0, 0, 0, 0, 0x0f, 4, 6, 0xff, 0xff, 0, 1, 0x80},
			want: []v1.ServicePort{
				{Name: "A b", Protocol: "ICMP", Port: -16, NodePort: -15},
				{Name: "", Protocol: "", Port: 65519 + 70000, NodePort: 1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Ports(tc.in)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestIngress(t *testing.T) {
	got := Ingress("p:1.2.3.4,v:fd00::1,h:lb.example,,bogus,h:")
	want := []v1.LoadBalancerIngress{
		{IP: "1.2.3.4", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)},
		{IP: "fd00::1", IPMode: ptr.To(v1.LoadBalancerIPModeVIP)},
		{Hostname: "lb.example"},
		{IP: ""},
		{IP: "bogus"},
		{Hostname: ""},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := Ingress(""); got != nil {
		t.Errorf("Ingress(\"\") = %v, want nil", got)
	}
}

func TestSplitList(t *testing.T) {
	for in, want := range map[string][]string{"": nil, "a": {"a"}, ",a,": {"", "a", ""}} {
		if diff := cmp.Diff(want, SplitList(in)); diff != "" {
			t.Errorf("SplitList(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func normalizeEntry(name string, vals ...any) Entry { return Entry{Name: name, Values: vals} }

func TestNormalizeObjects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		e       Entry
		want    Objects
		wantErr string
	}{
		{
			name: "every field",
			e: normalizeEntry("all", "lb", "fd00::10", "fd00::10,10.0.0.10", "6,4,x", "LoadBalancer",
				[]byte{1, 2, 0, 69, 0, 0, 0}, "1.2.3.4,", "10.0.0.0/8", "p:9.9.9.9,5.6.7.8", true, int32(31000),
				"ClientIP", int32(300), "=mine", true),
			want: Objects{Family: v1.IPv6Protocol, Services: []*v1.Service{{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "ns", Name: "lb", Annotations: map[string]string{},
					Labels: map[string]string{servicemodel.LabelServiceProxyName: "mine"},
				},
				Spec: v1.ServiceSpec{
					ClusterIP:                "fd00::10",
					ClusterIPs:               []string{"fd00::10", "10.0.0.10"},
					IPFamilies:               []v1.IPFamily{v1.IPv6Protocol, v1.IPv4Protocol, "x"},
					Type:                     v1.ServiceTypeLoadBalancer,
					Ports:                    []v1.ServicePort{{Name: "a", Protocol: v1.ProtocolUDP, Port: 53}},
					ExternalIPs:              []string{"1.2.3.4", ""},
					LoadBalancerSourceRanges: []string{"10.0.0.0/8"},
					ExternalTrafficPolicy:    v1.ServiceExternalTrafficPolicyLocal,
					HealthCheckNodePort:      31000,
					SessionAffinity:          v1.ServiceAffinityClientIP,
					SessionAffinityConfig:    &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To[int32](300)}},
				},
				Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{
					{IP: "9.9.9.9", IPMode: ptr.To(v1.LoadBalancerIPModeProxy)}, {IP: "5.6.7.8"},
				}}},
			}}},
		},
		{
			name: "empty values stay unset",
			e:    normalizeEntry("none", "h", "", "", "", "", []byte{}, "", "", "", false, int32(0), "", int32(0), "", false),
			want: Objects{Family: v1.IPv4Protocol, Services: []*v1.Service{{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h", Annotations: map[string]string{}},
			}}},
		},
		{
			name: "label of one byte is the empty value",
			e:    normalizeEntry("label", "h", "", "", "", "", []byte{}, "", "", "", false, int32(0), "", int32(0), "x", false),
			want: Objects{Family: v1.IPv4Protocol, Services: []*v1.Service{{
				ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "h", Annotations: map[string]string{},
					Labels: map[string]string{servicemodel.LabelServiceProxyName: ""}},
			}}},
		},
		{
			name:    "too few values",
			e:       normalizeEntry("short", "h", ""),
			wantErr: "2 values, want more",
		},
		{
			name:    "too many values",
			e:       normalizeEntry("long", "h", "", "", "", "", []byte{}, "", "", "", false, int32(0), "", int32(0), "", false, "extra"),
			wantErr: "16 values, want 15",
		},
		{
			name:    "wrong type",
			e:       normalizeEntry("type", "h", "", "", "", "", "not bytes", "", "", "", false, int32(0), "", int32(0), "", false),
			wantErr: "value 6 is a string, want []uint8",
		},
		{
			name:    "int instead of int32",
			e:       normalizeEntry("int", "h", "", "", "", "", []byte{}, "", "", "", false, 0, "", int32(0), "", false),
			wantErr: "value 11 is a int, want int32",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NormalizeObjects(tc.e)
			checkDecoded(t, tc.want, got, err, tc.wantErr)
		})
	}
}

func checkDecoded(t *testing.T, want, got Objects, err error, wantErr string) {
	t.Helper()
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("error %v, want one containing %q", err, wantErr)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestTrackerService(t *testing.T) {
	got := trackerService(2, 0x20|0x40|0x80|1<<3|2, 7)
	want := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "s2", ResourceVersion: "7", Annotations: map[string]string{},
			Labels: map[string]string{servicemodel.LabelServiceProxyName: "other"},
		},
		Spec: v1.ServiceSpec{
			ClusterIP: "fd00::1",
			Ports: []v1.ServicePort{
				{Name: "dns", Protocol: v1.ProtocolUDP, Port: 53, NodePort: 30053, TargetPort: intstr.FromInt32(53)},
				{Name: "web", Protocol: v1.ProtocolTCP, Port: 80, NodePort: 30080, TargetPort: intstr.FromInt32(80)},
			},
			Type:                  v1.ServiceTypeLoadBalancer,
			ExternalTrafficPolicy: v1.ServiceExternalTrafficPolicyLocal,
			HealthCheckNodePort:   31002,
			ExternalIPs:           []string{"1.1.1.1", "bogus"},
		},
		Status: v1.ServiceStatus{LoadBalancer: v1.LoadBalancerStatus{Ingress: []v1.LoadBalancerIngress{{IP: "5.5.5.5"}}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got := trackerService(0, 3<<3|3, 0); got.Spec.ClusterIP != v1.ClusterIPNone ||
		!cmp.Equal(got.Spec.Ports, []v1.ServicePort{{Name: "bad", Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(53)}}) {
		t.Errorf("headless with the bad port: %+v", got.Spec)
	}
}

func TestServiceTracker(t *testing.T) {
	ops := []byte{
		0, 0, 0x09, // update s0
		5, 3, 0x10, // update s0 again (op 5%4 = 1, service 3%3 = 0)
		2, 0, 0, // delete s0
		2, 1, 0x0a, // delete s1, never added
		7, 9, 9, // checkout
		0, 2, // too short: ignored
	}
	got := ServiceTracker(ops)
	first, second := trackerService(0, 0x09, 0), trackerService(0, 0x10, 1)
	want := []ServiceOp{
		{Kind: OpUpdate, Index: 0, New: first},
		{Kind: OpUpdate, Index: 0, Old: first, New: second},
		{Kind: OpDelete, Index: 0, Old: second},
		{Kind: OpDelete, Index: 1, Old: trackerService(1, 0x0a, 3)},
		{Kind: OpCheckout},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if got[1].Old != got[0].New || got[2].Old != got[1].New {
		t.Errorf("Old is not the object given before")
	}

	objs, err := ServiceTrackerObjects(Entry{Name: "e", Values: []any{[]byte{0, 0, 1, 0, 1, 2, 0, 2, 3, 2, 1, 0, 0, 2, 4}}})
	checkDecoded(t, Objects{Family: v1.IPv4Protocol, Services: []*v1.Service{trackerService(0, 1, 0), trackerService(2, 4, 4)}}, objs, err, "")
	_, err = ServiceTrackerObjects(Entry{Name: "e", Values: []any{"ops"}})
	checkDecoded(t, Objects{}, Objects{}, err, "value 1 is a string")
}

// denseV4 is the dense slice drawn from bytes that are all 0.
func denseV4() *discovery.EndpointSlice {
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: "d0", Labels: map[string]string{discovery.LabelServiceName: "a"}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr.To(""), Port: ptr.To[int32](1), Protocol: ptr.To(v1.ProtocolUDP)}},
		Endpoints:   []discovery.Endpoint{{Addresses: []string{"10.0.0.0"}}},
	}
}

func TestSlice(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		family v1.IPFamily
		want   *discovery.EndpointSlice
	}{
		{name: "dense from nothing", family: v1.IPv4Protocol, want: denseV4()},
		{
			name:   "dense IPv6, every choice",
			data:   []byte{0, 2, 1, 1, 1, 0, 1, 0, 1, 0, 1, 2, 0, 1, 2, 1, 0},
			family: v1.IPv6Protocol,
			want: &discovery.EndpointSlice{
				ObjectMeta:  metav1.ObjectMeta{Namespace: "ns1", Name: "d2", Labels: map[string]string{discovery.LabelServiceName: "a"}},
				AddressType: discovery.AddressTypeIPv6,
				Ports: []discovery.EndpointPort{
					{Name: ptr.To("p"), Port: ptr.To[int32](2), Protocol: ptr.To(v1.ProtocolUDP)},
					{Name: ptr.To("p"), Port: ptr.To[int32](1), Protocol: ptr.To(v1.ProtocolTCP)},
				},
				Endpoints: []discovery.Endpoint{{
					Addresses:  []string{"fd00::1"},
					Conditions: discovery.EndpointConditions{Ready: ptr.To(false), Serving: nil, Terminating: ptr.To(true)},
					NodeName:   ptr.To("node-b"),
					Hints:      &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: "z0"}}},
				}},
			},
		},
		{
			name: "wild",
			// wild; ns2/s4; other family; label b; trigger time 7s; one
			// port named q, port 65535, ICMP; one endpoint with a zoned
			// address and FD00:0::3, on node "", zone z2, hinted for z1
			// and node-b.
			data: []byte{1, 3, 5, 6, 4, 0, 7, 0, 3, 4, 4, 1, 2, 2, 11, 3, 6, 0, 0, 0, 3, 2, 2, 1, 1, 1, 1},
			want: &discovery.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "ns2", Name: "s4", Labels: map[string]string{discovery.LabelServiceName: "b"},
					Annotations: map[string]string{v1.EndpointsLastChangeTriggerTime: "2030-01-01T00:00:07Z"},
				},
				AddressType: discovery.AddressTypeIPv6,
				Ports:       []discovery.EndpointPort{{Name: ptr.To("q"), Port: ptr.To[int32](65535), Protocol: ptr.To(v1.Protocol("ICMP"))}},
				Endpoints: []discovery.Endpoint{{
					Addresses: []string{"fe80::2%eth0", "FD00:0::3"},
					NodeName:  ptr.To(""),
					Zone:      ptr.To("z2"),
					Hints: &discovery.EndpointHints{
						ForZones: []discovery.ForZone{{Name: "z1"}},
						ForNodes: []discovery.ForNode{{Name: "node-b"}},
					},
				}},
			},
			family: v1.IPv4Protocol,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := newInput(tc.data)
			if diff := cmp.Diff(tc.want, in.slice(tc.family)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !in.done() {
				t.Errorf("%d bytes left", len(in.b))
			}
		})
	}
}

func TestSliceMerge(t *testing.T) {
	family, got := SliceMerge([]byte{1})
	if family != v1.IPv6Protocol || got != nil {
		t.Errorf("family byte only: %s, %v", family, got)
	}
	// Every slice takes at least one byte, so the bound is what stops a
	// long input.
	family, got = SliceMerge(make([]byte, 200))
	if family != v1.IPv4Protocol || len(got) != maxMergeSlices {
		t.Errorf("long input: %s, %d slices", family, len(got))
	}

	// Two slices of ns1/d0 (13 bytes each), the second with port 2, then
	// one of ns1/d1 (the rest, past the end, is 0).
	data := make([]byte, 1+13+13)
	data[1+13+4] = 1
	data = append(data, 0, 1)
	objs, err := SliceMergeObjects(Entry{Name: "e", Values: []any{data}})
	_, fed := SliceMerge(data)
	if len(fed) != 3 || fed[2].Name != "d1" {
		t.Fatalf("decoded %d slices", len(fed))
	}
	checkDecoded(t, Objects{Family: v1.IPv4Protocol, Slices: []*discovery.EndpointSlice{fed[1], fed[2]}}, objs, err, "")
	if *fed[0].Ports[0].Port == *fed[1].Ports[0].Port {
		t.Errorf("the slices of ns1/d0 do not differ")
	}
	_, err = SliceMergeObjects(Entry{Name: "e"})
	checkDecoded(t, Objects{}, Objects{}, err, "0 values, want more")
}

func TestSliceTracker(t *testing.T) {
	// dense is the 13 bytes of the dense slice ns1/d<name> of one port and
	// one endpoint.
	dense := func(name int) []byte { return append([]byte{0, byte(name)}, make([]byte, 11)...) }
	var data []byte
	data = append(data, 0)           // IPv4
	data = append(data, 5)           // delete with nothing stored: an op doing nothing
	data = append(data, 7)           // touch with nothing stored: likewise
	data = append(data, 0)           // update ...
	data = append(data, dense(1)...) // ... with ns1/d1
	data = append(data, 1)           // update ...
	data = append(data, dense(0)...) // ... with ns1/d0
	data = append(data, 6)           // checkout
	data = append(data, 7, 1)        // touch the second stored slice, ns1/d1
	data = append(data, 5, 0)        // delete the first, ns1/d0
	got := SliceTracker(data)

	d1, d0 := newInput(dense(1)).slice(v1.IPv4Protocol), newInput(dense(0)).slice(v1.IPv4Protocol)
	touched := d1.DeepCopy()
	touched.ResourceVersion = "1"
	want := SliceTrace{
		Family: v1.IPv4Protocol,
		Ops: []SliceOp{
			{Kind: OpUpdate, New: d1},
			{Kind: OpUpdate, New: d0},
			{Kind: OpCheckout},
			{Kind: OpTouch, Old: d1, New: touched},
			{Kind: OpDelete, Old: d0},
		},
		Final: []*discovery.EndpointSlice{touched},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}

	// A touch reverses the lists: here two ports and two endpoints.
	two := []byte{0, 0, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}
	tr := SliceTracker(append(append([]byte{0, 0}, two...), 7, 0))
	if len(tr.Ops) != 2 || tr.Ops[1].Kind != OpTouch || len(tr.Ops[1].Old.Ports) != 2 || len(tr.Ops[1].Old.Endpoints) != 2 {
		t.Fatalf("ops %+v", tr.Ops)
	}
	reversed := tr.Ops[1].Old.DeepCopy()
	reversed.ResourceVersion = "1"
	slices.Reverse(reversed.Ports)
	slices.Reverse(reversed.Endpoints)
	if diff := cmp.Diff(reversed, tr.Ops[1].New); diff != "" {
		t.Errorf("touch (-want +got):\n%s", diff)
	}

	// The op bound counts ops that did nothing; an update of an all-0
	// slice takes 14 bytes.
	if tr := SliceTracker(append([]byte{0}, make([]byte, 14*(maxTrackerOps+5))...)); len(tr.Ops) != maxTrackerOps {
		t.Errorf("%d ops, want the bound %d", len(tr.Ops), maxTrackerOps)
	}
	long := append([]byte{0}, []byte(strings.Repeat("\x05", maxTrackerOps))...)
	if tr := SliceTracker(append(long, dense(0)...)); len(tr.Ops) != 0 {
		t.Errorf("%d ops after %d that did nothing, want none", len(tr.Ops), maxTrackerOps)
	}

	objs, err := SliceTrackerObjects(Entry{Name: "e", Values: []any{data}})
	checkDecoded(t, Objects{Family: v1.IPv4Protocol, Slices: want.Final}, objs, err, "")
	_, err = SliceTrackerObjects(Entry{Name: "e", Values: []any{data, data}})
	checkDecoded(t, Objects{}, Objects{}, err, "2 values, want 1")
}

// TestCheckedInCorporaDecode decodes the corpora this package exists for.
func TestCheckedInCorporaDecode(t *testing.T) {
	for dir, decode := range map[string]func(Entry) (Objects, error){
		"../../servicemodel/testdata/fuzz/FuzzNormalize": NormalizeObjects,
		"../../servicemodel/testdata/fuzz/FuzzTracker":   ServiceTrackerObjects,
		"../../endpoints/testdata/fuzz/FuzzSliceMerge":   SliceMergeObjects,
		"../../endpoints/testdata/fuzz/FuzzTracker":      SliceTrackerObjects,
	} {
		entries, err := ReadCorpus(dir)
		if err != nil {
			t.Fatal(err)
		}
		objects := 0
		for _, e := range entries {
			objs, err := decode(e)
			if err != nil {
				t.Errorf("%s: %v", dir, err)
			}
			objects += len(objs.Services) + len(objs.Slices)
		}
		if len(entries) == 0 || objects == 0 {
			t.Errorf("%s: %d entries, %d objects", dir, len(entries), objects)
		}
		t.Logf("%s: %d entries, %d objects", dir, len(entries), objects)
	}
}
