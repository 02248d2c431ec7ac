package affinity

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// ClientIP session affinity bounds, as the API server defaults and validates
// them.
const (
	DefaultClientIPTimeout = 10800 * time.Second
	MaxClientIPTimeout     = 86400 * time.Second
)

// SessionAffinity is a service's normalized session affinity. The zero value
// means none.
type SessionAffinity struct {
	// ClientIP pins a client IP to the endpoint it first reached.
	ClientIP bool
	// Timeout is how long a pin lasts after the client's last packet; it is
	// positive when ClientIP is set and zero otherwise.
	Timeout time.Duration
}

// SessionAffinityOf normalizes spec's session affinity. A missing config or
// timeout takes the API default instead of panicking as upstream does; a
// timeout outside (0, MaxClientIPTimeout] or an unknown type is an error.
func SessionAffinityOf(spec *v1.ServiceSpec) (SessionAffinity, error) {
	panic("unimplemented")
}

// Policy is what endpoint selection needs to know about one service port.
type Policy struct {
	// InternalLocal is internalTrafficPolicy: Local.
	InternalLocal bool
	// ExternalLocal is externalTrafficPolicy: Local on an externally
	// accessible service (LoadBalancer, NodePort, or with externalIPs).
	ExternalLocal bool
	// ExternallyAccessible reports that the port has a node port, a
	// LoadBalancer VIP or an external IP in this family.
	ExternallyAccessible bool
	// TrafficDistribution is spec.trafficDistribution ("" when unset). It
	// is consulted only with Options.DeriveHints.
	TrafficDistribution string
}

// UsesClusterEndpoints reports whether some traffic to the port is routed
// to the cluster-wide endpoint set.
func (p Policy) UsesClusterEndpoints() bool {
	panic("unimplemented")
}

// UsesLocalEndpoints reports whether some traffic to the port is routed
// only to endpoints on this node.
func (p Policy) UsesLocalEndpoints() bool {
	panic("unimplemented")
}

// EndpointInfo is what endpoint selection needs to know about one endpoint.
type EndpointInfo struct {
	Ready       bool
	Serving     bool
	Terminating bool
	// Local is true when the endpoint's node is this node.
	Local bool
	// NodeName and Zone are where the endpoint runs ("" when unknown).
	NodeName string
	Zone     string
	// ZoneHints and NodeHints are the EndpointSlice hints, sorted and
	// de-duplicated; nil when the slice carries none.
	ZoneHints []string
	NodeHints []string
}

// Info returns i itself, so that any type embedding EndpointInfo satisfies
// Endpoint.
func (i *EndpointInfo) Info() *EndpointInfo { return i }

// Endpoint is any endpoint representation that exposes EndpointInfo.
type Endpoint interface {
	Info() *EndpointInfo
}

// Node is the node that selection runs for.
type Node struct {
	Name string
	// Zone is the node's topology.kubernetes.io/zone label.
	Zone string
}

// Options tunes selection. The zero value is upstream kube-proxy.
type Options struct {
	// DeriveHints makes selection honour Policy.TrafficDistribution when no
	// endpoint of the port carries any hint, deriving the hints that the
	// EndpointSlice controller would have written from endpoint zones and
	// nodes. Without it, as upstream, only hints written into slices count.
	DeriveHints bool
}

// Selection is the outcome of Categorize for one service port.
type Selection[E Endpoint] struct {
	// Cluster is the endpoints for Cluster-policy traffic: nil when the
	// policy does not use cluster endpoints, non-nil (possibly empty)
	// otherwise.
	Cluster []E
	// Local is the endpoints for Local-policy traffic; nil when the policy
	// does not use local endpoints or none qualify.
	Local []E
	// AllReachable is every endpoint some traffic may reach: the union of
	// Cluster and Local, in input order.
	AllReachable []E
	// HasAny reports whether the port has any usable endpoint at all,
	// local or remote; without one, traffic is rejected.
	HasAny bool
}

// Categorize chooses, as upstream CategorizeEndpoints does, which of eps
// serve the port's Cluster and Local traffic.
func Categorize[E Endpoint](eps []E, p Policy, node Node, opts Options) Selection[E] {
	panic("unimplemented")
}
