package endpoints

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/internal/logtext"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/utils/net"
)

// The reasons a Tracker passes to Config.OnSkip. They are a fixed set so
// that they can label a metric.
const (
	SkipNoServiceName  = "missing service-name label"
	SkipNoName         = "missing name or namespace"
	SkipAddressType    = "unsupported address type"
	SkipPortName       = "port without name"
	SkipPortNumber     = "invalid port number"
	SkipProtocol       = "unsupported protocol"
	SkipNoAddress      = "endpoint without addresses"
	SkipInvalidAddress = "invalid address"
	SkipWrongFamily    = "address of another family"
)

// parsedSlice is one EndpointSlice reduced to what merging needs: per port
// name, its endpoints, normalized as in a Map. It is immutable once built;
// snapshots share its Endpoints.
type parsedSlice struct {
	service types.NamespacedName
	// ports is sorted by port name and holds no empty list.
	ports   []portList
	trigger time.Time
	// numbered is every port name the slice gives several port numbers,
	// sorted by name: API validation forbids it, so the tracker warns.
	numbered []portNumbers
}

// portNumbers is the port numbers one slice gives one port name.
type portNumbers struct {
	name    servicemodel.PortName
	numbers []uint16
}

type portList struct {
	name servicemodel.PortName
	eps  []*Endpoint
}

// get returns the endpoints the slice contributes to port pn; nil for a nil
// slice, which lets callers treat "absent" and "empty" alike.
func (p *parsedSlice) get(pn servicemodel.PortName) []*Endpoint {
	if p == nil {
		return nil
	}
	for i := range p.ports {
		if p.ports[i].name == pn {
			return p.ports[i].eps
		}
	}
	return nil
}

// skipLog gathers what one parse skipped, so that it is logged once per
// reason rather than once per endpoint.
type skipLog []skipCount

type skipCount struct {
	reason  string
	example string
	n       int
}

func (s *skipLog) add(reason, example string) {
	for i := range *s {
		if (*s)[i].reason == reason {
			(*s)[i].n++
			return
		}
	}
	*s = append(*s, skipCount{reason: reason, example: logtext.String(example), n: 1})
}

// report logs and counts what was skipped. It runs without the tracker's
// lock held, since OnSkip is the caller's code.
func (t *Tracker) report(s *discovery.EndpointSlice, skipped skipLog) {
	for _, c := range skipped {
		t.logger.Error(nil, "Skipping invalid EndpointSlice content", "endpointSlice", logtext.KObj(s),
			"reason", c.reason, "count", c.n, "example", c.example)
		if t.onSkip != nil {
			for range c.n {
				t.onSkip(c.reason)
			}
		}
	}
}

// parse reduces s to a parsedSlice. It returns nil when s is not tracked at
// all: another address type, or no service to attribute it to.
func (t *Tracker) parse(s *discovery.EndpointSlice, skipped *skipLog) *parsedSlice {
	if s.AddressType != t.addressType {
		if s.AddressType == discovery.AddressTypeIPv4 || s.AddressType == discovery.AddressTypeIPv6 {
			// The other family's tracker owns it; this is not bad input.
			t.logger.V(4).Info("Ignoring EndpointSlice of another family", "endpointSlice", logtext.KObj(s),
				"addressType", s.AddressType)
		} else {
			skipped.add(SkipAddressType, string(s.AddressType))
		}
		return nil
	}
	if s.Namespace == "" || s.Name == "" {
		skipped.add(SkipNoName, s.Namespace+"/"+s.Name)
		return nil
	}
	name := s.Labels[discovery.LabelServiceName]
	if name == "" {
		skipped.add(SkipNoServiceName, s.Name)
		return nil
	}
	ps := &parsedSlice{
		service: types.NamespacedName{Namespace: s.Namespace, Name: name},
		trigger: t.triggerTime(s),
	}
	// The first valid port takes the parsed endpoints as they are; any
	// other port gets a copy, since Endpoints are per port.
	parsed := t.parseEndpoints(s.Endpoints, skipped)
	taken := false
	for j := range s.Ports {
		pn, port, ok := parsePort(ps.service, &s.Ports[j], j, skipped)
		if !ok {
			continue
		}
		if len(s.Ports) > 1 {
			// One entry cannot give its name several numbers.
			ps.numbered = addNumber(ps.numbered, pn, port)
		}
		if len(parsed) == 0 {
			continue
		}
		buf := parsed
		if taken {
			buf = slices.Clone(parsed)
		}
		taken = true
		list := make([]*Endpoint, len(buf))
		for i := range buf {
			buf[i].Addr = netip.AddrPortFrom(buf[i].Addr.Addr(), port)
			list[i] = &buf[i]
		}
		// Two entries of one name and protocol feed one port, as upstream
		// merges them: their endpoints differ by port number.
		if k := slices.IndexFunc(ps.ports, func(p portList) bool { return p.name == pn }); k >= 0 {
			ps.ports[k].eps = append(ps.ports[k].eps, list...)
		} else {
			ps.ports = append(ps.ports, portList{name: pn, eps: list})
		}
	}
	for i := range ps.ports {
		ps.ports[i].eps = normalizeList(ps.ports[i].eps)
	}
	slices.SortFunc(ps.ports, func(a, b portList) int { return a.name.Compare(b.name) })
	ps.numbered = slices.DeleteFunc(ps.numbered, func(n portNumbers) bool { return len(n.numbers) < 2 })
	slices.SortFunc(ps.numbered, func(a, b portNumbers) int { return a.name.Compare(b.name) })
	return ps
}

// addNumber records that port name pn has port number port.
func addNumber(list []portNumbers, pn servicemodel.PortName, port uint16) []portNumbers {
	i := slices.IndexFunc(list, func(n portNumbers) bool { return n.name == pn })
	if i < 0 {
		return append(list, portNumbers{name: pn, numbers: []uint16{port}})
	}
	if k, found := slices.BinarySearch(list[i].numbers, port); !found {
		list[i].numbers = slices.Insert(list[i].numbers, k, port)
	}
	return list
}

// newlyNumbered returns the entries of cur that prev, what the same slice
// had before, lacks: port names that just got several numbers, or other
// ones. A slice seen again unchanged (an informer resync) has none.
func newlyNumbered(prev, cur []portNumbers) []portNumbers {
	var out []portNumbers
	for _, n := range cur {
		if !slices.ContainsFunc(prev, func(p portNumbers) bool { return p.name == n.name && slices.Equal(p.numbers, n.numbers) }) {
			out = append(out, n)
		}
	}
	return out
}

// warnNumbered logs, once per port name, that s gives it several port
// numbers. Upstream merges them silently: each endpoint then serves the
// port at every number, which is rarely what was meant.
func (t *Tracker) warnNumbered(s *discovery.EndpointSlice, list []portNumbers) {
	for _, n := range list {
		t.logger.Info("EndpointSlice gives one port name several port numbers; each endpoint is used at every one",
			"endpointSlice", logtext.KObj(s), "port", logtext.String(n.name.Port), "protocol", n.name.Protocol, "portNumbers", n.numbers)
	}
}

func parsePort(svc types.NamespacedName, p *discovery.EndpointPort, j int, skipped *skipLog) (servicemodel.PortName, uint16, bool) {
	if p.Name == nil {
		skipped.add(SkipPortName, fmt.Sprintf("ports[%d]", j))
		return servicemodel.PortName{}, 0, false
	}
	// A nil port would mean "every port" in the API, which no proxy
	// implements; upstream skips it too.
	if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
		example := "nil"
		if p.Port != nil {
			example = fmt.Sprint(*p.Port)
		}
		skipped.add(SkipPortNumber, example)
		return servicemodel.PortName{}, 0, false
	}
	// The API server defaults a missing protocol to TCP; upstream would
	// dereference nil here and panic.
	proto := v1.ProtocolTCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	switch proto {
	case v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP:
	default:
		skipped.add(SkipProtocol, string(proto))
		return servicemodel.PortName{}, 0, false
	}
	return servicemodel.PortName{NamespacedName: svc, Port: *p.Name, Protocol: proto}, uint16(*p.Port), true
}

// parseEndpoints returns the valid endpoints of a slice, with port 0.
func (t *Tracker) parseEndpoints(eps []discovery.Endpoint, skipped *skipLog) []Endpoint {
	out := make([]Endpoint, 0, len(eps))
	for i := range eps {
		ep := &eps[i]
		// Only the first address counts: the API documents the others as
		// unused, and upstream ignores them.
		if len(ep.Addresses) == 0 {
			skipped.add(SkipNoAddress, fmt.Sprintf("endpoints[%d]", i))
			continue
		}
		ip, ok := parseAddr(ep.Addresses[0])
		if !ok {
			skipped.add(SkipInvalidAddress, ep.Addresses[0])
			continue
		}
		if ip.Is4() != (t.addressType == discovery.AddressTypeIPv4) {
			skipped.add(SkipWrongFamily, ep.Addresses[0])
			continue
		}
		c := ep.Conditions
		info := affinity.EndpointInfo{
			Ready:       c.Ready == nil || *c.Ready,
			Serving:     c.Serving == nil || *c.Serving,
			Terminating: c.Terminating != nil && *c.Terminating,
		}
		if ep.NodeName != nil {
			info.NodeName = *ep.NodeName
			info.Local = t.nodeName != "" && info.NodeName == t.nodeName
		}
		if ep.Zone != nil {
			info.Zone = *ep.Zone
		}
		if h := ep.Hints; h != nil {
			info.ZoneHints = hintNames(h.ForZones, func(z discovery.ForZone) string { return z.Name })
			info.NodeHints = hintNames(h.ForNodes, func(n discovery.ForNode) string { return n.Name })
		}
		out = append(out, Endpoint{Addr: netip.AddrPortFrom(ip, 0), EndpointInfo: info})
	}
	return out
}

// parseAddr parses an address as upstream does, accepting the leading
// zeros that old objects may carry, and normalizes it (IPv4-mapped IPv6
// becomes IPv4, as upstream's re-printing does). The strict parser goes
// first because it does not allocate; it also accepts IPv6 zones, which
// upstream's parser rejects and no endpoint can have.
func parseAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), a.Zone() == ""
	}
	ip := utilnet.ParseIPSloppy(s)
	if ip == nil {
		return netip.Addr{}, false
	}
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

func hintNames[H any](hints []H, name func(H) string) []string {
	if len(hints) == 0 {
		return nil
	}
	names := make([]string, len(hints))
	for i, h := range hints {
		names[i] = name(h)
	}
	slices.Sort(names)
	return slices.Clip(slices.Compact(names))
}

// triggerTime returns the slice's last-change-trigger-time annotation when
// it postdates the tracker, the zero time otherwise: changes made before
// the tracker existed say nothing about its programming latency.
func (t *Tracker) triggerTime(s *discovery.EndpointSlice) time.Time {
	v, ok := s.Annotations[v1.EndpointsLastChangeTriggerTime]
	if !ok {
		return time.Time{}
	}
	tt, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		t.logger.Error(logtext.Error(err), "Ignoring unparsable annotation", "endpointSlice", logtext.KObj(s),
			"annotation", v1.EndpointsLastChangeTriggerTime)
		return time.Time{}
	}
	if !tt.After(t.start) {
		return time.Time{}
	}
	return tt
}
