package endpoints

import (
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/clock"
)

// Config configures a Tracker. The zero value tracks IPv4 slices with no
// endpoint counted as local, logging nothing.
type Config struct {
	// Family is the IP family to track; "" means IPv4 (as does any value
	// other than IPv6). Slices of another address type (FQDN included)
	// are ignored.
	Family v1.IPFamily
	// NodeName is this node's name; endpoints whose nodeName equals it are
	// local. "" makes no endpoint local.
	NodeName string
	// Logger receives the reason each skipped slice, port or endpoint was
	// skipped; the zero value (logr.Discard()) logs nothing.
	Logger logr.Logger
	// OnSkip, if set, is called once per skipped object with a short,
	// bounded reason (for a metric label): one of the Skip constants.
	OnSkip func(reason string)
	// Clock dates the tracker's creation, before which trigger times are
	// not reported; nil means the real clock.
	Clock clock.PassiveClock
}

// Tracker caches EndpointSlices, merges every slice of a service, and hands
// out snapshots. Its methods may be called from any goroutine.
type Tracker struct {
	addressType discovery.AddressType
	nodeName    string
	logger      logr.Logger
	onSkip      func(string)
	start       time.Time

	mu sync.Mutex
	// services holds every service with a tracked slice or a change not
	// yet checked out.
	services map[types.NamespacedName]*serviceSlices
	// owners maps each tracked slice (namespace/name) to its service, so
	// that a slice is found again whatever a later object claims.
	owners map[types.NamespacedName]types.NamespacedName
	// pending lists every service whose merged endpoints differ from
	// snapshot (serviceSlices.changed), which is then marked queued, and
	// npending counts them. A service that stops being pending stays
	// listed, unmarked, and may be listed again: a list is cheaper to
	// fill than a set, and the initial sync fills it with every service.
	pending  []types.NamespacedName
	npending int
	triggers map[types.NamespacedName][]time.Time
	snapshot Map
}

// NewTracker returns an empty Tracker.
func NewTracker(cfg Config) *Tracker {
	t := &Tracker{
		addressType: discovery.AddressTypeIPv4,
		nodeName:    cfg.NodeName,
		logger:      cfg.Logger,
		onSkip:      cfg.OnSkip,
		services:    map[types.NamespacedName]*serviceSlices{},
		owners:      map[types.NamespacedName]types.NamespacedName{},
		triggers:    map[types.NamespacedName][]time.Time{},
	}
	if cfg.Family == v1.IPv6Protocol {
		t.addressType = discovery.AddressTypeIPv6
	}
	c := cfg.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	t.start = c.Now()
	return t
}

// Update records an EndpointSlice update: old nil for an add, new nil for a
// delete. It reports whether this update changed what the next Checkout will
// return. Only merged content counts: a metadata-only update or reordered
// endpoints are no change.
func (t *Tracker) Update(old, new *discovery.EndpointSlice) bool {
	if new == nil {
		if old == nil {
			return false
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		return t.removeLocked(sliceKey(old))
	}
	var skipped skipLog
	ps := t.parse(new, &skipped)
	t.report(new, skipped)

	t.mu.Lock()
	changed, numbered := t.updateLocked(old, new, ps)
	t.mu.Unlock()
	t.warnNumbered(new, numbered)
	return changed
}

// updateLocked stores ps, parsed from new, and reports whether merged
// content changed and which port names of new have several numbers that
// the slice's previous version did not have.
func (t *Tracker) updateLocked(old, new *discovery.EndpointSlice, ps *parsedSlice) (changed bool, numbered []portNumbers) {
	key := sliceKey(new)
	if ps != nil {
		var prev []portNumbers
		if owner, ok := t.owners[key]; ok {
			prev = t.services[owner].slices.get(key.Name).numbered
		}
		numbered = newlyNumbered(prev, ps.numbered)
	}
	if old != nil && sliceKey(old) != key {
		changed = t.removeLocked(sliceKey(old))
	}
	if ps == nil {
		// A slice that stopped being trackable (its service label was
		// removed, say) must not linger as upstream lets it.
		return t.removeLocked(key) || changed, nil
	}
	return t.setLocked(key, ps) || changed, numbered
}

func sliceKey(s *discovery.EndpointSlice) types.NamespacedName {
	return types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
}

// setLocked stores ps as slice key and reports whether merged content
// changed.
func (t *Tracker) setLocked(key types.NamespacedName, ps *parsedSlice) bool {
	changed := false
	if owner, ok := t.owners[key]; ok && owner != ps.service {
		changed = t.removeLocked(key)
	}
	svc := t.services[ps.service]
	if svc == nil {
		svc = &serviceSlices{}
		t.services[ps.service] = svc
	}
	prev := svc.slices.get(key.Name)
	svc.slices.set(key.Name, ps)
	t.owners[key] = ps.service
	if !t.applyLocked(ps.service, svc, key.Name, prev, ps) {
		return changed
	}
	if !ps.trigger.IsZero() && svc.queued {
		t.triggers[ps.service] = append(t.triggers[ps.service], ps.trigger)
	}
	return true
}

// removeLocked forgets slice key and reports whether merged content
// changed. Removing an unknown slice is no change.
func (t *Tracker) removeLocked(key types.NamespacedName) bool {
	owner, ok := t.owners[key]
	if !ok {
		return false
	}
	delete(t.owners, key)
	svc := t.services[owner]
	prev := svc.slices.get(key.Name)
	svc.slices.delete(key.Name)
	changed := t.applyLocked(owner, svc, key.Name, prev, nil)
	if svc.slices.len() == 0 && !svc.changed() {
		delete(t.services, owner)
	}
	if changed {
		// The annotation of a deleted slice dates its last update, not
		// the deletion, so as upstream no latency is reported for it.
		delete(t.triggers, owner)
	}
	return changed
}

// smallMap is the size up to which clearing a map is cheaper than
// replacing it.
const smallMap = 8

// Pending returns the number of services with changes not yet checked out.
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.npending
}

// Checkout applies the pending changes and returns the new snapshot and what
// changed since the previous Checkout. It costs O(changed services): the
// lists of the ports that changed are rebuilt, nothing else is visited.
func (t *Tracker) Checkout() (Map, Changes) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// Sized for the pending services (most have one port), so that the
	// initial sync's sets and maps do not grow step by step.
	n := t.npending
	ch := Changes{
		Services:     make(sets.Set[types.NamespacedName], n),
		Ports:        make(sets.Set[servicemodel.PortName], n),
		LocalReady:   make(map[types.NamespacedName]int, n),
		TriggerTimes: map[types.NamespacedName][]time.Time{},
	}
	edit := t.snapshot.edit()
	for _, nn := range t.pending {
		svc := t.services[nn]
		if svc == nil || !svc.queued {
			// No longer pending, or listed twice.
			continue
		}
		svc.queued = false
		se := ch.apply(svc, t.snapshot.Service(nn))
		ch.Services.Insert(nn)
		ch.LocalReady[nn] = 0
		if se != nil {
			ch.LocalReady[nn] = se.LocalReady
		}
		if tt := t.triggers[nn]; len(tt) > 0 {
			ch.TriggerTimes[nn] = tt
		}
		edit.withService(nn, se)
		svc.dirty, svc.fresh = nil, nil
		if svc.slices.len() == 0 {
			delete(t.services, nn)
		}
	}
	t.snapshot = edit.done()
	// The initial sync's list of every service is not kept for the few
	// that later Checkouts see.
	t.npending = 0
	if cap(t.pending) > smallMap {
		t.pending = nil
	} else {
		t.pending = t.pending[:0]
	}
	// A cleared map keeps its buckets and ranging over it still costs its
	// peak size, so after a big Checkout (the initial sync) it is
	// replaced: otherwise every later Checkout would cost O(cluster).
	if len(t.triggers) > smallMap {
		t.triggers = map[types.NamespacedName][]time.Time{}
	} else {
		clear(t.triggers)
	}
	slices.SortFunc(ch.Stale, func(a, b StaleEndpoint) int {
		if c := a.Port.Compare(b.Port); c != 0 {
			return c
		}
		return compareAddrPorts(a.Addr, b.Addr)
	})
	return t.snapshot, ch
}

// Changes is what one Checkout changed. Its sets and maps are never nil.
type Changes struct {
	// Services is every service whose merged endpoints changed.
	Services sets.Set[types.NamespacedName]
	// Ports is every port name whose endpoint list changed.
	Ports sets.Set[servicemodel.PortName]
	// Stale is the UDP and SCTP endpoints that were serving a port and no
	// longer are, so that conntrack entries through them can be flushed;
	// sorted by port name, then address. It is nil when there are none.
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
