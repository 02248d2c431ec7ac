package proxykit

import (
	"cmp"
	"context"
	"slices"

	"github.com/proxykit/proxykit/dataplane"
	"github.com/proxykit/proxykit/endpoints"
	"github.com/proxykit/proxykit/servicemodel"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// ConntrackCleaner deletes connection-tracking entries that the rules just
// programmed no longer match, so that UDP and SCTP clients, which keep
// using an entry for as long as they send, reach the new endpoints.
// dataplane/conntrack's Cleaner implements it over netlink. What it is
// handed accumulates every change since the last successful cleanup (across
// failed syncs), de-duplicated; upstream forgets what a failed sync owed.
//
// The Proxy calls it from its sync loop, never concurrently, and only after
// every dataplane of stale.Family has programmed stale.State: deleting an
// entry earlier would let the next packet re-create it through the old
// rules.
type ConntrackCleaner interface {
	// CleanStale deletes the entries stale describes and returns how many
	// it deleted. On error the Proxy keeps the work and hands it over
	// again (merged with newer work) after the next successful sync, so
	// deleting is expected to be idempotent.
	CleanStale(ctx context.Context, stale dataplane.StaleFlows) (deleted int, err error)
}

// ConntrackCleanerFunc adapts a function to a ConntrackCleaner.
type ConntrackCleanerFunc func(ctx context.Context, stale dataplane.StaleFlows) (int, error)

// CleanStale calls f(ctx, stale).
func (f ConntrackCleanerFunc) CleanStale(ctx context.Context, stale dataplane.StaleFlows) (int, error) {
	return f(ctx, stale)
}

// conntrackDebt accumulates the cleanup one family owes until a sync of that
// family succeeds and the cleaner accepts it.
type conntrackDebt struct {
	frontends sets.Set[servicemodel.Frontend]
	endpoints sets.Set[endpoints.StaleEndpoint]
	ports     sets.Set[servicemodel.PortName]
}

func newConntrackDebt() *conntrackDebt {
	return &conntrackDebt{
		frontends: sets.New[servicemodel.Frontend](),
		endpoints: sets.New[endpoints.StaleEndpoint](),
		ports:     sets.New[servicemodel.PortName](),
	}
}

// add records what one Build of this family reported.
func (d *conntrackDebt) add(c dataplane.FamilyChanges) {
	for _, f := range c.Services.Stale {
		if conntrackProtocol(f.Protocol) {
			d.frontends.Insert(f)
		}
	}
	for _, e := range c.Endpoints.Stale {
		if conntrackProtocol(e.Port.Protocol) {
			d.endpoints.Insert(e)
		}
	}
	for pn := range c.Endpoints.Ports {
		if conntrackProtocol(pn.Protocol) {
			d.ports.Insert(pn)
		}
	}
	// A port that appeared or changed after its endpoints were known is
	// reconciled too: flows sent to its node port or addresses before it
	// existed were refused or answered un-NATed, and nothing else would
	// flush them while its endpoints stay as they are.
	for pn := range c.Services.Ports {
		if conntrackProtocol(pn.Protocol) {
			d.ports.Insert(pn)
		}
	}
}

func (d *conntrackDebt) len() int {
	return d.frontends.Len() + d.endpoints.Len() + d.ports.Len()
}

// clear forgets the debt. A Go map keeps its buckets when cleared, and
// ranging over it costs as many as it ever had, so a set that grew large
// (a first sync owes every UDP port of the cluster) is replaced instead:
// otherwise every later sync would pay for that peak.
func (d *conntrackDebt) clear() {
	d.frontends = emptied(d.frontends)
	d.endpoints = emptied(d.endpoints)
	d.ports = emptied(d.ports)
}

// emptyReused is the size up to which a set is cleared for reuse rather
// than replaced.
const emptyReused = 64

func emptied[T comparable](s sets.Set[T]) sets.Set[T] {
	if s.Len() > emptyReused {
		return sets.New[T]()
	}
	return s.Clear()
}

// flows renders the debt against the state now programmed, in a stable
// order: endpoints serving their port again are left out, and so are ports
// that are gone (their frontends are in Frontends).
func (d *conntrackDebt) flows(f v1.IPFamily, s *dataplane.State) dataplane.StaleFlows {
	out := dataplane.StaleFlows{Family: f, State: s}
	out.Frontends = d.frontends.UnsortedList()
	slices.SortFunc(out.Frontends, servicemodel.Frontend.Compare)
	for e := range d.endpoints {
		if !servingIn(s, e) {
			out.Endpoints = append(out.Endpoints, e)
		}
	}
	slices.SortFunc(out.Endpoints, compareStaleEndpoints)
	for pn := range d.ports {
		if _, ok := s.Services.Get(pn); ok {
			out.Ports = append(out.Ports, pn)
		}
	}
	slices.SortFunc(out.Ports, servicemodel.PortName.Compare)
	return out
}

func servingIn(s *dataplane.State, e endpoints.StaleEndpoint) bool {
	for _, ep := range s.Endpoints.Get(e.Port) {
		if ep.Addr == e.Addr && ep.Serving {
			return true
		}
	}
	return false
}

// conntrackProtocol reports whether entries of protocol p outlive a rule
// change. TCP entries are left alone: a TCP connection to a removed endpoint
// fails and the client reconnects through the new rules.
func conntrackProtocol(p v1.Protocol) bool {
	return p == v1.ProtocolUDP || p == v1.ProtocolSCTP
}

func compareStaleEndpoints(a, b endpoints.StaleEndpoint) int {
	return cmp.Or(a.Port.Compare(b.Port), a.Addr.Compare(b.Addr))
}
