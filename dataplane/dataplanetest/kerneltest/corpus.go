package kerneltest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/go-logr/logr/funcr"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/fuzzobj"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// CorpusBuilder feeds decoded fuzz-corpus objects to a dual-stack Builder
// as a source would, each update naming the object of that name it
// replaces, and adds what makes them reach a dataplane: a ready local
// endpoint for every port of every decoded Service, so that its rules are
// written, and a valid Service for every slice's service that the entry
// lacks, so that the slice's endpoints are.
type CorpusBuilder struct {
	b        *dataplane.Builder
	services map[types.NamespacedName]*v1.Service
	slices   map[types.NamespacedName]*discovery.EndpointSlice
	// served are the decoded Services given endpoints of their own.
	served map[types.NamespacedName]bool
	// made numbers the made-up Services, for their cluster IPs.
	made map[types.NamespacedName]int
	// skipped counts what the Builder reported skipping.
	skipped int
}

// NewCorpusBuilder returns a CorpusBuilder whose Builder is this node's
// (fuzzobj.SliceNode, the endpoints corpora's node) and proxy's
// (fuzzobj.ProxyName, FuzzNormalize's), so that the endpoints and Services
// meant to be theirs are this proxy's.
func NewCorpusBuilder() *CorpusBuilder {
	f := &CorpusBuilder{
		services: map[types.NamespacedName]*v1.Service{},
		slices:   map[types.NamespacedName]*discovery.EndpointSlice{},
		served:   map[types.NamespacedName]bool{},
		made:     map[types.NamespacedName]int{},
	}
	f.b = dataplane.NewBuilder(dataplane.BuilderConfig{
		Families:  []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		NodeName:  fuzzobj.SliceNode,
		ProxyName: fuzzobj.ProxyName,
		Settings:  dataplanetest.DefaultSettings(),
		Logger:    funcr.New(func(string, string) {}, funcr.Options{}),
		OnSkip:    func(string, string) { f.skipped++ },
	})
	f.b.UpdateNode(dataplanetest.TestNode(func(n *v1.Node) { n.Name = fuzzobj.SliceNode }))
	return f
}

// Build builds the States of everything fed so far, one per family.
func (f *CorpusBuilder) Build() []*dataplane.State { return f.b.Build().States }

// Served reports whether nn is a decoded Service that was given a ready
// local endpoint, so that each of its ports the model keeps has one.
func (f *CorpusBuilder) Served(nn types.NamespacedName) bool { return f.served[nn] }

// Skipped is how many objects, or parts of one, the Builder reported
// skipping as invalid.
func (f *CorpusBuilder) Skipped() int { return f.skipped }

// Service updates Service s as a source would.
func (f *CorpusBuilder) Service(s *v1.Service) {
	nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	f.b.UpdateService(f.services[nn], s)
	f.services[nn] = s
}

// Slice updates EndpointSlice s as a source would.
func (f *CorpusBuilder) Slice(s *discovery.EndpointSlice) {
	nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	f.b.UpdateEndpointSlice(f.slices[nn], s)
	f.slices[nn] = s
}

// Clear deletes every object fed so far, as a source would: the next
// Build's States hold only what is fed after.
func (f *CorpusBuilder) Clear() {
	for nn, s := range f.services {
		f.b.UpdateService(s, nil)
		delete(f.services, nn)
	}
	for nn, s := range f.slices {
		f.b.UpdateEndpointSlice(s, nil)
		delete(f.slices, nn)
	}
	clear(f.served)
}

// Feed feeds the objects of one corpus entry, with what makes them reach
// a dataplane (see CorpusBuilder).
func (f *CorpusBuilder) Feed(objs fuzzobj.Objects) {
	decoded := map[types.NamespacedName]bool{}
	for _, s := range objs.Services {
		nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		decoded[nn], f.served[nn] = true, true
		f.Service(s)
		f.Slice(servingSlice(s, false))
		f.Slice(servingSlice(s, true))
	}
	ports := map[types.NamespacedName][]discovery.EndpointPort{}
	for _, s := range objs.Slices {
		f.Slice(s)
		nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Labels[discovery.LabelServiceName]}
		if nn.Namespace != "" && nn.Name != "" && !decoded[nn] {
			ports[nn] = append(ports[nn], s.Ports...)
		}
	}
	for _, nn := range slices.SortedFunc(maps.Keys(ports), func(a, b types.NamespacedName) int {
		return strings.Compare(a.String(), b.String())
	}) {
		if _, ok := f.made[nn]; !ok {
			f.made[nn] = len(f.made) + 1
		}
		delete(f.served, nn)
		f.Service(sliceService(nn, f.made[nn], ports[nn]))
	}
}

// servingSlice is slice <service>-4 or <service>-6 of s, one ready local
// endpoint serving every port of s.
func servingSlice(s *v1.Service, v6 bool) *discovery.EndpointSlice {
	num, ip := 4, "10.180.0.1"
	if v6 {
		num, ip = 6, "fd00:180::1"
	}
	return dataplanetest.MakeSlice(s.Namespace, s.Name, num, func(es *discovery.EndpointSlice) {
		if v6 {
			es.AddressType = discovery.AddressTypeIPv6
		}
		for _, p := range s.Spec.Ports {
			proto := p.Protocol
			if proto == "" {
				proto = v1.ProtocolTCP
			}
			es.Ports = append(es.Ports, dataplanetest.SlicePort(p.Name, proto, 8080))
		}
		es.Endpoints = []discovery.Endpoint{dataplanetest.ReadyEndpoint(ip, fuzzobj.SliceNode)}
	})
}

// sliceService is a valid dual-stack Service nn, the n-th made up, with a
// port for every distinct usable name and protocol among ports.
func sliceService(nn types.NamespacedName, n int, ports []discovery.EndpointPort) *v1.Service {
	return dataplanetest.MakeService(nn.Namespace, nn.Name, func(s *v1.Service) {
		v4, v6 := fmt.Sprintf("172.30.1.%d", n), fmt.Sprintf("fd00:172:30::1:%d", n)
		dualStack(s, v4, v6)
		seen := map[string]bool{}
		for _, p := range ports {
			proto := v1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			if p.Name == nil || !slices.Contains([]v1.Protocol{v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP}, proto) || seen[*p.Name+"/"+string(proto)] {
				continue
			}
			seen[*p.Name+"/"+string(proto)] = true
			s.Spec.Ports = append(s.Spec.Ports, dataplanetest.ServicePort(*p.Name, proto, int32(1000+len(s.Spec.Ports)), 0, 0))
		}
	})
}

// dualStack makes s a ClusterIP Service with cluster IPs v4 and v6.
func dualStack(s *v1.Service, v4, v6 string) {
	s.Spec.Type = v1.ServiceTypeClusterIP
	s.Spec.ClusterIP, s.Spec.ClusterIPs = v4, []string{v4, v6}
	s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
}
