package dataplane_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/proxykit/proxykit/dataplane"
	dpt "github.com/proxykit/proxykit/dataplane/dataplanetest"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// logLines records what a logger writes, one funcr line per call, at every
// verbosity.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{Verbosity: 10})
}

// take returns the lines written since the last take.
func (l *logLines) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.lines
	l.lines = nil
	return got
}

// TestBuilderLogsBoundHugeStrings feeds objects whose every user-supplied
// string is 64 KiB through a dual-stack Builder and its trackers: each
// piece is logged, and no line comes near the size of what it quotes.
func TestBuilderLogsBoundHugeStrings(t *testing.T) {
	const maxLine = 2 << 10
	huge := strings.Repeat("x", 64<<10)
	var rec logLines
	b := dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol, v1.IPFamily(huge)},
		NodeName: huge,
		Logger:   rec.logger(),
	})
	b.UpdateNode(dpt.MakeNode(huge, func(n *v1.Node) {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeAddressType(huge), Address: huge}, {Type: v1.NodeInternalIP, Address: huge}}
		n.Spec.PodCIDRs = []string{huge}
	}))
	for _, svc := range []*v1.Service{
		dpt.MakeService(huge, huge, nil),
		dpt.MakeService("ns", "web", func(s *v1.Service) {
			s.Spec.ClusterIP = huge
			s.Spec.ClusterIPs = []string{huge}
		}),
		dpt.MakeService("ns", "web", func(s *v1.Service) {
			s.Spec.ClusterIP = "10.0.0.1"
			s.Spec.ExternalIPs = []string{huge}
			s.Spec.Ports = []v1.ServicePort{dpt.ServicePort(huge, v1.ProtocolTCP, 80, 0, 0), dpt.ServicePort("p", v1.Protocol(huge), 80, 0, 0)}
			s.Spec.LoadBalancerSourceRanges = []string{huge}
			s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: huge}}
		}),
		dpt.MakeService("ns", "ext", func(s *v1.Service) { s.Spec.Type = v1.ServiceTypeExternalName }),
	} {
		b.UpdateService(nil, svc)
	}
	for _, s := range []*discovery.EndpointSlice{
		dpt.MakeSlice(huge, huge, 0, func(s *discovery.EndpointSlice) {
			s.Name = huge
			s.AddressType = discovery.AddressType(huge)
		}),
		dpt.MakeSlice(huge, huge, 0, func(s *discovery.EndpointSlice) {
			s.Name = huge
			s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: huge}
			s.Ports = []discovery.EndpointPort{dpt.SlicePort("p", v1.Protocol(huge), 80)}
			s.Endpoints = []discovery.Endpoint{dpt.ReadyEndpoint(huge, huge), dpt.ReadyEndpoint("fd00::1", huge)}
		}),
		dpt.MakeSlice(huge, huge, 0, func(s *discovery.EndpointSlice) {
			s.Name = huge
			s.AddressType = discovery.AddressTypeIPv6
		}),
	} {
		b.UpdateEndpointSlice(nil, s)
	}
	b.Build()

	lines := rec.take()
	if len(lines) < 10 {
		t.Fatalf("got %d log lines, want at least 10: %q", len(lines), lines)
	}
	for _, l := range lines {
		if len(l) > maxLine {
			t.Errorf("log line of %d bytes, want at most %d: %.300s...", len(l), maxLine, l)
		}
	}
}
