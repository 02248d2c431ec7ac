package affinity

import (
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ClientIP session affinity bounds, as the API server defaults and validates
// them.
const (
	DefaultClientIPTimeout = 10800 * time.Second
	MaxClientIPTimeout     = 86400 * time.Second
)

// ErrInvalidSessionAffinity is wrapped by every error SessionAffinityOf
// returns, so that callers can skip and count such services with errors.Is.
var ErrInvalidSessionAffinity = errors.New("invalid session affinity")

// InvalidError describes a session affinity the API server would have
// rejected. It unwraps to ErrInvalidSessionAffinity.
type InvalidError struct {
	// Field is the offending spec field, as in API validation messages.
	Field string
	// Value is the rejected value.
	Value any
	// Reason says what a valid value looks like.
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("%v: %s: %v: %s", ErrInvalidSessionAffinity, e.Field, e.Value, e.Reason)
}

// Unwrap returns ErrInvalidSessionAffinity.
func (e *InvalidError) Unwrap() error { return ErrInvalidSessionAffinity }

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
// The returned error is an *InvalidError.
func SessionAffinityOf(spec *v1.ServiceSpec) (SessionAffinity, error) {
	if spec == nil {
		return SessionAffinity{}, nil
	}
	switch spec.SessionAffinity {
	case "", v1.ServiceAffinityNone:
		// API defaulting drops any config left on a None service, so a
		// stray config here is not an error.
		return SessionAffinity{}, nil
	case v1.ServiceAffinityClientIP:
	default:
		return SessionAffinity{}, &InvalidError{
			Field:  "spec.sessionAffinity",
			Value:  string(spec.SessionAffinity),
			Reason: fmt.Sprintf("supported values: %q, %q", v1.ServiceAffinityClientIP, v1.ServiceAffinityNone),
		}
	}
	timeout := DefaultClientIPTimeout
	if c := spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		secs := *c.ClientIP.TimeoutSeconds
		if secs <= 0 || time.Duration(secs)*time.Second > MaxClientIPTimeout {
			return SessionAffinity{}, &InvalidError{
				Field:  "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
				Value:  secs,
				Reason: fmt.Sprintf("must be greater than 0 and at most %d", int64(MaxClientIPTimeout/time.Second)),
			}
		}
		timeout = time.Duration(secs) * time.Second
	}
	return SessionAffinity{ClientIP: true, Timeout: timeout}, nil
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
	// An externally accessible port needs the cluster set even under
	// externalTrafficPolicy: Local, because pod- and host-originated
	// external traffic is short-circuited to it.
	return !p.InternalLocal || p.ExternallyAccessible
}

// UsesLocalEndpoints reports whether some traffic to the port is routed
// only to endpoints on this node.
func (p Policy) UsesLocalEndpoints() bool {
	return p.InternalLocal || (p.ExternalLocal && p.ExternallyAccessible)
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
