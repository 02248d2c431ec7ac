package troubleshoot

import (
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/ipvs"
	"github.com/proxykit/proxykit/dataplane/xtables"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// IPVS is the Kernel of the ipvs dataplane: what ipvs.Dataplane.Read found
// of it in the kernel (its virtual servers and real servers, the
// addresses on its link, its ipsets and chains), followed by
// ipvs.Reading.Trace, after the other programs' iptables rules (Others),
// which the kernel runs before IPVS sees a packet. Another program's
// virtual servers are not read. The kernel holds no
// service names, so a frontend is named after the model's service port
// there: IPVS tells what the kernel does at each frontend of the model,
// and (as a FrontendLister) which of its virtual servers no service port
// of the model has. NewIPVS makes one; without its names every verdict
// would be another program's.
type IPVS struct {
	Reading *ipvs.Reading
	// Others are the other programs' nat and filter rules
	// (xtables.NewReadingWithout the dataplane's chain prefix); one that DNATs,
	// drops or rejects a packet decides first. nil reads none.
	Others *xtables.Reading
	// NodeIPs are the node's addresses, which count as local with
	// loopback and the link's addresses; State.Node.IPs.
	NodeIPs []netip.Addr
	names   map[servicemodel.Frontend]servicemodel.PortName
	// nodePorts are the model's node ports, with no address.
	nodePorts map[servicemodel.Frontend]bool
}

// NewIPVS reads r against s, the State of r's family the dataplane was
// given, which names the frontends.
func NewIPVS(r *ipvs.Reading, s *dataplane.State) *IPVS {
	k := &IPVS{Reading: r, NodeIPs: s.Node.IPs, names: map[servicemodel.Frontend]servicemodel.PortName{}, nodePorts: map[servicemodel.Frontend]bool{}}
	for sp, fe := range modelFrontends(s) {
		k.names[fe] = sp.Name
		if sp.NodePort != 0 {
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
			fe := servicemodel.Frontend{IP: a, Port: sp.HealthCheckNodePort, Protocol: v1.ProtocolTCP}
			if _, ok := k.names[fe]; !ok {
				k.names[fe] = sp.Name
			}
		}
	}
	return k
}

func (k *IPVS) name(proto v1.Protocol, fe netip.AddrPort) servicemodel.PortName {
	return k.names[servicemodel.Frontend{IP: fe.Addr(), Port: fe.Port(), Protocol: proto}]
}

// Trace implements Kernel.
func (k *IPVS) Trace(p dataplane.Packet) (dataplane.Verdict, error) {
	v, _, err := k.TraceSteps(p)
	return v, err
}

// TraceSteps is Trace with the rules and the virtual server the packet
// met.
func (k *IPVS) TraceSteps(p dataplane.Packet) (dataplane.Verdict, []string, error) {
	if k.Others != nil {
		// The link's addresses are local: their packets cross INPUT.
		local := append(slices.Clip(k.NodeIPs), k.Reading.LinkAddresses...)
		v, steps := k.Others.Rules.TraceSteps(p, local)
		switch v.Action {
		case dataplane.DNAT, dataplane.Drop, dataplane.Reject:
			return v, steps, nil
		}
	}
	return k.Reading.Trace(p, k.NodeIPs, k.name)
}

// Frontends implements FrontendLister: the virtual servers' addresses,
// but for the model's node ports on node addresses the State does not
// list: the dataplane serves node ports on every address the kernel gives
// the node.
func (k *IPVS) Frontends() []servicemodel.Frontend {
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
