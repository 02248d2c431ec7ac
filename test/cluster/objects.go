package cluster

import (
	"context"
	"fmt"
	"net"
	"strconv"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Namespace is where the lab's services live.
const Namespace = "default"

// NewService is a service named name exposing port to the pods' PodPort,
// of type ClusterIP unless changed by the caller.
func NewService(name string, port int32) *v1.Service {
	return &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Spec: v1.ServiceSpec{
			Type:  v1.ServiceTypeClusterIP,
			Ports: []v1.ServicePort{{Name: "http", Protocol: v1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(PodPort)}},
		},
	}
}

// SliceName is the name of the one EndpointSlice the lab writes per
// service.
func SliceName(service string) string { return service + "-pk" }

// NewSlice is the EndpointSlice the EndpointSlice controller would write
// for svc with pods as its ready endpoints.
func NewSlice(svc *v1.Service, pods ...*Pod) *discovery.EndpointSlice {
	s := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: svc.Namespace, Name: SliceName(svc.Name),
			Labels: map[string]string{
				discovery.LabelServiceName: svc.Name,
				discovery.LabelManagedBy:   "endpointslice-controller.k8s.io",
			},
		},
		AddressType: discovery.AddressTypeIPv4,
	}
	for _, sp := range svc.Spec.Ports {
		s.Ports = append(s.Ports, discovery.EndpointPort{Name: ptr.To(sp.Name), Protocol: ptr.To(sp.Protocol), Port: ptr.To(int32(sp.TargetPort.IntValue()))})
	}
	for _, p := range pods {
		s.Endpoints = append(s.Endpoints, PodEndpoint(p))
	}
	return s
}

// PodEndpoint is the ready endpoint of pod p.
func PodEndpoint(p *Pod) discovery.Endpoint {
	return discovery.Endpoint{
		Addresses:  []string{p.IP},
		Conditions: discovery.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		NodeName:   ptr.To(p.Node.Name),
		TargetRef:  &v1.ObjectReference{Kind: "Pod", Namespace: Namespace, Name: p.Name},
	}
}

// Apply creates svc and its slice of pods, or updates both when they exist,
// and returns the service as the API server stored it (with its cluster IP
// and node ports).
func Apply(ctx context.Context, c kubernetes.Interface, svc *v1.Service, pods ...*Pod) (*v1.Service, error) {
	out, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *v1.Service
		if cur, err = c.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{}); err == nil {
			upd := cur.DeepCopy()
			spec := svc.Spec
			spec.ClusterIP, spec.ClusterIPs = cur.Spec.ClusterIP, cur.Spec.ClusterIPs
			upd.Spec = spec
			out, err = c.CoreV1().Services(svc.Namespace).Update(ctx, upd, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", svc.Name, err)
	}
	return out, WriteSlice(ctx, c, NewSlice(out, pods...))
}

// WriteSlice creates or replaces slice.
func WriteSlice(ctx context.Context, c kubernetes.Interface, slice *discovery.EndpointSlice) error {
	api := c.DiscoveryV1().EndpointSlices(slice.Namespace)
	_, err := api.Create(ctx, slice, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var cur *discovery.EndpointSlice
		if cur, err = api.Get(ctx, slice.Name, metav1.GetOptions{}); err == nil {
			slice.ResourceVersion = cur.ResourceVersion
			_, err = api.Update(ctx, slice, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		return fmt.Errorf("endpointslice %s: %w", slice.Name, err)
	}
	return nil
}

// Delete deletes the service name and its slice.
func Delete(ctx context.Context, c kubernetes.Interface, name string) error {
	if err := c.CoreV1().Services(Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("service %s: %w", name, err)
	}
	if err := c.DiscoveryV1().EndpointSlices(Namespace).Delete(ctx, SliceName(name), metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("endpointslice %s: %w", SliceName(name), err)
	}
	return nil
}

// ClusterAddr is host:port of svc's first port on its cluster IP.
func ClusterAddr(svc *v1.Service) string {
	return net.JoinHostPort(svc.Spec.ClusterIP, strconv.Itoa(int(svc.Spec.Ports[0].Port)))
}

// NodePortAddr is host:port of svc's first node port on node n.
func NodePortAddr(svc *v1.Service, n *Node) string {
	return net.JoinHostPort(n.IP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
}
