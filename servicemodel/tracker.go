package servicemodel

import (
	"net/netip"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Config configures a Tracker. The zero value tracks IPv4 services that are
// not claimed by another proxy, logging through klog.
type Config struct {
	// Family is the IP family to track; "" means IPv4.
	Family v1.IPFamily
	// ProxyName is this proxy's name for the
	// service.kubernetes.io/service-proxy-name label: services carrying
	// the label are tracked only when it names ProxyName. "" tracks only
	// services without the label, as kube-proxy does.
	ProxyName string
	// Logger receives the reason each skipped service was skipped; the
	// zero value is klog's default logger.
	Logger logr.Logger
	// OnSkip, if set, is called once per skipped object update with a
	// short, bounded reason (for a metric label).
	OnSkip func(reason string)
}

// Tracker accumulates Service updates and hands out snapshots. Its methods
// may be called from any goroutine.
type Tracker struct {
}

// NewTracker returns an empty Tracker.
func NewTracker(cfg Config) *Tracker {
	panic("unimplemented")
}

// Update records a Service update: old nil for an add, new nil for a
// delete. It reports whether the tracker now holds changes not yet checked
// out (from this update or an earlier one). Only normalized content counts:
// a metadata-only update is no change.
func (t *Tracker) Update(old, new *v1.Service) bool {
	panic("unimplemented")
}

// Pending returns the number of services with changes not yet checked out.
func (t *Tracker) Pending() int {
	panic("unimplemented")
}

// Checkout applies the pending changes and returns the new snapshot and what
// changed since the previous Checkout. It costs O(changes).
func (t *Tracker) Checkout() (Map, Changes) {
	panic("unimplemented")
}

// Changes is what one Checkout changed.
type Changes struct {
	// Services is every service with a net change, deletions included.
	Services sets.Set[types.NamespacedName]
	// Ports is every port name added, removed or modified.
	Ports sets.Set[PortName]
	// Stale is the UDP and SCTP frontends that existed before and are gone
	// now, so that conntrack entries to them can be flushed.
	Stale []Frontend
	// HealthCheckNodePorts is the current health-check node port of every
	// service that has one (not only changed ones); it is small.
	HealthCheckNodePorts map[types.NamespacedName]uint16
}

// Frontend is one address a service port is reached at.
type Frontend struct {
	// IP is the cluster IP, external IP or LoadBalancer VIP; invalid for a
	// node port, which is reached on every node address.
	IP       netip.Addr
	Port     uint16
	Protocol v1.Protocol
}
