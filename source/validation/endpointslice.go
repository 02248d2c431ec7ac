package validation

import (
	"slices"

	discovery "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// The API server's limits on an EndpointSlice.
const (
	maxEndpoints      = 1000
	maxAddresses      = 100
	maxSlicePorts     = 20000
	maxTopologyLabels = 16
	maxZoneHints      = 8
	maxNodeHints      = 8
)

var supportedAddressTypes = []discovery.AddressType{discovery.AddressTypeFQDN, discovery.AddressTypeIPv4, discovery.AddressTypeIPv6}

// EndpointSlice returns the errors the API server would give es: what
// ValidateEndpointSlice checks. See the package documentation for where
// it is stricter or looser.
func EndpointSlice(es *discovery.EndpointSlice, mode Mode) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&es.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, metaPath)
	path := field.NewPath("addressType")
	switch es.AddressType {
	case discovery.AddressTypeIPv4, discovery.AddressTypeIPv6, discovery.AddressTypeFQDN:
	case "":
		errs = append(errs, field.Required(path, ""))
	default:
		errs = append(errs, field.NotSupported(path, es.AddressType, supportedAddressTypes))
	}
	errs = append(errs, slicePorts(es.Ports)...)
	return append(errs, sliceEndpoints(es.Endpoints, es.AddressType, mode)...)
}

// slicePorts checks an EndpointSlice's ports. Their numbers are not
// checked: the API server accepts any, and a proxy skips those it cannot
// use. A missing name or protocol is what the API server defaults ("",
// TCP).
func slicePorts(ports []discovery.EndpointPort) field.ErrorList {
	path := field.NewPath("ports")
	if len(ports) > maxSlicePorts {
		return field.ErrorList{field.TooMany(path, len(ports), maxSlicePorts)}
	}
	var errs field.ErrorList
	names := make([]string, 0, len(ports))
	for i := range ports {
		p := &ports[i]
		idx := path.Index(i)
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != "" {
			errs = append(errs, dns1123Label(idx.Child("name"), name)...)
		}
		if slices.Contains(names, name) {
			errs = append(errs, field.Duplicate(idx.Child("name"), name))
		} else {
			names = append(names, name)
		}
		if p.Protocol != nil && !protocolSupported(*p.Protocol) {
			errs = append(errs, field.NotSupported(idx.Child("protocol"), *p.Protocol, supportedProtocols))
		}
		if p.AppProtocol != nil {
			errs = append(errs, qualifiedName(idx.Child("appProtocol"), *p.AppProtocol)...)
		}
	}
	return errs
}

// sliceEndpoints checks an EndpointSlice's endpoints.
func sliceEndpoints(eps []discovery.Endpoint, addressType discovery.AddressType, mode Mode) field.ErrorList {
	path := field.NewPath("endpoints")
	if len(eps) > maxEndpoints {
		return field.ErrorList{field.TooMany(path, len(eps), maxEndpoints)}
	}
	var errs field.ErrorList
	// A slice's endpoints share a few node names, whose check is a
	// regular expression: each valid one is checked once.
	validNodes := map[string]bool{}
	for i := range eps {
		ep := &eps[i]
		idx := path.Index(i)
		addrPath := idx.Child("addresses")
		switch n := len(ep.Addresses); {
		case n == 0:
			errs = append(errs, field.Required(addrPath, "must contain at least 1 address"))
		case n > maxAddresses:
			errs = append(errs, field.TooMany(addrPath, n, maxAddresses))
		}
		for j, a := range ep.Addresses {
			errs = append(errs, sliceAddress(addrPath, j, a, addressType, mode)...)
		}
		if n := ep.NodeName; n != nil && !validNodes[*n] {
			nodeErrs := nodeName(idx.Child("nodeName"), *n)
			validNodes[*n] = len(nodeErrs) == 0
			errs = append(errs, nodeErrs...)
		}
		topologyPath := idx.Child("deprecatedTopology")
		if len(ep.DeprecatedTopology) > maxTopologyLabels {
			errs = append(errs, field.TooMany(topologyPath, len(ep.DeprecatedTopology), maxTopologyLabels))
		}
		errs = append(errs, metavalidation.ValidateLabels(ep.DeprecatedTopology, topologyPath)...)
		if ep.Hostname != nil {
			errs = append(errs, dns1123Label(idx.Child("hostname"), *ep.Hostname)...)
		}
		if ep.Hints != nil {
			errs = append(errs, hints(ep.Hints, idx.Child("hints"))...)
		}
	}
	return errs
}

// sliceAddress checks address j of an endpoint, whose addresses are at
// path. A proxy forwards to the first: it must never be the node's own
// loopback, a link-local address (the cloud's metadata service) or an
// unspecified one.
func sliceAddress(path *field.Path, j int, a string, addressType discovery.AddressType, mode Mode) field.ErrorList {
	idx := path.Index(j)
	var errs field.ErrorList
	switch addressType {
	case discovery.AddressTypeIPv4:
		if ipErrs := legacyIP(idx, a, mode); len(ipErrs) != 0 {
			return ipErrs
		}
		if !netutils.IsIPv4String(a) {
			// The API server names the list here, not the entry.
			errs = append(errs, field.Invalid(path, a, "must be an IPv4 address"))
		}
		errs = append(errs, endpointIP(idx, a)...)
	case discovery.AddressTypeIPv6:
		ipErrs := utilvalidation.IsValidIP(idx, a)
		if mode == Stored {
			ipErrs = legacyIP(idx, a, mode)
		}
		if len(ipErrs) != 0 {
			return ipErrs
		}
		if !netutils.IsIPv6String(a) {
			errs = append(errs, field.Invalid(path, a, "must be an IPv6 address"))
		}
		errs = append(errs, endpointIP(idx, a)...)
	case discovery.AddressTypeFQDN:
		errs = append(errs, utilvalidation.IsFullyQualifiedDomainName(idx, a)...)
	}
	return errs
}

// nodeName checks a node name an endpoint or a hint gives.
func nodeName(path *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(path, name, msg))
	}
	return errs
}

// hints checks an endpoint's topology hints.
func hints(h *discovery.EndpointHints, path *field.Path) field.ErrorList {
	zonesPath := path.Child("forZones")
	if len(h.ForZones) > maxZoneHints {
		return field.ErrorList{field.TooMany(zonesPath, len(h.ForZones), maxZoneHints)}
	}
	var errs field.ErrorList
	zones := make([]string, 0, len(h.ForZones))
	for i, z := range h.ForZones {
		p := zonesPath.Index(i).Child("name")
		if slices.Contains(zones, z.Name) {
			errs = append(errs, field.Duplicate(p, z.Name))
		} else {
			zones = append(zones, z.Name)
		}
		for _, msg := range utilvalidation.IsValidLabelValue(z.Name) {
			errs = append(errs, field.Invalid(p, z.Name, msg))
		}
	}
	nodesPath := path.Child("forNodes")
	if len(h.ForNodes) > maxNodeHints {
		return append(errs, field.TooMany(nodesPath, len(h.ForNodes), maxNodeHints))
	}
	nodes := make([]string, 0, len(h.ForNodes))
	for i, n := range h.ForNodes {
		p := nodesPath.Index(i).Child("name")
		if slices.Contains(nodes, n.Name) {
			errs = append(errs, field.Duplicate(p, n.Name))
		} else {
			nodes = append(nodes, n.Name)
		}
		errs = append(errs, nodeName(p, n.Name)...)
	}
	return errs
}
