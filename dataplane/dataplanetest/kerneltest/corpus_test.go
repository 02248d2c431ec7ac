package kerneltest_test

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/dataplane/dataplanetest/kerneltest"
	"github.com/proxykit/proxykit/internal/fuzzobj"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// corpusView is what a CorpusBuilder made of one entry, per family: each
// service's cluster IP, whether it was served, and its endpoints.
type corpusView struct {
	ClusterIP netip.Addr
	Served    bool
	Endpoints []netip.AddrPort
}

// TestCorpusBuilder: a decoded Service gets a ready local endpoint per
// family, a slice whose Service the entry lacks gets a made-up dual-stack
// one, and what is invalid is counted as skipped.
func TestCorpusBuilder(t *testing.T) {
	decoded := dataplanetest.MakeService("ns", "decoded", func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "172.30.0.9", []string{"172.30.0.9"}
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p", v1.ProtocolTCP, 80, 0, 0)}
	})
	orphan := dataplanetest.MakeSlice("ns", "orphan", 0, func(es *discovery.EndpointSlice) {
		es.Ports = []discovery.EndpointPort{dataplanetest.SlicePort("q", v1.ProtocolUDP, 53)}
		es.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint("10.1.2.3", fuzzobj.SliceNode)}
	})
	bad := dataplanetest.MakeService("ns", "bad", func(s *v1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "not-an-ip", []string{"not-an-ip"}
		s.Spec.Ports = []v1.ServicePort{dataplanetest.ServicePort("p", v1.ProtocolTCP, 80, 0, 0)}
	})
	f := kerneltest.NewCorpusBuilder()
	f.Feed(fuzzobj.Objects{Services: []*v1.Service{decoded, bad}, Slices: []*discovery.EndpointSlice{orphan}})

	got := map[v1.IPFamily]map[string]corpusView{}
	for _, s := range f.Build() {
		got[s.Family] = map[string]corpusView{}
		for nn, ports := range s.Services.Services() {
			for _, sp := range ports {
				v := corpusView{ClusterIP: sp.ClusterIP, Served: f.Served(nn)}
				for _, ep := range s.Endpoints.Get(sp.Name) {
					v.Endpoints = append(v.Endpoints, ep.Addr)
				}
				got[s.Family][sp.Name.String()] = v
			}
		}
	}
	want := map[v1.IPFamily]map[string]corpusView{
		v1.IPv4Protocol: {
			"ns/decoded:p": {ClusterIP: netip.MustParseAddr("172.30.0.9"), Served: true, Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.180.0.1:8080")}},
			"ns/orphan:q":  {ClusterIP: netip.MustParseAddr("172.30.1.1"), Endpoints: []netip.AddrPort{netip.MustParseAddrPort("10.1.2.3:53")}},
		},
		v1.IPv6Protocol: {
			"ns/orphan:q": {ClusterIP: netip.MustParseAddr("fd00:172:30::1:1")},
		},
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("States (-want +got):\n%s", diff)
	}
	if f.Skipped() == 0 {
		t.Error("the invalid Service was not counted as skipped")
	}
	if f.Served(types.NamespacedName{Namespace: "ns", Name: "orphan"}) {
		t.Error("the made-up Service counts as served")
	}
}
