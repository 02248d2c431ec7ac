package servicemodel

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/affinity"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	netutils "k8s.io/utils/net"
)

// LabelServiceProxyName is the label by which a service asks to be handled
// by a particular proxy instead of the default one.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// Reasons a service, or part of one, is skipped. They are a small fixed set
// so that they can be used as metric label values.
const (
	// ReasonOtherProxy: the service-proxy-name label names another proxy.
	ReasonOtherProxy = "other-proxy"
	// ReasonExternalName: type ExternalName is resolved by DNS, not proxied.
	ReasonExternalName = "external-name"
	// ReasonHeadless: clusterIP is "None".
	ReasonHeadless = "headless"
	// ReasonNoClusterIP: clusterIP is empty.
	ReasonNoClusterIP = "no-cluster-ip"
	// ReasonOtherFamily: the service has no cluster IP of the requested
	// family (a single-stack service of the other family).
	ReasonOtherFamily = "other-family"
	// ReasonInvalidClusterIP: the cluster IP of the family does not parse,
	// is unspecified, or is of another family than ipFamilies says.
	ReasonInvalidClusterIP = "invalid-cluster-ip"
	// ReasonInvalidSessionAffinity: affinity.SessionAffinityOf rejected the
	// session affinity.
	ReasonInvalidSessionAffinity = "invalid-session-affinity"
	// ReasonInvalidName: the service's name or namespace, or a port's name,
	// contains characters no Kubernetes name can hold.
	ReasonInvalidName = "invalid-name"
	// ReasonInvalidProtocol: a port's protocol is not TCP, UDP or SCTP.
	ReasonInvalidProtocol = "invalid-protocol"
	// ReasonInvalidPort: a port number is outside 1..65535.
	ReasonInvalidPort = "invalid-port"
	// ReasonInvalidNodePort: a node port is outside 0..65535.
	ReasonInvalidNodePort = "invalid-node-port"
	// ReasonDuplicatePort: a port repeats the name, the port number or the
	// node port of an earlier port with the same protocol.
	ReasonDuplicatePort = "duplicate-port"
	// ReasonInvalidExternalIP: an external IP does not parse or is one the
	// API server refuses (unspecified, loopback, link-local).
	ReasonInvalidExternalIP = "invalid-external-ip"
	// ReasonInvalidIngressIP: a VIP-mode load-balancer ingress IP does not
	// parse or is unspecified.
	ReasonInvalidIngressIP = "invalid-ingress-ip"
	// ReasonInvalidSourceRange: a loadBalancerSourceRanges entry does not
	// parse as a CIDR.
	ReasonInvalidSourceRange = "invalid-source-range"
	// ReasonInvalidHealthCheckNodePort: a LoadBalancer service with
	// externalTrafficPolicy: Local has no usable healthCheckNodePort.
	ReasonInvalidHealthCheckNodePort = "invalid-health-check-node-port"
)

// SkipError says what Normalize skipped and why.
type SkipError struct {
	// Service is the service concerned.
	Service types.NamespacedName
	// Reason is one of the Reason constants.
	Reason string
	// Field is the offending field, as in API validation messages
	// ("spec.ports[2].port").
	Field string
	// Value is the offending value.
	Value string
	// Err is the underlying error, if any.
	Err error
}

// Error describes the skip for a log line.
func (e *SkipError) Error() string {
	msg := fmt.Sprintf("service %s: %s: %s %q", e.Service, e.Reason, e.Field, e.Value)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *SkipError) Unwrap() error { return e.Err }

// Skips returns the *SkipErrors that err, as returned by Normalize, holds.
func Skips(err error) []*SkipError {
	if se, ok := err.(*SkipError); ok {
		return []*SkipError{se}
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var out []*SkipError
	for _, e := range joined.Unwrap() {
		if se, ok := e.(*SkipError); ok {
			out = append(out, se)
		}
	}
	return out
}

// Normalize turns svc into its ports of one IP family ("" means IPv4), as
// upstream kube-proxy's service change tracker does, for a proxy named
// proxyName (see Config.ProxyName). The ports are sorted by name and
// protocol, share their address slices, and must not be modified.
//
// A nil svc has no ports and no error. When the whole service is skipped,
// Normalize returns no ports and a *SkipError. When only parts of it are
// dropped (a port, an address, a source range), it returns the remaining
// ports and an error joining one *SkipError per dropped part; Skips lists
// them in both cases.
func Normalize(svc *v1.Service, family v1.IPFamily, proxyName string) ([]*ServicePort, error) {
	if svc == nil {
		return nil, nil
	}
	if family == "" {
		family = v1.IPv4Protocol
	}
	n := &normalizer{
		nn:     types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name},
		family: family,
	}
	base, skip := n.service(svc, proxyName)
	if skip != nil {
		return nil, skip
	}
	ports := n.ports(svc, base)
	return ports, errors.Join(n.dropped...)
}

type normalizer struct {
	nn      types.NamespacedName
	family  v1.IPFamily
	dropped []error
}

func (n *normalizer) skip(reason, field, value string, err error) *SkipError {
	return &SkipError{Service: n.nn, Reason: reason, Field: field, Value: value, Err: err}
}

func (n *normalizer) drop(reason, field, value string) {
	n.dropped = append(n.dropped, n.skip(reason, field, value, nil))
}

// service decides whether svc is proxied in n.family and, if it is, returns
// the fields that every one of its ports shares.
func (n *normalizer) service(svc *v1.Service, proxyName string) (ServicePort, *SkipError) {
	spec := &svc.Spec
	switch {
	case !ValidName(svc.Name):
		return ServicePort{}, n.skip(ReasonInvalidName, "metadata.name", svc.Name, nil)
	case svc.Namespace != "" && !ValidName(svc.Namespace):
		return ServicePort{}, n.skip(ReasonInvalidName, "metadata.namespace", svc.Namespace, nil)
	}
	if v, ok := svc.Labels[LabelServiceProxyName]; ok && (proxyName == "" || v != proxyName) {
		return ServicePort{}, n.skip(ReasonOtherProxy, "metadata.labels["+LabelServiceProxyName+"]", v, nil)
	}
	// ExternalName comes first so that the usual ExternalName service,
	// which has no cluster IP, is counted as what it is.
	switch {
	case spec.Type == v1.ServiceTypeExternalName:
		return ServicePort{}, n.skip(ReasonExternalName, "spec.type", string(spec.Type), nil)
	case spec.ClusterIP == v1.ClusterIPNone:
		return ServicePort{}, n.skip(ReasonHeadless, "spec.clusterIP", spec.ClusterIP, nil)
	case spec.ClusterIP == "":
		return ServicePort{}, n.skip(ReasonNoClusterIP, "spec.clusterIP", spec.ClusterIP, nil)
	}
	clusterIP, skip := n.clusterIP(spec)
	if skip != nil {
		return ServicePort{}, skip
	}
	sa, err := affinity.SessionAffinityOf(spec)
	if err != nil {
		field, value := "spec.sessionAffinity", string(spec.SessionAffinity)
		if ie, ok := errors.AsType[*affinity.InvalidError](err); ok {
			field, value = ie.Field, fmt.Sprint(ie.Value)
		}
		return ServicePort{}, n.skip(ReasonInvalidSessionAffinity, field, value, err)
	}

	base := ServicePort{
		ClusterIP:                clusterIP,
		ExternalIPs:              n.externalIPs(spec.ExternalIPs),
		LoadBalancerVIPs:         n.loadBalancerVIPs(svc.Status.LoadBalancer.Ingress),
		LoadBalancerSourceRanges: n.sourceRanges(spec.LoadBalancerSourceRanges),
		InternalPolicyLocal:      spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == v1.ServiceInternalTrafficPolicyLocal,
		ExternalPolicyLocal:      externallyAccessible(spec) && spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal,
		SessionAffinity:          sa,
	}
	if spec.TrafficDistribution != nil && !topologyAnnotationAuto(svc.Annotations) {
		base.TrafficDistribution = *spec.TrafficDistribution
	}
	if spec.Type == v1.ServiceTypeLoadBalancer && base.ExternalPolicyLocal {
		if hc := spec.HealthCheckNodePort; hc > 0 && hc <= 65535 {
			base.HealthCheckNodePort = uint16(hc)
		} else {
			n.drop(ReasonInvalidHealthCheckNodePort, "spec.healthCheckNodePort", strconv.Itoa(int(hc)))
		}
	}
	return base, nil
}

// externallyAccessible is upstream's service-level test, which decides
// whether externalTrafficPolicy applies. It reads the raw externalIPs, of
// any family, as upstream does. An empty type is the API default,
// ClusterIP.
func externallyAccessible(spec *v1.ServiceSpec) bool {
	switch spec.Type {
	case v1.ServiceTypeLoadBalancer, v1.ServiceTypeNodePort:
		return true
	case v1.ServiceTypeClusterIP, "":
		return len(spec.ExternalIPs) > 0
	}
	return false
}

// clusterIP picks the cluster IP of n.family. Objects written before dual
// stack have no ipFamilies and only spec.clusterIP.
func (n *normalizer) clusterIP(spec *v1.ServiceSpec) (netip.Addr, *SkipError) {
	field, value := "spec.clusterIP", spec.ClusterIP
	if len(spec.IPFamilies) != 0 {
		i := slices.IndexFunc(spec.IPFamilies, func(f v1.IPFamily) bool { return f == n.family })
		if i < 0 || i >= len(spec.ClusterIPs) {
			return netip.Addr{}, n.skip(ReasonOtherFamily, "spec.ipFamilies", fmt.Sprint(spec.IPFamilies), nil)
		}
		field, value = fmt.Sprintf("spec.clusterIPs[%d]", i), spec.ClusterIPs[i]
	}
	ip, ok := parseIP(value)
	if !ok || ip.IsUnspecified() {
		return netip.Addr{}, n.skip(ReasonInvalidClusterIP, field, value, nil)
	}
	if familyOf(ip) != n.family {
		if len(spec.IPFamilies) == 0 {
			return netip.Addr{}, n.skip(ReasonOtherFamily, field, value, nil)
		}
		// ipFamilies claims this family for an address of the other one.
		return netip.Addr{}, n.skip(ReasonInvalidClusterIP, field, value, nil)
	}
	return ip, nil
}

// externalIPs parses, filters, sorts and de-duplicates spec.externalIPs.
// Empty strings are dropped silently, as upstream does, since the API
// server has not always rejected them. The API server also refuses the
// special addresses rejected here, but grandfathers old objects and cannot
// vouch for objects that never passed through it.
func (n *normalizer) externalIPs(values []string) []netip.Addr {
	var out []netip.Addr
	for i, s := range values {
		if strings.TrimSpace(s) == "" {
			continue
		}
		ip, ok := parseIP(s)
		if !ok || ip.IsUnspecified() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() {
			n.drop(ReasonInvalidExternalIP, fmt.Sprintf("spec.externalIPs[%d]", i), s)
			continue
		}
		if familyOf(ip) == n.family {
			out = append(out, ip)
		}
	}
	return sortedAddrs(out)
}

// loadBalancerVIPs returns the VIP-mode ingress IPs of n.family, for any
// service type, as upstream does. Hostname-only and Proxy-mode ingresses are
// reached through the load balancer, not at the ingress IP.
func (n *normalizer) loadBalancerVIPs(ingress []v1.LoadBalancerIngress) []netip.Addr {
	var out []netip.Addr
	for i := range ingress {
		ing := &ingress[i]
		if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode != v1.LoadBalancerIPModeVIP) {
			continue
		}
		ip, ok := parseIP(ing.IP)
		if !ok || ip.IsUnspecified() {
			n.drop(ReasonInvalidIngressIP, fmt.Sprintf("status.loadBalancer.ingress[%d].ip", i), ing.IP)
			continue
		}
		if familyOf(ip) == n.family {
			out = append(out, ip)
		}
	}
	return sortedAddrs(out)
}

// sourceRanges parses, filters, masks, sorts and de-duplicates
// spec.loadBalancerSourceRanges. Validation has long tolerated padding, so
// entries are trimmed. A range of prefix length 0 admits everything, which
// an empty list already means.
func (n *normalizer) sourceRanges(values []string) []netip.Prefix {
	var (
		out      []netip.Prefix
		allowAll bool
	)
	for i, raw := range values {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		p, ok := parsePrefix(s)
		if !ok {
			n.drop(ReasonInvalidSourceRange, fmt.Sprintf("spec.loadBalancerSourceRanges[%d]", i), raw)
			continue
		}
		if familyOf(p.Addr()) != n.family {
			continue
		}
		allowAll = allowAll || p.Bits() == 0
		out = append(out, p)
	}
	if allowAll {
		return nil
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Clip(slices.Compact(out))
}

// ports builds one ServicePort per valid spec.ports entry from base.
func (n *normalizer) ports(svc *v1.Service, base ServicePort) []*ServicePort {
	// seen holds, per protocol, the names, numbers and node ports taken so
	// far, so that a later duplicate of any of them is dropped.
	type key struct {
		kind  byte
		name  string
		num   int32
		proto v1.Protocol
	}
	seen := make(map[key]bool, 3*len(svc.Spec.Ports))
	out := make([]*ServicePort, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		sp := &svc.Spec.Ports[i]
		field := func(sub string) string { return fmt.Sprintf("spec.ports[%d].%s", i, sub) }
		proto := sp.Protocol
		if proto == "" {
			// The API server defaults the protocol; objects that did not
			// pass through it get the same default.
			proto = v1.ProtocolTCP
		}
		nameKey, portKey, nodePortKey := key{'n', sp.Name, 0, proto}, key{'p', "", sp.Port, proto}, key{'N', "", sp.NodePort, proto}
		switch {
		case sp.Name != "" && !ValidName(sp.Name):
			n.drop(ReasonInvalidName, field("name"), sp.Name)
			continue
		case proto != v1.ProtocolTCP && proto != v1.ProtocolUDP && proto != v1.ProtocolSCTP:
			n.drop(ReasonInvalidProtocol, field("protocol"), string(sp.Protocol))
			continue
		case sp.Port < 1 || sp.Port > 65535:
			n.drop(ReasonInvalidPort, field("port"), strconv.Itoa(int(sp.Port)))
			continue
		case sp.NodePort < 0 || sp.NodePort > 65535:
			n.drop(ReasonInvalidNodePort, field("nodePort"), strconv.Itoa(int(sp.NodePort)))
			continue
		case seen[nameKey]:
			n.drop(ReasonDuplicatePort, field("name"), sp.Name)
			continue
		case seen[portKey]:
			n.drop(ReasonDuplicatePort, field("port"), strconv.Itoa(int(sp.Port)))
			continue
		case sp.NodePort != 0 && seen[nodePortKey]:
			n.drop(ReasonDuplicatePort, field("nodePort"), strconv.Itoa(int(sp.NodePort)))
			continue
		}
		seen[nameKey], seen[portKey] = true, true
		if sp.NodePort != 0 {
			seen[nodePortKey] = true
		}
		p := base
		p.Name = PortName{NamespacedName: n.nn, Port: sp.Name, Protocol: proto}
		p.Port = uint16(sp.Port)
		p.Protocol = proto
		p.NodePort = uint16(sp.NodePort)
		out = append(out, &p)
	}
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b *ServicePort) int { return a.Name.Compare(b.Name) })
	return out
}

// ValidName reports whether s may name a namespace, service or port in the
// model: the Tracker skips a service, and drops a port, whose name it is
// not. It accepts what any Kubernetes object or port name may contain, and
// is deliberately looser than API validation (it admits upper case, as
// hand-written fixtures often use), but keeps out the quotes, spaces and
// control characters that could break out of a generated rule comment. Its
// length limit is the API server's for all three (each is a DNS label of
// at most 63 characters): every dataplane writes such a name into its
// rules, so a longer one, which no API server stores, would be served by
// the model and skipped by every kernel. A caller that builds ServicePorts
// without a Tracker checks names with it.
func ValidName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

// parseIP parses s as upstream does: leading zeros are accepted, and an
// IPv4-mapped IPv6 address is IPv4.
func parseIP(s string) (netip.Addr, bool) {
	// The strict parser agrees with the sloppy one wherever it succeeds
	// without a zone, and does not allocate.
	if ip, err := netip.ParseAddr(s); err == nil && ip.Zone() == "" {
		return ip.Unmap(), true
	}
	return parseIPSloppy(s)
}

func parseIPSloppy(s string) (netip.Addr, bool) {
	ip, ok := netip.AddrFromSlice(netutils.ParseIPSloppy(s))
	return ip.Unmap(), ok
}

// parsePrefix parses s as upstream does (see parseIP) and returns the
// network it names.
func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil && !p.Addr().Is4In6() {
		return p.Masked(), true
	}
	return parsePrefixSloppy(s)
}

func parsePrefixSloppy(s string) (netip.Prefix, bool) {
	_, ipnet, err := netutils.ParseCIDRSloppy(s)
	if err != nil {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(ipnet.IP)
	ones, bits := ipnet.Mask.Size()
	if !ok || bits == 0 {
		return netip.Prefix{}, false
	}
	if ip.Is4In6() {
		// Upstream takes the family from the (masked) address, so an
		// IPv4-mapped network of at least /96 is the IPv4 network below.
		if bits == 128 {
			ones -= 96
		}
		if ones < 0 {
			return netip.Prefix{}, false
		}
		ip = ip.Unmap()
	}
	return netip.PrefixFrom(ip, ones).Masked(), true
}

func sortedAddrs(ips []netip.Addr) []netip.Addr {
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Clip(slices.Compact(ips))
}

// topologyAnnotationAuto reports whether the service asks for the
// EndpointSlice controller's proportional ("Auto") hints. The controller then
// ignores spec.trafficDistribution, so hints derived from it (with
// affinity.Options.DeriveHints) would differ from what a cluster computes;
// the deprecated annotation takes precedence, as in the controller.
func topologyAnnotationAuto(annotations map[string]string) bool {
	v, ok := annotations[v1.DeprecatedAnnotationTopologyAwareHints]
	if !ok {
		v = annotations[v1.AnnotationTopologyMode]
	}
	return v == "Auto" || v == "auto"
}
