package dataplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/proxykit/proxykit/affinity"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// StateFormatVersion is the version of the JSON form of a State that
// MarshalJSON writes and UnmarshalJSON reads. It grows when a field changes
// meaning, so that a reader never takes a newer form for one it knows.
const StateFormatVersion = 1

// ErrStateFormat is what UnmarshalJSON's errors wrap when the JSON is not a
// State it can take: another format version, or a value that no Builder
// would produce (an address of the wrong family, an unknown protocol).
var ErrStateFormat = errors.New("not a proxykit State")

// The JSON form spells field names as the Kubernetes API does and keeps
// them apart from the Go names, so that renaming a Go field never changes
// what tools read.
type stateJSON struct {
	Version      int             `json:"version"`
	Family       v1.IPFamily     `json:"family"`
	Generation   uint64          `json:"generation"`
	Node         nodeJSON        `json:"node"`
	Settings     settingsJSON    `json:"settings"`
	ServiceCIDRs []netip.Prefix  `json:"serviceCIDRs,omitempty"`
	Services     []portJSON      `json:"services"`
	Endpoints    []endpointsJSON `json:"endpoints"`
}

type nodeJSON struct {
	Name     string         `json:"name"`
	Zone     string         `json:"zone,omitempty"`
	IPs      []netip.Addr   `json:"ips,omitempty"`
	PodCIDRs []netip.Prefix `json:"podCIDRs,omitempty"`
}

type settingsJSON struct {
	MasqueradeAll       bool              `json:"masqueradeAll,omitempty"`
	LocalDetector       localDetectorJSON `json:"localDetector"`
	NodePortAddresses   []netip.Prefix    `json:"nodePortAddresses,omitempty"`
	NodePortPrimary     bool              `json:"nodePortPrimary,omitempty"`
	LocalhostNodePorts  bool              `json:"localhostNodePorts,omitempty"`
	DeriveTopologyHints bool              `json:"deriveTopologyHints,omitempty"`
}

type localDetectorJSON struct {
	Mode      LocalMode      `json:"mode,omitempty"`
	CIDRs     []netip.Prefix `json:"cidrs,omitempty"`
	Interface string         `json:"interface,omitempty"`
}

type portNameJSON struct {
	Namespace string      `json:"namespace"`
	Name      string      `json:"name"`
	PortName  string      `json:"portName,omitempty"`
	Protocol  v1.Protocol `json:"protocol"`
}

type portJSON struct {
	portNameJSON
	ClusterIP                netip.Addr       `json:"clusterIP"`
	Port                     uint16           `json:"port"`
	NodePort                 uint16           `json:"nodePort,omitempty"`
	ExternalIPs              []netip.Addr     `json:"externalIPs,omitempty"`
	LoadBalancerVIPs         []netip.Addr     `json:"loadBalancerVIPs,omitempty"`
	LoadBalancerSourceRanges []netip.Prefix   `json:"loadBalancerSourceRanges,omitempty"`
	InternalPolicyLocal      bool             `json:"internalTrafficPolicyLocal,omitempty"`
	ExternalPolicyLocal      bool             `json:"externalTrafficPolicyLocal,omitempty"`
	HealthCheckNodePort      uint16           `json:"healthCheckNodePort,omitempty"`
	ClientIPAffinity         *metav1.Duration `json:"clientIPAffinityTimeout,omitempty"`
	TrafficDistribution      string           `json:"trafficDistribution,omitempty"`
}

type endpointsJSON struct {
	portNameJSON
	Endpoints []endpointJSON `json:"endpoints"`
}

type endpointJSON struct {
	Addr        netip.AddrPort `json:"addr"`
	Ready       bool           `json:"ready,omitempty"`
	Serving     bool           `json:"serving,omitempty"`
	Terminating bool           `json:"terminating,omitempty"`
	Local       bool           `json:"local,omitempty"`
	NodeName    string         `json:"nodeName,omitempty"`
	Zone        string         `json:"zone,omitempty"`
	ZoneHints   []string       `json:"zoneHints,omitempty"`
	NodeHints   []string       `json:"nodeHints,omitempty"`
}

// MarshalJSON writes s as a JSON object: its family, generation, node and
// settings, its service ports and its endpoints, in a stable order, so that
// equal States give equal bytes. A troubleshooting tool reads a running
// proxy's model from it (the node agent serves it on /proxykit/states);
// what ChangedSince knows is not part of it.
func (s *State) MarshalJSON() ([]byte, error) {
	w := stateJSON{
		Version:    StateFormatVersion,
		Family:     s.Family,
		Generation: s.Generation,
		Node:       nodeJSON{Name: s.Node.Name, Zone: s.Node.Zone, IPs: s.Node.IPs, PodCIDRs: s.Node.PodCIDRs},
		Settings: settingsJSON{
			MasqueradeAll: s.Settings.MasqueradeAll,
			LocalDetector: localDetectorJSON{
				Mode:      s.Settings.LocalDetector.Mode,
				CIDRs:     s.Settings.LocalDetector.CIDRs,
				Interface: s.Settings.LocalDetector.Interface,
			},
			NodePortAddresses:   s.Settings.NodePortAddresses,
			NodePortPrimary:     s.Settings.NodePortPrimary,
			LocalhostNodePorts:  s.Settings.LocalhostNodePorts,
			DeriveTopologyHints: s.Settings.Topology.DeriveHints,
		},
		ServiceCIDRs: s.ServiceCIDRs,
		Services:     make([]portJSON, 0, s.Services.Len()),
		Endpoints:    []endpointsJSON{},
	}
	for p := range s.Services.All() {
		pj := portJSON{
			portNameJSON:             portNameOut(p.Name),
			ClusterIP:                p.ClusterIP,
			Port:                     p.Port,
			NodePort:                 p.NodePort,
			ExternalIPs:              p.ExternalIPs,
			LoadBalancerVIPs:         p.LoadBalancerVIPs,
			LoadBalancerSourceRanges: p.LoadBalancerSourceRanges,
			InternalPolicyLocal:      p.InternalPolicyLocal,
			ExternalPolicyLocal:      p.ExternalPolicyLocal,
			HealthCheckNodePort:      p.HealthCheckNodePort,
			TrafficDistribution:      p.TrafficDistribution,
		}
		if p.SessionAffinity.ClientIP {
			pj.ClientIPAffinity = &metav1.Duration{Duration: p.SessionAffinity.Timeout}
		}
		w.Services = append(w.Services, pj)
	}
	slices.SortFunc(w.Services, func(a, b portJSON) int { return a.compare(b.portNameJSON) })
	for _, se := range s.Endpoints.Services() {
		for pn, list := range se.Ports {
			ej := endpointsJSON{portNameJSON: portNameOut(pn), Endpoints: make([]endpointJSON, 0, len(list))}
			for _, e := range list {
				ej.Endpoints = append(ej.Endpoints, endpointJSON{
					Addr: e.Addr, Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating, Local: e.Local,
					NodeName: e.NodeName, Zone: e.Zone, ZoneHints: e.ZoneHints, NodeHints: e.NodeHints,
				})
			}
			w.Endpoints = append(w.Endpoints, ej)
		}
	}
	slices.SortFunc(w.Endpoints, func(a, b endpointsJSON) int { return a.compare(b.portNameJSON) })
	return json.Marshal(w)
}

func portNameOut(n servicemodel.PortName) portNameJSON {
	return portNameJSON{Namespace: n.Namespace, Name: n.Name, PortName: n.Port, Protocol: n.Protocol}
}

func (n portNameJSON) portName() servicemodel.PortName {
	return servicemodel.PortName{NamespacedName: types.NamespacedName{Namespace: n.Namespace, Name: n.Name}, Port: n.PortName, Protocol: n.Protocol}
}

func (n portNameJSON) compare(o portNameJSON) int { return n.portName().Compare(o.portName()) }

// UnmarshalJSON reads what MarshalJSON writes into s, which must be a new
// State (the zero value). It checks what a Builder guarantees, so that
// Lookup, Select and the tracers can trust the result: a known format
// version and family; service ports with names the Tracker would take
// (servicemodel.ValidName), a known protocol, a port and a cluster IP, each
// once; addresses and CIDRs valid and of the State's family (Settings' of
// either); Settings that Settings.Validate accepts; a ClientIP affinity
// timeout within the API's range.
// Address lists are sorted and de-duplicated as the trackers do, and
// endpoint lists as endpoints.NewMap does. Errors wrap ErrStateFormat and
// name the service port or field at fault.
func (s *State) UnmarshalJSON(b []byte) error {
	if s.Family != "" || s.Generation != 0 || s.Services.Len() != 0 || s.Endpoints.Len() != 0 {
		return errors.New("dataplane: UnmarshalJSON into a State in use; States are immutable")
	}
	// Unknown fields are ignored: a newer proxy may add some without
	// changing what the known ones mean.
	var w stateJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("%w: %w", ErrStateFormat, err)
	}
	if w.Version != StateFormatVersion {
		return fmt.Errorf("%w: format version %d, this proxykit reads %d", ErrStateFormat, w.Version, StateFormatVersion)
	}
	c := checker{family: w.Family}
	if w.Family != v1.IPv4Protocol && w.Family != v1.IPv6Protocol {
		return fmt.Errorf("%w: family %q is not IPv4 or IPv6", ErrStateFormat, w.Family)
	}
	node := Node{
		Name:     w.Node.Name,
		Zone:     w.Node.Zone,
		IPs:      c.addrs("node ips", w.Node.IPs, keepOrder),
		PodCIDRs: c.prefixes("node podCIDRs", w.Node.PodCIDRs, keepOrder),
	}
	settings := Settings{
		MasqueradeAll: w.Settings.MasqueradeAll,
		LocalDetector: LocalDetector{
			Mode:      w.Settings.LocalDetector.Mode,
			CIDRs:     c.prefixes("settings localDetector cidrs", w.Settings.LocalDetector.CIDRs, anyFamily),
			Interface: w.Settings.LocalDetector.Interface,
		},
		NodePortAddresses:  c.prefixes("settings nodePortAddresses", w.Settings.NodePortAddresses, anyFamily),
		NodePortPrimary:    w.Settings.NodePortPrimary,
		LocalhostNodePorts: w.Settings.LocalhostNodePorts,
		Topology:           affinity.Options{DeriveHints: w.Settings.DeriveTopologyHints},
	}
	serviceCIDRs := c.prefixes("serviceCIDRs", w.ServiceCIDRs, normalize)
	if err := settings.Validate(); err != nil {
		c.fail("%v", err)
	}
	ports := make([]*servicemodel.ServicePort, 0, len(w.Services))
	seen := make(map[servicemodel.PortName]bool, len(w.Services))
	for _, pj := range w.Services {
		p := c.port(pj)
		if p == nil {
			continue
		}
		if seen[p.Name] {
			c.fail("service port %s (%s) is listed twice", p.Name, p.Protocol)
			continue
		}
		seen[p.Name] = true
		ports = append(ports, p)
	}
	eps := make(map[servicemodel.PortName][]*endpoints.Endpoint, len(w.Endpoints))
	for _, ej := range w.Endpoints {
		pn, ok := c.portName("endpoints of", ej.portNameJSON)
		if !ok {
			continue
		}
		if _, dup := eps[pn]; dup {
			c.fail("endpoints of %s (%s) are listed twice", pn, pn.Protocol)
			continue
		}
		list := make([]*endpoints.Endpoint, 0, len(ej.Endpoints))
		for _, e := range ej.Endpoints {
			if !c.addrPort(fmt.Sprintf("endpoint of %s", pn), e.Addr) {
				continue
			}
			list = append(list, &endpoints.Endpoint{Addr: e.Addr, EndpointInfo: affinity.EndpointInfo{
				Ready: e.Ready, Serving: e.Serving, Terminating: e.Terminating, Local: e.Local,
				NodeName: e.NodeName, Zone: e.Zone, ZoneHints: sortedStrings(e.ZoneHints), NodeHints: sortedStrings(e.NodeHints),
			}})
		}
		eps[pn] = list
	}
	if c.err != nil {
		return c.err
	}
	s.Family, s.Generation, s.Node, s.Settings, s.ServiceCIDRs = w.Family, w.Generation, node, settings, serviceCIDRs
	s.Services = servicemodel.NewMap(ports...)
	s.Endpoints = endpoints.NewMap(eps)
	return nil
}

// checker collects the first problem of a JSON State.
type checker struct {
	family v1.IPFamily
	err    error
}

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: %s", ErrStateFormat, fmt.Sprintf(format, args...))
	}
}

func (c *checker) addr(what string, a netip.Addr) bool {
	switch {
	case !a.IsValid():
		c.fail("%s: an address is missing", what)
	case a.Is4In6() || a.Zone() != "":
		c.fail("%s: %s is not a plain address", what, a)
	case familyOf(a) != c.family:
		c.fail("%s: %s is not %s", what, a, c.family)
	default:
		return true
	}
	return false
}

// listRule is how a list of addresses or CIDRs is checked and kept.
type listRule int

const (
	// keepOrder checks the family and keeps the order, which means
	// something (a node's first IP is its primary one).
	keepOrder listRule = iota
	// normalize checks the family and sorts and de-duplicates, as the
	// trackers do.
	normalize
	// anyFamily checks validity only: Settings are shared by both
	// families' States, and each uses its own family's entries.
	anyFamily
)

func (c *checker) addrs(what string, list []netip.Addr, rule listRule) []netip.Addr {
	for _, a := range list {
		c.addr(what, a)
	}
	if rule != normalize {
		return list
	}
	list = slices.Clone(list)
	slices.SortFunc(list, netip.Addr.Compare)
	return slices.Compact(list)
}

func (c *checker) prefixes(what string, list []netip.Prefix, rule listRule) []netip.Prefix {
	for _, p := range list {
		switch {
		case !p.IsValid():
			c.fail("%s: a CIDR is missing or invalid", what)
		case rule == anyFamily:
		default:
			c.addr(what, p.Addr())
		}
	}
	if rule != normalize {
		return list
	}
	list = slices.Clone(list)
	slices.SortFunc(list, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(list)
}

func (c *checker) addrPort(what string, ap netip.AddrPort) bool {
	if !c.addr(what, ap.Addr()) {
		return false
	}
	if ap.Port() == 0 {
		c.fail("%s: %s has port 0", what, ap)
		return false
	}
	return true
}

func (c *checker) portName(what string, n portNameJSON) (servicemodel.PortName, bool) {
	pn := n.portName()
	switch {
	case !servicemodel.ValidName(n.Name) || n.Namespace != "" && !servicemodel.ValidName(n.Namespace) ||
		n.PortName != "" && !servicemodel.ValidName(n.PortName):
		c.fail("%s %q: not a valid namespace, name or port name", what, pn.String())
	case n.Protocol != v1.ProtocolTCP && n.Protocol != v1.ProtocolUDP && n.Protocol != v1.ProtocolSCTP:
		c.fail("%s %s: protocol %q is not TCP, UDP or SCTP", what, pn, n.Protocol)
	default:
		return pn, true
	}
	return pn, false
}

func (c *checker) port(pj portJSON) *servicemodel.ServicePort {
	pn, ok := c.portName("service port", pj.portNameJSON)
	if !ok {
		return nil
	}
	what := "service port " + pn.String()
	if !c.addr(what+" clusterIP", pj.ClusterIP) {
		return nil
	}
	if pj.Port == 0 {
		c.fail("%s: port 0", what)
		return nil
	}
	p := &servicemodel.ServicePort{
		Name:                     pn,
		ClusterIP:                pj.ClusterIP,
		Port:                     pj.Port,
		Protocol:                 pn.Protocol,
		NodePort:                 pj.NodePort,
		ExternalIPs:              c.addrs(what+" externalIPs", pj.ExternalIPs, normalize),
		LoadBalancerVIPs:         c.addrs(what+" loadBalancerVIPs", pj.LoadBalancerVIPs, normalize),
		LoadBalancerSourceRanges: c.prefixes(what+" loadBalancerSourceRanges", pj.LoadBalancerSourceRanges, normalize),
		InternalPolicyLocal:      pj.InternalPolicyLocal,
		ExternalPolicyLocal:      pj.ExternalPolicyLocal,
		HealthCheckNodePort:      pj.HealthCheckNodePort,
		TrafficDistribution:      pj.TrafficDistribution,
	}
	if t := pj.ClientIPAffinity; t != nil {
		if t.Duration <= 0 || t.Duration > affinity.MaxClientIPTimeout {
			c.fail("%s: clientIPAffinityTimeout %s is not within (0, %s]", what, t.Duration, affinity.MaxClientIPTimeout)
			return nil
		}
		p.SessionAffinity = affinity.SessionAffinity{ClientIP: true, Timeout: t.Duration}
	}
	return p
}

func sortedStrings(l []string) []string {
	if l == nil {
		return nil
	}
	l = slices.Clone(l)
	slices.Sort(l)
	return slices.Compact(l)
}
