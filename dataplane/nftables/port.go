package nftables

import (
	"net/netip"
	"time"

	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Limits on name parts, from Kubernetes validation (namespace and service
// names are DNS labels, port names IANA service names). They keep every
// object name within nftables' limit.
const (
	maxNameLen     = 63
	maxPortNameLen = 15
)

// port is a ServicePort checked to be safe to write into a rule, with the
// addresses of the wrong family or invalid ones removed.
type port struct {
	sp *servicemodel.ServicePort
	// order sorts ports as dataplane.Lookup breaks ties: when several claim
	// one destination, the first wins.
	order string
	proto string

	externalIPs  []netip.Addr
	lbVIPs       []netip.Addr
	sourceRanges []netip.Prefix
	// affinitySeconds is the ClientIP timeout; 0 means no affinity.
	affinitySeconds int64
}

func safeName(s string, max int, allowEmpty bool) bool {
	if s == "" {
		return allowEmpty
	}
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func protoString(p v1.Protocol) string {
	switch p {
	case v1.ProtocolTCP:
		return "tcp"
	case v1.ProtocolUDP:
		return "udp"
	case v1.ProtocolSCTP:
		return "sctp"
	}
	return ""
}

// ofFamily reports whether a is a usable unicast address of the family.
func ofFamily(a netip.Addr, ipv6 bool) bool {
	if !a.IsValid() || a.IsUnspecified() || a.Zone() != "" || a.Is4In6() {
		return false
	}
	return a.Is6() == ipv6
}

// checkPort validates sp; a non-empty reason means it must be skipped.
// skipPart is told about addresses dropped from an otherwise good port.
func checkPort(sp *servicemodel.ServicePort, ipv6 bool, skipPart func(reason string)) (*port, string) {
	if sp == nil {
		return nil, "nil service port"
	}
	n := sp.Name
	if !safeName(n.Namespace, maxNameLen, false) || !safeName(n.Name, maxNameLen, false) || !safeName(n.Port, maxPortNameLen, true) {
		return nil, "service or port name not usable in a rule"
	}
	proto := protoString(sp.Protocol)
	if proto == "" || sp.Protocol != n.Protocol && n.Protocol != "" {
		return nil, "unsupported protocol"
	}
	if !ofFamily(sp.ClusterIP, ipv6) {
		return nil, "cluster IP missing or of another family"
	}
	if sp.Port == 0 {
		return nil, "port 0"
	}
	p := &port{sp: sp, proto: proto,
		order: n.Namespace + "\x00" + n.Name + "\x00" + n.Port + "\x00" + string(sp.Protocol)}
	for _, a := range sp.ExternalIPs {
		if ofFamily(a, ipv6) {
			p.externalIPs = append(p.externalIPs, a)
		} else {
			skipPart("external IP invalid or of another family")
		}
	}
	for _, a := range sp.LoadBalancerVIPs {
		if ofFamily(a, ipv6) {
			p.lbVIPs = append(p.lbVIPs, a)
		} else {
			skipPart("load balancer IP invalid or of another family")
		}
	}
	for _, r := range sp.LoadBalancerSourceRanges {
		if !r.IsValid() || r.Addr().Is6() != ipv6 || r.Addr().Is4In6() || r.Addr().Zone() != "" {
			skipPart("source range invalid or of another family")
			continue
		}
		if r.Bits() == 0 {
			// A range covering everything allows every source: no
			// firewall at all.
			p.sourceRanges = nil
			break
		}
		p.sourceRanges = append(p.sourceRanges, r.Masked())
	}
	if sa := sp.SessionAffinity; sa.ClientIP {
		secs := int64(sa.Timeout / time.Second)
		if secs <= 0 || secs > 86400 {
			return nil, "session affinity timeout out of range"
		}
		p.affinitySeconds = secs
	}
	return p, ""
}

// externallyAccessible is ServicePort.ExternallyAccessible over the valid
// addresses.
func (p *port) externallyAccessible() bool {
	return p.sp.NodePort != 0 || len(p.externalIPs) > 0 || len(p.lbVIPs) > 0
}

// usableEndpoint reports whether e can be written into a DNAT rule.
func usableEndpoint(e *endpoints.Endpoint, ipv6 bool) bool {
	return e != nil && ofFamily(e.Addr.Addr(), ipv6) && e.Addr.Port() != 0
}
