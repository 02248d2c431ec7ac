package ruleport

import (
	"net/netip"
	"time"

	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
)

// maxNameLen is the longest namespace, service or port name a rule holds:
// the API server's own limit on each (a namespace and a port name are
// DNS-1123 labels, a service name a DNS-1035 label). A service port name
// is not a container port's IANA service name (15 characters): the API
// server accepts 63. At 63 each, every iptables comment the dataplanes
// write fits in the 255 bytes xt_comment holds; the nftables dataplane
// hashes its object names and shortens its comments to fit.
const maxNameLen = content.DNS1123LabelMaxLength

// Port is a ServicePort checked to be safe to write into a rule, with the
// addresses of the wrong family or invalid ones removed.
type Port struct {
	SP *servicemodel.ServicePort
	// Proto is the protocol as rules spell it: "tcp", "udp" or "sctp".
	Proto string

	ExternalIPs  []netip.Addr
	LBVIPs       []netip.Addr
	SourceRanges []netip.Prefix
	// AffinitySeconds is the ClientIP timeout; 0 means no affinity.
	AffinitySeconds int64
}

// Check validates sp for a dataplane of one family; a non-empty reason
// means the port must be skipped. skipPart is told about addresses dropped
// from an otherwise good port.
func Check(sp *servicemodel.ServicePort, ipv6 bool, skipPart func(reason string)) (*Port, string) {
	if sp == nil {
		return nil, "nil service port"
	}
	n := sp.Name
	if !safeName(n.Namespace, false) || !safeName(n.Name, false) || !safeName(n.Port, true) {
		return nil, "service or port name not usable in a rule"
	}
	proto := protoString(sp.Protocol)
	if proto == "" || sp.Protocol != n.Protocol && n.Protocol != "" {
		return nil, "unsupported protocol"
	}
	if !OfFamily(sp.ClusterIP, ipv6) {
		return nil, "cluster IP missing or of another family"
	}
	if sp.Port == 0 {
		return nil, "port 0"
	}
	p := &Port{SP: sp, Proto: proto}
	for _, a := range sp.ExternalIPs {
		if OfFamily(a, ipv6) {
			p.ExternalIPs = append(p.ExternalIPs, a)
		} else {
			skipPart("external IP invalid or of another family")
		}
	}
	for _, a := range sp.LoadBalancerVIPs {
		if OfFamily(a, ipv6) {
			p.LBVIPs = append(p.LBVIPs, a)
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
			// A range covering everything allows every source, so the
			// port gets no firewall at all, as upstream does.
			p.SourceRanges = nil
			break
		}
		p.SourceRanges = append(p.SourceRanges, r.Masked())
	}
	if sa := sp.SessionAffinity; sa.ClientIP {
		secs := int64(sa.Timeout / time.Second)
		if secs <= 0 || secs > 86400 {
			return nil, "session affinity timeout out of range"
		}
		p.AffinitySeconds = secs
	}
	return p, ""
}

// ExternallyAccessible is ServicePort.ExternallyAccessible over the valid
// addresses.
func (p *Port) ExternallyAccessible() bool {
	return p.SP.NodePort != 0 || len(p.ExternalIPs) > 0 || len(p.LBVIPs) > 0
}

// OfFamily reports whether a is a usable unicast address of the family.
func OfFamily(a netip.Addr, ipv6 bool) bool {
	if !a.IsValid() || a.IsUnspecified() || a.Zone() != "" || a.Is4In6() {
		return false
	}
	return a.Is6() == ipv6
}

// UsableEndpoint reports whether e can be written into a DNAT rule.
func UsableEndpoint(e *endpoints.Endpoint, ipv6 bool) bool {
	return e != nil && OfFamily(e.Addr.Addr(), ipv6) && e.Addr.Port() != 0
}

// safeName reports whether s, a name the model accepts (ValidName keeps
// out what could break out of a rule comment), is short enough for a rule.
func safeName(s string, allowEmpty bool) bool {
	if s == "" {
		return allowEmpty
	}
	return len(s) <= maxNameLen && servicemodel.ValidName(s)
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
