package troubleshoot

import (
	"cmp"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
)

// Kernel answers what the rules a kernel holds do with the first packet of
// a connection, in the shape State.Lookup answers: a dataplane's reading of
// the kernel, such as xtables.Reading or nftables.Reading. An error means
// the rules could not be followed (a form the reading does not know).
type Kernel interface {
	Trace(p dataplane.Packet) (dataplane.Verdict, error)
}

// ServiceLister is a Kernel that can also name the service ports it holds
// rules for, so that Verify finds rules of services the model no longer
// has.
type ServiceLister interface {
	Services() []servicemodel.PortName
}

// FrontendLister is a Kernel that can list the frontends it serves but
// not name their services (IPVS holds no names), so that Verify reports as
// Extra those where no service port of the model is.
type FrontendLister interface {
	// Frontends lists the frontends the kernel serves, each with its IP.
	Frontends() []servicemodel.Frontend
}

// frontendString returns "ip:port/PROTO"; a node port's frontend, which
// has no IP, is at the unspecified address of family, which stands for
// any of the node's.
func frontendString(fe servicemodel.Frontend, family v1.IPFamily) string {
	ip := fe.IP
	switch {
	case ip.IsValid():
	case family == v1.IPv6Protocol:
		ip = netip.IPv6Unspecified()
	default:
		ip = netip.IPv4Unspecified()
	}
	return netip.AddrPortFrom(ip, fe.Port).String() + "/" + string(fe.Protocol)
}

// modelFrontends yields each frontend of every service port of s: the
// cluster IP, external IPs and LoadBalancer VIPs at the port, and the node
// port on each node address; the first claim of a frontend only, in the
// model's order, as Lookup decides.
func modelFrontends(s *dataplane.State) iter.Seq2[*servicemodel.ServicePort, servicemodel.Frontend] {
	return func(yield func(*servicemodel.ServicePort, servicemodel.Frontend) bool) {
		seen := map[servicemodel.Frontend]bool{}
		for sp := range s.Services.All() {
			var fes []servicemodel.Frontend
			for _, a := range append(append([]netip.Addr{sp.ClusterIP}, sp.ExternalIPs...), sp.LoadBalancerVIPs...) {
				fes = append(fes, servicemodel.Frontend{IP: a, Port: sp.Port, Protocol: sp.Protocol})
			}
			if sp.NodePort != 0 {
				for _, a := range s.Node.IPs {
					fes = append(fes, servicemodel.Frontend{IP: a, Port: sp.NodePort, Protocol: sp.Protocol})
				}
			}
			for _, fe := range fes {
				if seen[fe] {
					continue
				}
				seen[fe] = true
				if !yield(sp, fe) {
					return
				}
			}
		}
	}
}

// MismatchKind is how the kernel differs from the model at one frontend.
type MismatchKind string

// The kinds of mismatch.
const (
	// Missing: the model handles the packet, the kernel's rules do not.
	Missing MismatchKind = "missing"
	// Extra: the kernel's rules handle a packet the model does not, or
	// hold a service port the model does not have.
	Extra MismatchKind = "extra"
	// WrongEndpoints: both DNAT, to different endpoints.
	WrongEndpoints MismatchKind = "wrong-endpoints"
	// Shadowed: a rule that is not the proxy's (it names no service)
	// decides first.
	Shadowed MismatchKind = "shadowed"
	// WrongVerdict: the kernel does something else with the packet (another
	// action, service or masquerading).
	WrongVerdict MismatchKind = "wrong-verdict"
	// Untraceable: the kernel's rules could not be followed.
	Untraceable MismatchKind = "untraceable"
)

// Mismatch is one difference between the model and the kernel.
type Mismatch struct {
	// Service is the service port concerned: the model's, or the
	// kernel's when the model has none there; zero for a frontend of a
	// FrontendLister that no service port has.
	Service servicemodel.PortName `json:"service"`
	Kind    MismatchKind          `json:"kind"`
	// Frontend is the probe: destination, what it is and the source, as
	// "172.30.0.10:80/TCP (cluster IP) from 198.51.100.7"; empty for a
	// service port the kernel holds and the model does not.
	Frontend string `json:"frontend,omitempty"`
	// Model and Kernel summarize the two verdicts.
	Model  string `json:"model,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	// Detail says what differs, for people.
	Detail string `json:"detail"`
}

func (d Mismatch) String() string {
	svc := ServiceString(d.Service)
	if d.Service.Name == "" {
		// A frontend of the kernel the model has no service port at.
		svc = "no service"
	}
	s := fmt.Sprintf("%s: %s", svc, d.Kind)
	if d.Frontend != "" {
		s += " at " + d.Frontend
	}
	return s + ": " + d.Detail
}

// ServiceString returns "ns/name:port/PROTO".
func ServiceString(pn servicemodel.PortName) string {
	return pn.String() + "/" + string(pn.Protocol)
}

// probe is one packet Verify sends to a frontend.
type probe struct {
	label string
	p     dataplane.Packet
}

// Probe sources: documentation addresses, off the node and outside any
// cluster CIDR a test or a sane cluster uses.
var (
	probeSource4 = netip.MustParseAddr("198.51.100.7")
	probeSource6 = netip.MustParseAddr("2001:db8:ffff::7")
)

// outsideRanges returns a probe source of family outside every range.
func outsideRanges(ranges []netip.Prefix, family v1.IPFamily) (netip.Addr, bool) {
	candidates := []netip.Addr{probeSource4, netip.MustParseAddr("203.0.113.77"), netip.MustParseAddr("192.0.2.77")}
	if family == v1.IPv6Protocol {
		candidates = []netip.Addr{probeSource6, netip.MustParseAddr("3fff::7")}
	}
	for _, c := range candidates {
		if !slices.ContainsFunc(ranges, func(p netip.Prefix) bool { return p.Contains(c) }) {
			return c, true
		}
	}
	return netip.Addr{}, false
}

// probes returns a packet from outside the node to each frontend of sp in
// s: the cluster IP, each external IP, each LoadBalancer VIP (from inside
// and from outside its source ranges, when it has some) and the node port
// on each node address.
func probes(s *dataplane.State, sp *servicemodel.ServicePort) []probe {
	src := probeSource4
	if s.Family == v1.IPv6Protocol {
		src = probeSource6
	}
	var out []probe
	add := func(dst netip.Addr, port uint16, kind string, from netip.Addr) {
		p := dataplane.Packet{Src: from, Dst: netip.AddrPortFrom(dst, port), Protocol: sp.Protocol, From: dataplane.FromOutside}
		out = append(out, probe{label: fmt.Sprintf("%s/%s (%s) from %s", p.Dst, sp.Protocol, kind, from), p: p})
	}
	add(sp.ClusterIP, sp.Port, "cluster IP", src)
	for _, a := range sp.ExternalIPs {
		add(a, sp.Port, "external IP", src)
	}
	for _, a := range sp.LoadBalancerVIPs {
		r := sp.LoadBalancerSourceRanges
		if len(r) == 0 {
			add(a, sp.Port, "load balancer IP", src)
			continue
		}
		add(a, sp.Port, "load balancer IP", r[0].Masked().Addr())
		if out, ok := outsideRanges(r, s.Family); ok {
			add(a, sp.Port, "load balancer IP", out)
		}
	}
	if sp.NodePort != 0 {
		for _, a := range s.Node.IPs {
			add(a, sp.NodePort, "node port", src)
		}
	}
	return out
}

// Verify compares, for every frontend of every service port of s, the
// verdict of the model (s.LookupMode(mode, ...)) with the kernel's, and
// returns the differences sorted by service and frontend; none means the
// kernel does what the model says. A Kernel that is a ServiceLister also
// has the service ports it holds and the model lacks reported as Extra,
// one that is a FrontendLister the frontends it serves and no service
// port of the model has.
func Verify(s *dataplane.State, mode dataplane.Mode, k Kernel) []Mismatch {
	var out []Mismatch
	for sp := range s.Services.All() {
		out = append(out, verifyPort(s, mode, k, sp)...)
	}
	if l, ok := k.(ServiceLister); ok {
		for _, pn := range l.Services() {
			if _, ok := s.Services.Get(pn); !ok {
				out = append(out, Mismatch{Service: pn, Kind: Extra, Detail: "the kernel holds rules for this service port, the model has no such port"})
			}
		}
	}
	if l, ok := k.(FrontendLister); ok {
		model := map[servicemodel.Frontend]bool{}
		for _, fe := range modelFrontends(s) {
			model[fe] = true
		}
		for _, fe := range l.Frontends() {
			if !model[fe] {
				out = append(out, Mismatch{Kind: Extra, Frontend: frontendString(fe, s.Family),
					Detail: "the kernel serves this frontend, no service port of the model has it"})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Mismatch) int {
		return cmp.Or(a.Service.Compare(b.Service), cmp.Compare(a.Frontend, b.Frontend))
	})
	return out
}

func verifyPort(s *dataplane.State, mode dataplane.Mode, k Kernel, sp *servicemodel.ServicePort) []Mismatch {
	var out []Mismatch
	for _, pr := range probes(s, sp) {
		model := s.LookupMode(mode, pr.p)
		kernel, err := k.Trace(pr.p)
		kind, detail := Compare(model, kernel)
		if err != nil {
			kind, detail = Untraceable, err.Error()
		}
		if kind == "" {
			continue
		}
		svc := model.Service
		if svc.Name == "" {
			svc = kernel.Service
		}
		if svc.Name == "" {
			svc = sp.Name
		}
		out = append(out, Mismatch{Service: svc, Kind: kind, Frontend: pr.label,
			Model: Summary(model), Kernel: Summary(kernel), Detail: detail})
	}
	return out
}

// Compare says how the kernel's verdict for a packet differs from the
// model's, as Verify does at each frontend; kind is "" when they agree.
func Compare(model, kernel dataplane.Verdict) (kind MismatchKind, detail string) {
	same := model.Action == kernel.Action && slices.Equal(model.Endpoints, kernel.Endpoints) &&
		(model.Action == dataplane.NotAService || model.Service == kernel.Service) &&
		(model.Action != dataplane.DNAT || model.Masquerade == kernel.Masquerade)
	switch {
	case same:
		return "", ""
	case kernel.Action == dataplane.NotAService:
		return Missing, "no rule of the proxy matches; the model says " + Summary(model)
	case kernel.Action == dataplane.Reject && kernel.Service.Name == "" && model.Service.Name != "":
		// nftables rejects a cluster IP's ports that no rule serves.
		return Missing, "no rule of the service matches and the packet is rejected; the model says " + Summary(model)
	case kernel.Service.Name == "" && model.Service.Name != "":
		return Shadowed, "a rule that is not the proxy's decides first: " + Summary(kernel)
	case model.Action == dataplane.NotAService:
		return Extra, "rules of " + ServiceString(kernel.Service) + " still match; the model has nothing here"
	case model.Service != kernel.Service:
		return WrongVerdict, "the rules take it for " + ServiceString(kernel.Service)
	case model.Action == dataplane.DNAT && kernel.Action == dataplane.DNAT && !slices.Equal(model.Endpoints, kernel.Endpoints):
		var parts []string
		if m := minus(model.Endpoints, kernel.Endpoints); len(m) > 0 {
			parts = append(parts, "missing "+joinAddrs(m))
		}
		if x := minus(kernel.Endpoints, model.Endpoints); len(x) > 0 {
			parts = append(parts, "extra "+joinAddrs(x))
		}
		return WrongEndpoints, strings.Join(parts, "; ")
	}
	return WrongVerdict, "the model says " + Summary(model) + ", the rules " + Summary(kernel)
}

func minus(a, b []netip.AddrPort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func joinAddrs(list []netip.AddrPort) string {
	s := make([]string, len(list))
	for i, a := range list {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// Summary is a verdict in a few words: "DNAT to 10.1.0.5:8080, 10.2.0.7:8080
// (masquerade)", "reject", "drop", "accept", "not a service".
func Summary(v dataplane.Verdict) string {
	switch v.Action {
	case dataplane.DNAT:
		s := "DNAT to " + joinAddrs(v.Endpoints)
		if v.Masquerade {
			s += " (masquerade)"
		}
		return s
	case dataplane.Reject:
		return "reject"
	case dataplane.Drop:
		return "drop"
	case dataplane.Accept:
		return "accept"
	}
	return "not a service"
}
