package validation

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	networking "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	netutils "k8s.io/utils/net"
)

// FuzzValidate builds a Service, an EndpointSlice, a Node and a
// ServiceCIDR from the fuzzer's values and checks that none panics the
// validator or is modified by it, that every refusal is the API server's
// Invalid error with a field path on each cause, and that what passes can
// be proxied: names a rule can hold, port numbers, protocols, cluster IPs
// and endpoint addresses a dataplane writes rather than skips.
func FuzzValidate(f *testing.F) {
	f.Add("web", "ns", "app", "web", "http", int32(80), "TCP", "8080", "10.96.0.10", "10.244.1.5", "node-a", "10.244.1.0/24", false)
	f.Add("web", "ns", "app", "web", "http", int32(80), "", "http", "fd00::10", "fd00::5", "node-a", "fd00:10:244::/64", true)
	f.Fuzz(func(t *testing.T, name, namespace, labelKey, labelValue, portName string, port int32, protocol, target,
		ip, addr, nodeName, cidr string, stored bool,
	) {
		mode := Create
		if stored {
			mode = Stored
		}
		svc := validService()
		svc.Name, svc.Namespace, svc.Labels = name, namespace, map[string]string{labelKey: labelValue}
		p := &svc.Spec.Ports[0]
		p.Name, p.Port, p.Protocol = portName, port, v1.Protocol(protocol)
		p.TargetPort = intstr.Parse(target)
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs, svc.Spec.IPFamilies = ip, nil, nil
		svc.Spec.ExternalIPs = []string{addr}
		if refused := check1(t, svc, mode); !refused {
			proxiable(t, svc.Name, svc.Namespace, p.Name)
			usableAddr(t, ip, true)
			usableAddr(t, addr, false)
			if p.Port < 1 || p.Port > 65535 || !protocolSupported(p.Protocol) && p.Protocol != "" {
				t.Fatalf("accepted port %d/%s", p.Port, p.Protocol)
			}
		}

		es := validSlice()
		es.Namespace, es.Labels = namespace, map[string]string{discovery.LabelServiceName: name}
		if strings.Contains(addr, ":") {
			es.AddressType = discovery.AddressTypeIPv6
		}
		es.Endpoints[0].Addresses[0], es.Endpoints[0].NodeName = addr, &nodeName
		es.Ports[0].Name, es.Ports[0].Protocol = &portName, (*v1.Protocol)(&protocol)
		if refused := check1(t, es, mode); !refused {
			proxiable(t, name, es.Namespace, portName)
			usableAddr(t, addr, false)
		}

		node := validNode()
		node.Name, node.Labels = nodeName, map[string]string{v1.LabelTopologyZone: labelValue}
		node.Spec.PodCIDRs = []string{cidr}
		check1(t, node, mode)

		sc := &networking.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: nodeName}, Spec: networking.ServiceCIDRSpec{CIDRs: []string{cidr}}}
		check1(t, sc, mode)
	})
}

// check1 validates obj, checks the error's form and that obj is as it
// was, and reports whether obj was refused.
func check1(t *testing.T, obj runtime.Object, mode Mode) bool {
	t.Helper()
	before := obj.DeepCopyObject()
	err := Validate(obj, mode)
	if !equality.Semantic.DeepEqual(before, obj) {
		t.Fatalf("Validate modified the %T", obj)
	}
	if err == nil {
		return false
	}
	status, ok := err.(*apierrors.StatusError)
	if !ok || !apierrors.IsInvalid(err) {
		t.Fatalf("Validate = %T %v, want an Invalid *StatusError", err, err)
	}
	causes := status.Status().Details.Causes
	if len(causes) == 0 {
		t.Fatalf("Validate = %v with no causes", err)
	}
	for _, c := range causes {
		if c.Field == "" {
			t.Fatalf("cause %+v names no field", c)
		}
	}
	return true
}

// proxiable fails unless the names are DNS labels (a port name may be
// empty): what every dataplane can write into its rules.
func proxiable(t *testing.T, name, namespace, portName string) {
	t.Helper()
	for _, s := range []string{name, namespace, portName} {
		if s == "" && s == portName {
			continue
		}
		if len(s) == 0 || len(s) > 63 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			t.Fatalf("accepted name %q", s)
		}
	}
}

// usableAddr fails unless s is an address a proxy may forward to or
// answer on; a cluster IP may also be unset or None, and may be special.
func usableAddr(t *testing.T, s string, clusterIP bool) {
	t.Helper()
	if clusterIP && (s == "" || s == v1.ClusterIPNone) {
		return
	}
	ip := netutils.ParseIPSloppy(s)
	switch {
	case ip == nil:
		t.Fatalf("accepted address %q", s)
	case !clusterIP && (ip.IsUnspecified() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()):
		t.Fatalf("accepted address %q", s)
	}
}
