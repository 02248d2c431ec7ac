package endpoints

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
)

const testHostname = "test-hostname"

// cmpOpts lets cmp look into netip values, which hide their fields.
var cmpOpts = cmpopts.EquateComparable(netip.Addr{}, netip.AddrPort{})

// Endpoint condition flags for the compact expectations in tables.
const (
	R = 1 << iota // ready
	S             // serving
	T             // terminating
	L             // local
)

// e builds an expected endpoint; node is its nodeName ("" for none).
func e(addr string, flags int, node string) *Endpoint {
	return &Endpoint{
		Addr: netip.MustParseAddrPort(addr),
		EndpointInfo: affinity.EndpointInfo{
			Ready:       flags&R != 0,
			Serving:     flags&S != 0,
			Terminating: flags&T != 0,
			Local:       flags&L != 0,
			NodeName:    node,
		},
	}
}

func nsn(ns, name string) types.NamespacedName {
	return types.NamespacedName{Namespace: ns, Name: name}
}

func portName(ns, svc, port string, proto v1.Protocol) servicemodel.PortName {
	return servicemodel.PortName{NamespacedName: nsn(ns, svc), Port: port, Protocol: proto}
}

// contents flattens a Map for comparison.
func contents(m Map) map[servicemodel.PortName][]*Endpoint {
	out := map[servicemodel.PortName][]*Endpoint{}
	for _, se := range m.Services() {
		for pn, list := range se.Ports {
			out[pn] = list
		}
	}
	return out
}

// serviceContents is the ports of one service of m (empty when absent).
func serviceContents(m Map, nn types.NamespacedName) map[servicemodel.PortName][]*Endpoint {
	out := map[servicemodel.PortName][]*Endpoint{}
	if se := m.Service(nn); se != nil {
		for pn, list := range se.Ports {
			out[pn] = list
		}
	}
	return out
}

// localReady is the health-check count of every service that has one, as
// upstream's LocalReadyEndpoints reports them.
func localReady(m Map) map[types.NamespacedName]int {
	out := map[types.NamespacedName]int{}
	for nn, se := range m.Services() {
		if se.LocalReady > 0 {
			out[nn] = se.LocalReady
		}
	}
	return out
}

func newTestTracker(t testing.TB, cfg Config) *Tracker {
	t.Helper()
	if cfg.Logger.GetSink() == nil {
		if tt, ok := t.(*testing.T); ok {
			cfg.Logger = testr.New(tt)
		}
	}
	return NewTracker(cfg)
}

// checkout checks the tracker out and verifies the Changes against the
// difference between the previous and the new snapshot, so that every test
// also checks that Changes is exact.
func checkout(t testing.TB, tr *Tracker) (Map, Changes) {
	t.Helper()
	tr.mu.Lock()
	prev := tr.snapshot
	tr.mu.Unlock()
	pending := tr.Pending()
	m, ch := tr.Checkout()
	want := expectedChanges(prev, m)
	want.TriggerTimes = ch.TriggerTimes
	if diff := cmp.Diff(want, ch, cmpOpts); diff != "" {
		t.Errorf("Changes differ from the snapshot diff (-want +got):\n%s", diff)
	}
	if pending != ch.Services.Len() {
		t.Errorf("Pending() = %d before Checkout, which changed %d services", pending, ch.Services.Len())
	}
	return m, ch
}

// expectedChanges computes, the slow way, what a Checkout from prev to cur
// must report.
func expectedChanges(prev, cur Map) Changes {
	ch := Changes{
		Services:   sets.New[types.NamespacedName](),
		Ports:      sets.New[servicemodel.PortName](),
		LocalReady: map[types.NamespacedName]int{},
	}
	before, after := contents(prev), contents(cur)
	for pn, list := range before {
		if !cmp.Equal(list, after[pn], cmpOpts) {
			ch.Ports.Insert(pn)
			ch.Services.Insert(pn.NamespacedName)
		}
		if pn.Protocol != v1.ProtocolUDP && pn.Protocol != v1.ProtocolSCTP {
			continue
		}
		for _, old := range list {
			if !old.Serving {
				continue
			}
			still := false
			for _, now := range after[pn] {
				if now.Addr == old.Addr && now.Serving {
					still = true
				}
			}
			if !still {
				ch.Stale = append(ch.Stale, StaleEndpoint{Port: pn, Addr: old.Addr})
			}
		}
	}
	for pn := range after {
		if _, ok := before[pn]; !ok {
			ch.Ports.Insert(pn)
			ch.Services.Insert(pn.NamespacedName)
		}
	}
	for nn := range ch.Services {
		ch.LocalReady[nn] = cur.LocalReadyEndpoints(nn)
	}
	sortStale(ch.Stale)
	return ch
}

func sortStale(s []StaleEndpoint) {
	slices.SortFunc(s, func(a, b StaleEndpoint) int {
		if c := a.Port.Compare(b.Port); c != 0 {
			return c
		}
		return a.Addr.Compare(b.Addr)
	})
}

// guard fails the test at its end if any of objs was modified.
func guard(t testing.TB, objs ...*discovery.EndpointSlice) {
	t.Helper()
	copies := make([]*discovery.EndpointSlice, len(objs))
	for i, o := range objs {
		copies[i] = o.DeepCopy()
	}
	t.Cleanup(func() {
		for i, o := range objs {
			if diff := cmp.Diff(copies[i], o); diff != "" {
				t.Errorf("input slice %d was modified (-before +after):\n%s", i, diff)
			}
		}
	})
}

// genSlice builds slice "<svc>-<num>" of service ns/svc with n endpoints
// 10.0.<offset>.<i> (i = 1..n). Endpoint i is not serving when i%unreadyMod
// == 0 and terminating when i%terminatingMod == 0; it is ready when serving
// and not terminating. It runs on hosts[i%len(hosts)]. The ports are TCP,
// named port-<index>. This is the shape of upstream's test generator.
func genSlice(svc, ns string, num, offset, n, unreadyMod, terminatingMod int, hosts []string, ports ...*int32) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%d", svc, num),
			Namespace: ns,
			Labels:    map[string]string{discovery.LabelServiceName: svc},
		},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{},
		Endpoints:   []discovery.Endpoint{},
	}
	for i, p := range ports {
		s.Ports = append(s.Ports, discovery.EndpointPort{
			Name:     ptr.To(fmt.Sprintf("port-%d", i)),
			Port:     p,
			Protocol: ptr.To(v1.ProtocolTCP),
		})
	}
	for i := 1; i <= n; i++ {
		serving := i%unreadyMod != 0
		terminating := i%terminatingMod == 0
		ep := discovery.Endpoint{
			Addresses: []string{fmt.Sprintf("10.0.%d.%d", offset, i)},
			Conditions: discovery.EndpointConditions{
				Ready:       ptr.To(serving && !terminating),
				Serving:     ptr.To(serving),
				Terminating: ptr.To(terminating),
			},
		}
		if len(hosts) > 0 {
			ep.NodeName = ptr.To(hosts[i%len(hosts)])
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// gen is genSlice with the offset equal to the slice number.
func gen(svc, ns string, num, n, unreadyMod, terminatingMod int, hosts []string, ports ...*int32) *discovery.EndpointSlice {
	return genSlice(svc, ns, num, num, n, unreadyMod, terminatingMod, hosts, ports...)
}

// makeSlice builds slice "<name>-<num>" of service ns/name and lets fill
// set its endpoints and ports.
func makeSlice(ns, name string, num int, fill func(*discovery.EndpointSlice)) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:        fmt.Sprintf("%s-%d", name, num),
			Namespace:   ns,
			Annotations: map[string]string{},
			Labels:      map[string]string{discovery.LabelServiceName: name},
		},
		AddressType: discovery.AddressTypeIPv4,
	}
	fill(s)
	return s
}

func udpPort(name string, port int32) discovery.EndpointPort {
	return discovery.EndpointPort{Name: ptr.To(name), Port: ptr.To(port), Protocol: ptr.To(v1.ProtocolUDP)}
}

func addr(ip string) discovery.Endpoint { return discovery.Endpoint{Addresses: []string{ip}} }

func localAddr(ip string) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{ip}, NodeName: ptr.To(testHostname)}
}
