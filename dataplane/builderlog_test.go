package dataplane_test

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
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

// TestBuilderWarnsMissingDetectionCIDR checks that a family local-traffic
// detection has no CIDR for is warned about once per change of what
// detection depends on, not on every update or Build.
func TestBuilderWarnsMissingDetectionCIDR(t *testing.T) {
	const (
		noClusterCIDRv6 = `"level"=0 "msg"="Local traffic detection is ClusterCIDR, but no cluster CIDR of this IP family is set: none of its traffic counts as from a local pod" "ipFamily"="IPv6" "clusterCIDRs"=["10.0.0.0/8"]`
		noPodCIDRv6     = `"level"=0 "msg"="Local traffic detection is NodeCIDR, but the node has no pod CIDR of this IP family: none of its traffic counts as from a local pod" "ipFamily"="IPv6" "node"="` + dpt.NodeName + `"`
		noPodCIDRv4     = `"level"=0 "msg"="Local traffic detection is NodeCIDR, but the node has no pod CIDR of this IP family: none of its traffic counts as from a local pod" "ipFamily"="IPv4" "node"="` + dpt.NodeName + `"`
	)
	dualStack := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	clusterCIDR := func(cidrs ...string) dataplane.LocalDetector {
		d := dataplane.LocalDetector{Mode: dataplane.LocalModeClusterCIDR}
		for _, c := range cidrs {
			d.CIDRs = append(d.CIDRs, netip.MustParsePrefix(c))
		}
		return d
	}
	node := func(podCIDRs ...string) *v1.Node {
		return dpt.TestNode(func(n *v1.Node) { n.Spec.PodCIDR, n.Spec.PodCIDRs = "", podCIDRs })
	}
	type step struct {
		node *v1.Node
		want []string
	}
	for _, tc := range []struct {
		name     string
		families []v1.IPFamily
		detector dataplane.LocalDetector
		atStart  []string
		steps    []step
	}{{
		name:     "ClusterCIDR without IPv6: once, at start",
		families: dualStack,
		detector: clusterCIDR("10.0.0.0/8"),
		atStart:  []string{noClusterCIDRv6},
		steps:    []step{{}, {node: node("10.0.0.0/24")}, {}, {node: node()}},
	}, {
		name:     "ClusterCIDR with both",
		families: dualStack,
		detector: clusterCIDR("10.0.0.0/8", "fd00:10::/64"),
		steps:    []step{{node: node()}, {}},
	}, {
		name:     "ClusterCIDR single-stack needs only its own",
		detector: clusterCIDR("10.0.0.0/8"),
		steps:    []step{{}},
	}, {
		name:     "NodeCIDR: once per change of the node's pod CIDRs",
		families: dualStack,
		detector: dataplane.LocalDetector{Mode: dataplane.LocalModeNodeCIDR},
		steps: []step{
			{},
			{node: node("10.0.0.0/24"), want: []string{noPodCIDRv6}},
			{node: node("10.0.0.0/24")},
			{},
			{node: node("10.0.0.0/24", "fd00:10::/96")},
			{node: node("10.0.0.0/24", "fd00:10::/96")},
			{node: node("10.0.1.0/24"), want: []string{noPodCIDRv6}},
			{node: node(), want: []string{noPodCIDRv4}},
			{node: node()},
		},
	}, {
		name:     "other modes",
		families: dualStack,
		detector: dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: "cbr0"},
		steps:    []step{{node: node()}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var rec logLines
			b := dataplane.NewBuilder(dataplane.BuilderConfig{
				Families: tc.families,
				NodeName: dpt.NodeName,
				Settings: dataplane.Settings{LocalDetector: tc.detector},
				Logger:   rec.logger(),
			})
			if diff := cmp.Diff(tc.atStart, rec.take()); diff != "" {
				t.Errorf("NewBuilder: log lines (-want +got):\n%s", diff)
			}
			for i, s := range tc.steps {
				if s.node != nil {
					b.UpdateNode(s.node)
				}
				b.Build()
				if diff := cmp.Diff(s.want, rec.take()); diff != "" {
					t.Errorf("step %d: log lines (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

// TestBuilderLogsInvalidSettings: a Builder cannot refuse its
// configuration, so it says at once that every dataplane will refuse its
// States, quoting the value bounded.
func TestBuilderLogsInvalidSettings(t *testing.T) {
	var rec logLines
	huge := "br0\n" + strings.Repeat("x", 64<<10)
	dataplane.NewBuilder(dataplane.BuilderConfig{
		Settings: dataplane.Settings{LocalDetector: dataplane.LocalDetector{Mode: dataplane.LocalModeBridgeInterface, Interface: huge}},
		Logger:   rec.logger(),
	})
	lines := rec.take()
	if len(lines) != 1 || !strings.Contains(lines[0], "every dataplane will refuse the States") ||
		!strings.Contains(lines[0], "Settings.LocalDetector.Interface") || len(lines[0]) > 2<<10 {
		t.Errorf("log lines = %.500q, want one bounded line naming the setting", lines)
	}
}
