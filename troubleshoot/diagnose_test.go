package troubleshoot

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/dataplane/conntrack"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

const otherNode = "node-b"

func TestDiagnose(t *testing.T) {
	webName := types.NamespacedName{Namespace: "default", Name: "web"}
	nodePort := func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}
	cases := []struct {
		name   string
		objs   []any
		port   string
		cfg    Config
		want   []Finding
		wantOK bool
	}{{
		name:   "ok",
		objs:   []any{web(nil), webSlice(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), dt.ReadyEndpoint("10.1.0.7", otherNode))},
		wantOK: true,
	}, {
		name: "not found",
		want: []Finding{{Severity: Problem, Text: "no Service default/web is proxied here: it does not exist, is headless, of type ExternalName, of another family than the node's, or handled by another proxy"}},
	}, {
		name: "no endpoints",
		objs: []any{web(nil)},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "no endpoints: no EndpointSlice lists an endpoint for port http (does the selector match a pod?); connections are rejected"}},
	}, {
		name: "all terminating",
		objs: []any{web(nil), webSlice(
			dt.Endpoint("10.0.0.5", dt.NodeName, false, false, true),
			dt.Endpoint("10.1.0.7", otherNode, false, false, true),
			dt.Endpoint("10.1.0.8", otherNode, false, false, true))},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "no ready endpoints: 3 pods terminating, 0 serving"}},
	}, {
		name:   "terminating but serving",
		objs:   []any{web(nil), webSlice(dt.Endpoint("10.1.0.7", otherNode, false, true, true))},
		want:   []Finding{{Severity: Warning, Port: "http/TCP (IPv4)", Text: "no ready endpoints: 1 terminating pod still serving take the traffic until they stop"}},
		wantOK: true,
	}, {
		name: "wrong topology zone",
		objs: []any{web(nil), webSlice(
			inZone(dt.ReadyEndpoint("10.1.0.7", otherNode), "zone-b", "zone-b"),
			inZone(dt.ReadyEndpoint("10.1.0.8", otherNode), "zone-b", "zone-b"))},
		want:   []Finding{{Severity: Warning, Port: "http/TCP (IPv4)", Text: `wrong topology zone: the hints name zone zone-b, not this node's zone "zone-a"; hints are ignored and every ready endpoint takes cluster traffic`}},
		wantOK: true,
	}, {
		name: "topology narrows to this zone",
		objs: []any{web(nil), webSlice(
			inZone(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), nodeZone, nodeZone),
			inZone(dt.ReadyEndpoint("10.1.0.7", otherNode), "zone-b", "zone-b"))},
		wantOK: true,
	}, {
		name: "eTP Local without local endpoints",
		objs: []any{web(func(s *v1.Service) {
			nodePort(s)
			s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		}), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "externalTrafficPolicy Local and no endpoint on node test-node (1 elsewhere): external traffic arriving here is dropped (pods and the node itself still reach the cluster endpoints)"}},
	}, {
		name: "iTP Local without local endpoints",
		objs: []any{web(func(s *v1.Service) {
			s.Spec.InternalTrafficPolicy = new(v1.ServiceInternalTrafficPolicyLocal)
		}), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "internalTrafficPolicy Local and no endpoint on node test-node (1 elsewhere): cluster IP traffic from this node is dropped"}},
	}, {
		name: "source range blocks the client",
		objs: []any{web(func(s *v1.Service) {
			nodePort(s)
			s.Spec.Type = v1.ServiceTypeLoadBalancer
			s.Spec.LoadBalancerSourceRanges = []string{dt.LBSourceRange}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.6.7.8"}}
		}), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		cfg:  Config{Client: netip.MustParseAddr(dt.ExternalClientBlocked)},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "source range blocks the client: 203.0.113.130 is outside loadBalancerSourceRanges 203.0.113.0/25, so its packets to 5.6.7.8:80 are dropped"}},
	}, {
		name: "port name mismatch",
		objs: []any{web(nil), dt.MakeSlice("default", "web", 1, func(s *discovery.EndpointSlice) {
			s.Ports = []discovery.EndpointPort{dt.SlicePort("web", v1.ProtocolTCP, 8080)}
			s.Endpoints = []discovery.Endpoint{dt.ReadyEndpoint("10.1.0.7", otherNode)}
		})},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "port name mismatch: the Service's port is named http/TCP but its EndpointSlices list endpoints for web/TCP only; endpoints are matched to service ports by name and protocol"}},
	}, {
		name: "wrong family of the endpoints",
		objs: []any{web(nil), dt.MakeSlice("default", "web", 1, func(s *discovery.EndpointSlice) {
			s.AddressType = discovery.AddressTypeIPv6
			s.Ports = []discovery.EndpointPort{dt.SlicePort("http", v1.ProtocolTCP, 8080)}
			s.Endpoints = []discovery.Endpoint{dt.ReadyEndpoint("fd00:10::7", otherNode)}
		})},
		want: []Finding{{Severity: Problem, Port: "http/TCP (IPv4)", Text: "wrong family: the EndpointSlices of port http hold IPv6 endpoints only, and the Service's IPv4 cluster IP has none"}},
	}, {
		name: "wrong family of the client",
		objs: []any{web(nil), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		cfg:  Config{Client: netip.MustParseAddr(dt.ExternalClientV6)},
		want: []Finding{{Severity: Problem, Text: "wrong family: client 2600:5200::1 is IPv6, the Service has IPv4 frontends only"}},
	}, {
		name: "no such port",
		objs: []any{web(nil), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		port: "https",
		want: []Finding{{Severity: Problem, Text: `no port "https": the Service's ports are http (80/TCP)`}},
	}, {
		name:   "port by number",
		objs:   []any{web(nil), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		port:   "80",
		wantOK: true,
	}, {
		name: "stale conntrack entries",
		objs: []any{web(nil), webSlice(dt.ReadyEndpoint("10.1.0.7", otherNode))},
		cfg: Config{Flows: []conntrack.Flow{
			{Protocol: v1.ProtocolTCP, Client: netip.MustParseAddrPort("10.0.0.9:4000"), Frontend: netip.MustParseAddrPort("172.30.0.10:80"), Endpoint: netip.MustParseAddrPort("10.1.0.7:8080")},
			{Protocol: v1.ProtocolTCP, Client: netip.MustParseAddrPort("10.0.0.9:4001"), Frontend: netip.MustParseAddrPort("172.30.0.10:80"), Endpoint: netip.MustParseAddrPort("10.1.0.99:8080")},
			{Protocol: v1.ProtocolUDP, Client: netip.MustParseAddrPort("10.0.0.9:4002"), Frontend: netip.MustParseAddrPort("172.30.0.10:80"), Endpoint: netip.MustParseAddrPort("10.1.0.98:8080")},
		}},
		want:   []Finding{{Severity: Warning, Port: "http/TCP (IPv4)", Text: "stale conntrack entries: connections still go to endpoints no longer serving: 10.1.0.99:8080 (1)"}},
		wantOK: true,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Diagnose(build(t, tc.objs...), webName, tc.port, tc.cfg)
			if diff := cmp.Diff(tc.want, r.Findings, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
			if r.OK != tc.wantOK {
				t.Errorf("OK = %v, want %v (verdict %q)", r.OK, tc.wantOK, r.Verdict)
			}
			var b bytes.Buffer
			if err := r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, "diagnose/"+strings.ReplaceAll(tc.name, " ", "-")+".txt", b.String())
		})
	}
}

// TestDiagnoseJSON pins the shape tools read.
func TestDiagnoseJSON(t *testing.T) {
	states := build(t, web(func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}), webSlice(inZone(dt.ReadyEndpoint("10.0.0.5", dt.NodeName), nodeZone, nodeZone), dt.Endpoint("10.1.0.7", otherNode, false, true, true)))
	r := Diagnose(states, types.NamespacedName{Namespace: "default", Name: "web"}, "http", Config{})
	out, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "diagnose/json.json", string(out)+"\n")
}
