package troubleshoot

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/dataplane/conntrack"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config is what Diagnose looks at besides the States. The zero value
// answers from the model alone, with iptables semantics.
type Config struct {
	// Mode is the proxy mode whose semantics the model answers with
	// (State.LookupMode); "" is iptables.
	Mode dataplane.Mode
	// Kernel holds, per IP family, the kernel's rules; a family without
	// one is not checked against the kernel.
	Kernel map[v1.IPFamily]Kernel
	// Flows are the conntrack entries of DNATed connections
	// (conntrack.DNATFlows); nil checks none.
	Flows []conntrack.Flow
	// Client, when valid, is a client whose packets to each frontend are
	// followed, from outside the node: source ranges and traffic policy
	// decide for it.
	Client netip.Addr
}

// Severity grades a Finding.
type Severity string

// The severities: a Problem stops some traffic, a Warning is worth
// knowing.
const (
	Problem Severity = "problem"
	Warning Severity = "warning"
)

// Finding is one answer of the checklist that needs attention.
type Finding struct {
	Severity Severity `json:"severity"`
	// Port is "http/TCP (IPv4)", empty for the whole service.
	Port string `json:"port,omitempty"`
	Text string `json:"text"`
}

// Report is what Diagnose found out about one service.
type Report struct {
	// Service is "ns/name".
	Service string `json:"service"`
	Node    string `json:"node"`
	Zone    string `json:"zone,omitempty"`
	// Port is the port asked about, "" for all.
	Port     string       `json:"port,omitempty"`
	Ports    []PortReport `json:"ports"`
	Findings []Finding    `json:"findings"`
	// Verdict is the answer in one line: the first problem, or "OK: ...".
	Verdict string `json:"verdict"`
	// OK is true when no finding is a Problem.
	OK bool `json:"ok"`
}

// PortReport is one service port in one IP family.
type PortReport struct {
	Family   v1.IPFamily `json:"family"`
	Name     string      `json:"name"`
	Protocol v1.Protocol `json:"protocol"`
	// Frontends are the addresses the port is reached at on this node.
	Frontends []FrontendReport `json:"frontends"`
	// InternalPolicy and ExternalPolicy are "Cluster" or "Local"; the
	// external one is empty for a port that is not externally accessible.
	InternalPolicy string   `json:"internalTrafficPolicy"`
	ExternalPolicy string   `json:"externalTrafficPolicy,omitempty"`
	SourceRanges   []string `json:"loadBalancerSourceRanges,omitempty"`
	// Topology is the topology filter applied to cluster traffic
	// (affinity.TopologyMode): "", PreferSameZone or PreferSameNode.
	Topology  string           `json:"topology,omitempty"`
	Endpoints []EndpointReport `json:"endpoints"`
	// Cluster and Local are the endpoints serving cluster-wide and
	// node-local traffic here (State.Select); Cluster is nil when the
	// policy uses none.
	Cluster []string `json:"cluster"`
	Local   []string `json:"local"`
	// Notes say why, for people.
	Notes []string `json:"notes,omitempty"`
}

// FrontendReport is one address of a port.
type FrontendReport struct {
	// Address is "ip:port/PROTO".
	Address string `json:"address"`
	Type    string `json:"type"`
	// Kernel is "rules in place", what drifted, or "" when not checked.
	Kernel string `json:"kernel,omitempty"`
}

// EndpointReport is one endpoint of a port.
type EndpointReport struct {
	Address   string   `json:"address"`
	State     string   `json:"state"`
	Node      string   `json:"node,omitempty"`
	Zone      string   `json:"zone,omitempty"`
	Local     bool     `json:"local,omitempty"`
	ZoneHints []string `json:"zoneHints,omitempty"`
	NodeHints []string `json:"nodeHints,omitempty"`
}

// Diagnose answers why service svc may not be reachable through this node,
// from states (one per IP family the node proxies). port, when not empty,
// is a port name or number (service port or node port) to look at alone.
func Diagnose(states []*dataplane.State, svc types.NamespacedName, port string, cfg Config) *Report {
	d := &diagnosis{cfg: cfg, states: states, svc: svc, r: &Report{Service: svc.String(), Port: port, Ports: []PortReport{}, Findings: []Finding{}}}
	if len(states) > 0 {
		d.r.Node, d.r.Zone = states[0].Node.Name, states[0].Node.Zone
	}
	d.run(port)
	d.verdict()
	return d.r
}

type diagnosis struct {
	cfg    Config
	states []*dataplane.State
	svc    types.NamespacedName
	r      *Report
	// checked counts the frontends checked against the kernel, eps the
	// endpoints serving.
	checked, eps int
}

func (d *diagnosis) add(sev Severity, port, format string, args ...any) {
	d.r.Findings = append(d.r.Findings, Finding{Severity: sev, Port: port, Text: fmt.Sprintf(format, args...)})
}

func (d *diagnosis) run(port string) {
	var found, withEndpoints []v1.IPFamily
	var all []*servicemodel.ServicePort
	for _, s := range d.states {
		ports := s.Services.Service(d.svc)
		if len(ports) > 0 {
			found = append(found, s.Family)
		}
		if s.Endpoints.Service(d.svc) != nil {
			withEndpoints = append(withEndpoints, s.Family)
		}
		all = append(all, ports...)
	}
	if len(found) == 0 {
		if len(withEndpoints) > 0 {
			d.add(Problem, "", "no Service %s is proxied here, but EndpointSlices of it (%s) exist: the Service is missing, headless, of type ExternalName, of another family than the node's or handled by another proxy (service.kubernetes.io/service-proxy-name)",
				d.svc, familyList(withEndpoints))
			return
		}
		d.add(Problem, "", "no Service %s is proxied here: it does not exist, is headless, of type ExternalName, of another family than the node's, or handled by another proxy", d.svc)
		return
	}
	if c := d.cfg.Client; c.IsValid() && !slices.Contains(found, familyOf(c)) {
		d.add(Problem, "", "wrong family: client %s is %s, the Service has %s frontends only", c, familyOf(c), familyList(found))
	}
	matched := false
	for _, s := range d.states {
		for _, sp := range s.Services.Service(d.svc) {
			if port != "" && !portMatches(sp, port) {
				continue
			}
			matched = true
			d.port(s, sp)
		}
	}
	if !matched {
		var names []string
		for _, sp := range all {
			names = append(names, fmt.Sprintf("%s (%d/%s)", portLabel(sp.Name.Port), sp.Port, sp.Protocol))
		}
		slices.Sort(names)
		d.add(Problem, "", "no port %q: the Service's ports are %s", port, strings.Join(slices.Compact(names), ", "))
	}
}

func portMatches(sp *servicemodel.ServicePort, port string) bool {
	if sp.Name.Port == port {
		return true
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n != 0 && (uint16(n) == sp.Port || uint16(n) == sp.NodePort)
}

func portLabel(name string) string {
	if name == "" {
		return `""`
	}
	return name
}

func familyOf(a netip.Addr) v1.IPFamily {
	if a.Is4() || a.Is4In6() {
		return v1.IPv4Protocol
	}
	return v1.IPv6Protocol
}

func familyList(fs []v1.IPFamily) string {
	s := make([]string, len(fs))
	for i, f := range fs {
		s[i] = string(f)
	}
	return strings.Join(s, " and ")
}

func policyName(local bool) string {
	if local {
		return "Local"
	}
	return "Cluster"
}

// port answers the checklist for one service port of state s.
func (d *diagnosis) port(s *dataplane.State, sp *servicemodel.ServicePort) {
	label := fmt.Sprintf("%s/%s (%s)", portLabel(sp.Name.Port), sp.Protocol, s.Family)
	pr := PortReport{Family: s.Family, Name: sp.Name.Port, Protocol: sp.Protocol, InternalPolicy: policyName(sp.InternalPolicyLocal)}
	if sp.ExternallyAccessible() {
		pr.ExternalPolicy = policyName(sp.ExternalPolicyLocal)
	}
	for _, r := range sp.LoadBalancerSourceRanges {
		pr.SourceRanges = append(pr.SourceRanges, r.String())
	}
	eps := s.Endpoints.Get(sp.Name)
	for _, e := range eps {
		pr.Endpoints = append(pr.Endpoints, EndpointReport{Address: e.String(), State: EndpointState(e), Node: e.NodeName,
			Zone: e.Zone, Local: e.Local, ZoneHints: e.ZoneHints, NodeHints: e.NodeHints})
	}
	sel := s.Select(sp)
	pol := sp.Policy()
	node := affinity.Node{Name: s.Node.Name, Zone: s.Node.Zone}
	pr.Topology = affinity.TopologyMode(eps, pol, node, s.Settings.Topology)
	if sel.Cluster != nil {
		pr.Cluster = addrs(sel.Cluster)
	}
	pr.Local = addrs(sel.Local)
	d.eps = max(d.eps, len(sel.AllReachable))

	d.endpoints(s, sp, label, eps, sel, &pr)
	d.topology(s, sp, label, eps, pol, &pr)
	d.policies(s, sp, label, eps, sel, pol)
	d.frontends(s, sp, label, &pr)
	d.stale(s, sp, label, sel)
	d.r.Ports = append(d.r.Ports, pr)
}

func addrs(list []*endpoints.Endpoint) []string {
	out := make([]string, len(list))
	for i, e := range list {
		out[i] = e.String()
	}
	return out
}

// endpoints covers the EndpointSlices: none, under another port name or
// family, none ready.
func (d *diagnosis) endpoints(s *dataplane.State, sp *servicemodel.ServicePort, label string, eps []*endpoints.Endpoint, sel affinity.Selection[*endpoints.Endpoint], pr *PortReport) {
	if len(eps) == 0 {
		var others []string
		if se := s.Endpoints.Service(d.svc); se != nil {
			for pn := range se.Ports {
				if _, ok := s.Services.Get(pn); !ok {
					others = append(others, fmt.Sprintf("%s/%s", portLabel(pn.Port), pn.Protocol))
				}
			}
		}
		slices.Sort(others)
		switch {
		case len(others) > 0:
			d.add(Problem, label, "port name mismatch: the Service's port is named %s but its EndpointSlices list endpoints for %s only; endpoints are matched to service ports by name and protocol",
				portLabel(sp.Name.Port)+"/"+string(sp.Protocol), strings.Join(others, ", "))
		case d.otherFamilyHas(s, sp.Name):
			d.add(Problem, label, "wrong family: the EndpointSlices of port %s hold %s endpoints only, and the Service's %s cluster IP has none",
				portLabel(sp.Name.Port), d.otherFamilies(s, sp.Name), s.Family)
		default:
			d.add(Problem, label, "no endpoints: no EndpointSlice lists an endpoint for port %s (does the selector match a pod?); connections are rejected", portLabel(sp.Name.Port))
		}
		return
	}
	var ready, terminating, serving int
	for _, e := range eps {
		switch {
		case e.Ready:
			ready++
		case e.Terminating:
			terminating++
			if e.Serving {
				serving++
			}
		}
	}
	switch {
	case !sel.HasAny && terminating > 0:
		d.add(Problem, label, "no ready endpoints: %d pods terminating, 0 serving", terminating)
	case !sel.HasAny:
		d.add(Problem, label, "no ready endpoints: %d not ready; connections are rejected", len(eps))
	case ready == 0:
		d.add(Warning, label, "no ready endpoints: %s still serving take the traffic until they stop", plural(serving, "terminating pod"))
		pr.Notes = append(pr.Notes, "cluster traffic falls back to serving terminating endpoints")
	}
}

func (d *diagnosis) otherFamilies(s *dataplane.State, pn servicemodel.PortName) string {
	var fs []v1.IPFamily
	for _, o := range d.states {
		if o != s && len(o.Endpoints.Get(pn)) > 0 {
			fs = append(fs, o.Family)
		}
	}
	return familyList(fs)
}

func (d *diagnosis) otherFamilyHas(s *dataplane.State, pn servicemodel.PortName) bool {
	return d.otherFamilies(s, pn) != ""
}

// topology explains which topology filter applied, and why hints were
// ignored.
func (d *diagnosis) topology(s *dataplane.State, sp *servicemodel.ServicePort, label string, eps []*endpoints.Endpoint, pol affinity.Policy, pr *PortReport) {
	if !pol.UsesClusterEndpoints() {
		return
	}
	switch pr.Topology {
	case v1.ServiceTrafficDistributionPreferSameZone:
		pr.Notes = append(pr.Notes, fmt.Sprintf("topology: cluster traffic goes to the endpoints hinted for zone %q only (%d of %d)", s.Node.Zone, len(pr.Cluster), len(eps)))
		return
	case v1.ServiceTrafficDistributionPreferSameNode:
		pr.Notes = append(pr.Notes, fmt.Sprintf("topology: cluster traffic goes to the endpoints hinted for node %q only (%d of %d)", s.Node.Name, len(pr.Cluster), len(eps)))
		return
	}
	var zones []string
	hinted, readyN := 0, 0
	for _, e := range eps {
		if !e.Ready {
			continue
		}
		readyN++
		if len(e.ZoneHints) > 0 {
			hinted++
		}
		zones = append(zones, e.ZoneHints...)
	}
	if hinted == 0 {
		return
	}
	slices.Sort(zones)
	zones = slices.Compact(zones)
	switch {
	case s.Node.Zone == "":
		d.add(Warning, label, "topology hints ignored: this node has no topology.kubernetes.io/zone label; every ready endpoint takes cluster traffic")
	case hinted < readyN:
		d.add(Warning, label, "topology hints ignored: %d of %d ready endpoints have no zone hint; every ready endpoint takes cluster traffic", readyN-hinted, readyN)
	case !slices.Contains(zones, s.Node.Zone):
		d.add(Warning, label, "wrong topology zone: the hints name zone %s, not this node's zone %q; hints are ignored and every ready endpoint takes cluster traffic",
			strings.Join(zones, ", "), s.Node.Zone)
	}
}

// policies covers the traffic policies: Local without a local endpoint.
func (d *diagnosis) policies(s *dataplane.State, sp *servicemodel.ServicePort, label string, eps []*endpoints.Endpoint, sel affinity.Selection[*endpoints.Endpoint], pol affinity.Policy) {
	if !sel.HasAny || len(sel.Local) > 0 {
		return
	}
	if pol.InternalLocal {
		d.add(Problem, label, "internalTrafficPolicy Local and no endpoint on node %s (%d elsewhere): cluster IP traffic from this node is dropped", s.Node.Name, len(eps))
	}
	if pol.ExternalLocal && pol.ExternallyAccessible {
		d.add(Problem, label, "externalTrafficPolicy Local and no endpoint on node %s (%d elsewhere): external traffic arriving here is dropped (pods and the node itself still reach the cluster endpoints)", s.Node.Name, len(eps))
	}
}

// frontends lists the port's addresses, checks them against the kernel and
// follows Config.Client to them.
func (d *diagnosis) frontends(s *dataplane.State, sp *servicemodel.ServicePort, label string, pr *PortReport) {
	at := func(a netip.Addr, port uint16) string {
		return netip.AddrPortFrom(a, port).String() + "/" + string(sp.Protocol)
	}
	pr.Frontends = append(pr.Frontends, FrontendReport{Address: at(sp.ClusterIP, sp.Port), Type: TypeClusterIP})
	for _, a := range sp.ExternalIPs {
		pr.Frontends = append(pr.Frontends, FrontendReport{Address: at(a, sp.Port), Type: TypeExternalIP})
	}
	for _, a := range sp.LoadBalancerVIPs {
		pr.Frontends = append(pr.Frontends, FrontendReport{Address: at(a, sp.Port), Type: TypeLoadBalancer})
	}
	if sp.NodePort != 0 {
		for _, a := range s.Node.IPs {
			pr.Frontends = append(pr.Frontends, FrontendReport{Address: at(a, sp.NodePort), Type: TypeNodePort})
		}
	}
	if k := d.cfg.Kernel[s.Family]; k != nil {
		drift := verifyPort(s, d.cfg.Mode, k, sp)
		for i := range pr.Frontends {
			fe := &pr.Frontends[i]
			fe.Kernel = "rules in place"
			for _, dr := range drift {
				if strings.HasPrefix(dr.Frontend, fe.Address+" ") {
					fe.Kernel = string(dr.Kind) + ": " + dr.Detail
					d.add(Problem, label, "rules %s at %s: %s", dr.Kind, dr.Frontend, dr.Detail)
				}
			}
			d.checked++
		}
	}
	if c := d.cfg.Client; c.IsValid() && familyOf(c) == s.Family {
		d.client(s, sp, label, c)
	}
}

// client follows packets from c to the port's external frontends.
func (d *diagnosis) client(s *dataplane.State, sp *servicemodel.ServicePort, label string, c netip.Addr) {
	for _, a := range sp.LoadBalancerVIPs {
		p := dataplane.Packet{Src: c, Dst: netip.AddrPortFrom(a, sp.Port), Protocol: sp.Protocol, From: dataplane.FromOutside}
		v := s.LookupMode(d.cfg.Mode, p)
		if v.Action != dataplane.Drop {
			continue
		}
		if r := sp.LoadBalancerSourceRanges; len(r) > 0 && !slices.ContainsFunc(r, func(p netip.Prefix) bool { return p.Contains(c) }) {
			ranges := make([]string, len(r))
			for i, x := range r {
				ranges[i] = x.String()
			}
			d.add(Problem, label, "source range blocks the client: %s is outside loadBalancerSourceRanges %s, so its packets to %s are dropped",
				c, strings.Join(ranges, ", "), p.Dst)
		}
	}
}

// stale reports conntrack entries of the port's frontends that still point
// at endpoints which no longer take its traffic.
func (d *diagnosis) stale(s *dataplane.State, sp *servicemodel.ServicePort, label string, sel affinity.Selection[*endpoints.Endpoint]) {
	if len(d.cfg.Flows) == 0 {
		return
	}
	fronts := []netip.AddrPort{netip.AddrPortFrom(sp.ClusterIP, sp.Port)}
	for _, a := range append(slices.Clone(sp.ExternalIPs), sp.LoadBalancerVIPs...) {
		fronts = append(fronts, netip.AddrPortFrom(a, sp.Port))
	}
	if sp.NodePort != 0 {
		for _, a := range s.Node.IPs {
			fronts = append(fronts, netip.AddrPortFrom(a, sp.NodePort))
		}
	}
	count := map[netip.AddrPort]int{}
	for _, f := range d.cfg.Flows {
		if f.Protocol != sp.Protocol || !slices.Contains(fronts, f.Frontend) || f.Endpoint == f.Frontend {
			continue
		}
		if !slices.ContainsFunc(sel.AllReachable, func(e *endpoints.Endpoint) bool { return e.Addr == f.Endpoint }) {
			count[f.Endpoint]++
		}
	}
	if len(count) == 0 {
		return
	}
	var list []string
	for _, ep := range slices.SortedFunc(maps.Keys(count), netip.AddrPort.Compare) {
		list = append(list, fmt.Sprintf("%s (%d)", ep, count[ep]))
	}
	d.add(Warning, label, "stale conntrack entries: connections still go to endpoints no longer serving: %s", strings.Join(list, ", "))
}

func (d *diagnosis) verdict() {
	d.r.OK = true
	for _, f := range d.r.Findings {
		if f.Severity == Problem {
			d.r.OK = false
			d.r.Verdict = f.Text
			if f.Port != "" {
				d.r.Verdict = f.Port + ": " + f.Text
			}
			return
		}
	}
	d.r.Verdict = "OK: " + plural(d.eps, "endpoint")
	if d.checked > 0 {
		d.r.Verdict += ", rules in place"
	}
	if n := len(d.r.Findings); n > 0 {
		d.r.Verdict += " (" + plural(n, "warning") + ")"
	}
}

// plural returns "1 pod", "2 pods".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
