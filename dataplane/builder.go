package dataplane

import (
	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
)

// BuilderConfig configures a Builder. The zero value builds IPv4 States for
// a node with no name, with default Settings.
type BuilderConfig struct {
	// Families are the IP families to build States for; nil means IPv4.
	Families []v1.IPFamily
	// NodeName is this node's name: endpoints on it are local, and the Node
	// object of that name supplies zone, IPs and pod CIDRs.
	NodeName string
	// ProxyName is passed to servicemodel.Config.ProxyName.
	ProxyName string
	// Settings are copied into every State; per-family CIDR lists are
	// filtered to the State's family.
	Settings Settings
	Logger   logr.Logger
	// OnSkip, if set, is called with the kind ("Service", "EndpointSlice",
	// "Node") and a short reason whenever an object or part of one is
	// skipped as invalid.
	OnSkip func(kind, reason string)
}

// Builder turns Services, EndpointSlices and this Node into one State per IP
// family. Update methods may be called from any goroutine; Build must not be
// called concurrently with itself.
type Builder struct {
}

// NewBuilder returns a Builder with one servicemodel.Tracker and one
// endpoints.Tracker per family.
func NewBuilder(cfg BuilderConfig) *Builder {
	panic("unimplemented")
}

// UpdateService records a Service update (old nil: add; new nil: delete) for
// every family. It reports whether a Build is now due.
func (b *Builder) UpdateService(old, new *v1.Service) bool {
	panic("unimplemented")
}

// UpdateEndpointSlice records an EndpointSlice update for the family of its
// address type. It reports whether a Build is now due.
func (b *Builder) UpdateEndpointSlice(old, new *discovery.EndpointSlice) bool {
	panic("unimplemented")
}

// UpdateNode records this node's object (nil: deleted). Objects of other
// nodes are ignored. It reports whether a Build is now due.
func (b *Builder) UpdateNode(node *v1.Node) bool {
	panic("unimplemented")
}

// Build checks out every tracker and returns the new States, one per
// configured family in configuration order, and what became stale.
func (b *Builder) Build() Build {
	panic("unimplemented")
}

// Build is the result of one Builder.Build.
type Build struct {
	States []*State
	// Changes holds, per family (same order as States), what the trackers
	// reported since the previous Build.
	Changes []Changes
}

// Changes is what changed in one family between two Builds.
type Changes struct {
	Services  servicemodel.Changes
	Endpoints endpoints.Changes
}
