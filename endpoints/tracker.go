package endpoints

import (
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Config configures a Tracker. The zero value tracks IPv4 slices with no
// endpoint counted as local, logging through klog.
type Config struct {
	// Family is the IP family to track; "" means IPv4. Slices of another
	// address type (FQDN included) are ignored.
	Family v1.IPFamily
	// NodeName is this node's name; endpoints whose nodeName equals it are
	// local. "" makes no endpoint local.
	NodeName string
	// Logger receives the reason each skipped slice, port or endpoint was
	// skipped; the zero value is klog's default logger.
	Logger logr.Logger
	// OnSkip, if set, is called once per skipped object with a short,
	// bounded reason (for a metric label).
	OnSkip func(reason string)
}

// Tracker caches EndpointSlices, merges every slice of a service, and hands
// out snapshots. Its methods may be called from any goroutine.
type Tracker struct {
}

// NewTracker returns an empty Tracker.
func NewTracker(cfg Config) *Tracker {
	panic("unimplemented")
}

// Update records an EndpointSlice update: old nil for an add, new nil for a
// delete. It reports whether this update changed what the next Checkout will
// return. Only merged content counts: a metadata-only update or reordered
// endpoints are no change.
func (t *Tracker) Update(old, new *discovery.EndpointSlice) bool {
	panic("unimplemented")
}

// Pending returns the number of services with changes not yet checked out.
func (t *Tracker) Pending() int {
	panic("unimplemented")
}

// Checkout applies the pending changes and returns the new snapshot and what
// changed since the previous Checkout. It costs O(changed services).
func (t *Tracker) Checkout() (Map, Changes) {
	panic("unimplemented")
}

// Changes is what one Checkout changed.
type Changes struct {
	// Services is every service whose merged endpoints changed.
	Services sets.Set[types.NamespacedName]
	// Ports is every port name whose endpoint list changed.
	Ports sets.Set[servicemodel.PortName]
	// Stale is the UDP and SCTP endpoints that were serving a port and no
	// longer are, so that conntrack entries through them can be flushed.
	Stale []StaleEndpoint
	// LocalReady is the current health-check count of every changed
	// service (0 for one that lost all endpoints).
	LocalReady map[types.NamespacedName]int
	// TriggerTimes is, per changed service, the
	// endpoints.kubernetes.io/last-change-trigger-time values seen since
	// the previous Checkout, for network programming latency.
	TriggerTimes map[types.NamespacedName][]time.Time
}

// StaleEndpoint is an endpoint that stopped serving a port.
type StaleEndpoint struct {
	Port servicemodel.PortName
	Addr netip.AddrPort
}
