package iptables

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/dataplanetest"
	"github.com/proxykit/proxykit/internal/fuzzobj"
	"github.com/proxykit/proxykit/internal/netns"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// corpusFeeder feeds decoded objects to a Builder as a source would, each
// update naming the object of that name it replaces, and adds what makes
// them reach a dataplane: a ready local endpoint for every port of every
// decoded Service, so that its chains are written, and a valid Service for
// every slice's service that the entry lacks, so that the slice's
// endpoints are.
type corpusFeeder struct {
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

func newCorpusFeeder() *corpusFeeder {
	f := &corpusFeeder{
		services: map[types.NamespacedName]*v1.Service{},
		slices:   map[types.NamespacedName]*discovery.EndpointSlice{},
		served:   map[types.NamespacedName]bool{},
		made:     map[types.NamespacedName]int{},
	}
	f.b = dataplane.NewBuilder(dataplane.BuilderConfig{
		Families: []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol},
		// The endpoints corpora's node and FuzzNormalize's proxy, so that
		// the endpoints and Services meant to be theirs are this proxy's.
		NodeName:  fuzzobj.SliceNode,
		ProxyName: fuzzobj.ProxyName,
		Settings:  dataplanetest.DefaultSettings(),
		Logger:    funcr.New(func(string, string) {}, funcr.Options{}),
		OnSkip:    func(string, string) { f.skipped++ },
	})
	f.b.UpdateNode(dataplanetest.TestNode(func(n *v1.Node) { n.Name = fuzzobj.SliceNode }))
	return f
}

func (f *corpusFeeder) service(s *v1.Service) {
	nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	f.b.UpdateService(f.services[nn], s)
	f.services[nn] = s
}

func (f *corpusFeeder) slice(s *discovery.EndpointSlice) {
	nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	f.b.UpdateEndpointSlice(f.slices[nn], s)
	f.slices[nn] = s
}

func (f *corpusFeeder) feed(objs fuzzobj.Objects) {
	decoded := map[types.NamespacedName]bool{}
	for _, s := range objs.Services {
		nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
		decoded[nn], f.served[nn] = true, true
		f.service(s)
		f.slice(servingSlice(s, false))
		f.slice(servingSlice(s, true))
	}
	ports := map[types.NamespacedName][]discovery.EndpointPort{}
	for _, s := range objs.Slices {
		f.slice(s)
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
		f.service(sliceService(nn, f.made[nn], ports[nn]))
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
		s.Spec.Type = v1.ServiceTypeClusterIP
		s.Spec.ClusterIP, s.Spec.ClusterIPs = v4, []string{v4, v6}
		s.Spec.IPFamilies = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
		s.Spec.IPFamilyPolicy = ptr.To(v1.IPFamilyPolicyRequireDualStack)
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

// replayStats counts the service ports found programmed.
type replayStats struct {
	// served: ports of decoded Services; sliceChains and sliceRejects:
	// ports of made-up Services, by whether their slices' endpoints got a
	// chain or the port rejects for lack of them.
	served, sliceChains, sliceRejects int
}

// checkKernelServices requires every port the model kept in s to be in
// the kernel: a decoded Service's with its cluster IP rule and the service
// chain it jumps to (it has a ready local endpoint), a made-up Service's
// with those or with the reject of a port without endpoints.
func checkKernelServices(t *testing.T, what string, ns *netns.NS, s *dataplane.State, served map[types.NamespacedName]bool, stats *replayStats) {
	t.Helper()
	save := "iptables-save"
	if s.Family == v1.IPv6Protocol {
		save = "ip6tables-save"
	}
	nat, filter := ns.MustRun(save, "-t", "nat"), ns.MustRun(save, "-t", "filter")
	for nn, ports := range s.Services.Services() {
		for _, sp := range ports {
			name := portComment(sp.Name)
			chain := serviceChainOf(nat, name) != ""
			switch {
			case served[nn] && !chain:
				t.Errorf("%s, %s: port %s, which has a ready endpoint, has no cluster IP rule", what, s.Family, name)
			case served[nn]:
				stats.served++
			case chain:
				stats.sliceChains++
			case strings.Contains(filter, `"`+name+` has no endpoints"`):
				stats.sliceRejects++
			default:
				t.Errorf("%s, %s: port %s is not programmed", what, s.Family, name)
			}
		}
	}
}

// serviceChainOf returns the declared service chain (SVC or SVL) that the
// cluster IP rule of port name jumps to in the iptables-save text nat, ""
// if there is none.
func serviceChainOf(nat, name string) string {
	for line := range strings.Lines(nat) {
		if !strings.HasPrefix(line, "-A "+DefaultChainPrefix+"SERVICES ") || !strings.Contains(line, `"`+name+` cluster IP"`) {
			continue
		}
		_, target, _ := strings.Cut(strings.TrimSpace(line), " -j ")
		if (strings.HasPrefix(target, DefaultChainPrefix+kindSVC) || strings.HasPrefix(target, DefaultChainPrefix+kindSVL)) &&
			strings.Contains(nat, "\n:"+target+" ") {
			return target
		}
	}
	return ""
}

// portComment is how the rules' comments name a port.
func portComment(pn servicemodel.PortName) string {
	if pn.Port == "" {
		return pn.NamespacedName.String()
	}
	return pn.NamespacedName.String() + ":" + pn.Port
}

// TestKernelFuzzCorporaAccepted replays the model's checked-in fuzz corpora,
// the bad objects its fuzzers found interesting, through the Builder into
// the real iptables-restore of both families: first every entry at once,
// then each entry alone in a fresh Builder, which the same dataplanes
// program as partial syncs. The kernel must accept every restore, a second
// Sync of the same State must do nothing, every service port the model
// kept must be programmed, and each partial sync must leave the rules a
// full sync of its State writes.
func TestKernelFuzzCorporaAccepted(t *testing.T) {
	netns.Require(t, "iptables-restore", "iptables-save", "ip6tables-restore", "ip6tables-save", "iptables")
	entries, err := fuzzobj.ModelCorpora("../..")
	if err != nil {
		t.Fatal(err)
	}
	node, ref := netns.New(t, "corpus"), netns.New(t, "corpusref")
	families := []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	dps, refs := map[v1.IPFamily]*nsDataplane{}, map[v1.IPFamily]*nsDataplane{}
	for _, fam := range families {
		dps[fam] = newNSDataplane(t, node, Config{Family: fam})
		refs[fam] = newNSDataplane(t, ref, Config{Family: fam})
	}
	var stats replayStats

	replay := func(what string, f *corpusFeeder, partial bool) {
		t.Helper()
		ctx := t.Context()
		for _, s := range f.b.Build().States {
			dp := dps[s.Family]
			if err := dp.Sync(ctx, s); err != nil {
				t.Fatalf("%s, %s: the kernel rejected what the model built from the corpus: %v", what, s.Family, err)
			}
			if full := dp.LastSync().Full; full == partial {
				t.Errorf("%s, %s: full sync %v, want %v", what, s.Family, full, !partial)
			}
			if err := dp.Sync(ctx, s); err != nil || dp.Stats() != (SyncStats{}) {
				t.Errorf("%s, %s: the same State again: %v, %+v; want a sync doing nothing", what, s.Family, err, dp.LastSync())
			}
			// iptables-save spells every rule differently from the
			// restore input: Reconcile must still see them as equal.
			if drift, err := dp.Reconcile(ctx); err != nil || !drift.Empty() {
				t.Errorf("%s, %s: Reconcile of what was just synced: %v, drift %s", what, s.Family, err, drift)
			}
			checkKernelServices(t, what, node, s, f.served, &stats)
			checkRuleGauge(t, what, node, dp.Dataplane, s.Family == v1.IPv6Protocol)
			if partial {
				forceFull(refs[s.Family].Dataplane)
				if err := refs[s.Family].Sync(ctx, s); err != nil {
					t.Fatalf("%s, %s: full sync: %v", what, s.Family, err)
				}
				v6 := s.Family == v1.IPv6Protocol
				if diff := cmpDiff(kernelRules(t, ref, v6), kernelRules(t, node, v6)); diff != "" {
					t.Errorf("%s, %s: the partial sync left other rules than a full one (-full +partial):\n%s", what, s.Family, diff)
				}
			}
		}
	}

	all := newCorpusFeeder()
	for _, e := range entries {
		all.feed(e.Objects)
	}
	replay("all entries", all, false)
	if all.skipped == 0 {
		t.Error("the Builder skipped nothing: the corpora's bad objects did not reach the model")
	}
	for _, e := range entries {
		f := newCorpusFeeder()
		f.feed(e.Objects)
		replay(e.Name, f, true)
	}
	if stats.served == 0 || stats.sliceChains == 0 {
		t.Errorf("programmed %+v: the decoded Services or the slices' endpoints never reached the kernel", stats)
	}
	t.Logf("%d entries; service ports found programmed: %+v", len(entries), stats)
}

// checkRuleGauge requires the rules gauge of d to count the rules the
// kernel holds in d's chains.
func checkRuleGauge(t *testing.T, what string, ns *netns.NS, d *Dataplane, v6 bool) {
	t.Helper()
	kernel := map[string]float64{"nat": 0, "filter": 0}
	for key, rules := range kernelRules(t, ns, v6) {
		table, chain, _ := strings.Cut(key, " ")
		if strings.HasPrefix(chain, DefaultChainPrefix) && chain != DefaultChainPrefix+"PROXY-CANARY" {
			kernel[table] += float64(len(rules))
		}
	}
	if diff := cmp.Diff(kernel, gauges(d.metrics.rules)); diff != "" {
		t.Errorf("%s, v6=%v: rules gauge differs from the kernel (-kernel +gauge):\n%s", what, v6, diff)
	}
}
