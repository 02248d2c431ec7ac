package ipvs

import (
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// NamedReading is a Reading as troubleshooting compares it with the
// model: its frontends named after the model's service ports, since the
// kernel holds no service names, and the other programs' iptables rules
// (Others), which the kernel runs before IPVS sees a packet. It tells
// what the kernel does at each frontend of the model (Trace) and which
// virtual servers it has (Frontends), so that one no service port of the
// model has shows. Another program's virtual servers are not read.
// NewNamedReading makes one; without its names every verdict would be
// another program's.
type NamedReading struct {
	Reading *Reading
	// Others are the other programs' nat and filter rules (iptables-save
	// without the dataplane's chains and the rules that jump to them);
	// one that DNATs, drops or rejects a packet decides first. nil reads
	// none.
	Others *xtables.Ruleset
	// NodeIPs are the node's addresses, which count as local with
	// loopback and the link's addresses; State.Node.IPs.
	NodeIPs []netip.Addr
	names   map[servicemodel.Frontend]servicemodel.PortName
	// nodePorts are the model's node ports, with no address.
	nodePorts map[servicemodel.Frontend]bool
}

// NewNamedReading reads r against s, the State of r's family the
// dataplane was given, which names the frontends: a frontend is named
// after the first service port of s (in its order) that has it.
func NewNamedReading(r *Reading, s *dataplane.State) *NamedReading {
	k := &NamedReading{Reading: r, NodeIPs: s.Node.IPs, names: map[servicemodel.Frontend]servicemodel.PortName{}, nodePorts: map[servicemodel.Frontend]bool{}}
	name := func(a netip.Addr, port uint16, proto v1.Protocol, sp *servicemodel.ServicePort) {
		fe := servicemodel.Frontend{IP: a, Port: port, Protocol: proto}
		if _, ok := k.names[fe]; !ok {
			k.names[fe] = sp.Name
		}
	}
	for sp := range s.Services.All() {
		for _, a := range append(append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...), sp.LoadBalancerVIPs...) {
			name(a, sp.Port, sp.Protocol, sp)
		}
		if sp.NodePort != 0 {
			for _, a := range s.Node.IPs {
				name(a, sp.NodePort, sp.Protocol, sp)
			}
			k.nodePorts[servicemodel.Frontend{Port: sp.NodePort, Protocol: sp.Protocol}] = true
		}
	}
	loopback := netip.MustParseAddr("127.0.0.1")
	if s.Family == v1.IPv6Protocol {
		loopback = netip.IPv6Loopback()
	}
	for sp := range s.Services.All() {
		if sp.HealthCheckNodePort == 0 {
			continue
		}
		for _, a := range append([]netip.Addr{loopback}, s.Node.IPs...) {
			name(a, sp.HealthCheckNodePort, v1.ProtocolTCP, sp)
		}
	}
	return k
}

func (k *NamedReading) name(proto v1.Protocol, fe netip.AddrPort) servicemodel.PortName {
	return k.names[servicemodel.Frontend{IP: fe.Addr(), Port: fe.Port(), Protocol: proto}]
}

// Trace answers what the kernel, as read, does with the first packet of
// a connection p, in the shape State.Lookup answers.
func (k *NamedReading) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	v, _, err := k.TraceSteps(p)
	return v, err
}

// TraceSteps is Trace with the rules and the virtual server the packet
// met.
func (k *NamedReading) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	if k.Others != nil {
		// The link's addresses are local: their packets cross INPUT.
		local := append(slices.Clip(k.NodeIPs), k.Reading.LinkAddresses...)
		v, steps := k.Others.TraceSteps(p, local)
		switch v.Action {
		case dataplane.DNAT, dataplane.Drop, dataplane.Reject:
			return v, steps, nil
		}
	}
	return k.Reading.Trace(p, k.NodeIPs, k.name)
}

// Frontends are the virtual servers' addresses, but for the model's node
// ports on node addresses the State does not list: the dataplane serves
// node ports on every address the kernel gives the node.
func (k *NamedReading) Frontends() []servicemodel.Frontend {
	var out []servicemodel.Frontend
	for _, vs := range k.Reading.VirtualServers {
		_, bound := slices.BinarySearchFunc(k.Reading.LinkAddresses, vs.Address.Addr(), netip.Addr.Compare)
		if !bound && k.nodePorts[servicemodel.Frontend{Port: vs.Address.Port(), Protocol: vs.Protocol}] {
			continue
		}
		out = append(out, servicemodel.Frontend{IP: vs.Address.Addr(), Port: vs.Address.Port(), Protocol: vs.Protocol})
	}
	return out
}
