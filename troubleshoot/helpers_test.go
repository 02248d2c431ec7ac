package troubleshoot

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	dt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/xtables"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// The zone of the test node and of the endpoints on it.
const nodeZone = "zone-a"

// build returns the IPv4 and IPv6 States of the test node (zone
// nodeZone) serving objs, Services and EndpointSlices.
func build(t *testing.T, objs ...any) []*dataplane.State {
	t.Helper()
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		NodeName: dt.NodeName,
		Settings: dt.DefaultSettings(),
	})
	b.UpdateNode(dt.TestNode(func(n *v1.Node) { n.Labels = map[string]string{v1.LabelTopologyZone: nodeZone} }))
	for _, o := range objs {
		switch o := o.(type) {
		case *v1.Service:
			b.UpdateService(nil, o)
		case *discovery.EndpointSlice:
			b.UpdateEndpointSlice(nil, o)
		default:
			t.Fatalf("build: %T is no Service or EndpointSlice", o)
		}
	}
	return b.Build().States
}

// web is Service default/web: cluster IP 172.30.0.10 (and fd00:30::10
// when dual), port http 80/TCP, changed by mutate.
func web(mutate func(*v1.Service)) *v1.Service {
	return dt.MakeService("default", "web", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP = "172.30.0.10"
		s.Spec.ClusterIPs = []string{"172.30.0.10"}
		s.Spec.Ports = []v1.ServicePort{dt.ServicePort("http", v1.ProtocolTCP, 80, 0, 8080)}
		if mutate != nil {
			mutate(s)
		}
	})
}

// webSlice is an EndpointSlice of default/web with port http 8080/TCP and
// eps.
func webSlice(eps ...discovery.Endpoint) *discovery.EndpointSlice {
	return dt.MakeSlice("default", "web", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dt.SlicePort("http", v1.ProtocolTCP, 8080)}
		s.Endpoints = eps
	})
}

// inZone puts ep in zone with the given zone hints.
func inZone(ep discovery.Endpoint, zone string, hints ...string) discovery.Endpoint {
	ep.Zone = &zone
	if len(hints) > 0 {
		ep.Hints = &discovery.EndpointHints{}
		for _, h := range hints {
			ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: h})
		}
	}
	return ep
}

// golden compares got with testdata/name, or writes it there when
// TROUBLESHOOT_WRITE_GOLDEN is set.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("TROUBLESHOOT_WRITE_GOLDEN") != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (TROUBLESHOOT_WRITE_GOLDEN=1 go test writes it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; TROUBLESHOOT_WRITE_GOLDEN=1 go test rewrites it):\n%s", path, diff)
	}
}

// lbWeb makes web a LoadBalancer at 5.6.7.8 with node port 30080 and a
// source range, the frontend the verify tests drift.
func lbWeb(s *v1.Service) {
	s.Spec.Type = v1.ServiceTypeLoadBalancer
	s.Spec.Ports[0].NodePort = 30080
	s.Spec.LoadBalancerSourceRanges = []string{dt.LBSourceRange}
	s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.6.7.8"}}
}

// dbObjects are default/db, a ClusterIP service with one endpoint on
// another node, and its slice: the service the verify tests leave alone.
func dbObjects() (*v1.Service, *discovery.EndpointSlice) {
	db := dt.MakeService("default", "db", func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.20", []string{"172.30.0.20"}
		s.Spec.Ports = []v1.ServicePort{dt.ServicePort("", v1.ProtocolTCP, 5432, 0, 0)}
	})
	dbSlice := dt.MakeSlice("default", "db", 1, func(s *discovery.EndpointSlice) {
		s.Ports = []discovery.EndpointPort{dt.SlicePort("", v1.ProtocolTCP, 5432)}
		s.Endpoints = []discovery.Endpoint{dt.ReadyEndpoint("10.1.0.30", otherNode)}
	})
	return db, dbSlice
}

// saved is the nat, filter and mangle tables of fake as iptables-save
// lists them.
func saved(t *testing.T, fake *xtables.FakeRunner) string {
	t.Helper()
	var b strings.Builder
	for _, table := range []string{"nat", "filter", "mangle"} {
		out, err := fake.Save(t.Context(), table)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(out)
	}
	return b.String()
}
