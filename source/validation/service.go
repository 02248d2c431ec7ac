package validation

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metavalidation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"
)

// maxAffinitySeconds is the longest ClientIP affinity timeout the API
// server accepts.
const maxAffinitySeconds = 86400

// The values the API server accepts, sorted as its messages list them.
var (
	supportedServiceTypes = []v1.ServiceType{v1.ServiceTypeClusterIP, v1.ServiceTypeExternalName,
		v1.ServiceTypeLoadBalancer, v1.ServiceTypeNodePort}
	supportedAffinities       = []v1.ServiceAffinity{v1.ServiceAffinityClientIP, v1.ServiceAffinityNone}
	supportedFamilies         = []v1.IPFamily{v1.IPv4Protocol, v1.IPv6Protocol}
	supportedFamilyPolicies   = []v1.IPFamilyPolicy{v1.IPFamilyPolicyPreferDualStack, v1.IPFamilyPolicyRequireDualStack, v1.IPFamilyPolicySingleStack}
	supportedExternalPolicies = []v1.ServiceExternalTrafficPolicy{v1.ServiceExternalTrafficPolicyCluster, v1.ServiceExternalTrafficPolicyLocal}
	supportedInternalPolicies = []v1.ServiceInternalTrafficPolicy{v1.ServiceInternalTrafficPolicyCluster, v1.ServiceInternalTrafficPolicyLocal}
	supportedIPModes          = []v1.LoadBalancerIPMode{v1.LoadBalancerIPModeProxy, v1.LoadBalancerIPModeVIP}
	// Not sorted: the API server lists them in this order.
	supportedTrafficDistributions = []string{v1.ServiceTrafficDistributionPreferClose,
		v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode}
)

// service is a Service as the API server validates it: after the
// defaults it would apply and the cluster IPs it would fill in.
type service struct {
	*v1.Service
	mode Mode
	// typ is spec.type, ClusterIP when unset.
	typ v1.ServiceType
	// clusterIPs is spec.clusterIPs, or spec.clusterIP alone when only it
	// is set (the API server fills clusterIPs in so on create).
	clusterIPs []string
}

func (s *service) headless() bool {
	return len(s.clusterIPs) == 1 && s.clusterIPs[0] == v1.ClusterIPNone
}

func (s *service) externallyAccessible() bool {
	return s.typ == v1.ServiceTypeLoadBalancer || s.typ == v1.ServiceTypeNodePort ||
		(s.typ == v1.ServiceTypeClusterIP && len(s.Spec.ExternalIPs) > 0)
}

func (s *service) needsHealthCheck() bool {
	return s.typ == v1.ServiceTypeLoadBalancer && s.Spec.ExternalTrafficPolicy == v1.ServiceExternalTrafficPolicyLocal
}

var (
	metaPath = field.NewPath("metadata")
	specPath = field.NewPath("spec")
)

// Service returns the errors the API server would give svc: what
// ValidateServiceCreate checks (Create) or would have checked when it was
// stored (Stored), and what a status update checks in
// status.loadBalancer. See the package documentation for where it is
// stricter or looser.
func Service(svc *v1.Service, mode Mode) field.ErrorList {
	s := &service{Service: svc, mode: mode, typ: svc.Spec.Type, clusterIPs: svc.Spec.ClusterIPs}
	if s.typ == "" {
		s.typ = v1.ServiceTypeClusterIP
	}
	if len(s.clusterIPs) == 0 && svc.Spec.ClusterIP != "" {
		s.clusterIPs = []string{svc.Spec.ClusterIP}
	}
	errs := apivalidation.ValidateObjectMeta(&svc.ObjectMeta, true, apivalidation.NameIsDNSLabel, metaPath)
	errs = append(errs, s.typeFields()...)
	errs = append(errs, s.ports()...)
	if svc.Spec.Selector != nil {
		errs = append(errs, metavalidation.ValidateLabels(svc.Spec.Selector, specPath.Child("selector"))...)
	}
	errs = append(errs, s.sessionAffinity()...)
	errs = append(errs, s.clusterIPFields()...)
	errs = append(errs, s.externalIPs()...)
	errs = append(errs, s.sourceRanges()...)
	errs = append(errs, s.loadBalancerFields()...)
	errs = append(errs, s.trafficPolicies()...)
	errs = append(errs, s.loadBalancerStatus()...)
	return errs
}

// typeFields checks spec.type and what depends on it alone.
func (s *service) typeFields() field.ErrorList {
	var errs field.ErrorList
	spec := &s.Spec
	topologyHints, hintsSet := s.Annotations[v1.DeprecatedAnnotationTopologyAwareHints]
	topologyMode, modeSet := s.Annotations[v1.AnnotationTopologyMode]
	if hintsSet && modeSet && topologyHints != topologyMode {
		errs = append(errs, field.Invalid(metaPath.Child("annotations").Key(v1.AnnotationTopologyMode), topologyMode,
			fmt.Sprintf("must match annotations[%s] when both are specified", v1.DeprecatedAnnotationTopologyAwareHints)))
	}
	if len(spec.Ports) == 0 && !s.headless() && s.typ != v1.ServiceTypeExternalName {
		errs = append(errs, field.Required(specPath.Child("ports"), ""))
	}
	switch s.typ {
	case v1.ServiceTypeLoadBalancer, v1.ServiceTypeNodePort:
		if s.headless() {
			errs = append(errs, field.Invalid(specPath.Child("clusterIPs").Index(0), s.clusterIPs[0],
				fmt.Sprintf("may not be set to 'None' for %s services", s.typ)))
		}
	case v1.ServiceTypeExternalName:
		if len(s.clusterIPs) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("clusterIPs"), "may not be set for ExternalName services"))
		}
		if len(spec.IPFamilies) > 0 {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilies"), "may not be set for ExternalName services"))
		}
		if spec.IPFamilyPolicy != nil {
			errs = append(errs, field.Forbidden(specPath.Child("ipFamilyPolicy"), "may not be set for ExternalName services"))
		}
		// A CNAME may end with a dot to say it is fully qualified.
		if cname := strings.TrimSuffix(spec.ExternalName, "."); cname != "" {
			for _, msg := range utilvalidation.IsDNS1123Subdomain(cname) {
				errs = append(errs, field.Invalid(specPath.Child("externalName"), cname, msg))
			}
		} else {
			errs = append(errs, field.Required(specPath.Child("externalName"), ""))
		}
	case v1.ServiceTypeClusterIP:
	default:
		errs = append(errs, field.NotSupported(specPath.Child("type"), spec.Type, supportedServiceTypes))
	}
	return errs
}

// servicePortKey prints a duplicate (protocol, port) pair as the API
// server's own ServicePort type does in its message: Go field names and
// every field, as encoding/json renders a struct without tags.
type servicePortKey struct {
	Name        string
	Protocol    v1.Protocol
	AppProtocol *string
	Port        int32
	TargetPort  intstr.IntOrString
	NodePort    int32
}

// ports checks spec.ports, each and together.
func (s *service) ports() field.ErrorList {
	var errs field.ErrorList
	ports := s.Spec.Ports
	names := make(map[string]bool, len(ports))
	numbers := make(map[servicePortKey]bool, len(ports))
	nodePorts := make(map[servicePortKey]bool, len(ports))
	for i := range ports {
		p := &ports[i]
		path := specPath.Child("ports").Index(i)
		switch {
		case p.Name == "" && len(ports) > 1:
			errs = append(errs, field.Required(path.Child("name"), ""))
		case p.Name != "":
			errs = append(errs, dns1123Label(path.Child("name"), p.Name)...)
			if names[p.Name] {
				errs = append(errs, field.Duplicate(path.Child("name"), p.Name))
			}
			names[p.Name] = true
		}
		errs = append(errs, portNum(path.Child("port"), p.Port)...)
		// An empty protocol is TCP, as the API server defaults it.
		proto := p.Protocol
		if proto == "" {
			proto = v1.ProtocolTCP
		} else if !protocolSupported(proto) {
			errs = append(errs, field.NotSupported(path.Child("protocol"), proto, supportedProtocols))
		}
		errs = append(errs, targetPort(path.Child("targetPort"), p.TargetPort)...)
		if p.AppProtocol != nil {
			errs = append(errs, qualifiedName(path.Child("appProtocol"), *p.AppProtocol)...)
		}
		if p.NodePort != 0 {
			// The node port range is the API server's to know; no
			// range reaches past a port number.
			errs = append(errs, portNum(path.Child("nodePort"), p.NodePort)...)
			if s.typ == v1.ServiceTypeClusterIP {
				errs = append(errs, field.Forbidden(path.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
			}
			key := servicePortKey{Protocol: proto, NodePort: p.NodePort}
			if nodePorts[key] {
				errs = append(errs, field.Duplicate(path.Child("nodePort"), p.NodePort))
			}
			nodePorts[key] = true
		}
		key := servicePortKey{Protocol: proto, Port: p.Port}
		if numbers[key] {
			errs = append(errs, field.Duplicate(path, key))
		}
		numbers[key] = true
	}
	return errs
}

// targetPort checks a target port; the zero value is the port itself, as
// the API server defaults it.
func targetPort(path *field.Path, tp intstr.IntOrString) field.ErrorList {
	var errs field.ErrorList
	switch {
	case tp == intstr.FromInt32(0) || tp == intstr.FromString(""):
	case tp.Type == intstr.Int:
		errs = append(errs, portNum(path, tp.IntVal)...)
	case tp.Type == intstr.String:
		for _, msg := range utilvalidation.IsValidPortName(tp.StrVal) {
			errs = append(errs, field.Invalid(path, tp.StrVal, msg))
		}
	}
	return errs
}

// sessionAffinity checks spec.sessionAffinity and its timeout. A missing
// affinity, or ClientIP without a timeout, is what the API server
// defaults (None, 10800 s); a config beside None it clears.
func (s *service) sessionAffinity() field.ErrorList {
	spec := &s.Spec
	switch spec.SessionAffinity {
	case "", v1.ServiceAffinityNone:
		return nil
	case v1.ServiceAffinityClientIP:
	default:
		return field.ErrorList{field.NotSupported(specPath.Child("sessionAffinity"), spec.SessionAffinity, supportedAffinities)}
	}
	c := spec.SessionAffinityConfig
	if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
		return nil
	}
	if t := c.ClientIP.TimeoutSeconds; *t <= 0 || *t > maxAffinitySeconds {
		return field.ErrorList{field.Invalid(specPath.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), t,
			fmt.Sprintf("must be greater than 0 and less than %d", maxAffinitySeconds))}
	}
	return nil
}

// externalIPs checks spec.externalIPs: addresses a proxy may answer on,
// never special ones.
func (s *service) externalIPs() field.ErrorList {
	var errs field.ErrorList
	for i, ip := range s.Spec.ExternalIPs {
		path := specPath.Child("externalIPs").Index(i)
		if ipErrs := legacyIP(path, ip, s.mode); len(ipErrs) != 0 {
			errs = append(errs, ipErrs...)
			continue
		}
		errs = append(errs, endpointIP(path, ip)...)
	}
	return errs
}

// sourceRanges checks spec.loadBalancerSourceRanges, or the annotation
// that stands in for it. Padding is tolerated, as it always was.
func (s *service) sourceRanges() field.ErrorList {
	var errs field.ErrorList
	if ranges := s.Spec.LoadBalancerSourceRanges; len(ranges) > 0 {
		// The API server names the field so, capital L included.
		path := specPath.Child("LoadBalancerSourceRanges")
		if s.typ != v1.ServiceTypeLoadBalancer {
			errs = append(errs, field.Forbidden(path, "may only be used when `type` is 'LoadBalancer'"))
		}
		for i, r := range ranges {
			errs = append(errs, legacyCIDR(path.Index(i), strings.TrimSpace(r), s.mode)...)
		}
		return errs
	}
	val, ok := s.Annotations[v1.AnnotationLoadBalancerSourceRangesKey]
	if !ok {
		return nil
	}
	path := metaPath.Child("annotations").Key(v1.AnnotationLoadBalancerSourceRangesKey)
	if s.typ != v1.ServiceTypeLoadBalancer {
		errs = append(errs, field.Forbidden(path, "may only be used when `type` is 'LoadBalancer'"))
	}
	if val = strings.TrimSpace(val); val != "" {
		for r := range strings.SplitSeq(val, ",") {
			errs = append(errs, legacyCIDR(path, strings.TrimSpace(r), s.mode)...)
		}
	}
	return errs
}

// loadBalancerFields checks the fields only a LoadBalancer may set.
func (s *service) loadBalancerFields() field.ErrorList {
	var errs field.ErrorList
	spec := &s.Spec
	lb := s.typ == v1.ServiceTypeLoadBalancer
	if spec.AllocateLoadBalancerNodePorts != nil && !lb {
		errs = append(errs, field.Forbidden(specPath.Child("allocateLoadBalancerNodePorts"), "may only be used when `type` is 'LoadBalancer'"))
	}
	if spec.LoadBalancerClass != nil {
		if lb {
			errs = append(errs, qualifiedName(specPath.Child("loadBalancerClass"), *spec.LoadBalancerClass)...)
		} else {
			errs = append(errs, field.Forbidden(specPath.Child("loadBalancerClass"), "may only be used when `type` is 'LoadBalancer'"))
		}
	}
	return errs
}

// trafficPolicies checks the external and internal traffic policies, the
// health check node port and the traffic distribution. An unset policy
// is what the API server defaults (Cluster), an unset health check node
// port what it allocates.
func (s *service) trafficPolicies() field.ErrorList {
	var errs field.ErrorList
	spec := &s.Spec
	etp := spec.ExternalTrafficPolicy
	switch {
	case !s.externallyAccessible() && etp != "":
		errs = append(errs, field.Invalid(specPath.Child("externalTrafficPolicy"), etp, "may only be set for externally-accessible services"))
	case etp != "" && etp != v1.ServiceExternalTrafficPolicyCluster && etp != v1.ServiceExternalTrafficPolicyLocal:
		errs = append(errs, field.NotSupported(specPath.Child("externalTrafficPolicy"), etp, supportedExternalPolicies))
	}
	hc := spec.HealthCheckNodePort
	switch {
	case !s.needsHealthCheck() && hc != 0:
		errs = append(errs, field.Invalid(specPath.Child("healthCheckNodePort"), hc,
			"may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'"))
	case hc != 0:
		errs = append(errs, portNum(specPath.Child("healthCheckNodePort"), hc)...)
	}
	if itp := spec.InternalTrafficPolicy; itp != nil && *itp != v1.ServiceInternalTrafficPolicyCluster && *itp != v1.ServiceInternalTrafficPolicyLocal {
		errs = append(errs, field.NotSupported(specPath.Child("internalTrafficPolicy"), *itp, supportedInternalPolicies))
	}
	if td := spec.TrafficDistribution; td != nil {
		switch *td {
		case v1.ServiceTrafficDistributionPreferClose, v1.ServiceTrafficDistributionPreferSameZone, v1.ServiceTrafficDistributionPreferSameNode:
		default:
			errs = append(errs, field.NotSupported(specPath.Child("trafficDistribution"), *td, supportedTrafficDistributions))
		}
	}
	return errs
}

// loadBalancerStatus checks status.loadBalancer as a status update would
// be checked: manifests carry the status a cloud controller would write.
// A missing ipMode is what the API server defaults (VIP).
func (s *service) loadBalancerStatus() field.ErrorList {
	ingress := s.Status.LoadBalancer.Ingress
	path := field.NewPath("status", "loadBalancer", "ingress")
	if s.typ != v1.ServiceTypeLoadBalancer && len(ingress) != 0 {
		return field.ErrorList{field.Forbidden(path, "may only be used when `spec.type` is 'LoadBalancer'")}
	}
	var errs field.ErrorList
	for i := range ingress {
		ing := &ingress[i]
		p := path.Index(i)
		if ing.IP != "" {
			errs = append(errs, legacyIP(p.Child("ip"), ing.IP, s.mode)...)
		}
		switch mode := ing.IPMode; {
		case mode == nil:
		case ing.IP == "":
			errs = append(errs, field.Forbidden(p.Child("ipMode"), "may not be specified when `ip` is not set"))
		case *mode != v1.LoadBalancerIPModeVIP && *mode != v1.LoadBalancerIPModeProxy:
			errs = append(errs, field.NotSupported(p.Child("ipMode"), mode, supportedIPModes))
		}
		if ing.Hostname != "" {
			for _, msg := range utilvalidation.IsDNS1123Subdomain(ing.Hostname) {
				errs = append(errs, field.Invalid(p.Child("hostname"), ing.Hostname, msg))
			}
			if netutils.ParseIPSloppy(ing.Hostname) != nil {
				errs = append(errs, field.Invalid(p.Child("hostname"), ing.Hostname, "must be a DNS name, not an IP address"))
			}
		}
	}
	return errs
}
