package validation

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// Mode says which of the API server's two views of an object applies.
type Mode uint8

const (
	// Create checks an object as the API server checks one it is asked to
	// create (a manifest applied with kubectl): IP addresses and CIDRs in
	// their strict form only.
	Create Mode = iota
	// Stored checks an object as an API server may still hand it out. The
	// fields whose IP addresses and CIDRs older versions validated
	// loosely (leading zeros, IPv4-mapped IPv6, IPv6 not in canonical form)
	// accept those forms, as the API server keeps accepting them in objects
	// stored before: an informer may be sent them.
	Stored
)

// strict reports whether legacy IP and CIDR fields get strict validation
// (the StrictIPCIDRValidation feature, on by default since v1.36).
func (m Mode) strict() bool { return m == Create }

// Kinds of the objects this package validates, with their API groups as
// the API server names them in its errors ("EndpointSlice.discovery.k8s.io").
var (
	kindService       = schema.GroupKind{Kind: "Service"}
	kindEndpointSlice = schema.GroupKind{Group: discovery.GroupName, Kind: "EndpointSlice"}
	kindNode          = schema.GroupKind{Kind: "Node"}
	kindServiceCIDR   = schema.GroupKind{Group: networking.GroupName, Kind: "ServiceCIDR"}
)

// Validate returns nil if the API server would accept obj, a *v1.Service,
// a *discovery.EndpointSlice, a *v1.Node or a *networking.ServiceCIDR
// (objects of other types are not checked and nil is returned). Otherwise it returns what the API
// server would answer: an *apierrors.StatusError of reason Invalid
// (apierrors.IsInvalid), whose message is the server's ("Service \"web\"
// is invalid: spec.ports[0].port: Invalid value: 0: must be between 1 and
// 65535, inclusive") and whose causes name each field.
func Validate(obj runtime.Object, mode Mode) error {
	_, err := check(obj, mode)
	return err
}

// check validates obj and returns its kind with Validate's answer.
func check(obj runtime.Object, mode Mode) (schema.GroupKind, error) {
	var (
		errs field.ErrorList
		gk   schema.GroupKind
		name string
	)
	switch o := obj.(type) {
	case *v1.Service:
		errs, gk, name = Service(o, mode), kindService, o.Name
	case *discovery.EndpointSlice:
		errs, gk, name = EndpointSlice(o, mode), kindEndpointSlice, o.Name
	case *v1.Node:
		errs, gk, name = Node(o, mode), kindNode, o.Name
	case *networking.ServiceCIDR:
		errs, gk, name = ServiceCIDR(o, mode), kindServiceCIDR, o.Name
	}
	if len(errs) == 0 {
		return gk, nil
	}
	return gk, apierrors.NewInvalid(gk, name, errs)
}

// legacyIP checks an IP address field that predates strict IP validation.
func legacyIP(path *field.Path, value string, mode Mode) field.ErrorList {
	return utilvalidation.IsValidIPForLegacyField(path, value, mode.strict(), nil)
}

// legacyCIDR checks a CIDR field that predates strict CIDR validation.
func legacyCIDR(path *field.Path, value string, mode Mode) field.ErrorList {
	return utilvalidation.IsValidCIDRForLegacyField(path, value, mode.strict(), nil)
}

// endpointIP refuses the addresses the API server refuses as a
// destination (its ValidateEndpointIP, which lives outside apimachinery):
// unspecified, loopback, link-local and link-local multicast. A proxy that
// forwarded to them would reach the node itself or its metadata service.
func endpointIP(path *field.Path, value string) field.ErrorList {
	ip := netutils.ParseIPSloppy(value)
	if ip == nil {
		return field.ErrorList{field.Invalid(path, value, "must be a valid IP address")}
	}
	var errs field.ErrorList
	if ip.IsUnspecified() {
		errs = append(errs, field.Invalid(path, value, fmt.Sprintf("may not be unspecified (%v)", value)))
	}
	if ip.IsLoopback() {
		errs = append(errs, field.Invalid(path, value, "may not be in the loopback range (127.0.0.0/8, ::1/128)"))
	}
	if ip.IsLinkLocalUnicast() {
		errs = append(errs, field.Invalid(path, value, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"))
	}
	if ip.IsLinkLocalMulticast() {
		errs = append(errs, field.Invalid(path, value, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"))
	}
	return errs
}

// portNum checks a port number as the API server does.
func portNum(path *field.Path, port int32) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsValidPortNum(int(port)) {
		errs = append(errs, field.Invalid(path, port, msg))
	}
	return errs
}

// dns1123Label checks a port or host name as the API server does.
func dns1123Label(path *field.Path, value string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Label(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}

// qualifiedName checks an appProtocol or a load balancer class as the API
// server does.
func qualifiedName(path *field.Path, value string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsQualifiedName(value) {
		errs = append(errs, field.Invalid(path, value, msg))
	}
	return errs
}

// supportedProtocols are the port protocols the API server accepts, in
// the order its messages list them.
var supportedProtocols = []v1.Protocol{v1.ProtocolSCTP, v1.ProtocolTCP, v1.ProtocolUDP}

func protocolSupported(p v1.Protocol) bool {
	return p == v1.ProtocolTCP || p == v1.ProtocolUDP || p == v1.ProtocolSCTP
}
