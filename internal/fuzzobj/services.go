package fuzzobj

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// LabelServiceProxyName is servicemodel.LabelServiceProxyName, which this
// package cannot import: servicemodel's fuzz targets import this package.
const LabelServiceProxyName = "service.kubernetes.io/service-proxy-name"

// ServiceNamespace is the namespace of every decoded Service.
const ServiceNamespace = "ns"

// ProxyName is the proxy servicemodel's FuzzNormalize normalizes for: a
// NormalizeInput Label of "=mine" hands the Service to it, others to
// another proxy.
const ProxyName = "mine"

func newService(name string) *v1.Service {
	return &v1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ServiceNamespace, Name: name, Annotations: map[string]string{}}}
}

// SplitList splits a comma-separated list; "" is the empty list, and empty
// items are kept, so that inputs reach empty strings inside lists.
func SplitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// Ports decodes spec.ports from b, 7 bytes a port (a shorter rest is
// ignored), reaching every kind of name, protocol and number, valid or not:
// name and protocol from small tables, the port from bytes 2-3 less 16 (so
// that 0 and negatives are reached) plus 70000 when bit 7 of byte 6 is set,
// the node port from bytes 4-5 less the low nibble of byte 6.
func Ports(b []byte) []v1.ServicePort {
	names := []string{"", "a", "b", "A b"}
	protos := []v1.Protocol{"", v1.ProtocolTCP, v1.ProtocolUDP, v1.ProtocolSCTP, "tcp", "ICMP"}
	var out []v1.ServicePort
	for ; len(b) >= 7; b = b[7:] {
		p := v1.ServicePort{
			Name:     names[int(b[0])%len(names)],
			Protocol: protos[int(b[1])%len(protos)],
			Port:     int32(uint16(b[2])<<8|uint16(b[3])) - 16,
			NodePort: int32(uint16(b[4])<<8|uint16(b[5])) - int32(b[6]&0x0f),
		}
		if b[6]&0x80 != 0 {
			p.Port += 70000
		}
		out = append(out, p)
	}
	return out
}

// Ingress decodes a comma-separated list of load-balancer ingress entries:
// "p:IP" is Proxy mode, "v:IP" explicit VIP mode, "h:NAME" a hostname only,
// anything else an IP with no mode.
func Ingress(s string) []v1.LoadBalancerIngress {
	var out []v1.LoadBalancerIngress
	for _, e := range SplitList(s) {
		switch {
		case strings.HasPrefix(e, "p:"):
			out = append(out, v1.LoadBalancerIngress{IP: e[2:], IPMode: ptr.To(v1.LoadBalancerIPModeProxy)})
		case strings.HasPrefix(e, "v:"):
			out = append(out, v1.LoadBalancerIngress{IP: e[2:], IPMode: ptr.To(v1.LoadBalancerIPModeVIP)})
		case strings.HasPrefix(e, "h:"):
			out = append(out, v1.LoadBalancerIngress{Hostname: e[2:]})
		default:
			out = append(out, v1.LoadBalancerIngress{IP: e})
		}
	}
	return out
}

// NormalizeInput is the arguments of servicemodel's FuzzNormalize, in the
// order of its fuzz function's parameters (and so of its corpus files'
// lines).
type NormalizeInput struct {
	Name       string
	ClusterIP  string
	ClusterIPs string // comma-separated
	// Families is a comma-separated list in which "4" and "6" stand for
	// IPv4 and IPv6 and anything else is taken as it is.
	Families     string
	Type         string
	Ports        []byte // see Ports
	ExternalIPs  string // comma-separated
	SourceRanges string // comma-separated
	Ingress      string // see Ingress
	// ExternalPolicyLocal sets externalTrafficPolicy: Local.
	ExternalPolicyLocal bool
	HealthCheckNodePort int32
	SessionAffinity     string
	// Timeout, when not 0, is the ClientIP session affinity timeout.
	Timeout int32
	// Label, when not empty, sets the service-proxy-name label to all of it
	// but its first byte, so that the empty label value is reachable too.
	Label string
	// IPv6 selects the family to normalize for.
	IPv6 bool
}

// Service returns the Service ns/<Name> the input describes.
func (in NormalizeInput) Service() *v1.Service {
	s := newService(in.Name)
	s.Spec.ClusterIP = in.ClusterIP
	s.Spec.ClusterIPs = SplitList(in.ClusterIPs)
	for _, fam := range SplitList(in.Families) {
		switch fam {
		case "4":
			fam = string(v1.IPv4Protocol)
		case "6":
			fam = string(v1.IPv6Protocol)
		}
		s.Spec.IPFamilies = append(s.Spec.IPFamilies, v1.IPFamily(fam))
	}
	s.Spec.Type = v1.ServiceType(in.Type)
	s.Spec.Ports = Ports(in.Ports)
	s.Spec.ExternalIPs = SplitList(in.ExternalIPs)
	s.Spec.LoadBalancerSourceRanges = SplitList(in.SourceRanges)
	s.Status.LoadBalancer.Ingress = Ingress(in.Ingress)
	if in.ExternalPolicyLocal {
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
	}
	s.Spec.HealthCheckNodePort = in.HealthCheckNodePort
	s.Spec.SessionAffinity = v1.ServiceAffinity(in.SessionAffinity)
	if in.Timeout != 0 {
		s.Spec.SessionAffinityConfig = &v1.SessionAffinityConfig{ClientIP: &v1.ClientIPConfig{TimeoutSeconds: ptr.To(in.Timeout)}}
	}
	if in.Label != "" {
		s.Labels = map[string]string{LabelServiceProxyName: in.Label[1:]}
	}
	return s
}

// Family is the IP family the input normalizes for.
func (in NormalizeInput) Family() v1.IPFamily {
	if in.IPv6 {
		return v1.IPv6Protocol
	}
	return v1.IPv4Protocol
}

func normalizeInput(e Entry) (NormalizeInput, error) {
	a := &args{e: e}
	in := NormalizeInput{
		Name: arg[string](a), ClusterIP: arg[string](a), ClusterIPs: arg[string](a), Families: arg[string](a),
		Type: arg[string](a), Ports: arg[[]byte](a), ExternalIPs: arg[string](a), SourceRanges: arg[string](a),
		Ingress: arg[string](a), ExternalPolicyLocal: arg[bool](a), HealthCheckNodePort: arg[int32](a),
		SessionAffinity: arg[string](a), Timeout: arg[int32](a), Label: arg[string](a), IPv6: arg[bool](a),
	}
	return in, a.done()
}

// TrackerServices is how many Services servicemodel's FuzzTracker plays
// with: "ns/s0" to "ns/s<TrackerServices-1>".
const TrackerServices = 3

// trackerService builds one of the small, overlapping set of Services that
// servicemodel's FuzzTracker plays with: "ns/s<i>" from the bits of v, so
// that random sequences revisit the same content, change it slightly, and
// make metadata-only updates (gen is the resource version). Bits 0-2 pick
// the cluster IP (IPv4, IPv6 or None), 3-4 the ports (one of them invalid),
// 5 makes it an eTP Local LoadBalancer, 6 adds external IPs (one bogus) and 7
// hands it to another proxy.
func trackerService(i int, v byte, gen int) *v1.Service {
	s := newService(fmt.Sprintf("s%d", i))
	s.ResourceVersion = fmt.Sprint(gen)
	s.Spec.ClusterIP = []string{"10.0.0.1", "10.0.0.2", "fd00::1", v1.ClusterIPNone, "10.0.0.1"}[int(v&7)%5]
	switch v >> 3 & 3 {
	case 0:
		s.Spec.Ports = []v1.ServicePort{trackerPort("dns", v1.ProtocolUDP, 53, 0, 53)}
	case 1:
		s.Spec.Ports = []v1.ServicePort{trackerPort("dns", v1.ProtocolUDP, 53, 30053, 53), trackerPort("web", v1.ProtocolTCP, 80, 30080, 80)}
	case 2:
		s.Spec.Ports = []v1.ServicePort{trackerPort("dns", v1.ProtocolTCP, 53, 0, 53), trackerPort("sig", v1.ProtocolSCTP, 2905, 0, 2905)}
	case 3:
		s.Spec.Ports = []v1.ServicePort{trackerPort("bad", v1.ProtocolUDP, 0, 0, 53)}
	}
	if v&0x20 != 0 {
		s.Spec.Type = v1.ServiceTypeLoadBalancer
		s.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 31000 + int32(i)
		s.Status.LoadBalancer.Ingress = []v1.LoadBalancerIngress{{IP: "5.5.5.5"}}
	}
	if v&0x40 != 0 {
		s.Spec.ExternalIPs = []string{"1.1.1.1", "bogus"}
	}
	if v&0x80 != 0 {
		s.Labels = map[string]string{LabelServiceProxyName: "other"}
	}
	return s
}

func trackerPort(name string, proto v1.Protocol, port, nodePort, targetPort int32) v1.ServicePort {
	return v1.ServicePort{Name: name, Protocol: proto, Port: port, NodePort: nodePort, TargetPort: intstr.FromInt32(targetPort)}
}

// OpKind is what one step of a tracker fuzz target does.
type OpKind int

const (
	// OpUpdate adds or updates an object (Old nil: an add).
	OpUpdate OpKind = iota
	// OpDelete deletes Old.
	OpDelete
	// OpCheckout checks the tracker out; it has no objects.
	OpCheckout
	// OpTouch updates Old to New, a copy with a new resource version and
	// its lists reversed: no change a tracker may report.
	OpTouch
)

// ServiceOp is one step of servicemodel's FuzzTracker.
type ServiceOp struct {
	Kind OpKind
	// Index is the Service the step is about ("ns/s<Index>"); 0 for a
	// checkout.
	Index int
	// Old is the Service last given for Index, nil if there is none. A
	// delete of a Service that is not there deletes a made-up one.
	Old *v1.Service
	// New is the updated Service, nil for a delete.
	New *v1.Service
}

// ServiceTracker decodes the input of servicemodel's FuzzTracker: each 3
// bytes are one op (update, update, delete or checkout), the Service it is
// about, and the trackerService bits of the update; the op's position is
// the Service's resource version. A shorter rest is ignored.
func ServiceTracker(ops []byte) []ServiceOp {
	var latest [TrackerServices]*v1.Service
	var out []ServiceOp
	for gen := 0; len(ops) >= 3; ops, gen = ops[3:], gen+1 {
		op, i, v := ops[0]%4, int(ops[1])%TrackerServices, ops[2]
		switch op {
		case 0, 1:
			s := trackerService(i, v, gen)
			out = append(out, ServiceOp{Kind: OpUpdate, Index: i, Old: latest[i], New: s})
			latest[i] = s
		case 2:
			old := latest[i]
			if old == nil {
				old = trackerService(i, v, gen)
			}
			out = append(out, ServiceOp{Kind: OpDelete, Index: i, Old: old})
			latest[i] = nil
		case 3:
			out = append(out, ServiceOp{Kind: OpCheckout})
		}
	}
	return out
}
