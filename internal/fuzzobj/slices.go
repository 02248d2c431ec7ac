package fuzzobj

import (
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// input turns the fuzz data of endpoints' fuzz targets into choices; past
// its end every choice is 0, so that every input decodes to something.
type input struct{ b []byte }

// newInput returns an input reading data.
func newInput(data []byte) *input { return &input{b: data} }

// pick consumes one byte and returns it modulo n (0 when none is left).
func (in *input) pick(n int) int {
	if len(in.b) == 0 {
		return 0
	}
	c := in.b[0]
	in.b = in.b[1:]
	return int(c) % n
}

// done reports whether the data is used up.
func (in *input) done() bool { return len(in.b) == 0 }

// family picks the IP family a target's tracker is for.
func (in *input) family() v1.IPFamily {
	if in.pick(2) == 1 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

func (in *input) tri() *bool {
	switch in.pick(3) {
	case 1:
		return ptr.To(true)
	case 2:
		return ptr.To(false)
	}
	return nil
}

// slice draws an EndpointSlice for a tracker of family: half the time a
// valid one of service ns1/a from a tiny universe of ports and addresses,
// so that slices overlap and compete for addresses; otherwise anything,
// valid or not.
func (in *input) slice(family v1.IPFamily) *discovery.EndpointSlice {
	if in.pick(2) == 0 {
		return in.denseSlice(family)
	}
	return in.wildSlice(family)
}

func (in *input) denseSlice(family v1.IPFamily) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns1",
			Name:      fmt.Sprintf("d%d", in.pick(3)),
			Labels:    map[string]string{discovery.LabelServiceName: "a"},
		},
		AddressType: discovery.AddressTypeIPv4,
	}
	format := "10.0.0.%d"
	if family == v1.IPv6Protocol {
		s.AddressType = discovery.AddressTypeIPv6
		format = "fd00::%d"
	}
	for range in.pick(2) + 1 {
		s.Ports = append(s.Ports, discovery.EndpointPort{
			Name:     ptr.To([]string{"", "p"}[in.pick(2)]),
			Port:     ptr.To(int32(in.pick(2) + 1)),
			Protocol: ptr.To([]v1.Protocol{v1.ProtocolUDP, v1.ProtocolTCP}[in.pick(2)]),
		})
	}
	for range in.pick(6) + 1 {
		ep := discovery.Endpoint{
			Addresses:  []string{fmt.Sprintf(format, in.pick(3))},
			Conditions: discovery.EndpointConditions{Ready: in.tri(), Serving: in.tri(), Terminating: in.tri()},
		}
		if n := in.pick(3); n > 0 {
			ep.NodeName = ptr.To(fmt.Sprintf("node-%c", 'a'+n-1))
		}
		if in.pick(2) == 1 {
			ep.Hints = &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: fmt.Sprintf("z%d", in.pick(2))}}}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func (in *input) wildSlice(family v1.IPFamily) *discovery.EndpointSlice {
	own, other := discovery.AddressTypeIPv4, discovery.AddressTypeIPv6
	if family == v1.IPv6Protocol {
		own, other = other, own
	}
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: []string{"ns1", "ns1", "ns1", "ns2", "ns2", "ns1", "ns1", ""}[in.pick(8)],
			Name:      []string{"s1", "s2", "s3", "s1", "s2", "s4", "s1", ""}[in.pick(8)],
		},
		AddressType: []discovery.AddressType{own, own, own, own, own, own, other, discovery.AddressTypeFQDN}[in.pick(8)],
	}
	switch in.pick(8) {
	case 0, 1, 2, 3:
		s.Labels = map[string]string{discovery.LabelServiceName: "a"}
	case 4, 5:
		s.Labels = map[string]string{discovery.LabelServiceName: "b"}
	case 6:
		s.Labels = map[string]string{discovery.LabelServiceName: ""}
	}
	if in.pick(3) == 0 {
		s.Annotations = map[string]string{v1.EndpointsLastChangeTriggerTime: time.Date(2030, 1, 1, 0, 0, in.pick(60), 0, time.UTC).Format(time.RFC3339Nano)}
	}
	for range in.pick(4) + 1 {
		var p discovery.EndpointPort
		switch in.pick(6) {
		case 1, 5:
			p.Name = ptr.To("")
		case 2, 4:
			p.Name = ptr.To("p")
		case 3:
			p.Name = ptr.To("q")
		}
		switch in.pick(10) {
		case 0:
			p.Port = nil
		case 1:
			p.Port = ptr.To[int32](0)
		case 2:
			p.Port = ptr.To[int32](-1)
		case 3:
			p.Port = ptr.To[int32](70000)
		case 4:
			p.Port = ptr.To[int32](65535)
		default:
			p.Port = ptr.To(int32(in.pick(4) + 1))
		}
		switch in.pick(8) {
		case 1, 6:
			p.Protocol = ptr.To(v1.ProtocolTCP)
		case 2, 5, 7:
			p.Protocol = ptr.To(v1.ProtocolUDP)
		case 3:
			p.Protocol = ptr.To(v1.ProtocolSCTP)
		case 4:
			p.Protocol = ptr.To(v1.Protocol("ICMP"))
		}
		s.Ports = append(s.Ports, p)
	}
	for range in.pick(9) {
		var ep discovery.Endpoint
		for range in.pick(4) {
			d := in.pick(4)
			a := []string{
				fmt.Sprintf("10.0.0.%d", d), fmt.Sprintf("010.000.000.00%d", d), fmt.Sprintf("fd00::%d", d),
				fmt.Sprintf("::ffff:10.0.0.%d", d), "bogus", "", fmt.Sprintf("FD00:0::%d", d),
				fmt.Sprintf("10.0.0.1%d", d), "1.2.3.4.5", fmt.Sprintf("fd00::1%d", d),
				fmt.Sprintf("10.0.0.%d", d), fmt.Sprintf("fe80::%d%%eth0", d), fmt.Sprintf("::ffff:010.0.0.%d", d),
			}[in.pick(13)]
			ep.Addresses = append(ep.Addresses, a)
		}
		ep.Conditions = discovery.EndpointConditions{Ready: in.tri(), Serving: in.tri(), Terminating: in.tri()}
		switch in.pick(4) {
		case 1:
			ep.NodeName = ptr.To("node-a")
		case 2:
			ep.NodeName = ptr.To("node-b")
		case 3:
			ep.NodeName = ptr.To("")
		}
		if z := in.pick(3); z > 0 {
			ep.Zone = ptr.To(fmt.Sprintf("z%d", z))
		}
		switch in.pick(3) {
		case 1:
			ep.Hints = &discovery.EndpointHints{}
		case 2:
			ep.Hints = &discovery.EndpointHints{}
			for range in.pick(3) {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discovery.ForZone{Name: fmt.Sprintf("z%d", in.pick(2))})
			}
			for range in.pick(3) {
				ep.Hints.ForNodes = append(ep.Hints.ForNodes, discovery.ForNode{Name: fmt.Sprintf("node-%c", 'a'+in.pick(2))})
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// SliceNode is the node the endpoints targets' trackers run on: endpoints
// with this nodeName are local.
const SliceNode = "node-a"

// maxMergeSlices bounds the slices of one FuzzSliceMerge input.
const maxMergeSlices = 8

// SliceMerge decodes the input of endpoints' FuzzSliceMerge: the family,
// then slices until the data or the bound of 8 runs out. Slices may share a
// namespace and name; each is an update of the previous one of that name.
func SliceMerge(data []byte) (v1.IPFamily, []*discovery.EndpointSlice) {
	in := newInput(data)
	family := in.family()
	var fed []*discovery.EndpointSlice
	for !in.done() && len(fed) < maxMergeSlices {
		fed = append(fed, in.slice(family))
	}
	return family, fed
}

// SliceOp is one step of endpoints' FuzzTracker.
type SliceOp struct {
	Kind OpKind
	// Old is the slice of New's name given before, nil if none (for a
	// delete, the slice deleted).
	Old *discovery.EndpointSlice
	// New is the updated slice, nil for a delete or a checkout.
	New *discovery.EndpointSlice
}

// SliceTrace is the decoded input of endpoints' FuzzTracker.
type SliceTrace struct {
	Family v1.IPFamily
	Ops    []SliceOp
	// Final is the slices stored after the last op, ordered by
	// namespace/name.
	Final []*discovery.EndpointSlice
}

// maxTrackerOps bounds the ops of one FuzzTracker input.
const maxTrackerOps = 64

// SliceTracker decodes the input of endpoints' FuzzTracker: the family,
// then up to 64 ops until the data runs out. An op byte picks an update
// with a new slice (5 in 8), a delete, a checkout or a touch; a delete or a
// touch picks a stored slice by the next byte and, with nothing stored,
// counts as an op but does nothing.
func SliceTracker(data []byte) SliceTrace {
	in := newInput(data)
	tr := SliceTrace{Family: in.family()}
	store := map[types.NamespacedName]*discovery.EndpointSlice{}
	for ops := 0; !in.done() && ops < maxTrackerOps; ops++ {
		switch op := in.pick(8); {
		case op <= 4:
			s := in.slice(tr.Family)
			key := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
			tr.Ops = append(tr.Ops, SliceOp{Kind: OpUpdate, Old: store[key], New: s})
			store[key] = s
		case op == 5:
			ks := sortedKeys(store)
			if len(ks) == 0 {
				continue
			}
			k := ks[in.pick(len(ks))]
			tr.Ops = append(tr.Ops, SliceOp{Kind: OpDelete, Old: store[k]})
			delete(store, k)
		case op == 6:
			tr.Ops = append(tr.Ops, SliceOp{Kind: OpCheckout})
		default:
			ks := sortedKeys(store)
			if len(ks) == 0 {
				continue
			}
			k := ks[in.pick(len(ks))]
			c := store[k].DeepCopy()
			c.ResourceVersion += "1"
			slices.Reverse(c.Endpoints)
			slices.Reverse(c.Ports)
			tr.Ops = append(tr.Ops, SliceOp{Kind: OpTouch, Old: store[k], New: c})
			store[k] = c
		}
	}
	for _, k := range sortedKeys(store) {
		tr.Final = append(tr.Final, store[k])
	}
	return tr
}

func sortedKeys(store map[types.NamespacedName]*discovery.EndpointSlice) []types.NamespacedName {
	var ks []types.NamespacedName
	for k := range store {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b types.NamespacedName) int { return strings.Compare(a.String(), b.String()) })
	return ks
}
