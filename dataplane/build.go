package dataplane

import (
	"net/netip"
	"sync"

	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Build checks out every tracker and returns the new States, one per
// configured family in configuration order, and what became stale. It
// warns once about every destination (address or node port, port and
// protocol) that several services come to claim, when that appears;
// kube-proxy is silent about them. Such services are valid objects, so
// they are not reported to OnSkip. All
// States of one Build share one Generation, one more than the previous
// Build's. Each State can tell which services changed since the previous
// Build's State of its family (see State.ChangedSince), except the first
// and those after a node change that affects every service (zone, IPs, and
// pod CIDRs under LocalModeNodeCIDR).
func (b *Builder) Build() BuildResult {
	b.mu.Lock()
	zone, full := b.zone, b.nodeFull
	nodes := make([]Node, len(b.families))
	for i, fb := range b.families {
		nodes[i] = Node{Name: b.nodeName, Zone: zone, IPs: fb.ips, PodCIDRs: fb.podCIDRs}
	}
	cidrs := b.serviceCIDRsLocked()
	b.nodeDirty, b.nodeFull, b.cidrsDirty = false, false, false
	b.mu.Unlock()

	prev := b.gen
	b.gen++
	out := BuildResult{
		States:  make([]*State, len(b.families)),
		Changes: make([]FamilyChanges, len(b.families)),
	}
	hasChanges := prev > 0 && !full
	checkouts := make([]struct {
		m  servicemodel.Map
		ch servicemodel.Changes
	}, len(b.families))
	// The endpoint trackers share nothing with the service trackers and
	// the claims: after many changes (a first Build) their Checkouts run
	// beside the rest.
	epCheckouts := make([]struct {
		m  endpoints.Map
		ch endpoints.Changes
	}, len(b.families))
	var wg sync.WaitGroup
	for i, fb := range b.families {
		if fb.endpoints.Pending() >= concurrentCheckout {
			wg.Go(func() { epCheckouts[i].m, epCheckouts[i].ch = fb.endpoints.Checkout() })
		} else {
			epCheckouts[i].m, epCheckouts[i].ch = fb.endpoints.Checkout()
		}
	}
	touches := 0
	for i, fb := range b.families {
		checkouts[i].m, checkouts[i].ch = fb.services.Checkout()
		touches += checkouts[i].ch.Services.Len()
	}
	// Every changed service touches at least one destination; sizing the
	// maps for them spares a first Build their growth.
	touched := make(map[destination]bool, touches)
	b.claims.reserve(touches)
	for i, fb := range b.families {
		svcs, svcChanges := checkouts[i].m, checkouts[i].ch
		for nn := range svcChanges.Services {
			b.claims.update(nn, fb.applied.Service(nn), svcs.Service(nn), touched)
		}
	}
	wg.Wait()
	for i, fb := range b.families {
		svcs, svcChanges := checkouts[i].m, checkouts[i].ch
		eps, epChanges := epCheckouts[i].m, epCheckouts[i].ch
		fb.applied = svcs
		// A State that cannot tell what changed needs no set of it.
		var changed sets.Set[types.NamespacedName]
		if hasChanges {
			changed = make(sets.Set[types.NamespacedName], svcChanges.Services.Len()+epChanges.Services.Len())
			for nn := range svcChanges.Services {
				changed.Insert(nn)
			}
			for nn := range epChanges.Services {
				changed.Insert(nn)
			}
		}
		out.States[i] = &State{
			Family:       fb.family,
			Node:         nodes[i],
			Settings:     withPrimary(fb.settings, nodes[i].IPs),
			Services:     svcs,
			Endpoints:    eps,
			ServiceCIDRs: filterFamily(cidrs, fb.family, func(p netip.Prefix) bool { return p.Addr().Is4() }),
			Generation:   b.gen,
			builder:      b.id,
			changed:      changed,
			changedSince: prev,
			hasChanges:   hasChanges,
		}
		out.Changes[i] = FamilyChanges{Services: svcChanges, Endpoints: epChanges}
	}
	b.warnConflicts(b.claims.conflicts(touched))
	return out
}

// concurrentCheckout is the fewest services with endpoint changes whose
// Checkout Build runs on a goroutine of its own.
const concurrentCheckout = 256

// BuildResult is the result of one Builder.Build.
type BuildResult struct {
	States []*State
	// Changes holds, per family (same order as States), what the trackers
	// reported since the previous Build.
	Changes []FamilyChanges
}

// FamilyChanges is what changed in one family between two Builds.
type FamilyChanges struct {
	Services  servicemodel.Changes
	Endpoints endpoints.Changes
}
