package servicemodel

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/internal/logtext"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Config configures a Tracker. The zero value tracks IPv4 services that are
// not claimed by another proxy, logging nothing.
type Config struct {
	// Family is the IP family to track; "" means IPv4.
	Family v1.IPFamily
	// ProxyName is this proxy's name for the
	// service.kubernetes.io/service-proxy-name label: services carrying
	// the label are tracked only when it names ProxyName. "" tracks only
	// services without the label, as kube-proxy does.
	ProxyName string
	// Logger receives the reason each skipped service or part of one was
	// skipped; the zero value (logr.Discard()) logs nothing.
	Logger logr.Logger
	// OnSkip, if set, is called on every Update once per skipped service,
	// port, address or source range, with one of the Reason constants (a
	// bounded set, for a metric label). Update calls it synchronously,
	// before it takes the Tracker's lock.
	OnSkip func(reason string)
}

// Tracker accumulates Service updates and hands out snapshots. Its methods
// may be called from any goroutine.
type Tracker struct {
	family    v1.IPFamily
	proxyName string
	logger    logr.Logger
	onSkip    func(reason string)

	mu sync.Mutex
	// applied is the snapshot the last Checkout returned.
	applied Map
	// pending holds, per service whose normalized ports differ from
	// applied, the ports it will have after the next Checkout (nil for a
	// deletion).
	pending map[types.NamespacedName][]*ServicePort
	// healthCheckNodePorts mirrors applied, so that Checkout need not scan
	// every service. Every Changes shares it, so it is never written: a
	// Checkout that changes it writes a copy.
	healthCheckNodePorts map[types.NamespacedName]uint16
}

// NewTracker returns an empty Tracker.
func NewTracker(cfg Config) *Tracker {
	t := &Tracker{
		family:               cfg.Family,
		proxyName:            cfg.ProxyName,
		logger:               cfg.Logger,
		onSkip:               cfg.OnSkip,
		pending:              map[types.NamespacedName][]*ServicePort{},
		healthCheckNodePorts: map[types.NamespacedName]uint16{},
	}
	if t.family == "" {
		t.family = v1.IPv4Protocol
	}
	return t
}

// Update records a Service update: old nil for an add, new nil for a
// delete. It reports whether the tracker now holds changes not yet checked
// out (from this update or an earlier one). Only normalized content counts:
// a metadata-only update is no change.
//
// new is normalized at once, so that what it has that cannot be proxied is
// logged and reported to Config.OnSkip once per update. old only names the
// service on a delete: the tracker compares with what it last checked out,
// not with old.
func (t *Tracker) Update(old, new *v1.Service) bool {
	svc := new
	if svc == nil {
		svc = old
	}
	if svc == nil {
		return false
	}
	nn := types.NamespacedName{Namespace: svc.Namespace, Name: svc.Name}
	ports, err := Normalize(new, t.family, t.proxyName)
	if err != nil {
		t.report(err)
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	if slices.EqualFunc(t.applied.Service(nn), ports, (*ServicePort).Equal) {
		delete(t.pending, nn)
	} else {
		t.pending[nn] = ports
	}
	return len(t.pending) > 0
}

// maxLoggedSkips bounds the log lines one Update writes, so that a huge
// object full of bad entries cannot flood the log; OnSkip still sees all.
const maxLoggedSkips = 10

// report logs and counts what Normalize skipped. Services that are not
// proxied by design (headless, ExternalName, the other family, another
// proxy's) are routine and logged only at high verbosity. The SkipError's
// own fields are logged, bounded, rather than its message, which quotes
// them whole.
func (t *Tracker) report(err error) {
	_, whole := err.(*SkipError)
	skips := Skips(err)
	for i, se := range skips {
		if t.onSkip != nil {
			t.onSkip(se.Reason)
		}
		svc := logtext.Name(se.Service)
		switch {
		case i >= maxLoggedSkips:
		case se.Reason == ReasonOtherProxy, se.Reason == ReasonExternalName, se.Reason == ReasonHeadless,
			se.Reason == ReasonNoClusterIP, se.Reason == ReasonOtherFamily:
			t.logger.V(4).Info("Service not proxied", "service", svc, "family", t.family, "reason", se.Reason)
		case whole:
			t.logger.Error(logtext.Error(se.Err), "Ignoring invalid service", "service", svc, "family", t.family,
				"reason", se.Reason, "field", se.Field, "value", logtext.String(se.Value))
		default:
			t.logger.Error(logtext.Error(se.Err), "Ignoring invalid part of service", "service", svc, "family", t.family,
				"reason", se.Reason, "field", se.Field, "value", logtext.String(se.Value))
		}
	}
	if n := len(skips) - maxLoggedSkips; n > 0 {
		t.logger.Error(nil, "Ignoring more invalid parts of service", "service", logtext.Name(skips[0].Service), "family", t.family, "count", n)
	}
}

// Pending returns the number of services with changes not yet checked out.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}

// Checkout applies the pending changes and returns the new snapshot and what
// changed since the previous Checkout. It costs O(changes).
func (t *Tracker) Checkout() (Map, Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Sized for the pending services (most have one port), so that the
	// initial sync's sets do not grow step by step.
	ch := Changes{
		Services: make(sets.Set[types.NamespacedName], len(t.pending)),
		Ports:    make(sets.Set[PortName], len(t.pending)),
	}
	edit := t.applied.edit()
	copied := false
	for nn, cur := range t.pending {
		prev := t.applied.Service(nn)
		ch.Services.Insert(nn)
		diffPortNames(prev, cur, ch.Ports)
		ch.Stale = appendStale(ch.Stale, prev, cur)
		edit.withService(nn, cur)
		// Every port of a service carries the service's health-check port.
		var hc uint16
		if len(cur) != 0 {
			hc = cur[0].HealthCheckNodePort
		}
		if old, had := t.healthCheckNodePorts[nn]; old != hc || had != (hc != 0) {
			if !copied {
				t.healthCheckNodePorts, copied = maps.Clone(t.healthCheckNodePorts), true
			}
			if hc == 0 {
				delete(t.healthCheckNodePorts, nn)
			} else {
				t.healthCheckNodePorts[nn] = hc
			}
		}
	}
	t.applied = edit.done()
	// A cleared map keeps its buckets and ranging over it still costs its
	// peak size, so the initial sync's is replaced.
	if len(t.pending) > smallMap {
		t.pending = map[types.NamespacedName][]*ServicePort{}
	} else {
		clear(t.pending)
	}
	slices.SortFunc(ch.Stale, Frontend.Compare)
	ch.Stale = slices.Compact(ch.Stale)
	ch.HealthCheckNodePorts = t.healthCheckNodePorts
	return t.applied, ch
}

// smallMap is the size up to which clearing a map is cheaper than
// replacing it.
const smallMap = 8

// diffPortNames adds to names every port name that is in only one of prev
// and cur, or in both with different content. Both are sorted by name.
func diffPortNames(prev, cur []*ServicePort, names sets.Set[PortName]) {
	i, j := 0, 0
	for i < len(prev) || j < len(cur) {
		var c int
		switch {
		case i == len(prev):
			c = 1
		case j == len(cur):
			c = -1
		default:
			c = prev[i].Name.Compare(cur[j].Name)
		}
		switch {
		case c < 0:
			names.Insert(prev[i].Name)
			i++
		case c > 0:
			names.Insert(cur[j].Name)
			j++
		default:
			if !prev[i].Equal(cur[j]) {
				names.Insert(cur[j].Name)
			}
			i++
			j++
		}
	}
}

// appendStale appends the UDP and SCTP frontends of prev that cur no longer
// has. Connection tracking keeps such flows pointed at their old endpoints;
// TCP needs no cleanup because its flows end with the endpoint.
func appendStale(dst []Frontend, prev, cur []*ServicePort) []Frontend {
	var gone []Frontend
	for _, p := range prev {
		if p.Protocol == v1.ProtocolUDP || p.Protocol == v1.ProtocolSCTP {
			gone = p.frontends(gone)
		}
	}
	if len(gone) == 0 {
		return dst
	}
	kept := map[Frontend]bool{}
	for _, p := range cur {
		for _, f := range p.frontends(nil) {
			kept[f] = true
		}
	}
	for _, f := range gone {
		if !kept[f] {
			dst = append(dst, f)
		}
	}
	return dst
}

// Compare orders frontends by IP, port and protocol (node ports, with no
// IP, first); it returns -1, 0 or +1.
func (f Frontend) Compare(o Frontend) int {
	return cmp.Or(f.IP.Compare(o.IP), cmp.Compare(f.Port, o.Port), cmp.Compare(f.Protocol, o.Protocol))
}

// Changes is what one Checkout changed.
type Changes struct {
	// Services is every service with a net change, deletions included.
	Services sets.Set[types.NamespacedName]
	// Ports is every port name added, removed or modified.
	Ports sets.Set[PortName]
	// Stale is the UDP and SCTP frontends that existed before and are gone
	// now, so that conntrack entries to them can be flushed: those of
	// deleted services, removed ports and changed addresses, ports or
	// protocols. It is sorted. A frontend is judged within its service, so
	// one that another service also uses may be listed; flushing it only
	// makes that service's flows pass through NAT again.
	Stale []Frontend
	// HealthCheckNodePorts is the current health-check node port of every
	// service that has one (not only changed ones). Changes share it:
	// read it, never write it.
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
