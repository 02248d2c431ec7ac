package userspace

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// TestListeningFrontends: a node port's forwarder is listed as the
// model's node port frontend, with no IP; a service address's at it.
func TestListeningFrontends(t *testing.T) {
	c := newCluster()
	c.service("web", "10.96.0.10", func(s *v1.Service) {
		s.Spec.Type = v1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}, "http/TCP/80")
	c.endpoints("web", []string{"10.0.0.1"}, "http/TCP/8080")
	c.service("empty", "10.96.0.11", nil, "dns/UDP/53")
	d := newDataplane(t, newBackends(t), Config{Listen: loopbackListen})
	mustSync(t, d, c.build())
	want := map[servicemodel.Frontend]string{
		{IP: netip.MustParseAddr("10.96.0.10"), Port: 80, Protocol: v1.ProtocolTCP}: "cluster IP",
		{Port: 30080, Protocol: v1.ProtocolTCP}:                                     "node port",
	}
	if diff := cmp.Diff(want, d.ListeningFrontends(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
		t.Errorf("ListeningFrontends (-want +got):\n%s", diff)
	}
}
