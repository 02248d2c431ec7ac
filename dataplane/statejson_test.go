package dataplane_test

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// content is what a State holds, in a form go-cmp compares.
type content struct {
	Family       v1.IPFamily
	Generation   uint64
	Node         dataplane.Node
	Settings     dataplane.Settings
	ServiceCIDRs []netip.Prefix
	Services     []*servicemodel.ServicePort
	Endpoints    map[servicemodel.PortName][]*endpoints.Endpoint
}

func contentOf(s *dataplane.State) content {
	c := content{Family: s.Family, Generation: s.Generation, Node: s.Node, Settings: s.Settings, ServiceCIDRs: s.ServiceCIDRs,
		Endpoints: map[servicemodel.PortName][]*endpoints.Endpoint{}}
	for _, ports := range s.Services.Services() {
		c.Services = append(c.Services, ports...)
	}
	for _, se := range s.Endpoints.Services() {
		for pn, list := range se.Ports {
			c.Endpoints[pn] = list
		}
	}
	return c
}

// fullState sets every field a State can hold, so that a field the JSON
// form forgets fails TestStateJSONRoundTrip (TestFullStateIsFull checks
// that it stays so as fields are added).
func fullState() *dataplane.State {
	web := dpt.PortName("default", "web", "http", v1.ProtocolTCP)
	dns := dpt.PortName("kube-system", "dns", "", v1.ProtocolUDP)
	return &dataplane.State{
		Family:     v1.IPv4Protocol,
		Generation: 7,
		Node: dataplane.Node{Name: "node-a", Zone: "zone-a",
			IPs:      []netip.Addr{netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("10.9.0.1")},
			PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}},
		Settings: dataplane.Settings{
			MasqueradeAll: true,
			LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR, Interface: "cbr0",
				CIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/48"), netip.MustParsePrefix("10.0.0.0/16")}},
			NodePortAddresses:  []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")},
			NodePortPrimary:    true,
			LocalhostNodePorts: true,
			Topology:           affinity.Options{DeriveHints: true},
		},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("172.30.0.0/16")},
		Services: servicemodel.NewMap(&servicemodel.ServicePort{
			Name: web, ClusterIP: netip.MustParseAddr("172.30.0.10"), Port: 80, Protocol: v1.ProtocolTCP, NodePort: 30080,
			ExternalIPs:              []netip.Addr{netip.MustParseAddr("1.2.3.4")},
			LoadBalancerVIPs:         []netip.Addr{netip.MustParseAddr("5.6.7.8")},
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/25")},
			InternalPolicyLocal:      true, ExternalPolicyLocal: true, HealthCheckNodePort: 30900,
			SessionAffinity:     affinity.SessionAffinity{ClientIP: true, Timeout: 3 * time.Hour},
			TrafficDistribution: v1.ServiceTrafficDistributionPreferClose,
		}, &servicemodel.ServicePort{Name: dns, ClusterIP: netip.MustParseAddr("172.30.0.53"), Port: 53, Protocol: v1.ProtocolUDP}),
		Endpoints: endpoints.NewMap(map[servicemodel.PortName][]*endpoints.Endpoint{
			web: {{Addr: netip.MustParseAddrPort("10.0.0.5:8080"), EndpointInfo: affinity.EndpointInfo{
				Ready: true, Serving: true, Terminating: true, Local: true, NodeName: "node-a", Zone: "zone-a",
				ZoneHints: []string{"zone-a"}, NodeHints: []string{"node-a"}}},
				{Addr: netip.MustParseAddrPort("10.0.1.5:8080"), EndpointInfo: affinity.EndpointInfo{Ready: true, Serving: true}}},
			dpt.PortName("default", "web", "metrics", v1.ProtocolTCP): {{Addr: netip.MustParseAddrPort("10.0.0.5:9090")}},
		}),
	}
}

// TestFullStateIsFull: fullState leaves no field of the model's types at
// its zero value, so the round trip covers every one.
func TestFullStateIsFull(t *testing.T) {
	set := map[string]bool{}
	var walk func(path string, v reflect.Value)
	walk = func(path string, v reflect.Value) {
		set[path] = set[path] || !v.IsZero()
		switch v.Kind() {
		case reflect.Pointer:
			walk(path, v.Elem())
		case reflect.Struct:
			if v.Type().PkgPath() == "net/netip" {
				return
			}
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() {
					walk(path+"."+f.Name, v.Field(i))
				}
			}
		case reflect.Slice:
			for i := range v.Len() {
				walk(path+"[]", v.Index(i))
			}
		case reflect.Map:
			for _, k := range v.MapKeys() {
				walk(path+"[]", v.MapIndex(k))
			}
		}
	}
	walk("State", reflect.ValueOf(contentOf(fullState())))
	var zero []string
	for path, ok := range set {
		if !ok {
			zero = append(zero, path)
		}
	}
	if len(zero) > 0 {
		slices.Sort(zero)
		t.Errorf("fullState leaves these at zero: %s", strings.Join(zero, ", "))
	}
}

func TestStateJSONRoundTrip(t *testing.T) {
	states := []*dataplane.State{fullState(), {Family: v1.IPv6Protocol}}
	for _, sc := range dpt.Scenarios() {
		_, st := sc.Build(t)
		states = append(states, st)
	}
	for _, st := range states {
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		got := new(dataplane.State)
		if err := json.Unmarshal(b, got); err != nil {
			t.Fatalf("%s\n%s", err, b)
		}
		if diff := cmp.Diff(contentOf(st), contentOf(got), addrCmp); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(b) {
			t.Errorf("the decoded State encodes differently:\n%s\n%s", b, again)
		}
	}
}

// TestStateJSONLookup: a decoded State answers every conformance packet as
// the State it was encoded from, in both modes.
func TestStateJSONLookup(t *testing.T) {
	for _, sc := range dpt.Scenarios() {
		_, st := sc.Build(t)
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		got := new(dataplane.State)
		if err := json.Unmarshal(b, got); err != nil {
			t.Fatal(err)
		}
		for _, pc := range sc.Packets {
			for _, m := range []dataplane.Mode{dataplane.ModeIPTables, dataplane.ModeNFTables, dataplane.ModeIPVS, dataplane.ModeUserspace} {
				if d := dpt.DiffVerdict(st.LookupMode(m, pc.Packet), got.LookupMode(m, pc.Packet)); d != "" {
					t.Errorf("%s/%s (%s): decoded State answers otherwise:\n%s", sc.Name, pc.Name, m, d)
				}
			}
		}
	}
}

func TestStateJSONRejects(t *testing.T) {
	good, err := json.Marshal(fullState())
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal(good, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	svc := func(m map[string]any, i int) map[string]any { return m["services"].([]any)[i].(map[string]any) }
	cases := []struct {
		name, json, want string
	}{
		{"other version", edit(func(m map[string]any) { m["version"] = 2 }), "format version 2, this proxykit reads 1"},
		{"no version", `{"family":"IPv4"}`, "format version 0"},
		{"family", edit(func(m map[string]any) { m["family"] = "IPv5" }), `family "IPv5" is not IPv4 or IPv6`},
		{"cluster IP of the other family", edit(func(m map[string]any) { svc(m, 0)["clusterIP"] = "fd00::1" }),
			"service port default/web:http clusterIP: fd00::1 is not IPv4"},
		{"no cluster IP", edit(func(m map[string]any) { delete(svc(m, 0), "clusterIP") }), "default/web:http clusterIP: an address is missing"},
		{"mapped address", edit(func(m map[string]any) { svc(m, 0)["externalIPs"] = []string{"::ffff:1.2.3.4"} }),
			"externalIPs: ::ffff:1.2.3.4 is not a plain address"},
		{"bad address", edit(func(m map[string]any) { svc(m, 0)["externalIPs"] = []string{"1.2.3"} }), "ParseAddr"},
		{"protocol", edit(func(m map[string]any) { svc(m, 0)["protocol"] = "ICMP" }), `protocol "ICMP" is not TCP, UDP or SCTP`},
		{"port 0", edit(func(m map[string]any) { svc(m, 0)["port"] = 0 }), "default/web:http: port 0"},
		{"port range", edit(func(m map[string]any) { svc(m, 0)["port"] = 70000 }), "cannot unmarshal number 70000"},
		{"name with a quote", edit(func(m map[string]any) { svc(m, 0)["name"] = `we"b` }), "not a valid namespace, name or port name"},
		{"no name", edit(func(m map[string]any) { delete(svc(m, 0), "name") }), "not a valid namespace, name or port name"},
		{"twice", edit(func(m map[string]any) { m["services"] = append(m["services"].([]any), svc(m, 0)) }),
			"service port default/web:http (TCP) is listed twice"},
		{"affinity timeout", edit(func(m map[string]any) { svc(m, 0)["clientIPAffinityTimeout"] = "25h" }),
			"clientIPAffinityTimeout 25h0m0s is not within (0, 24h0m0s]"},
		{"endpoint of the other family", edit(func(m map[string]any) {
			m["endpoints"].([]any)[0].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["addr"] = "[fd00::1]:80"
		}), "endpoint of default/web:http: fd00::1 is not IPv4"},
		{"endpoint port 0", edit(func(m map[string]any) {
			m["endpoints"].([]any)[0].(map[string]any)["endpoints"].([]any)[0].(map[string]any)["addr"] = "10.0.0.9:0"
		}), "10.0.0.9:0 has port 0"},
		{"node IP", edit(func(m map[string]any) { m["node"].(map[string]any)["ips"] = []string{"fd00::2"} }), "node ips: fd00::2 is not IPv4"},
		{"detector mode", edit(func(m map[string]any) {
			m["settings"].(map[string]any)["localDetector"] = map[string]any{"mode": "Magic"}
		}),
			`Settings.LocalDetector.Mode: Unsupported value: "Magic"`},
		{"detector interface", edit(func(m map[string]any) {
			m["settings"].(map[string]any)["localDetector"] = map[string]any{"mode": "BridgeInterface", "interface": "br0\n-A INPUT"}
		}),
			`Settings.LocalDetector.Interface: Invalid value: "br0\n-A INPUT": must consist of ASCII letters`},
		{"service CIDR", edit(func(m map[string]any) { m["serviceCIDRs"] = []string{"fd00::/64"} }), "serviceCIDRs: fd00:: is not IPv4"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := json.Unmarshal([]byte(tc.json), new(dataplane.State))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !errors.Is(err, dataplane.ErrStateFormat) {
				t.Errorf("error %v does not wrap ErrStateFormat", err)
			}
		})
	}
	t.Run("not JSON", func(t *testing.T) {
		if err := json.Unmarshal([]byte(`{"version":`), new(dataplane.State)); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("into a State in use", func(t *testing.T) {
		if err := json.Unmarshal(good, fullState()); err == nil {
			t.Fatal("a State in use was overwritten")
		}
	})
	t.Run("unknown fields", func(t *testing.T) {
		st := new(dataplane.State)
		if err := json.Unmarshal([]byte(edit(func(m map[string]any) { m["later"] = true; svc(m, 0)["later"] = 1 })), st); err != nil {
			t.Fatalf("a field of a later proxy: %v", err)
		}
	})
}

// TestStateJSONNormalizes: lists a tool wrote by hand are sorted and
// de-duplicated as a Tracker would, so that Lookup's assumptions hold;
// the node's addresses and detector CIDRs keep their order, which means
// something.
func TestStateJSONNormalizes(t *testing.T) {
	in := `{"version":1,"family":"IPv4","node":{"name":"n","ips":["10.0.0.9","10.0.0.1"]},
		"settings":{"localDetector":{"mode":"ClusterCIDR","cidrs":["10.1.0.0/16","10.0.0.0/16"]}},
		"services":[{"namespace":"ns","name":"a","protocol":"TCP","clusterIP":"172.30.0.1","port":80,
			"externalIPs":["1.1.1.2","1.1.1.1","1.1.1.2"]}],
		"endpoints":[{"namespace":"ns","name":"a","protocol":"TCP","endpoints":[
			{"addr":"10.0.0.2:80","zoneHints":["b","a","b"]},{"addr":"10.0.0.1:80"},{"addr":"10.0.0.2:80","terminating":true}]}]}`
	st := new(dataplane.State)
	if err := json.Unmarshal([]byte(in), st); err != nil {
		t.Fatal(err)
	}
	got := contentOf(st)
	pn := dpt.PortName("ns", "a", "", v1.ProtocolTCP)
	want := content{
		Family: v1.IPv4Protocol,
		Node:   dataplane.Node{Name: "n", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.9"), netip.MustParseAddr("10.0.0.1")}},
		Settings: dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR,
			CIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.0.0.0/16")}}},
		Services: []*servicemodel.ServicePort{{Name: pn, ClusterIP: netip.MustParseAddr("172.30.0.1"), Port: 80, Protocol: v1.ProtocolTCP,
			ExternalIPs: []netip.Addr{netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("1.1.1.2")}}},
		Endpoints: map[servicemodel.PortName][]*endpoints.Endpoint{pn: {
			{Addr: netip.MustParseAddrPort("10.0.0.1:80")},
			{Addr: netip.MustParseAddrPort("10.0.0.2:80"), EndpointInfo: affinity.EndpointInfo{ZoneHints: []string{"a", "b"}}},
		}},
	}
	if diff := cmp.Diff(want, got, addrCmp); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// FuzzStateJSON: no JSON makes UnmarshalJSON panic, and what it takes
// encodes to JSON it takes again to the same bytes, and answers Lookup.
func FuzzStateJSON(f *testing.F) {
	b, err := json.Marshal(fullState())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte(`{"version":1,"family":"IPv6","services":[],"endpoints":[]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		st := new(dataplane.State)
		if json.Unmarshal(in, st) != nil {
			return
		}
		out, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		again := new(dataplane.State)
		if err := json.Unmarshal(out, again); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out2, _ := json.Marshal(again); string(out2) != string(out) {
			t.Fatalf("encodings differ:\n%s\n%s", out, out2)
		}
		for p := range st.Services.All() {
			pkt := dataplane.Packet{Src: netip.MustParseAddr("10.0.0.2"), Dst: netip.AddrPortFrom(p.ClusterIP, p.Port), Protocol: p.Protocol, From: dataplane.FromLocalPod}
			if v := st.Lookup(pkt); v.Reason == "" {
				t.Fatalf("no reason for %+v", pkt)
			}
		}
	})
}
